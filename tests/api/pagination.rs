//! `GET /api/v1/agent-work-grants`: pages, limits, state filter, headers.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::helpers::{Auth, Resp, TestApp};
use crate::world::{BOT, OWNER, Prepare, REPO, RIVAL, World};

const LIST: &str = "/api/v1/agent-work-grants";

/// `rel -> url` from a `Link` header.
fn links(resp: &Resp) -> BTreeMap<String, String> {
    let header = resp
        .header("link")
        .unwrap_or_else(|| panic!("no Link header: {:?}", resp.headers));
    let mut out = BTreeMap::new();
    for part in header.split(',') {
        let part = part.trim();
        let url = part
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(url, _)| url.to_owned())
            .unwrap_or_else(|| panic!("bad Link part {part:?}"));
        let rel = part
            .split(';')
            .skip(1)
            .find_map(|p| p.trim().strip_prefix("rel="))
            .map(|r| r.trim_matches('"').to_owned())
            .unwrap_or_else(|| panic!("no rel in {part:?}"));
        out.insert(rel, url);
    }
    out
}

/// The value of a query parameter of an absolute URL.
fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

pub async fn list(app: &TestApp, token: &str, query: &str) -> Resp {
    let path = if query.is_empty() {
        LIST.to_owned()
    } else {
        format!("{LIST}?{query}")
    };
    app.get(&path, Auth::Token(token)).await
}

/// The ids of a 200 list page, with its total.
#[track_caller]
pub fn page(resp: &Resp) -> (Vec<i64>, u64) {
    resp.assert_status(200);
    let total = resp
        .header("x-total-count")
        .expect("X-Total-Count")
        .parse()
        .expect("numeric X-Total-Count");
    let ids = resp
        .json()
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|g| g["id"].as_i64().expect("grant id"))
        .collect();
    (ids, total)
}

both_backends!(list_pages_limits_and_headers);
async fn list_pages_limits_and_headers(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..31 {
        ids.push(world.prepare(&format!("Grant number {n}")).await);
    }
    // Another bot's grant never appears in builder-bot's list.
    let rival_id = world
        .alice
        .prepare_ok(OWNER, REPO, &Prepare::new(RIVAL, "Rival's"))
        .await;
    let bot = world.bot.as_str();

    // Default page: 30 items, ordered by id, full grant objects.
    let first = list(&app, bot, "").await;
    let (got, total) = page(&first);
    assert_eq!(total, 31);
    assert_eq!(got, ids[..30]);
    let grant = &first.json()[0];
    assert_eq!(grant["agent"]["login"], BOT);
    assert_eq!(grant["state"], "awaiting_agent");
    assert_eq!(*grant, world.grant(ids[0]).await);
    let expose = first
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        expose.contains("x-total-count") && expose.contains("link"),
        "{expose}"
    );

    let rels = links(&first);
    let list_url = app.url(LIST);
    for (rel, url) in &rels {
        assert!(
            url.starts_with(&format!("{list_url}?")),
            "{rel}: {url} not on the public URL"
        );
        assert_eq!(
            query_param(url, "limit").as_deref(),
            Some("30"),
            "{rel}: {url}"
        );
    }
    assert!(!rels.contains_key("prev"), "no prev on page 1: {rels:?}");
    assert_eq!(query_param(&rels["next"], "page").as_deref(), Some("2"));
    assert_eq!(query_param(&rels["last"], "page").as_deref(), Some("2"));
    assert_eq!(query_param(&rels["first"], "page").as_deref(), Some("1"));

    // Following `next` gives page 2 with the last grant.
    let next = app
        .client
        .get(&rels["next"])
        .header("Authorization", format!("token {bot}"));
    let second = Resp::read(next.send().await.unwrap()).await;
    assert_eq!(page(&second), (vec![ids[30]], 31));
    let rels = links(&second);
    assert_eq!(query_param(&rels["prev"], "page").as_deref(), Some("1"));
    assert!(
        !rels.contains_key("next"),
        "no next on the last page: {rels:?}"
    );
    assert_eq!(page(&list(&app, bot, "page=2").await), (vec![ids[30]], 31));

    // Past the end: empty, same headers.
    let past = list(&app, bot, "page=3").await;
    assert_eq!(page(&past), (vec![], 31));
    assert_eq!(links(&past)["last"], links(&first)["last"]);

    // Explicit limits.
    for (n, chunk) in ids.chunks(10).enumerate() {
        let resp = list(&app, bot, &format!("limit=10&page={}", n + 1)).await;
        assert_eq!(page(&resp), (chunk.to_vec(), 31));
        assert_eq!(
            query_param(&links(&resp)["last"], "page").as_deref(),
            Some("4")
        );
    }
    let clamped = list(&app, bot, "limit=1000").await;
    assert_eq!(page(&clamped), (ids.clone(), 31));
    assert_eq!(
        query_param(&links(&clamped)["first"], "limit").as_deref(),
        Some("50")
    );
    for query in ["limit=0", "limit=-5"] {
        let resp = list(&app, bot, query).await;
        assert_eq!(page(&resp), (ids[..30].to_vec(), 31), "{query}");
    }

    // Invalid query: 400.
    for query in [
        "page=0",
        "page=-1",
        "page=abc",
        "page=",
        "page=1.5",
        "limit=abc",
        "foo=1",
        "state=bogus",
        "state=",
        "page=99999999999999999999999",
    ] {
        let resp = list(&app, bot, query).await;
        resp.assert_error(400, "invalid_input");
    }

    // The rival sees only its own grant.
    assert_eq!(
        page(&list(&app, &world.rival, "").await),
        (vec![rival_id], 1)
    );
}

both_backends!(list_state_filter);
async fn list_state_filter(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(world.prepare(&format!("Stateful {n}")).await);
    }
    world.confirm(ids[1]).await.assert_status(200);
    world.confirm(ids[2]).await.assert_status(200);
    world.approve(ids[2]).await.assert_status(303);
    world.withdraw(ids[3]).await.assert_status(303);
    world.confirm(ids[4]).await.assert_status(200);
    world.withdraw(ids[4]).await.assert_status(303);
    let bot = world.bot.as_str();

    let cases: [(&str, Vec<i64>); 6] = [
        ("", vec![ids[0], ids[1], ids[2], ids[5]]),
        ("state=awaiting_agent", vec![ids[0], ids[5]]),
        ("state=awaiting_human", vec![ids[1]]),
        ("state=active", vec![ids[2]]),
        ("state=revoked", vec![ids[3], ids[4]]),
        ("state=all", ids.clone()),
    ];
    for (query, expected) in cases {
        let resp = list(&app, bot, query).await;
        let total = expected.len() as u64;
        assert_eq!(page(&resp), (expected, total), "{query:?}");
        let states: Vec<Value> = resp
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["state"].clone())
            .collect();
        if let Some(state) = query.strip_prefix("state=").filter(|s| *s != "all") {
            assert!(states.iter().all(|s| s == state), "{query}: {states:?}");
        }
        // The filter is repeated in the links.
        let rels = links(&resp);
        let expected_state = query.strip_prefix("state=");
        assert_eq!(
            query_param(&rels["first"], "state").as_deref(),
            expected_state,
            "{query}"
        );
    }
    // Small pages of a filtered list.
    let resp = list(&app, bot, "state=all&limit=4&page=2").await;
    assert_eq!(page(&resp), (ids[4..].to_vec(), 6));
}
