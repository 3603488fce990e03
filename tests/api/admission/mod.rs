//! MCP admission (spec `admission.md`): one decision function at preview
//! (API and grant page), approval (browser form) and handoff (submit); the
//! project filesystem context settings form; MCP health and its snapshots;
//! the admin MCP routes and the admissions report. This module holds the
//! packages and helpers the tests share.

mod admin;
mod approval;
mod events;
mod evidence;
mod filesystem_context;
mod health;
mod parity;
mod task_tracker;

use reqwest::Method;
use serde_json::{Value, json};

use crate::browser::{Browser, nonce_in};
use crate::db::SqlConn;
use crate::helpers::{Auth, Body, Resp, TestApp, grant_path};
use crate::world::{BOT, OWNER, Prepare, REPO, World, is_hex64, is_timestamp};

// ---------------------------------------------------------------------------
// Packages.
// ---------------------------------------------------------------------------

/// The tiny task-tracker package (`src/domain/admission/tests.rs`):
/// req-0 frontend prompt-only github context, req-1 qa required filesystem
/// read + search, req-2 review optional deferred PR creation, req-3 docs
/// optional github read with prompt context.
const TINY_TASK_TRACKER: &str = r#"[
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Open issues describe the due-date feature."},
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.read"],"fallback":"continue_without_mcp","prompt_context":"Docs live under docs/."}
]"#;

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

/// `/{owner}/{repo}/settings/filesystem-context`
fn fs_settings() -> String {
    format!("/{OWNER}/{REPO}/settings/filesystem-context")
}

/// The settings form's fields: nonce, action and repeated capabilities.
fn fs_fields(nonce: &str, action: &str, caps: &[&str]) -> Vec<(String, String)> {
    let mut fields = vec![
        ("nonce".to_owned(), nonce.to_owned()),
        ("action".to_owned(), action.to_owned()),
    ];
    for cap in caps {
        fields.push(("capabilities".to_owned(), (*cap).to_owned()));
    }
    fields
}

/// The nonce of the settings form, loading the page (asserting 200).
async fn fs_nonce(browser: &Browser) -> String {
    let page = browser.get_page(&fs_settings()).await;
    assert_eq!(
        page.status.as_u16(),
        200,
        "GET {} (the repo admin's project filesystem context page, browser.md): {}",
        fs_settings(),
        page.body
    );
    nonce_in(&page.body, &fs_settings()).expect("the filesystem context form has a nonce")
}

/// Loads the settings page and posts `action` with `caps`.
async fn fs_change(browser: &Browser, action: &str, caps: &[&str]) -> Resp {
    let nonce = fs_nonce(browser).await;
    browser
        .post_form(
            &fs_settings(),
            &fs_fields(&nonce, action, caps),
            Some(&browser.origin()),
        )
        .await
}

/// A settings change that must succeed: 303 back to the settings page.
async fn fs_change_ok(browser: &Browser, action: &str, caps: &[&str]) {
    let resp = fs_change(browser, action, caps).await;
    resp.assert_status(303);
    assert_eq!(
        crate::browser::location_path(&resp, &browser.base),
        fs_settings()
    );
}

/// Sets an MCP's health with the admin token: the response.
async fn put_health_as(app: &TestApp, auth: Auth<'_>, mcp_id: &str, body: Body) -> Resp {
    let path = format!("/api/v1/admin/mcp/{mcp_id}/health");
    app.send(Method::PUT, &path, auth, body).await
}

/// Sets an MCP's health with the admin token, expecting 200: the view.
async fn put_health(
    app: &TestApp,
    mcp_id: &str,
    installed: bool,
    healthy: bool,
    detail: &str,
) -> Value {
    let body = json!({"installed": installed, "healthy": healthy, "detail": detail});
    let resp = put_health_as(app, Auth::Token(&app.admin_token), mcp_id, Body::Json(body)).await;
    resp.assert_status(200);
    let view = resp.json();
    assert_eq!(view["installed"], installed, "{view}");
    assert_eq!(view["healthy"], healthy, "{view}");
    assert_eq!(view["detail"], detail, "{view}");
    assert!(is_timestamp(&view["checked_at"]), "{view}");
    view
}

/// `.../agent-work-grants/{id}/admission`
fn preview_path(id: i64) -> String {
    format!("{}/admission", grant_path(OWNER, REPO, id))
}

/// builder-bot's admission preview of grant `id`, checking its envelope.
async fn preview(world: &World<'_>, id: i64) -> Value {
    let resp = world
        .app
        .get(&preview_path(id), Auth::Token(&world.bot))
        .await;
    resp.assert_status(200);
    let p = resp.json();
    assert_eq!(p["schema_version"], 1, "{p}");
    assert_eq!(p["phase"], "preview", "{p}");
    assert_eq!(
        p["evaluation_id"],
        Value::Null,
        "a preview is never stored: {p}"
    );
    assert!(is_hex64(&p["catalog_version"]), "{p}");
    check_package(&p);
    p
}

