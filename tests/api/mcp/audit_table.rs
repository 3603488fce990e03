//! The audit table: records written before migration 0010 survive it, and
//! rows are append-only.

use serde_json::json;

use super::{GET, LIST, Mcp, audit_rows, col, put_grants, target};
use crate::db::SqlConn;
use crate::helpers::{Backend, TestApp};
use crate::world::{BOT, OWNER, REPO, World};

/// Two audit records as Writ before migration 0010 wrote them (their ids
/// left to the engine).
const OLD_RECORDS: &str = "INSERT INTO tool_calls (called_at, via, agent_id, agent_login, \
     token_id, tool, repository, decision, matched_grant, reason, rpc_id, request_id, \
     arg_names, native_status, error_code, completed_at) VALUES \
     ('2026-01-01T00:00:00.000000Z', 'api', 999, 'old-bot', 1, 'get_agent_work_grant', \
     'acme/widgets', 'allow', NULL, 'native_api', NULL, 'old-1', '[\"grant_id\"]', 200, NULL, \
     '2026-01-01T00:00:00.000001Z'), \
     ('2026-01-01T00:00:00.000000Z', 'api', 999, 'old-bot', 1, 'get_agent_work_grant', \
     'acme/widgets', 'allow', NULL, 'native_api', NULL, 'old-2', '[\"grant_id\"]', 200, NULL, \
     '2026-01-01T00:00:00.000001Z')";

both_backends!(
    audit_records_survive_migration_0010,
    spawn =
        |backend| { crate::helpers::TestApp::spawn_upgraded(backend, 9, &[super::OLD_RECORDS]) }
);
/// Records written before migration 0010 (which drops the per-agent index
/// and, on SQLite, AUTOINCREMENT by rebuilding the table) keep their ids
/// and columns; the next record's id comes after theirs; the table stays
/// append-only and the reporting view reads it.
async fn audit_records_survive_migration_0010(app: TestApp) {
    let old = audit_rows(&app).await;
    assert_eq!(old.len(), 2, "{old:?}");
    let ids: Vec<i64> = old
        .iter()
        .map(|r| col(r, "id").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(col(&old[0], "request_id"), Some("old-1"));
    assert_eq!(col(&old[1], "request_id"), Some("old-2"));
    assert_eq!(col(&old[1], "agent_login"), Some("old-bot"));
    assert_eq!(col(&old[1], "arg_names"), Some("[\"grant_id\"]"));
    assert_eq!(col(&old[1], "native_status"), Some("200"));
    assert_eq!(
        col(&old[1], "completed_at"),
        Some("2026-01-01T00:00:00.000001Z")
    );

    let mut conn = SqlConn::connect(&app.database_url()).await;
    let sqlite = app.backend == Backend::Sqlite;
    let indexes = if sqlite {
        "SELECT name FROM sqlite_master WHERE type = 'index' \
         AND tbl_name = 'tool_calls' ORDER BY name"
    } else {
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'tool_calls' \
         AND schemaname = current_schema() ORDER BY indexname"
    };
    let names: Vec<String> = conn
        .text_rows(indexes)
        .await
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    let expected: &[&str] = if sqlite {
        &["tool_calls_called_at"]
    } else {
        &[
            "tool_calls_called_at",
            "tool_calls_pkey",
            "tool_calls_sealing",
        ]
    };
    assert_eq!(names, expected);
    if sqlite {
        let table = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'tool_calls'";
        let sql = conn.text_rows(table).await[0][0].clone().unwrap();
        assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
    }

    // A new record comes after the old ones.
    let world = World::new(&app).await;
    let id = world.prepare("After the upgrade").await;
    world.read(id).await.assert_status(200);
    let rows = audit_rows(&app).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(col(&rows[2], "id"), Some("3"));
    assert_eq!(col(&rows[2], "agent_login"), Some(BOT));
    assert_eq!(col(&rows[2], "native_status"), Some("200"));

    // Still append-only (records leave only through an archive), and the
    // view reads every record.
    let refused = conn.execute("DELETE FROM tool_calls WHERE id = 1").await;
    assert!(refused.unwrap_err().contains("deleted only by the archive"));
    // (The sealer may have sealed the record already: then that trigger
    // refuses first.)
    let refused = conn
        .execute("UPDATE tool_calls SET agent_login = 'x' WHERE id = 2")
        .await
        .unwrap_err();
    assert!(
        refused.contains("only gain their outcome") || refused.contains("record is sealed"),
        "{refused}"
    );
    let view = conn
        .text_rows(
            "SELECT CAST(call_id AS TEXT), request_id FROM report_tool_calls_v1 \
             ORDER BY call_id",
        )
        .await;
    assert_eq!(view.len(), 3);
    assert_eq!(view[0], [Some("1".to_owned()), Some("old-1".to_owned())]);
    assert_eq!(view[1], [Some("2".to_owned()), Some("old-2".to_owned())]);
    assert_eq!(view[2][0].as_deref(), Some("3"));
    conn.close().await;
}

both_backends!(audit_rows_are_append_only);
async fn audit_rows_are_append_only(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "widgets", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    let id = world.prepare("Append only").await;
    let mcp = Mcp::new(&app, &world.bot);
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    mcp.call(LIST, json!({}))
        .await
        .denied("tool_not_in_any_grant");
    world.read(id).await.assert_status(200);
    let before = audit_rows(&app).await;
    assert_eq!(before.len(), 3);
    let allowed = col(&before[0], "id").unwrap().to_owned();
    let denied = col(&before[1], "id").unwrap().to_owned();
    let api = col(&before[2], "id").unwrap().to_owned();

    let mut conn = SqlConn::connect(&app.database_url()).await;
    let statements = [
        format!("UPDATE tool_calls SET native_status = 599 WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET error_code = 'x' WHERE id = {api}"),
        format!("UPDATE tool_calls SET completed_at = NULL WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET decision = 'allow' WHERE id = {denied}"),
        format!("UPDATE tool_calls SET arg_names = '[]' WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET reason = reason WHERE id = {denied}"),
        "UPDATE tool_calls SET agent_login = 'someone-else'".to_owned(),
        format!("DELETE FROM tool_calls WHERE id = {allowed}"),
        format!("DELETE FROM tool_calls WHERE id = {denied}"),
        "DELETE FROM tool_calls".to_owned(),
    ];
    for sql in &statements {
        let result = conn.execute(sql).await;
        // Refused by the schema's triggers (not by a lock or a permission).
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("tool_calls rows")),
            "{sql}: {result:?}"
        );
    }
    // The same connection may write: statements that touch no row succeed.
    assert_eq!(
        conn.execute("DELETE FROM tool_calls WHERE id < 0").await,
        Ok(0)
    );
    assert_eq!(
        conn.execute("UPDATE tool_calls SET reason = 'x' WHERE id < 0")
            .await,
        Ok(0)
    );
    conn.close().await;
    assert_eq!(audit_rows(&app).await, before);

    // The service keeps appending afterwards.
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    assert_eq!(audit_rows(&app).await.len(), 4);
}
