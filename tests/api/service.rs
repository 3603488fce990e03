//! Service endpoints, and no redirects anywhere on the API.

use reqwest::Method;

use crate::helpers::{Auth, Backend, Body, OTHER_DIGEST, TestApp, confirm_body, grant_path};
use crate::world::{OWNER, REPO, World, new_key, submit_body};

both_backends!(health_metrics_and_openapi);
async fn health_metrics_and_openapi(app: TestApp) {
    app.get("/healthz", Auth::None).await.assert_status(200);
    app.get("/readyz", Auth::None).await.assert_status(200);
    // Make sure at least one API request was counted.
    app.get("/api/v1/agent-work-grants", Auth::None)
        .await
        .assert_status(401);
    let metrics = app.get("/metrics", Auth::None).await;
    metrics.assert_status(200);
    let content_type = metrics.header("content-type").unwrap_or_default();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(metrics.body.contains("http_requests"), "{}", metrics.body);

    let openapi = app.get("/api/v1/openapi.json", Auth::None).await;
    openapi.assert_status(200);
    let doc = openapi.json();
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.1"), "{version}");
    let paths = doc["paths"].as_object().expect("paths");
    assert!(
        paths.contains_key("/api/v1/agent-work-grants"),
        "{:?}",
        paths.keys()
    );
    assert!(
        paths
            .keys()
            .any(|p| p.starts_with("/api/v1/repos/") && p.ends_with("/confirm"))
    );
    assert!(paths.keys().any(|p| p.starts_with("/api/v1/admin/users")));
}