/// The package invariants: status from the decisions, retryable iff every
/// blocking decision recovers by fixing an MCP, ids in order.
#[track_caller]
fn check_package(p: &Value) {
    let decisions = p["decisions"].as_array().expect("decisions");
    let statuses: Vec<&str> = decisions
        .iter()
        .map(|d| d["status"].as_str().expect("status"))
        .collect();
    let expected = if statuses.contains(&"blocked") {
        "blocked"
    } else if statuses.contains(&"warning") {
        "warning"
    } else {
        "allowed"
    };
    assert_eq!(p["status"], expected, "package status: {p}");
    let blocking: Vec<&Value> = decisions
        .iter()
        .filter(|d| d["status"] == "blocked")
        .collect();
    let retryable = !blocking.is_empty()
        && blocking
            .iter()
            .all(|d| d["recovery_action"] == "install_or_fix_mcp");
    assert_eq!(p["retryable"], retryable, "retryable: {p}");
    for (i, d) in decisions.iter().enumerate() {
        assert_eq!(d["schema_version"], 1, "{d}");
        assert_eq!(d["decision_id"], format!("req-{i}"), "{d}");
        assert_ne!(d["mode"], "unknown_legacy", "{d}");
        assert!(
            d["reason"].as_str().is_some_and(|r| !r.trim().is_empty()),
            "a decision explains itself: {d}"
        );
    }
}

/// `(mode, status, recovery_action)` of one decision.
fn verdict(d: &Value) -> (String, String, String) {
    let s = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
    (s("mode"), s("status"), s("recovery_action"))
}

fn v(mode: &str, status: &str, recovery: &str) -> (String, String, String) {
    (mode.to_owned(), status.to_owned(), recovery.to_owned())
}

/// The verdicts of a package, in order.
fn verdicts(p: &Value) -> Vec<(String, String, String)> {
    p["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(verdict)
        .collect()
}

/// alice prepares a grant for builder-bot with these requirements;
/// builder-bot confirms it: awaiting_human.
async fn confirmed_with(world: &World<'_>, task: &str, requirements: &str) -> i64 {
    let mut form = Prepare::new(BOT, task);
    form.mcp_requirements = Some(requirements.to_owned());
    let id = world.alice.prepare_ok(OWNER, REPO, &form).await;
    world.confirm(id).await.assert_status(200);
    assert_eq!(world.grant(id).await["state"], "awaiting_human");
    id
}

/// alice posts the approve form of grant `id`, ticking the acknowledgment
/// when `acknowledge`.
async fn approve(world: &World<'_>, id: i64, acknowledge: bool) -> Resp {
    let extra = if acknowledge {
        vec![("acknowledge_warnings".to_owned(), "on".to_owned())]
    } else {
        Vec::new()
    };
    world
        .alice
        .grant_action(OWNER, REPO, id, "approve", &extra)
        .await
}

/// Every row of the admissions report (admin token, JSON).
async fn admissions(app: &TestApp) -> Vec<Value> {
    let resp = app
        .get(
            "/api/v1/admin/reports/admissions?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    resp.assert_status(200);
    resp.json().as_array().expect("a JSON array").clone()
}

/// The admissions report rows of one grant, by evaluation id (the report's
/// own order is checked separately).
async fn admissions_of(app: &TestApp, grant_id: i64) -> Vec<Value> {
    let mut rows: Vec<Value> = admissions(app)
        .await
        .into_iter()
        .filter(|r| r["grant_id"] == grant_id)
        .collect();
    rows.sort_by_key(|r| r["evaluation_id"].as_i64().expect("numeric evaluation_id"));
    rows
}

/// One stored evaluation read with SQL: `(phase, status, decisions)`.
async fn stored(app: &TestApp, evaluation_id: &Value) -> (String, String, Value) {
    let id = evaluation_id.as_i64().expect("an evaluation id");
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn
        .text_rows(&format!(
            "SELECT phase, status, decisions FROM admission_evaluations WHERE id = {id}"
        ))
        .await;
    conn.close().await;
    assert_eq!(rows.len(), 1, "evaluation {id}");
    let cell = |i: usize| rows[0][i].clone().expect("not null");
    let decisions = serde_json::from_str(&cell(2)).expect("decisions are JSON");
    (cell(0), cell(1), decisions)
}

/// The status shown on the grant page's admission preview, and whether
/// each decision of the API's preview has its element on the page.
async fn assert_page_agrees(world: &World<'_>, id: i64, api: &Value) {
    let html = world.alice.grant_page(OWNER, REPO, id).await;
    let marker = "id=\"admission-status\" data-status=\"";
    let at = html
        .find(marker)
        .expect("admission status on the grant page")
        + marker.len();
    let status = html[at..].split('"').next().unwrap_or("");
    assert_eq!(
        status,
        api["status"].as_str().unwrap(),
        "page vs API status"
    );
    for d in api["decisions"].as_array().unwrap() {
        let element = format!("id=\"decision-{}\"", d["decision_id"].as_str().unwrap());
        assert!(
            html.contains(&element),
            "{element} missing on the grant page"
        );
    }
}
