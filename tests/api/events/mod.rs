//! Events (spec `events.md`): each change writes its event in its own
//! transaction, none from a change that rolled back; the feed serves them
//! to whoever may see them, waits for them, streams them, and never skips
//! one under concurrent writers (and two processes on PostgreSQL).

mod feed;
mod no_gaps;
mod shutdown;
mod types;
mod wait_for_change;

use serde_json::Value;

use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, Resp, TestApp};

/// `GET /api/v1/events?{query}`.
pub async fn feed(app: &TestApp, auth: Auth<'_>, query: &str) -> Resp {
    app.get(&format!("/api/v1/events?{query}"), auth).await
}

/// Waits until the feed can serve every event committed so far. On
/// PostgreSQL it serves only events of transactions older than the oldest
/// one still running on the cluster, and the other tests' transactions run
/// on the same cluster; on SQLite it always can.
pub async fn settled(app: &TestApp) {
    if app.backend == Backend::Sqlite {
        return;
    }
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let sql = "SELECT CASE WHEN pg_snapshot_xmin(pg_current_snapshot()) > \
               COALESCE((SELECT max(xact_id) FROM events), '0'::xid8) THEN 'yes' ELSE 'no' END";
    for _ in 0..3000 {
        if conn.text_rows(sql).await[0][0].as_deref() == Some("yes") {
            conn.close().await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the feed did not catch up with the commits in 30 s");
}

/// Every event `auth` sees after `after` ("" for the beginning), following
/// `next_after` until an answer is empty (once every commit so far can be
/// served); and the last cursor.
pub async fn all_after(app: &TestApp, auth: Auth<'_>, after: &str) -> (Vec<Value>, String) {
    settled(app).await;
    let (mut events, mut after) = (Vec::new(), after.to_owned());
    loop {
        let query = if after.is_empty() {
            "limit=100".to_owned()
        } else {
            format!("limit=100&after={after}")
        };
        let resp = feed(app, auth, &query).await;
        resp.assert_status(200);
        let page = resp.json();
        let batch = page["events"].as_array().expect("events").clone();
        after = page["next_after"].as_str().expect("next_after").to_owned();
        if batch.is_empty() {
            return (events, after);
        }
        events.extend(batch);
    }
}

/// Every event `auth` sees.
pub async fn all(app: &TestApp, auth: Auth<'_>) -> Vec<Value> {
    all_after(app, auth, "").await.0
}

/// The types of `events`, in order.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().expect("type").to_owned())
        .collect()
}

/// The events of grant `id`, in order.
pub fn of_grant(events: &[Value], id: i64) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["grant"]["id"] == id)
        .cloned()
        .collect()
}
