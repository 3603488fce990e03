//! Input refused at the edge, the same on both engines: U+0000 or bytes
//! that are not UTF-8 in a path segment, a query parameter or a form field
//! (400 or 422 before any query, where PostgreSQL's driver would refuse the
//! byte with an error), and every
//! 4xx on an API path with the JSON error body, whichever layer wrote it.

use reqwest::Method;
use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{Auth, Body, Resp, TestApp};
use crate::world::{OWNER, Prepare, REPO, World};

/// Row counts of every table a refusal must leave alone (the audit and the
/// browser's session tables may legitimately grow), and the grants'
/// revisions, which every change to a grant bumps.
async fn fingerprint(app: &TestApp) -> Vec<Vec<Option<String>>> {
    let tables = [
        "users",
        "access_tokens",
        "repositories",
        "collaborators",
        "grants",
        "grant_events",
        "events",
        "webhook_deliveries",
        "issues",
        "submissions",
        "admission_evaluations",
        "agent_tool_grants",
        "mcp_health",
        "login_failures",
    ];
    let counts: Vec<String> = tables
        .iter()
        .map(|t| format!("SELECT CAST(COUNT(*) AS TEXT) FROM {t}"))
        .collect();
    let sql = format!(
        "{} UNION ALL SELECT CAST(COALESCE(SUM(state_revision), 0) AS TEXT) FROM grants",
        counts.join(" UNION ALL ")
    );
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn.text_rows(&sql).await;
    conn.close().await;
    rows
}

#[track_caller]
fn assert_json_400(resp: &Resp) {
    resp.assert_error(400, "invalid_input");
    assert!(!resp.body.contains('\0'));
}

both_backends!(nul_in_urls_is_400_before_any_query);
async fn nul_in_urls_is_400_before_any_query(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("NUL target").await;
    let before = fingerprint(&app).await;
    let bot = Auth::Token(&world.bot);
    let admin = Auth::Token(&app.admin_token);
    let api = [
        (
            format!("/api/v1/repos/{OWNER}%00/{REPO}/agent-work-grants/{id}"),
            bot,
        ),
        (
            format!("/api/v1/repos/{OWNER}/{REPO}%00/agent-work-grants/{id}"),
            bot,
        ),
        (
            format!("/api/v1/repos/{OWNER}/{REPO}/agent-work-grants/{id}/submissions/%00"),
            bot,
        ),
        ("/api/v1/agent-work-grants?state=all%00".to_owned(), bot),
        ("/api/v1/agent-work-grants?%00=1".to_owned(), bot),
        (format!("/api/v1/repos/{OWNER}/{REPO}/issues/1%00"), bot),
        (
            "/api/v1/admin/reports/receipts?repository=acme%00".to_owned(),
            admin,
        ),
        (
            "/api/v1/admin/reports/tool_calls?agent=a%00b".to_owned(),
            admin,
        ),
        (
            "/api/v1/repos/acme/widgets%FF/agent-work-grants".to_owned(),
            bot,
        ),
    ];
    for (path, auth) in &api {
        let resp = app.get(path, *auth).await;
        assert_json_400(&resp);
    }
    let writes = [
        (
            Method::PUT,
            format!("/api/v1/repos/{OWNER}/{REPO}/collaborators/x%00y"),
        ),
        (Method::POST, "/api/v1/admin/users/x%00/tokens".to_owned()),
        (
            Method::DELETE,
            format!("/api/v1/repos/{OWNER}/{REPO}/issues/%00"),
        ),
    ];
    for (method, path) in writes {
        let resp = app
            .send(method, &path, admin, Body::Json(serde_json::json!({})))
            .await;
        assert_json_400(&resp);
    }
    // Pages answer the same refusal as a page.
    for path in [
        format!("/{OWNER}%00/{REPO}/agent-work-grants"),
        format!("/{OWNER}/{REPO}/agent-work-grants/{id}%00"),
        "/?state=%00".to_owned(),
    ] {
        let page = world.alice.get_page(&path).await;
        page.assert_status(400);
        assert!(
            page.header("content-type")
                .unwrap()
                .starts_with("text/html")
        );
    }
    assert_eq!(fingerprint(&app).await, before);
}

