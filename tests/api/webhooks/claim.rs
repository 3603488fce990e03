//! A worker's claim costs the same whatever the backlog: its pick reads the
//! due index in order and stops at its limit (ADR 0032).

use sea_query::{PostgresQueryBuilder, SqliteQueryBuilder};
use writ::store::Backend;
use writ::store::webhooks::{claim_planning, due_pick};

use super::insert_unchecked;
use crate::db::SqlConn;
use crate::helpers::TestApp;

/// Pending deliveries put in the outbox, none attempted (the app's worker
/// is off), as a worker that fell behind finds them.
const BACKLOG: i64 = 3000;

both_backends!(
    the_pick_reads_the_due_index_in_order,
    |config: &mut writ::Config| config.webhooks.deliver = false
);
async fn the_pick_reads_the_due_index_in_order(app: TestApp) {
    insert_unchecked(&app, "http://127.0.0.1:9/hook").await;
    let mut db = SqlConn::connect(&app.database_url()).await;
    db.execute(
        "INSERT INTO events (type, occurred_at, data) \
         VALUES ('grant.prepared', '2026-01-01T00:00:00.000000Z', '{}')",
    )
    .await
    .expect("an event");
    let backend = match &db {
        SqlConn::Sqlite(_) => Backend::Sqlite,
        SqlConn::Postgres(_) => Backend::Postgres,
    };
    let numbers = match backend {
        Backend::Postgres => format!("SELECT n FROM generate_series(1, {BACKLOG}) AS s(n)"),
        Backend::Sqlite => format!(
            "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {BACKLOG}) \
             SELECT n FROM s"
        ),
    };
    let inserted = db
        .execute(&format!(
            "INSERT INTO webhook_deliveries (subscription_id, event_id, status, next_attempt_at, \
             created_at) \
             SELECT (SELECT MAX(id) FROM webhook_subscriptions), (SELECT MAX(id) FROM events), \
             'pending', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z' \
             FROM ({numbers}) AS numbers"
        ))
        .await
        .expect("the backlog");
    assert_eq!(inserted, BACKLOG as u64);

    let pick = due_pick(backend, "2026-01-02T00:00:00.000000Z", 16);
    let plan: Vec<String> = match backend {
        Backend::Postgres => {
            db.execute("BEGIN").await.expect("begin");
            let settings = claim_planning().to_string(PostgresQueryBuilder);
            db.text_rows(&settings).await;
            let sql = format!("EXPLAIN {}", pick.to_string(PostgresQueryBuilder));
            let plan = db.text_rows(&sql).await;
            db.execute("ROLLBACK").await.expect("rollback");
            plan.into_iter().flatten().flatten().collect()
        }
        Backend::Sqlite => {
            let SqlConn::Sqlite(conn) = &mut db else {
                unreachable!()
            };
            let sql = format!("EXPLAIN QUERY PLAN {}", pick.to_string(SqliteQueryBuilder));
            sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut *conn)
                .await
                .expect("the plan")
                .into_iter()
                .map(|(.., detail)| detail)
                .collect()
        }
    };
    let text = plan.join("\n");
    assert!(
        text.contains("webhook_deliveries_due"),
        "the pick reads the due index:\n{text}"
    );
    for whole_backlog in ["Sort", "Bitmap", "TEMP B-TREE"] {
        assert!(
            !text.contains(whole_backlog),
            "the pick reads the due index in order, not the whole backlog ({whole_backlog}):\n{text}"
        );
    }
    db.close().await;
}
