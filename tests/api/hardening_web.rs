//! Browser defence in depth and bounded inputs: the security headers of real
//! pages, forms that are not UTF-8, the minimum password length on every path
//! that sets one, and a client's `X-Request-Id`.

use reqwest::Method;
use serde_json::{Value, json};

use crate::browser::{Browser, nonce_in};
use crate::db::SqlConn;
use crate::helpers::{ADMIN_LOGIN, Auth, Body, Resp, TestApp};
use crate::world::{ALICE, OWNER, Prepare, REPO, World, page_path};

/// Every header an HTML page must carry, with the CSP directives required.
#[track_caller]
fn assert_page_headers(resp: &Resp, what: &str) {
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/html"),
        "{what}: {content_type}"
    );
    let csp = resp
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"));
    for directive in [
        "default-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(
            csp.split(';').any(|d| d.trim() == directive),
            "{what}: {csp} lacks {directive}"
        );
    }
    assert_eq!(
        resp.header("x-content-type-options").as_deref(),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        resp.header("referrer-policy").as_deref(),
        Some("same-origin"),
        "{what}"
    );
    assert_eq!(
        resp.header("cache-control").as_deref(),
        Some("no-store"),
        "{what}"
    );
    // What `default-src 'self'` would block must not be on the page.
    let lower = resp.body.to_ascii_lowercase();
    for inline in [
        "<script",
        "<style",
        " style=",
        " onclick=",
        " onload=",
        " onsubmit=",
    ] {
        assert!(!lower.contains(inline), "{what} has inline {inline}");
    }
}