both_backends!(sqlite_checkpoints_run_beside_the_writer);
/// Enough audited grant reads to grow SQLite's WAL past 1000 frames (each
/// read commits its record): the WAL is checkpointed by the writer's own
/// checkpointer, in two steps (a background thread, then the writer), as
/// `/metrics` shows; the answers are unaffected. PostgreSQL has no such
/// counter.
async fn sqlite_checkpoints_run_beside_the_writer(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Checkpoints").await;
    let path = grant_path(OWNER, REPO, id);
    for _ in 0..500 {
        app.get(&path, Auth::Token(&world.bot))
            .await
            .assert_status(200);
    }
    let counted = |body: &str, on: &str| {
        body.lines()
            .any(|l| l.starts_with("writ_sqlite_checkpoints_total") && l.contains(on))
    };
    let mut body = String::new();
    for _ in 0..50 {
        body = app.get("/metrics", Auth::None).await.body;
        if app.backend == Backend::Postgres
            || (counted(&body, r#"on="background""#) && counted(&body, r#"on="writer""#))
        {
            break;
        }
        // The writer takes its step after the next commit.
        app.get(&path, Auth::Token(&world.bot))
            .await
            .assert_status(200);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    match app.backend {
        Backend::Sqlite => {
            assert!(counted(&body, r#"on="background""#), "{body}");
            assert!(counted(&body, r#"on="writer""#), "{body}");
        }
        Backend::Postgres => {
            assert!(!body.contains("writ_sqlite_checkpoints_total"), "{body}");
        }
    }
}

both_backends!(api_routes_never_redirect);
async fn api_routes_never_redirect(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("No redirects").await;
    let before = world.grant(id).await;
    let grant = grant_path(OWNER, REPO, id);
    let bot = Auth::Token(&world.bot);
    let not_found = [
        (Method::GET, "/api/v1/agent-work-grants/".to_owned()),
        (Method::GET, format!("{grant}/")),
        (Method::POST, format!("{grant}/confirm/")),
        (
            Method::GET,
            format!("/api/v1/repos/{OWNER}/{REPO}/agent-work-grants/"),
        ),
        (Method::GET, "/api/v1/agent-work-grant".to_owned()),
    ];
    for (method, path) in &not_found {
        let body = Body::Json(confirm_body(OTHER_DIGEST));
        let resp = app.send(method.clone(), path, bot, body).await;
        assert_eq!(resp.status.as_u16(), 404, "{method} {path}: {}", resp.body);
        assert!(resp.header("location").is_none(), "{path}");
    }
    let others = [
        "/api/v1",
        "/api/v1/",
        "//api/v1/agent-work-grants",
        "/api//v1/agent-work-grants",
        "/api/v1/agent-work-grants?page=1&",
    ];
    for path in others {
        for auth in [Auth::None, bot] {
            let resp = app.get(path, auth).await;
            let status = resp.status.as_u16();
            assert!(!(300..400).contains(&status), "{path} redirects: {status}");
            assert!(status < 500, "{path}: {status} {}", resp.body);
        }
    }
    world.assert_unchanged(id, &before).await;
}

both_backends!(connections_the_database_dropped_are_replaced);
async fn connections_the_database_dropped_are_replaced(app: TestApp) {
    app.create_user("before-drop", "bot", None).await;
    app.get("/readyz", Auth::None).await.assert_status(200);
    // PostgreSQL: end every server process of the app's pooled connections,
    // as a database restart or an idle-connection reaper would. (SQLite has
    // no server to drop them; there the same steps just have to keep working.)
    let url = app.database_url();
    if url.starts_with("postgres") {
        let mut sql = crate::db::SqlConn::connect(&url).await;
        let ended = sql
            .text_rows(
                "SELECT CAST(pg_terminate_backend(pid) AS TEXT) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .await;
        assert!(
            ended.iter().any(|row| row[0].as_deref() == Some("true")),
            "no pooled connection was ended: {ended:?}"
        );
        sql.close().await;
    }
    // A connection idle this long is pinged before it is handed out, and a
    // dead one replaced, so the next requests succeed.
    tokio::time::sleep(writ::store::PING_AFTER_IDLE + std::time::Duration::from_millis(300)).await;
    app.get("/readyz", Auth::None).await.assert_status(200);
    app.create_user("after-drop", "bot", None).await;
    app.get("/readyz", Auth::None).await.assert_status(200);
}

both_backends!(refused_calls_leave_no_transaction_open, |config| {
    config.max_connections = 2;
});
/// Every refusal rolls back the transaction it opened, and the connection it
/// ran on is handed out again only once that rollback is answered: right
/// after each refusal no connection of the app is left inside a
/// transaction, and what was committed stays committed.
async fn refused_calls_leave_no_transaction_open(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Connections come back clean").await;
    let digest = world.digest(id).await;
    let key = new_key();
    world.submit(id, &key, "Kept", "").await.assert_status(201);
    let url = app.database_url();
    let mut sql = match url.starts_with("postgres") {
        true => Some(crate::db::SqlConn::connect(&url).await),
        false => None,
    };
    for round in 0..3 {
        // Refused after the grant row was locked (wrong digest, another
        // body under a used key, a confirm with the wrong digest), and a
        // grant that is not there.
        let refusals = [
            world
                .submit_with(id, submit_body(OTHER_DIGEST, &new_key(), "No", ""))
                .await
                .assert_error(409, "proposal_mismatch")
                .status,
            world
                .submit_with(
                    id,
                    submit_body(&digest, &key, &format!("Other {round}"), ""),
                )
                .await
                .assert_error(409, "request_key_conflict")
                .status,
            world
                .confirm_with(id, confirm_body(OTHER_DIGEST))
                .await
                .assert_status(409)
                .status,
            world
                .read(999_999)
                .await
                .assert_error(404, "not_found")
                .status,
        ];
        assert_eq!(refusals.len(), 4);
        if let Some(sql) = sql.as_mut() {
            assert_no_transaction_left(sql).await;
        }
    }
    let next = new_key();
    world
        .submit(id, &next, "Also kept", "")
        .await
        .assert_status(201);
    assert_eq!(world.grant(id).await["submission_count"], 2);
    world.receipt(id, &key).await;
    world.receipt(id, &next).await;
    if let Some(mut sql) = sql {
        let receipts = sql
            .text_rows("SELECT CAST(count(*) AS TEXT) FROM submissions")
            .await;
        assert_eq!(receipts[0][0].as_deref(), Some("2"));
        sql.close().await;
    }
}

/// Fails unless, within two seconds, no other connection to the database is
/// idle inside a transaction.
async fn assert_no_transaction_left(sql: &mut crate::db::SqlConn) {
    let mut open = Vec::new();
    for _ in 0..100 {
        open = sql
            .text_rows(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'",
            )
            .await;
        if open.is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("connections left inside a transaction: {open:?}");
}

both_backends!(postgres_use_cases_plan_each_statement_once);
/// On PostgreSQL the use cases' connections keep one generic plan per
/// prepared statement (`plan_cache_mode = force_generic_plan`): with the
/// default, a statement whose generic plan the planner judged dearer was
/// planned anew at every execution, milliseconds per submit.
async fn postgres_use_cases_plan_each_statement_once(app: TestApp) {
    let store = &app.writ().ctx().store;
    let setting = sea_query::Query::select()
        .expr(sea_query::Expr::cust(
            "CAST(current_setting('plan_cache_mode') AS TEXT)",
        ))
        .to_owned();
    if app.database_url().starts_with("postgres") {
        for mut tx in [
            store.single().await.expect("single"),
            store.write().await.expect("write"),
            store.read().await.expect("read"),
        ] {
            let (mode,): (String,) = tx.fetch_one(&setting).await.expect("setting");
            assert_eq!(mode, "force_generic_plan");
        }
    } else {
        // No plan cache to set on SQLite: the store only has to keep working.
        app.get("/readyz", Auth::None).await.assert_status(200);
    }
}