both_backends!(nul_in_form_fields_is_422_and_changes_nothing);
async fn nul_in_form_fields_is_422_and_changes_nothing(app: TestApp) {
    let world = World::new(&app).await;
    let before = fingerprint(&app).await;
    // The prepare form with NUL in the agent field.
    let new_page = world
        .alice
        .get_page(&format!("/{OWNER}/{REPO}/agent-work-grants/new"))
        .await;
    let nonce = crate::browser::nonce_in(
        &new_page.body,
        &format!("/{OWNER}/{REPO}/agent-work-grants"),
    )
    .expect("the new-grant page has a nonce");
    let mut fields = Prepare::new("builder\0bot", "NUL agent").fields();
    fields.push(("nonce".into(), nonce));
    let resp = world
        .alice
        .post_form(
            &format!("/{OWNER}/{REPO}/agent-work-grants"),
            &fields,
            Some(&world.alice.origin()),
        )
        .await;
    resp.assert_status(422);
    // The login form with NUL in the login.
    let mut anonymous = crate::browser::Browser::new(&app.base);
    let resp = anonymous.login("ali\0ce", "alice-password-1").await;
    resp.assert_status(422);
    assert_eq!(fingerprint(&app).await, before);
}

both_backends!(every_4xx_on_an_api_path_is_json);
async fn every_4xx_on_an_api_path_is_json(app: TestApp) {
    let world = World::new(&app).await;
    let bot = Auth::Token(&world.bot);
    // A known route with another method: 405, JSON, Allow kept.
    let resp = app
        .send(Method::DELETE, "/api/v1/agent-work-grants", bot, Body::None)
        .await;
    resp.assert_error(405, "method_not_allowed");
    assert!(resp.header("allow").is_some_and(|a| a.contains("GET")));
    let resp = app
        .send(Method::PATCH, "/api/v1/admin/users", bot, Body::None)
        .await;
    resp.assert_error(405, "method_not_allowed");
    // A doubled leading slash is still an API path.
    let resp = app.get("//api/v1/agent-work-grants", bot).await;
    resp.assert_error(404, "not_found");
    let resp = app.get("/api/v1/no-such-route", bot).await;
    resp.assert_error(404, "not_found");
    // A page path keeps its HTML 404.
    let page = world.alice.get_page("/no/such/page/here").await;
    page.assert_status(404);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
}

/// One raw POST to `/mcp` as builder-bot.
async fn mcp_post(app: &TestApp, bot: &str, accept: Option<&str>, body: Vec<u8>) -> Resp {
    let mut request = app
        .client
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {bot}"))
        .header("Content-Type", "application/json")
        .body(body);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    Resp::read(request.send().await.expect("POST /mcp")).await
}

#[track_caller]
fn assert_rpc_error(resp: &Resp, status: u16, code: i64) {
    resp.assert_status(status);
    let body = resp.json();
    assert_eq!(body["jsonrpc"], "2.0", "{}", resp.body);
    assert_eq!(body["error"]["code"], code, "{}", resp.body);
}

both_backends!(mcp_transport_errors_are_json_rpc);
async fn mcp_transport_errors_are_json_rpc(app: TestApp) {
    let world = World::new(&app).await;
    let both = Some("application/json, text/event-stream");
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"a\":{}{}}}}}",
        "[".repeat(3000),
        "]".repeat(3000)
    );
    let mut not_utf8 = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":""#.to_vec();
    not_utf8.extend_from_slice(b"\xff\"}}");
    for body in [
        b"{\"jsonrpc\":".to_vec(),
        Vec::new(),
        not_utf8,
        deep.into_bytes(),
    ] {
        let resp = mcp_post(&app, &world.bot, both, body).await;
        assert_rpc_error(&resp, 400, -32700);
    }
    // One JSON value, but no JSON-RPC message: -32600, naming a valid id.
    for (body, id) in [
        (r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#, json!(3)),
        (r#"{"jsonrpc":"2.0","id":"a","method":7}"#, json!("a")),
        (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, Value::Null),
        ("42", Value::Null),
    ] {
        let resp = mcp_post(&app, &world.bot, both, body.as_bytes().to_vec()).await;
        assert_rpc_error(&resp, 400, -32600);
        assert_eq!(resp.json()["id"], id, "{}", resp.body);
    }
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec();
    for accept in [None, Some("text/html"), Some("application/json")] {
        let resp = mcp_post(&app, &world.bot, accept, ping.clone()).await;
        assert_rpc_error(&resp, 406, -32600);
    }
    // A discovery probe without what its revision requires: a JSON-RPC
    // error in HTTP 200, never an HTTP error.
    let discover = br#"{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{}}"#;
    let resp = mcp_post(&app, &world.bot, both, discover.to_vec()).await;
    resp.assert_status(200);
    assert_eq!(resp.json()["id"], 7);
    assert!(resp.json()["error"]["code"].is_i64(), "{}", resp.body);
    let resp = app
        .client
        .get(app.url("/mcp"))
        .header("Authorization", format!("Bearer {}", world.bot))
        .send()
        .await
        .unwrap();
    let resp = Resp::read(resp).await;
    assert_rpc_error(&resp, 405, -32600);
}
