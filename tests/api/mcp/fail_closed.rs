//! Failing closed: a call whose record cannot be written is refused, and
//! a use case never commits without its record.

use serde_json::json;

use super::{
    ALL_TOOLS, CONFIRM, GET, LIST, Mcp, Row, SUBMIT, ToolResult, audit_rows, col, confirm_args,
    put_grants, submit_args, target,
};
use crate::db::SqlConn;
use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, REPO, World, new_key, submit_body};

/// Adds a trigger that makes every INSERT (`"INSERT"`) or UPDATE
/// (`"UPDATE"`) of `tool_calls` fail, as an unwritable audit would.
async fn block_audit(app: &TestApp, operation: &str) {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let name = format!("test_block_audit_{}", operation.to_ascii_lowercase());
    let statements = match conn {
        SqlConn::Sqlite(_) => vec![format!(
            "CREATE TRIGGER {name} BEFORE {operation} ON tool_calls \
             BEGIN SELECT RAISE(ABORT, 'audit blocked by the test'); END"
        )],
        SqlConn::Postgres(_) => vec![
            "CREATE OR REPLACE FUNCTION test_block_audit() RETURNS trigger AS $$ \
             BEGIN RAISE EXCEPTION 'audit blocked by the test'; END; $$ LANGUAGE plpgsql"
                .to_owned(),
            format!(
                "CREATE TRIGGER {name} BEFORE {operation} ON tool_calls \
                 FOR EACH ROW EXECUTE FUNCTION test_block_audit()"
            ),
        ],
    };
    for sql in statements {
        conn.execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    conn.close().await;
}

/// Removes the trigger [`block_audit`] added.
async fn unblock_audit(app: &TestApp, operation: &str) {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let name = format!("test_block_audit_{}", operation.to_ascii_lowercase());
    let sql = match conn {
        SqlConn::Sqlite(_) => format!("DROP TRIGGER {name}"),
        SqlConn::Postgres(_) => format!("DROP TRIGGER {name} ON tool_calls"),
    };
    conn.execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn.close().await;
}

both_backends!(an_unwritable_audit_refuses_the_call);
async fn an_unwritable_audit_refuses_the_call(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
    )
    .await;
    let pending = world.prepare("Fail closed: pending").await;
    let active = world.active("Fail closed: active").await;
    let pending_digest = world.digest(pending).await;
    let active_digest = world.digest(active).await;
    let before_pending = world.grant(pending).await;
    let before_active = world.grant(active).await;
    let mcp = Mcp::new(&app, &world.bot);
    let rows_before = audit_rows(&app).await.len();

    // The record cannot be written: nothing runs, over MCP or REST.
    block_audit(&app, "INSERT").await;
    let refused = |result: ToolResult| {
        result.error(503, "audit_unavailable");
    };
    refused(mcp.call(GET, target(OWNER, REPO, pending)).await);
    refused(mcp.call(LIST, json!({})).await);
    refused(
        mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
            .await,
    );
    let key = new_key();
    refused(
        mcp.call(
            SUBMIT,
            submit_args(active, &active_digest, &key, "Blocked", "b"),
        )
        .await,
    );
    // A call the policy would deny is not answered either way without its
    // record.
    let unknown = mcp.call("create_issue", json!({})).await;
    assert!(unknown.is_error, "{:?}", unknown);
    // The native routes refuse too (their status and code are checked in
    // native_routes_answer_503_when_the_audit_is_unwritable).
    let resp = world
        .confirm_with(pending, crate::helpers::confirm_body(&pending_digest))
        .await;
    assert!(resp.status.is_server_error(), "{resp:?}");
    let resp = world
        .submit_with(active, submit_body(&active_digest, &key, "Blocked", "b"))
        .await;
    assert!(resp.status.is_server_error(), "{resp:?}");
    unblock_audit(&app, "INSERT").await;
    assert_eq!(audit_rows(&app).await.len(), rows_before);
    world.assert_unchanged(pending, &before_pending).await;
    world.assert_unchanged(active, &before_active).await;
    assert!(world.all_issues().await.is_empty());
    let rows_before = audit_rows(&app).await.len();

    // The record is written but its outcome cannot be: a write rolls back
    // with it, so nothing happened, and the call is refused.
    block_audit(&app, "UPDATE").await;
    refused(
        mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
            .await,
    );
    refused(
        mcp.call(
            SUBMIT,
            submit_args(active, &active_digest, &key, "Blocked", "b"),
        )
        .await,
    );
    refused(mcp.call(GET, target(OWNER, REPO, pending)).await);
    // A native call's record is never updated: it is written once, whole,
    // with its outcome, in the operation's transaction.
    world.read(pending).await.assert_status(200);
    unblock_audit(&app, "UPDATE").await;
    world.assert_unchanged(pending, &before_pending).await;
    world.assert_unchanged(active, &before_active).await;
    assert!(world.all_issues().await.is_empty());
    world
        .readback(active, &key)
        .await
        .assert_error(404, "not_found");
    // Each of those calls left its record. An MCP call's record was
    // committed with its policy decision, so it stays without an outcome.
    // The native read's record was written with its outcome.
    let rows = audit_rows(&app).await;
    let blocked = &rows[rows_before..rows_before + 4];
    for row in blocked {
        assert_eq!(col(row, "decision"), Some("allow"), "{row:?}");
        if col(row, "via") == Some("mcp") {
            assert_eq!(col(row, "completed_at"), None, "{row:?}");
            assert_eq!(col(row, "native_status"), None, "{row:?}");
        } else {
            assert_eq!(col(row, "native_status"), Some("200"), "{row:?}");
            assert_eq!(col(row, "error_code"), None, "{row:?}");
            assert!(col(row, "completed_at").is_some(), "{row:?}");
        }
    }
    assert_eq!(
        blocked
            .iter()
            .filter(|r| col(r, "via") == Some("api"))
            .count(),
        1
    );

    // Writable again: the same calls go through.
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
        .await
        .ok(200);
    mcp.call(
        SUBMIT,
        submit_args(active, &active_digest, &key, "Now", "b"),
    )
    .await
    .ok(201);
    assert_eq!(world.all_issues().await.len(), 1);
}

