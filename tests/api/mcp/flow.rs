//! The grant flow end to end over MCP, and listing.

use serde_json::{Value, json};

use super::{
    CONFIRM, GET, LIST, Mcp, READBACK, SUBMIT, ToolResult, confirm_args, put_grants, submit_args,
    target,
};
use crate::helpers::{Auth, TestApp};
use crate::world::{BOT, OWNER, REPO, RIVAL, World, new_key};

both_backends!(confirm_approve_submit_replay_and_read_back);
async fn confirm_approve_submit_replay_and_read_back(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM, SUBMIT, READBACK]},
        ]),
    )
    .await;
    let id = world.prepare("End to end over MCP").await;
    let mcp = Mcp::new(&app, &world.bot);

    // Read: the native JSON plus native_status.
    let read = mcp.call(GET, target(OWNER, REPO, id)).await;
    let mut got = read.ok(200).clone();
    got.as_object_mut().unwrap().remove("native_status");
    let rest = world.read(id).await;
    rest.assert_status(200);
    assert_eq!(got, rest.json());
    assert_eq!(got["grant"]["state"], "awaiting_agent");
    let digest = got["grant"]["proposal_digest"].as_str().unwrap().to_owned();

    // Confirm: awaiting_agent -> awaiting_human, visible over REST.
    let confirmed = mcp
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await;
    let body = confirmed.ok(200);
    assert_eq!(body["grant"]["state"], "awaiting_human", "{body}");
    let now = world.grant(id).await;
    assert_eq!(now["state"], "awaiting_human");
    assert_eq!(body["grant"], now);
    // The answer says where a person approves: the grant's page.
    let page = format!("{}/{OWNER}/{REPO}/agent-work-grants/{id}", app.base);
    assert_eq!(body["grant"]["html_url"], page.as_str());
    assert_eq!(confirmed.said.len(), 1, "{:?}", confirmed.said);
    assert!(
        confirmed.said[0].contains(&format!("approve it at {page}")),
        "{:?}",
        confirmed.said
    );
    // Other tools' answers carry the JSON only.
    assert!(read.said.is_empty(), "{:?}", read.said);

    // alice approves in the browser.
    world.approve(id).await.assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");

    // Submit with a fresh key: 201; the same key again: the 200 replay.
    let key = new_key();
    assert_eq!(key.len(), 36);
    assert_eq!(&key[14..15], "4", "a UUIDv4: {key}");
    let title = format!("MCP issue {}", uuid::Uuid::new_v4().simple());
    let text = "Body over MCP:\n  kept  byte for byte \u{1F980}\r\n\ttrailing space ";
    let args = submit_args(id, &digest, &key, &title, text);
    let created = mcp.call(SUBMIT, args.clone()).await;
    let created = created.ok(201).clone();
    let submission = created["submission"].clone();
    assert_eq!(submission["request_key"], key.as_str(), "{created}");
    assert_eq!(submission["grant_id"], id, "{created}");
    assert_eq!(created["grant"]["submission_count"], 1, "{created}");
    let replay = mcp.call(SUBMIT, args).await;
    let replay = replay.ok(200);
    assert_eq!(replay["submission"], submission);
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0]["title"], title.as_str());
    assert_eq!(issues[0]["body"], text);
    assert_eq!(
        issues[0]["agent_work_grant"],
        json!({"grant_id": id, "request_key": key})
    );

    // Concurrent retries of one new key: exactly one issue, one 201.
    let key2 = new_key();
    let args2 = submit_args(id, &digest, &key2, "Concurrent", "same body");
    let attempts = (0..6).map(|_| mcp.call(SUBMIT, args2.clone()));
    let results = futures_util::future::join_all(attempts).await;
    let mut statuses: Vec<u64> = results.iter().map(ToolResult::native_status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 201], "{results:?}");
    let receipts: Vec<&Value> = results.iter().map(|r| &r.content["submission"]).collect();
    assert!(receipts.windows(2).all(|w| w[0] == w[1]), "{receipts:?}");
    assert_eq!(world.all_issues().await.len(), 2);

    // The same key with other content is the native conflict.
    let other = submit_args(id, &digest, &key, "Another title", text);
    let conflict = mcp.call(SUBMIT, other).await;
    assert!(conflict.error(409, "request_key_conflict")["grant"].is_object());

    // Read back over REST and over MCP: the same receipt.
    let rest = world.readback(id, &key).await;
    rest.assert_status(200);
    let rest = rest.json();
    assert_eq!(rest["submission"], submission);
    let back = mcp
        .call(
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key}),
        )
        .await;
    let mut back = back.ok(200).clone();
    back.as_object_mut().unwrap().remove("native_status");
    assert_eq!(back, rest);
    let unknown = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": new_key()});
    mcp.call(READBACK, unknown).await.error(404, "not_found");
    assert_eq!(world.all_issues().await.len(), 2);
}

