//! The feed: who sees what, bad requests, waiting, the event stream, and
//! the cap on waiting requests.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{all, all_after, feed, of_grant, types};
use crate::helpers::{Auth, TestApp};
use crate::world::{ALL_SCOPES, BOT, OWNER, Prepare, REPO, RIVAL, World};

both_backends!(each_reader_sees_only_what_it_may);
async fn each_reader_sees_only_what_it_may(app: TestApp) {
    let world = World::new(&app).await;
    let mine = world.confirmed("The bot's own").await;
    let theirs = world
        .alice
        .prepare_ok(OWNER, REPO, &Prepare::new(RIVAL, "The rival's"))
        .await;
    app.create_user("mallory", "human", None).await;
    app.create_repo(OWNER, "gadgets", true).await;
    let outsider = app.create_token("mallory", ALL_SCOPES).await.token;
    let elsewhere = app
        .create_token_with(
            "alice",
            json!({"name": "elsewhere", "scopes": ALL_SCOPES, "repositories": ["acme/gadgets"]}),
        )
        .await
        .token;
    let grants_of = |events: &[Value]| -> Vec<i64> {
        let mut ids: Vec<i64> = events
            .iter()
            .map(|e| e["grant"]["id"].as_i64().unwrap())
            .collect();
        ids.dedup();
        ids
    };

    let alice = all(&app, Auth::Token(&world.alice_token)).await;
    assert_eq!(grants_of(&alice), [mine, theirs]);
    let bot = all(&app, Auth::Token(&world.bot)).await;
    assert_eq!(grants_of(&bot), [mine], "a bot sees its own grants only");
    assert_eq!(types(&bot), ["grant.prepared", "grant.confirmed"]);
    let rival = all(&app, Auth::Token(&world.rival)).await;
    assert_eq!(grants_of(&rival), [theirs]);
    for (who, token) in [("an outsider", &outsider), ("a reduced token", &elsewhere)] {
        assert_eq!(
            all(&app, Auth::Token(token)).await,
            Vec::<Value>::new(),
            "{who}"
        );
    }

    // Filters: a type or a prefix, and a repository.
    let confirmed = feed(
        &app,
        Auth::Token(&world.alice_token),
        "type=grant.confirmed",
    )
    .await;
    assert_eq!(
        types(confirmed.json()["events"].as_array().unwrap()),
        ["grant.confirmed"]
    );
    let prefixed = feed(
        &app,
        Auth::Token(&world.alice_token),
        "type=submission.*,grant.confirmed",
    )
    .await;
    assert_eq!(prefixed.json()["events"], confirmed.json()["events"]);
    let by_repo = feed(&app, Auth::Token(&world.alice_token), "repo=acme/widgets").await;
    assert_eq!(
        by_repo.json()["events"].as_array().unwrap().len(),
        alice.len()
    );
    for (who, token) in [
        ("an outsider", outsider.as_str()),
        ("alice", world.alice_token.as_str()),
    ] {
        let missing = if who == "alice" {
            "repo=acme/nothing"
        } else {
            "repo=acme/widgets"
        };
        feed(&app, Auth::Token(token), missing)
            .await
            .assert_error(404, "not_found");
    }

    // The scope: read:repository (or an administrator's read:admin).
    let no_scope = app.create_token(BOT, &["read:issue"]).await.token;
    feed(&app, Auth::Token(&no_scope), "")
        .await
        .assert_error(403, "insufficient_scope");
    feed(&app, Auth::None, "")
        .await
        .assert_error(401, "unauthenticated");
}

both_backends!(bad_feed_requests_are_400_and_change_nothing);
async fn bad_feed_requests_are_400_and_change_nothing(app: TestApp) {
    let world = World::new(&app).await;
    world.prepare("Something to read").await;
    let auth = Auth::Token(&world.alice_token);
    let before = all(&app, auth).await;
    for query in [
        "after=abc",
        "after=1",
        "after=-1.2",
        "after=1.2.3",
        "after=1234567890123456789.1",
        "limit=0",
        "limit=101",
        "limit=x",
        "wait=61",
        "wait=-1",
        "wait=1.5",
        "type=nope",
        "type=grant",
        "type=*",
        "type=grant.*,%20submission.created",
        "repo=widgets",
        "repo=a/b/c",
        "repo=a%20b/c",
        "unknown=1",
        "limit=1&limit=2",
    ] {
        let resp = feed(&app, auth, query).await;
        assert_eq!(resp.status.as_u16(), 400, "{query}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{query}");
    }
    assert_eq!(all(&app, auth).await, before);
    let page = feed(&app, auth, "limit=1").await.json();
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    let next = page["next_after"].as_str().unwrap();
    let rest = feed(&app, auth, &format!("after={next}")).await.json();
    assert_eq!(
        rest["events"].as_array().unwrap()[..],
        before[1..],
        "limit and after page through the feed"
    );
}