// The native agent routes answer an unwritable audit as `/mcp` does: 503
// `audit_unavailable` (`service::Error::AuditUnavailable`), never a
// generic 500 `internal`.
both_backends!(native_routes_answer_503_when_the_audit_is_unwritable);
async fn native_routes_answer_503_when_the_audit_is_unwritable(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
    )
    .await;
    let id = world.prepare("Audit unavailable").await;
    let digest = world.digest(id).await;
    let before = world.grant(id).await;
    block_audit(&app, "INSERT").await;
    // /mcp: 503 audit_unavailable.
    Mcp::new(&app, &world.bot)
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(503, "audit_unavailable");
    // The native routes, for the same failure.
    let get = world.read(id).await;
    let confirm = world
        .confirm_with(id, crate::helpers::confirm_body(&digest))
        .await;
    unblock_audit(&app, "INSERT").await;
    world.assert_unchanged(id, &before).await;
    for (route, resp) in [("GET grant", &get), ("POST confirm", &confirm)] {
        assert_eq!(
            (resp.status.as_u16(), resp.code().as_str()),
            (503, "audit_unavailable"),
            "{route}: an unwritable audit must be 503 audit_unavailable, as on /mcp: {}",
            resp.body
        );
    }
}

both_backends!(an_audited_transaction_commits_its_record_with_the_outcome);
async fn an_audited_transaction_commits_its_record_with_the_outcome(app: TestApp) {
    use writ::service::audit::{self, Access, CallInfo};
    use writ::service::auth::{Credential, authenticate};

    // `audit::begin` → `AuditedTx::commit`: the record is written whole,
    // with its outcome, in the transaction's own commit; `audit::finish`
    // then writes nothing more. A transaction dropped uncommitted leaves no
    // record, and `finish` records the refusal.
    let world = World::new(&app).await;
    let ctx = app.writ().ctx();
    let records = |request_id: String| {
        let app = &app;
        async move {
            audit_rows(app)
                .await
                .into_iter()
                .filter(|r| col(r, "request_id") == Some(request_id.as_str()))
                .collect::<Vec<Row>>()
        }
    };
    for access in [Access::Write, Access::Read] {
        let mut caller = authenticate(ctx, Credential::Token(&world.bot))
            .await
            .expect("the bot's token authenticates");
        let mut args = serde_json::Map::new();
        args.insert("owner".into(), json!(OWNER));
        args.insert("repo".into(), json!(REPO));
        let request_id = format!("audited-{}", new_key());
        let call = CallInfo {
            tool: "",
            args: &args,
            rpc_id: None,
            request_id: Some(request_id.clone()),
        };
        audit::prepare_api(ctx, &mut caller, writ::domain::tools::Tool::List, &call)
            .expect("prepared");
        let dropped = audit::begin(ctx, &caller, access).await.expect("begun");
        drop(dropped);
        assert!(records(request_id.clone()).await.is_empty(), "{access:?}");

        let tx = audit::begin(ctx, &caller, access).await.expect("begun");
        tx.commit_ok(ctx).await.expect("commits with its record");
        let written = records(request_id.clone()).await;
        assert_eq!(written.len(), 1, "{access:?}: {written:?}");
        assert_eq!(col(&written[0], "tool"), Some("list_agent_work_grants"));
        assert_eq!(col(&written[0], "via"), Some("api"));
        assert_eq!(col(&written[0], "decision"), Some("allow"));
        assert_eq!(col(&written[0], "native_status"), Some("200"));
        assert!(col(&written[0], "completed_at").is_some(), "{written:?}");

        audit::finish(ctx, &caller, Ok::<(), writ::service::Error>(()), 200)
            .await
            .expect("nothing more to write");
        assert_eq!(records(request_id.clone()).await.len(), 1, "{access:?}");
    }

    // Dropped, then refused: the refusal is the record.
    let mut caller = authenticate(ctx, Credential::Token(&world.bot))
        .await
        .expect("the bot's token authenticates");
    let args = serde_json::Map::new();
    let request_id = format!("refused-{}", new_key());
    let call = CallInfo {
        tool: "",
        args: &args,
        rpc_id: None,
        request_id: Some(request_id.clone()),
    };
    audit::prepare_api(ctx, &mut caller, writ::domain::tools::Tool::Get, &call).expect("prepared");
    drop(
        audit::begin(ctx, &caller, Access::Write)
            .await
            .expect("begun"),
    );
    let refused = audit::finish(
        ctx,
        &caller,
        Err::<(), _>(writ::service::Error::NotFound),
        200,
    )
    .await;
    assert!(refused.is_err());
    let written = records(request_id).await;
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(col(&written[0], "native_status"), Some("404"));
    assert_eq!(col(&written[0], "error_code"), Some("not_found"));
}