both_backends!(list_pages_over_mcp);
async fn list_pages_over_mcp(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..32 {
        ids.push(world.prepare(&format!("Listed grant {n}")).await);
    }
    // rival-bot's grant is never in builder-bot's list.
    world
        .alice
        .prepare_ok(OWNER, REPO, &crate::world::Prepare::new(RIVAL, "Rival"))
        .await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "list", "repos": [], "tools": [LIST]}]),
    )
    .await;
    let mcp = Mcp::new(&app, &world.bot);
    let page_ids = |page: &Value| -> Vec<i64> {
        page["grants"]
            .as_array()
            .expect("grants")
            .iter()
            .map(|g| g["id"].as_i64().unwrap())
            .collect()
    };

    let first = mcp.call(LIST, json!({})).await;
    let first = first.ok(200);
    assert_eq!(first["total_count"], 32);
    assert_eq!(first["page"], 1);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["next_page"], 2);
    assert_eq!(first["snapshot"], false);
    assert_eq!(page_ids(first), ids[..30]);
    // The same as the native route's first page (limit 30).
    let rest = app
        .get("/api/v1/agent-work-grants", Auth::Token(&world.bot))
        .await;
    rest.assert_status(200);
    assert_eq!(&first["grants"], &rest.json());
    assert_eq!(rest.header("x-total-count").as_deref(), Some("32"));

    let second = mcp.call(LIST, json!({"page": 2})).await;
    let second = second.ok(200);
    assert_eq!(page_ids(second), ids[30..]);
    assert_eq!(second["page"], 2);
    assert_eq!(second["has_more"], false);
    assert_eq!(second["next_page"], Value::Null);
    assert_eq!(second["total_count"], 32);
    for page in [json!(9), json!(1_000_000_000)] {
        let past = mcp.call(LIST, json!({"page": page})).await;
        let past = past.ok(200);
        assert_eq!(past["grants"], json!([]), "page {page}");
        assert_eq!(past["total_count"], 32, "page {page}");
        assert_eq!(past["has_more"], false, "page {page}");
        assert_eq!(past["next_page"], Value::Null, "page {page}");
    }

    // Exactly 30 left: no next page.
    world.confirm(ids[0]).await.assert_status(200);
    world.confirm(ids[1]).await.assert_status(200);
    let awaiting = mcp.call(LIST, json!({"state": "awaiting_agent"})).await;
    let awaiting = awaiting.ok(200);
    assert_eq!(awaiting["total_count"], 30);
    assert_eq!(awaiting["has_more"], false);
    assert_eq!(awaiting["next_page"], Value::Null);
    assert_eq!(page_ids(awaiting), ids[2..]);
    let human = mcp
        .call(LIST, json!({"state": "awaiting_human", "page": 1}))
        .await;
    assert_eq!(page_ids(human.ok(200)), ids[..2]);
    // Withdrawn grants are left out unless asked for.
    world.withdraw(ids[31]).await.assert_status(303);
    let all = mcp.call(LIST, json!({"page": 2})).await;
    let all = all.ok(200);
    assert_eq!(all["total_count"], 31);
    assert_eq!(page_ids(all), ids[30..31]);
    assert_eq!(all["has_more"], false);
}

// The list tool's page bound is the native list's (1..=1_000_000_000; the
// bad-input catalogue wants oversized pages refused with a 4xx): pages up to
// it past the end are empty, larger ones are 400 on both surfaces, and the
// schema says so.
both_backends!(list_tool_pages_are_bounded_like_the_native_list);
async fn list_tool_pages_are_bounded_like_the_native_list(app: TestApp) {
    let world = World::new(&app).await;
    world.prepare("Far pages").await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "list", "repos": [], "tools": [LIST]}]),
    )
    .await;
    let mcp = Mcp::new(&app, &world.bot);
    let list = mcp.tools().await;
    // The schema's bound is the native list's: a larger page is 400 on both.
    let maximum = &list[0]["inputSchema"]["properties"]["page"]["maximum"];
    assert_eq!(maximum, &json!(1_000_000_000));
    for page in [2_i64, 1_000_000_000] {
        let result = mcp.call(LIST, json!({"page": page})).await;
        assert!(
            !result.is_error && result.content["grants"] == json!([]),
            "page {page}: {}",
            result.content
        );
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_status(200);
        assert_eq!(rest.json(), json!([]));
    }
    for page in [1_000_000_001_i64, i64::MAX] {
        let result = mcp.call(LIST, json!({"page": page})).await;
        assert!(result.is_error, "page {page}: {}", result.content);
        assert_eq!(result.content["code"], "invalid_input");
        assert!(
            result.content["message"]
                .as_str()
                .is_some_and(|m| m.contains("1 to 1000000000")),
            "{}",
            result.content
        );
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_error(400, "invalid_input");
        assert!(rest.body.contains("1 to 1000000000"), "{}", rest.body);
    }
}