both_backends!(pages_send_security_headers);
async fn pages_send_security_headers(app: TestApp) {
    let anonymous = Browser::new(&app.base);
    let login = anonymous.get_page("/user/login").await;
    login.assert_status(200);
    assert!(nonce_in(&login.body, "/user/login").is_some());
    assert_page_headers(&login, "/user/login");

    let world = World::new(&app).await;
    let id = world.prepare("Headers").await;
    let pages = [
        "/".to_owned(),
        format!("/{OWNER}/{REPO}/agent-work-grants"),
        format!("/{OWNER}/{REPO}/agent-work-grants/new"),
        page_path(OWNER, REPO, id),
        format!("/{OWNER}/{REPO}/settings/filesystem-context"),
    ];
    for path in &pages {
        let page = world.alice.get_page(path).await;
        page.assert_status(200);
        assert_page_headers(&page, path);
    }
    // Refusals and missing pages are pages too.
    for (path, status) in [
        ("/admin/mcp", 404),
        ("/acme/nothing/agent-work-grants", 404),
        ("/no/such/page/here", 404),
    ] {
        let page = world.alice.get_page(path).await;
        page.assert_status(status);
        assert_page_headers(&page, path);
    }
    let docs = app.get("/docs/errors", Auth::None).await;
    docs.assert_status(200);
    assert_page_headers(&docs, "/docs/errors");

    // The stylesheet the CSP allows is served from Writ itself.
    let css = app.get("/static/writ.css", Auth::None).await;
    css.assert_status(200);
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
    assert_eq!(
        css.header("x-content-type-options").as_deref(),
        Some("nosniff")
    );

    // JSON answers are not pages: nosniff, no page policy.
    let api = app.get("/api/v1/openapi.json", Auth::None).await;
    api.assert_status(200);
    assert_eq!(
        api.header("x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert!(api.header("content-security-policy").is_none());
}

both_backends!(token_creation_answer_is_not_stored);
async fn token_creation_answer_is_not_stored(app: TestApp) {
    let resp = app
        .send(
            Method::POST,
            &format!("/api/v1/admin/users/{ADMIN_LOGIN}/tokens"),
            Auth::Token(&app.admin_token),
            Body::Json(json!({"name": "cli", "scopes": ["read:admin"]})),
        )
        .await;
    resp.assert_status(201);
    assert!(resp.json()["token"].as_str().is_some());
    assert_eq!(resp.header("cache-control").as_deref(), Some("no-store"));
}

async fn count(app: &TestApp, sql: &str) -> String {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn.text_rows(sql).await;
    conn.close().await;
    rows[0][0].clone().unwrap_or_default()
}

/// Posts a raw form body, as a browser on Writ's own origin would.
async fn post_raw_form(browser: &Browser, path: &str, body: Vec<u8>) -> Resp {
    let response = browser
        .client
        .post(format!("{}{path}", browser.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Origin", browser.origin())
        .body(body)
        .send()
        .await
        .expect("POST form");
    Resp::read(response).await
}

fn form_body(fields: &[(String, String)], raw_extra: &[u8]) -> Vec<u8> {
    let mut body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
        .into_bytes();
    body.extend_from_slice(raw_extra);
    body
}

both_backends!(forms_that_are_not_utf8_are_refused);
async fn forms_that_are_not_utf8_are_refused(app: TestApp) {
    let world = World::new(&app).await;
    let new_page = world
        .alice
        .get_page(&format!("/{OWNER}/{REPO}/agent-work-grants/new"))
        .await;
    let action = format!("/{OWNER}/{REPO}/agent-work-grants");
    let nonce = nonce_in(&new_page.body, &action).expect("prepare nonce");
    let mut fields = Prepare::new(crate::world::BOT, "Café task").fields();
    fields.push(("nonce".to_owned(), nonce));
    let grants_before = count(&app, "SELECT CAST(COUNT(*) AS TEXT) FROM grants").await;

    // Percent-encoded and raw invalid sequences, in a value and in a key.
    for extra in [
        &b"&summary=%C3"[..],
        b"&expires_at=%FF%FE",
        b"&%80=x",
        b"&note=\xff",
        b"&summary=%ED%A0%80",
    ] {
        let resp = post_raw_form(&world.alice, &action, form_body(&fields, extra)).await;
        resp.assert_status(422);
        assert!(resp.body.contains("not valid UTF-8"), "{}", resp.body);
        assert_page_headers(&resp, "422 page");
    }
    assert_eq!(
        count(&app, "SELECT CAST(COUNT(*) AS TEXT) FROM grants").await,
        grants_before
    );
    assert_eq!(grants_before, "0");

    // The task itself with an invalid byte: refused, nothing stored.
    let bad_task: Vec<(String, String)> = fields
        .iter()
        .filter(|(k, _)| k != "task")
        .cloned()
        .collect();
    let resp = post_raw_form(
        &world.alice,
        &action,
        form_body(&bad_task, b"&task=Caf%E9+task"),
    )
    .await;
    resp.assert_status(422);
    assert_eq!(
        count(&app, "SELECT CAST(COUNT(*) AS TEXT) FROM grants").await,
        "0"
    );

    // The nonce was not spent: the same form, valid, is accepted.
    let resp = post_raw_form(&world.alice, &action, form_body(&fields, b"")).await;
    resp.assert_status(303);
    assert_eq!(
        count(&app, "SELECT CAST(COUNT(*) AS TEXT) FROM grants").await,
        "1"
    );
    let proposal = count(&app, "SELECT proposal FROM grants").await;
    assert!(proposal.contains("Café task"), "{proposal}");
    assert!(!proposal.contains('\u{fffd}'), "{proposal}");

    // The login form too; its nonce survives the refusal.
    let browser = Browser::new(&app.base);
    let page = browser.get_page("/user/login").await;
    let nonce = nonce_in(&page.body, "/user/login").expect("login nonce");
    let login = |password: &[u8]| {
        let mut body = format!("login={ALICE}&nonce={nonce}&password=").into_bytes();
        body.extend_from_slice(password);
        body
    };
    let resp = post_raw_form(&browser, "/user/login", login(b"alice-password-%FF")).await;
    resp.assert_status(422);
    let resp = post_raw_form(&browser, "/user/login", login(b"alice-password-1")).await;
    resp.assert_status(303);
}

/// Runs the `writ` binary against the app's database, with the default
/// password minimum.
fn writ_command(app: &TestApp, args: &[&str]) -> tokio::process::Command {
    let mut cmd = crate::helpers::writ_command(&app.database_url(), args);
    cmd.env_remove("WRIT_MIN_PASSWORD_LENGTH");
    cmd
}

async fn create_human(app: &TestApp, login: &str, password: &str) -> Resp {
    app.send(
        Method::POST,
        "/api/v1/admin/users",
        Auth::Token(&app.admin_token),
        Body::Json(json!({"login": login, "kind": "human", "password": password})),
    )
    .await
}

both_backends!(passwords_have_a_minimum_length);
async fn passwords_have_a_minimum_length(app: TestApp) {
    // The admin API: 11 characters refused, 12 accepted (characters, not
    // bytes).
    for short in ["eleven-char", "ééééééééééé", ""] {
        let resp = create_human(&app, "shorty", short).await;
        resp.assert_error(400, "invalid_input");
        let message = resp.json()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("at least 12 characters"), "{message}");
    }
    create_human(&app, "shorty", "twelve-chars")
        .await
        .assert_status(201);
    create_human(&app, "accent", "éééééééééééé")
        .await
        .assert_status(201);
    Browser::logged_in(&app.base, "shorty", "twelve-chars").await;

    // The CLI: `writ admin user` and `writ admin bootstrap` refuse too.
    for args in [
        &[
            "admin",
            "user",
            "--login",
            "cli-user",
            "--kind",
            "human",
            "--password",
            "short-pw",
        ][..],
        &[
            "admin",
            "bootstrap",
            "--login",
            "cli-admin",
            "--password",
            "short-pw",
        ],
    ] {
        let out = writ_command(&app, args).output().await.expect("run writ");
        assert!(!out.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("at least 12 characters"), "{stderr}");
    }
    let users = count(
        &app,
        "SELECT CAST(COUNT(*) AS TEXT) FROM users WHERE login LIKE 'cli-%'",
    )
    .await;
    assert_eq!(users, "0");

    // The setting, from the environment, applies to the CLI.
    let out = writ_command(
        &app,
        &[
            "admin",
            "user",
            "--login",
            "cli-user",
            "--kind",
            "human",
            "--password",
            "eight-ch",
        ],
    )
    .env("WRIT_MIN_PASSWORD_LENGTH", "8")
    .output()
    .await
    .expect("run writ");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let user: Value = serde_json::from_slice(&out.stdout).expect("user JSON");
    assert_eq!(user["login"], "cli-user");
}

both_backends!(a_configured_minimum_applies, |config| {
    config.min_password_length = 15;
});
async fn a_configured_minimum_applies(app: TestApp) {
    let resp = create_human(&app, "dora", "fourteen-chars").await;
    resp.assert_error(400, "invalid_input");
    assert!(
        resp.body.contains("at least 15 characters"),
        "{}",
        resp.body
    );
    create_human(&app, "dora", "fifteen-chars-x")
        .await
        .assert_status(201);
}

/// `GET /healthz` with these `X-Request-Id` values: the id answered.
async fn answered_id(app: &TestApp, ids: &[&[u8]]) -> String {
    let mut request = app.client.get(app.url("/healthz"));
    for id in ids {
        let value = reqwest::header::HeaderValue::from_bytes(id).expect("a sendable header");
        request = request.header("x-request-id", value);
    }
    let resp = Resp::read(request.send().await.expect("GET /healthz")).await;
    resp.assert_status(200);
    resp.header("x-request-id").expect("an answered request id")
}

fn is_bounded(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

both_backends!(client_request_ids_are_bounded);
async fn client_request_ids_are_bounded(app: TestApp) {
    let longest = "x".repeat(128);
    for good in ["good-id_123", "a.b:c/d=e", longest.as_str()] {
        assert_eq!(answered_id(&app, &[good.as_bytes()]).await, good);
    }
    let too_long = "x".repeat(129);
    let bad: [Vec<&[u8]>; 6] = [
        vec![too_long.as_bytes()],
        vec![b"a b"],
        vec![b"a\tb"],
        vec!["café".as_bytes()],
        vec![b"\x80\xff"],
        vec![b"one", b"two"],
    ];
    for ids in &bad {
        let answered = answered_id(&app, ids).await;
        assert!(is_bounded(&answered), "{answered:?}");
        assert!(
            !ids.iter().any(|id| id == &answered.as_bytes()),
            "{ids:?} was kept"
        );
    }
    assert_eq!(answered_id(&app, &[]).await.len(), 36);

    // The audit records the id Writ answered, not the one sent.
    let world = World::new(&app).await;
    let resp = Resp::read(
        app.client
            .get(app.url("/api/v1/agent-work-grants"))
            .header("Authorization", format!("token {}", world.bot))
            .header("x-request-id", too_long.as_str())
            .send()
            .await
            .expect("list grants"),
    )
    .await;
    resp.assert_status(200);
    let answered = resp.header("x-request-id").unwrap();
    assert_ne!(answered, too_long);
    let recorded = count(&app, "SELECT request_id FROM tool_calls ORDER BY id DESC").await;
    assert_eq!(recorded, answered);
}

both_backends!(error_messages_stay_bounded);
async fn error_messages_stay_bounded(app: TestApp) {
    let mut body = serde_json::Map::new();
    body.insert("login".into(), json!("someone"));
    body.insert("kind".into(), json!("human"));
    body.insert("x".repeat(4000), json!(1));
    let resp = app
        .send(
            Method::POST,
            "/api/v1/admin/users",
            Auth::Token(&app.admin_token),
            Body::Json(Value::Object(body)),
        )
        .await;
    resp.assert_error(400, "invalid_input");
    let message = resp.json()["message"].as_str().unwrap().to_owned();
    assert!(message.len() <= 512, "{} bytes", message.len());
}