both_backends!(a_waiting_request_returns_when_an_event_commits_or_its_time_ends);
async fn a_waiting_request_returns_when_an_event_commits_or_its_time_ends(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Wait for me").await;
    let auth = Auth::Token(&world.bot);
    let (_, cursor) = all_after(&app, auth, "").await;

    let started = Instant::now();
    let query = format!("wait=30&after={cursor}");
    let (answer, _) = tokio::join!(feed(&app, auth, &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        world.confirm(id).await.assert_status(200);
    });
    let waited = started.elapsed();
    answer.assert_status(200);
    let page = answer.json();
    assert_eq!(
        types(page["events"].as_array().unwrap()),
        ["grant.confirmed"]
    );
    assert!(
        waited < Duration::from_secs(20),
        "the answer came with the commit, not at the end of the wait: {waited:?}"
    );

    let next = page["next_after"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let quiet = feed(&app, auth, &format!("wait=1&after={next}")).await;
    quiet.assert_status(200);
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited");
    assert_eq!(quiet.json(), json!({"events": [], "next_after": next}));
}

/// The `(id, event, data)` of each event in a Server-Sent Events text.
fn parse_stream(text: &str) -> Vec<(String, String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
            };
            let data = field("data:")?;
            Some((
                field("id:")?,
                field("event:")?,
                serde_json::from_str(&data).expect("data is JSON"),
            ))
        })
        .collect()
}

/// Opens the stream (resuming after `last_id`) and reads until it holds
/// `n` events.
async fn stream(
    app: &TestApp,
    token: &str,
    last_id: Option<&str>,
    n: usize,
) -> Vec<(String, String, Value)> {
    let mut request = app
        .client
        .get(app.url("/api/v1/events"))
        .header("authorization", format!("token {token}"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_id {
        request = request.header("last-event-id", id);
    }
    let mut response = request.send().await.expect("open the stream");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut text = String::new();
    loop {
        let events = parse_stream(&text);
        if events.len() >= n {
            return events;
        }
        let chunk = response
            .chunk()
            .await
            .expect("read")
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
    }
}

both_backends!(a_stream_sends_each_event_as_it_commits_and_resumes_after_the_last_id);
async fn a_stream_sends_each_event_as_it_commits_and_resumes_after_the_last_id(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Streamed").await;
    let first = stream(&app, &world.bot, None, 2).await;
    assert_eq!(
        first.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
        ["grant.prepared", "grant.confirmed"]
    );
    let json = all(&app, Auth::Token(&world.bot)).await;
    assert_eq!(first.iter().map(|e| e.2.clone()).collect::<Vec<_>>(), json);

    // Resumed after the first: the second, then what commits meanwhile.
    let (resumed, _) = tokio::join!(stream(&app, &world.bot, Some(&first[0].0), 2), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        world.approve(id).await.assert_status(303);
    });
    assert_eq!(resumed[0], first[1]);
    assert_eq!(resumed[1].1, "grant.approved");
    let approved = of_grant(&all(&app, Auth::Token(&world.bot)).await, id);
    assert_eq!(resumed[1].2, approved[2]);
}

both_backends!(a_token_holds_at_most_eight_waiting_requests);
async fn a_token_holds_at_most_eight_waiting_requests(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Many waiters").await;
    let auth = Auth::Token(&world.bot);
    let (_, cursor) = all_after(&app, auth, "").await;
    let query = format!("wait=30&after={cursor}");
    let waiting = futures_util::future::join_all((0..8).map(|_| feed(&app, auth, &query)));
    let (answers, refused) = tokio::join!(waiting, async {
        let waiters = &app.writ().ctx().waiters;
        while waiters.count() < 8 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refused = feed(&app, auth, &format!("wait=1&after={cursor}")).await;
        // Another token is not held back by this one's waiters.
        let other = feed(&app, Auth::Token(&world.alice_token), "wait=0").await;
        other.assert_status(200);
        world.confirm(id).await.assert_status(200);
        refused
    });
    refused.assert_error(429, "too_many_waiters");
    for answer in answers {
        answer.assert_status(200);
        assert_eq!(
            types(answer.json()["events"].as_array().unwrap()),
            ["grant.confirmed"]
        );
    }
    assert_eq!(app.writ().ctx().waiters.count(), 0, "every waiter is gone");
}
