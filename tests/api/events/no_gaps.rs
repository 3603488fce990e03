//! No gaps: many writers commit events concurrently (through two Writ
//! processes on PostgreSQL, where ids commit out of order) while a follower
//! walks the feed with `next_after`; at the end the follower has seen every
//! committed event exactly once.
//!
//! On PostgreSQL one more writer, straight SQL, holds each of its events
//! in a transaction for 150 ms before it commits: its id is taken long
//! before the ids the other writers commit meanwhile, the case a feed that
//! reads "id > after" loses (with such a feed this test fails; measured with
//! a patched build).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::join_all;
use serde_json::Value;

use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, Resp, TestApp};
use crate::world::{BOT, OWNER, Prepare, REPO, World, new_key, submit_body, submit_path};

/// Writers, each on its own grant, and the submissions each makes.
const WRITERS: usize = 8;
const EACH: usize = 40;

async fn post_to(app: &TestApp, base: &str, path: &str, token: &str, body: &Value) -> Resp {
    let response = app
        .client
        .post(format!("{base}{path}"))
        .header("authorization", format!("token {token}"))
        .json(body)
        .send()
        .await
        .expect("send");
    Resp::read(response).await
}

both_backends!(a_follower_sees_every_committed_event_exactly_once);
async fn a_follower_sees_every_committed_event_exactly_once(app: TestApp) {
    let world = World::new(&app).await;
    let replica = match app.backend {
        Backend::Postgres => Some(app.spawn_replica().await),
        Backend::Sqlite => None,
    };
    let mut servers = vec![app.base.clone()];
    servers.extend(replica.iter().map(|r| r.base.clone()));
    let mut grants = Vec::new();
    for n in 0..WRITERS {
        let mut form = Prepare::new(BOT, &format!("Writer {n}"));
        form.max_submissions = EACH.to_string();
        let id = world.active_with(&form).await;
        grants.push((id, world.digest(id).await));
    }

    let done = AtomicBool::new(false);
    let slow = async {
        if app.backend != Backend::Postgres {
            return 0;
        }
        let mut conn = SqlConn::connect(&app.database_url()).await;
        let mut written = 0;
        while !done.load(Ordering::Acquire) {
            conn.execute("BEGIN").await.expect("begin");
            conn.execute(
                "INSERT INTO events (type, occurred_at, data) VALUES \
                 ('tool_grants.changed', '2026-01-01T00:00:00.000000Z', '{\"agent\": \"slow\"}')",
            )
            .await
            .expect("insert");
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            conn.execute("COMMIT").await.expect("commit");
            written += 1;
        }
        conn.close().await;
        written
    };
    let writers = join_all(grants.iter().enumerate().map(|(n, (id, digest))| {
        let (servers, world) = (&servers, &world);
        async move {
            let path = submit_path(OWNER, REPO, id);
            for i in 0..EACH {
                let body = submit_body(digest, &new_key(), &format!("Work {n}.{i}"), "");
                let server = &servers[(n + i) % servers.len()];
                post_to(world.app, server, &path, &world.bot, &body)
                    .await
                    .assert_status(201);
            }
        }
    }));
    let follower = async {
        let (mut seen, mut after, mut last_round) = (Vec::<i64>::new(), String::new(), false);
        loop {
            // Once the writers are done and the feed caught up with their
            // commits, one more pass to an empty answer ends the walk.
            if !last_round && done.load(Ordering::Acquire) {
                super::settled(&app).await;
                last_round = true;
            }
            let query = if after.is_empty() {
                "limit=100&wait=1".to_owned()
            } else {
                format!("limit=100&wait=1&after={after}")
            };
            let resp = super::feed(&app, Auth::Token(&app.admin_token), &query).await;
            resp.assert_status(200);
            let page = resp.json();
            let events = page["events"].as_array().unwrap();
            seen.extend(events.iter().map(|e| e["id"].as_i64().unwrap()));
            after = page["next_after"].as_str().unwrap().to_owned();
            if events.is_empty() && last_round {
                return seen;
            }
        }
    };
    let (_, seen, slow) = tokio::join!(
        async {
            writers.await;
            done.store(true, Ordering::Release);
        },
        follower,
        slow
    );

    let mut conn = SqlConn::connect(&app.database_url()).await;
    let committed: BTreeSet<i64> = conn
        .text_rows("SELECT CAST(id AS TEXT) FROM events")
        .await
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    conn.close().await;
    let unique: BTreeSet<i64> = seen.iter().copied().collect();
    let missed: Vec<&i64> = committed.difference(&unique).collect();
    eprintln!(
        "no-gap harness ({:?}, {} servers, {slow} slow transactions): {} events committed, \
         {} seen, {} duplicates, {} missed",
        app.backend,
        servers.len(),
        committed.len(),
        seen.len(),
        seen.len() - unique.len(),
        missed.len()
    );
    assert_eq!(seen.len(), unique.len(), "no event is seen twice");
    assert!(missed.is_empty(), "missed events: {missed:?}");
    assert_eq!(unique, committed, "nothing seen that did not commit");
    assert!(committed.len() >= WRITERS * EACH);
}
