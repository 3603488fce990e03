//! MCP admission (spec `admission.md`): one decision function at preview
//! (API and grant page), approval (browser form) and handoff (submit); the
//! project filesystem context settings form; MCP health and its snapshots;
//! the admin MCP routes and the admissions report.

use reqwest::Method;
use serde_json::{Value, json};

use crate::browser::{Browser, nonce_in};
use crate::db::SqlConn;
use crate::helpers::{ADMIN_LOGIN, Auth, Body, Resp, TestApp, grant_path};
use crate::world::{
    BOT, OWNER, Prepare, REPO, World, is_hex64, is_timestamp, new_key, state_of, submission_of,
};

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

/// The same package with a typo in qa's capabilities.
const TINY_TASK_TRACKER_TYPO: &str = r#"[
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Open issues describe the due-date feature."},
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.serach"],"fallback":"block"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.read"],"fallback":"continue_without_mcp","prompt_context":"Docs live under docs/."}
]"#;

/// Every capability class: bounded filesystem reads (one via a mixed-case
/// alias), planning-only `filesystem.project.write`, github reads as prompt
/// context (one needing normalization), a deferred live-MCP feature, and a
/// github read without prompt context that may proceed.
const EVERY_CLASS: &str = r#"[
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","Filesystem.List"],"fallback":"block"},
 {"mcp_id":"filesystem","agent":"frontend","requirement":"optional","capabilities":["filesystem.project.write"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"required","capabilities":["github.repository.read"," GitHub.Contents.Search "],"fallback":"ask_user","prompt_context":"The README explains the layout."},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.workflows.dispatch"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"triage","requirement":"optional","capabilities":["github.issues.read"],"fallback":"continue_without_mcp"}
]"#;

/// Deny wins: req-0 would be an approved bounded read, but req-1 prohibits
/// it (through the alias, in another case, with padding).
const DENY_WINS: &str = r#"[
 {"mcp_id":"filesystem","agent":"qa","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.issues.read"],"fallback":"continue_without_mcp","prompt_context":"Only read.","prohibited_capabilities":[" FileSystem.Read "]}
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

/// The history table of the settings page, newest first:
/// `[at, action, capabilities, actor]` per row.
async fn fs_history(browser: &Browser) -> Vec<Vec<String>> {
    let page = browser.get_page(&fs_settings()).await;
    page.assert_status(200);
    let html = page.body;
    let Some(start) = html.find("<h2>History</h2>") else {
        panic!("no history on the settings page: {html}");
    };
    let rest = &html[start..];
    let Some(body_start) = rest.find("<tbody>") else {
        return Vec::new();
    };
    let body_end = rest.find("</tbody>").expect("</tbody>");
    rest[body_start + 7..body_end]
        .split("<tr>")
        .filter(|row| row.contains("<td>"))
        .map(|row| {
            row.split("<td>")
                .skip(1)
                .map(|cell| cell.split("</td>").next().unwrap_or("").trim().to_owned())
                .collect()
        })
        .collect()
}

/// The history without timestamps: `[action, capabilities, actor]`.
async fn fs_changes(browser: &Browser) -> Vec<[String; 3]> {
    let rows = fs_history(browser).await;
    for row in &rows {
        assert_eq!(row.len(), 4, "history row: {row:?}");
        assert!(is_timestamp(&json!(row[0])), "history time: {row:?}");
    }
    rows.into_iter()
        .map(|r| [r[1].clone(), r[2].clone(), r[3].clone()])
        .collect()
}

fn change(action: &str, caps: &str, actor: &str) -> [String; 3] {
    [action.to_owned(), caps.to_owned(), actor.to_owned()]
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

/// Every stored evaluation as text, by id, to prove none is ever changed.
async fn all_stored(app: &TestApp) -> Vec<Vec<Option<String>>> {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn
        .text_rows(
            "SELECT CAST(id AS TEXT), CAST(grant_id AS TEXT), phase, status, \
             CAST(snapshot_id AS TEXT), catalog_version, decisions, evaluated_at \
             FROM admission_evaluations ORDER BY id",
        )
        .await;
    conn.close().await;
    rows
}

/// The status shown on the grant page's admission preview, and whether
/// each decision of the API's preview has its element on the page.
async fn assert_page_agrees(world: &World<'_>, id: i64, api: &Value) {
    let html = world.alice.grant_page(OWNER, REPO, id).await;
    let marker = "id=\"admission-status\">";
    let at = html
        .find(marker)
        .expect("admission status on the grant page")
        + marker.len();
    let status = html[at..].split('<').next().unwrap_or("").trim();
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

/// The issues of acme/widgets (count).
async fn issue_count(world: &World<'_>) -> usize {
    world.all_issues().await.len()
}

// ---------------------------------------------------------------------------
// 1. The required regression: the tiny task-tracker flow.
// ---------------------------------------------------------------------------

both_backends!(tiny_task_tracker_flow);
async fn tiny_task_tracker_flow(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, true, "probe answered 200").await;
    let id = confirmed_with(&world, "Build a tiny task tracker", TINY_TASK_TRACKER).await;

    // Preview: blocked only by the missing project filesystem context.
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "blocked", "{p}");
    assert_eq!(p["retryable"], false, "{p}");
    assert_eq!(p["filesystem_grant_id"], Value::Null, "{p}");
    assert_eq!(
        verdicts(&p),
        vec![
            v("planning_only", "allowed", "continue_as_prompt_context"),
            v(
                "bounded_context_required",
                "blocked",
                "approve_project_filesystem_context"
            ),
            v("deferred_live_mcp", "warning", "defer_live_mcp_feature"),
            v("planning_only", "allowed", "continue_as_prompt_context"),
        ],
        "{p}"
    );
    let agents: Vec<&str> = p["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["agent"].as_str().unwrap())
        .collect();
    assert_eq!(agents, ["frontend", "qa", "review", "docs"]);
    let qa = &p["decisions"][1];
    assert_eq!(
        qa["grant_state"],
        json!({"phase": "none", "revocation_reason": null})
    );
    assert_eq!(
        qa["normalized_capabilities"],
        json!(["filesystem.project.read", "filesystem.project.search"])
    );
    assert_eq!(
        qa["capability_classes"],
        json!([
            {"capability": "filesystem.project.read", "class": "bounded_read_only", "delivery_kind": "bounded_context_packet"},
            {"capability": "filesystem.project.search", "class": "bounded_read_only", "delivery_kind": "bounded_context_packet"},
        ])
    );
    let reason = qa["reason"].as_str().unwrap();
    assert!(
        reason.contains("acme/widgets") && reason.contains("read") && reason.contains("search"),
        "the reason names the exact missing grant: {reason}"
    );
    assert_eq!(p["decisions"][0]["grant_state"], Value::Null);
    let review = &p["decisions"][2];
    assert_eq!(
        review["capability_classes"],
        json!([{"capability": "github.pull_requests.create", "class": "deferred_live_mcp", "delivery_kind": null}])
    );
    assert!(
        review["reason"]
            .as_str()
            .unwrap()
            .contains("not available in this version"),
        "a deferred feature is not a broken install: {review}"
    );
    assert_eq!(
        p["decisions"][3]["evidence_refs"],
        json!([
            "github:acme/widgets:github.contents.read",
            "prompt_context:req-3"
        ])
    );
    assert_page_agrees(&world, id, &p).await;

    // Approval is refused: 409, still awaiting_human, the refusal stored.
    let before = world.grant(id).await;
    let resp = approve(&world, id, true).await;
    resp.assert_status(409);
    assert!(
        resp.body.contains("req-1"),
        "the 409 page names the blocking decision: {}",
        resp.body
    );
    let grant = world.grant(id).await;
    assert_eq!(state_of(&grant), state_of(&before));
    assert_eq!(grant["approver"], Value::Null);
    let refused = grant["admission"].clone();
    assert_eq!(refused["phase"], "approval", "{grant}");
    assert_eq!(refused["status"], "blocked", "{grant}");
    assert!(refused["evaluation_id"].is_i64(), "{grant}");
    assert!(refused["snapshot_id"].is_i64(), "{grant}");
    assert!(is_timestamp(&refused["evaluated_at"]), "{grant}");
    let (phase, status, decisions) = stored(&app, &refused["evaluation_id"]).await;
    assert_eq!((phase.as_str(), status.as_str()), ("approval", "blocked"));
    assert_eq!(
        decisions, p["decisions"],
        "approval decisions = preview decisions"
    );
    let early = all_stored(&app).await;

    // A repository admin approves project filesystem context {read, search}.
    fs_change_ok(&world.alice, "approve", &["read", "search"]).await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "warning", "{p}");
    assert!(p["filesystem_grant_id"].is_i64(), "{p}");
    assert_eq!(
        p["snapshot_id"], refused["snapshot_id"],
        "same health, same snapshot"
    );
    assert_eq!(
        verdict(&p["decisions"][1]),
        v(
            "bounded_context_approved",
            "allowed",
            "continue_as_prompt_context"
        )
    );
    assert_eq!(
        p["decisions"][1]["grant_state"],
        json!({"phase": "approved", "revocation_reason": null})
    );
    assert_eq!(
        p["decisions"][1]["evidence_refs"],
        json!([
            "filesystem:acme/widgets:filesystem.project.read",
            "filesystem:acme/widgets:filesystem.project.search"
        ])
    );
    assert_eq!(
        verdict(&p["decisions"][2]),
        v("deferred_live_mcp", "warning", "defer_live_mcp_feature")
    );
    assert_page_agrees(&world, id, &p).await;

    // A warning needs the acknowledgment: 422 and nothing stored.
    let evaluations = admissions_of(&app, id).await.len();
    let resp = approve(&world, id, false).await;
    resp.assert_status(422);
    assert!(
        resp.body.contains("acknowledge_warnings"),
        "the 422 page names the field: {}",
        resp.body
    );
    assert_eq!(world.grant(id).await, grant, "422 changed the grant");
    assert_eq!(admissions_of(&app, id).await.len(), evaluations);

    // Acknowledged: approved, and the approval decisions are the preview's.
    let before_approval = preview(&world, id).await;
    approve(&world, id, true).await.assert_status(303);
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "active");
    assert_eq!(grant["admission"]["phase"], "approval", "{grant}");
    assert_eq!(grant["admission"]["status"], "warning", "{grant}");
    let (_, _, decisions) = stored(&app, &grant["admission"]["evaluation_id"]).await;
    assert_eq!(decisions, before_approval["decisions"]);

    // Handoff: 201, under a handoff evaluation with the same decisions.
    let issues_before = issue_count(&world).await;
    let first = world
        .submitted(id, &new_key(), "Task list", "The first slice")
        .await;
    let admission = &first["admission"];
    assert_eq!(admission["phase"], "handoff", "{first}");
    assert_eq!(admission["status"], "warning", "{first}");
    assert_eq!(admission["snapshot_id"], grant["admission"]["snapshot_id"]);
    let (phase, _, decisions) = stored(&app, &admission["evaluation_id"]).await;
    assert_eq!(phase, "handoff");
    assert_eq!(decisions, before_approval["decisions"]);
    let receipt = world
        .receipt(id, first["request_key"].as_str().unwrap())
        .await;
    assert_eq!(receipt["admission"], first["admission"]);
    assert_eq!(issue_count(&world).await, issues_before + 1);

    // Narrowed to {read}: the next handoff blocks with project_grant_narrowed.
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    let narrowed = preview(&world, id).await;
    assert_eq!(narrowed["status"], "blocked");
    let key = new_key();
    let resp = world
        .submit(id, &key, "Due dates", "The second slice")
        .await;
    resp.assert_error(409, "admission_blocked");
    let body = resp.json();
    assert_eq!(body["grant"]["id"], id, "{body}");
    assert_eq!(body["grant"]["state"], "active", "{body}");
    let blocked = &body["admission"];
    assert_eq!(blocked["phase"], "handoff", "{body}");
    assert_eq!(blocked["status"], "blocked", "{body}");
    assert_eq!(blocked["retryable"], false, "{body}");
    assert!(blocked["evaluation_id"].is_i64(), "{body}");
    check_package(blocked);
    let qa = &blocked["decisions"][1];
    assert_eq!(
        verdict(qa),
        v(
            "bounded_context_required",
            "blocked",
            "approve_project_filesystem_context"
        ),
        "{body}"
    );
    assert_eq!(
        qa["grant_state"],
        json!({"phase": "revoked", "revocation_reason": "project_grant_narrowed"})
    );
    assert_eq!(blocked["decisions"], narrowed["decisions"]);
    assert!(
        body["message"].as_str().unwrap().contains("req-1"),
        "the message names the blocking decision: {body}"
    );
    let (phase, status, decisions) = stored(&app, &blocked["evaluation_id"]).await;
    assert_eq!((phase.as_str(), status.as_str()), ("handoff", "blocked"));
    assert_eq!(&decisions, &blocked["decisions"]);
    // A replay of the first key is still a replay: the key lookup comes
    // before the admission.
    let first_key = first["request_key"].as_str().unwrap();
    let replay = world
        .submit(id, first_key, "Task list", "The first slice")
        .await;
    replay.assert_status(200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(submission_of(&replay), receipt);
    // The key stays unused: no receipt, no issue, no count.
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    assert_eq!(issue_count(&world).await, issues_before + 1);
    let grant = world.grant(id).await;
    assert_eq!(grant["submission_count"], 1);
    assert_eq!(
        grant["admission"]["evaluation_id"],
        blocked["evaluation_id"]
    );
    assert_eq!(grant["admission"]["status"], "blocked");

    // Re-approved {read, search}: the same key now succeeds.
    fs_change_ok(&world.alice, "approve", &["read", "search"]).await;
    let resp = world
        .submit(id, &key, "Due dates", "The second slice")
        .await;
    resp.assert_status(201);
    let second = submission_of(&resp);
    assert_eq!(second["request_key"], key.as_str());
    assert_eq!(second["admission"]["phase"], "handoff");
    assert_eq!(second["admission"]["status"], "warning");
    assert_eq!(world.receipt(id, &key).await, second);
    assert_eq!(issue_count(&world).await, issues_before + 2);
    assert_eq!(world.grant(id).await["submission_count"], 2);

    // The typo variant: blocked at preview with revise_plan, and at approval.
    let typo = confirmed_with(&world, "Tiny task tracker, typo", TINY_TASK_TRACKER_TYPO).await;
    let p = preview(&world, typo).await;
    assert_eq!(p["status"], "blocked", "{p}");
    assert_eq!(p["retryable"], false, "{p}");
    assert_eq!(
        verdict(&p["decisions"][1]),
        v("blocked", "blocked", "revise_plan"),
        "{p}"
    );
    assert_eq!(
        p["decisions"][1]["capability_classes"][1],
        json!({"capability": "filesystem.project.serach", "class": "unknown", "delivery_kind": null})
    );
    assert!(
        p["decisions"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("filesystem.project.serach"),
        "the reason names the unsupported capability: {p}"
    );
    let before = world.grant(typo).await;
    approve(&world, typo, true).await.assert_status(409);
    let after = world.grant(typo).await;
    assert_eq!(state_of(&after), state_of(&before));
    assert_eq!(after["admission"]["status"], "blocked");
    let (_, _, decisions) = stored(&app, &after["admission"]["evaluation_id"]).await;
    assert_eq!(decisions, p["decisions"]);

    // Persisted evaluations are never updated or deleted.
    let late = all_stored(&app).await;
    assert_eq!(late[..early.len()], early[..], "stored evaluations changed");
    assert!(late.len() >= early.len() + 5, "{late:?}");
}

// ---------------------------------------------------------------------------
// 2. Parity: preview, approval and handoff decide identically.
// ---------------------------------------------------------------------------

both_backends!(preview_approval_and_handoff_agree);
async fn preview_approval_and_handoff_agree(app: TestApp) {
    let world = World::new(&app).await;
    fs_change_ok(&world.alice, "approve", &["read", "list"]).await;
    put_health(&app, "filesystem", true, true, "").await;
    let id = confirmed_with(&world, "Every capability class", EVERY_CLASS).await;

    let p = preview(&world, id).await;
    assert_eq!(p["status"], "warning", "{p}");
    assert_eq!(
        verdicts(&p),
        vec![
            v(
                "bounded_context_approved",
                "allowed",
                "continue_as_prompt_context"
            ),
            v("planning_only", "warning", "continue_as_prompt_context"),
            v("planning_only", "allowed", "continue_as_prompt_context"),
            v("deferred_live_mcp", "warning", "defer_live_mcp_feature"),
            v("planning_only", "warning", "continue_as_prompt_context"),
        ],
        "{p}"
    );
    let d = &p["decisions"];
    assert_eq!(
        d[0]["requested_capabilities"],
        json!(["filesystem.project.read", "Filesystem.List"])
    );
    assert_eq!(
        d[0]["normalized_capabilities"],
        json!(["filesystem.project.read", "filesystem.project.list"])
    );
    assert_eq!(
        d[1]["capability_classes"],
        json!([{"capability": "filesystem.project.write", "class": "planning_only", "delivery_kind": null}])
    );
    assert_eq!(
        d[1]["grant_state"],
        Value::Null,
        "no filesystem read, no grant state"
    );
    assert_eq!(
        d[2]["capability_classes"],
        json!([
            {"capability": "github.repository.read", "class": "bounded_read_only", "delivery_kind": "planning_context_only"},
            {"capability": "github.contents.search", "class": "bounded_read_only", "delivery_kind": "planning_context_only"},
        ])
    );
    assert_eq!(
        d[2]["evidence_refs"],
        json!([
            "github:acme/widgets:github.repository.read",
            "github:acme/widgets:github.contents.search",
            "prompt_context:req-2"
        ])
    );
    assert_eq!(d[3]["capability_classes"][0]["class"], "deferred_live_mcp");
    assert_eq!(d[4]["capability_classes"][0]["class"], "bounded_read_only");
    assert_page_agrees(&world, id, &p).await;

    // Approval: the stored decisions are the preview's, byte for byte.
    approve(&world, id, true).await.assert_status(303);
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "active");
    let approval = grant["admission"].clone();
    assert_eq!(approval["phase"], "approval");
    assert_eq!(approval["status"], "warning");
    let (_, _, decisions) = stored(&app, &approval["evaluation_id"]).await;
    assert_eq!(decisions, p["decisions"], "approval vs preview");
    let after = preview(&world, id).await;
    assert_eq!(after["decisions"], p["decisions"]);
    assert_eq!(after["snapshot_id"], approval["snapshot_id"]);

    // Handoff under the same inputs: the same decisions again.
    let receipt = world
        .submitted(id, &new_key(), "Parity", "Same inputs")
        .await;
    assert_eq!(receipt["admission"]["status"], "warning");
    assert_eq!(receipt["admission"]["snapshot_id"], approval["snapshot_id"]);
    let (_, _, decisions) = stored(&app, &receipt["admission"]["evaluation_id"]).await;
    assert_eq!(decisions, p["decisions"], "handoff vs preview");

    // The filesystem MCP turns unhealthy: preview and a blocked handoff agree.
    let health = put_health(&app, "filesystem", true, false, "probe timed out").await;
    let p2 = preview(&world, id).await;
    assert_eq!(p2["status"], "blocked", "{p2}");
    assert_eq!(p2["retryable"], true, "{p2}");
    assert_eq!(
        verdict(&p2["decisions"][0]),
        v("bounded_context_approved", "blocked", "install_or_fix_mcp")
    );
    let reason = p2["decisions"][0]["reason"].as_str().unwrap();
    let since = health["checked_at"].as_str().unwrap();
    assert!(
        reason.contains("\"filesystem\"")
            && reason.contains("probe timed out")
            && reason.contains(since),
        "the reason names the MCP, since when and why: {reason}"
    );
    for i in 1..5 {
        assert_eq!(
            p2["decisions"][i], p["decisions"][i],
            "req-{i} is not health-gated"
        );
    }
    assert_page_agrees(&world, id, &p2).await;
    let key = new_key();
    let resp = world.submit(id, &key, "Parity", "Unhealthy").await;
    resp.assert_error(409, "admission_blocked");
    let blocked = resp.json()["admission"].clone();
    assert_eq!(blocked["phase"], "handoff");
    assert_eq!(blocked["retryable"], true);
    assert_eq!(
        blocked["decisions"], p2["decisions"],
        "handoff 409 vs preview"
    );
    assert_eq!(blocked["catalog_version"], p2["catalog_version"]);
    assert_eq!(blocked["filesystem_grant_id"], p2["filesystem_grant_id"]);
    assert_ne!(blocked["snapshot_id"], approval["snapshot_id"]);
    let (_, _, decisions) = stored(&app, &blocked["evaluation_id"]).await;
    assert_eq!(decisions, p2["decisions"], "stored handoff vs preview");
    assert_eq!(
        preview(&world, id).await["snapshot_id"],
        blocked["snapshot_id"]
    );
    world.readback(id, &key).await.assert_status(404);

    // The admissions report has each evaluation with its counts.
    let rows = admissions_of(&app, id).await;
    let summary: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!([
                r["phase"],
                r["status"],
                r["retryable"],
                r["blocked_count"],
                r["warning_count"]
            ])
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            json!(["approval", "warning", 0, 0, 3]),
            json!(["handoff", "warning", 0, 0, 3]),
            json!(["handoff", "blocked", 1, 1, 3]),
        ]
    );
    for row in &rows {
        assert_eq!(row["catalog_version"], p["catalog_version"]);
        assert_eq!(row["repository"], "acme/widgets");
        assert_eq!(row["agent_login"], BOT);
        assert!(is_timestamp(&row["evaluated_at"]), "{row}");
    }
    assert_eq!(rows[2]["evaluation_id"], blocked["evaluation_id"]);
    assert_eq!(rows[2]["snapshot_id"], blocked["snapshot_id"]);

    // Recovered: the same key succeeds.
    put_health(&app, "filesystem", true, true, "").await;
    world
        .submit(id, &key, "Parity", "Unhealthy")
        .await
        .assert_status(201);

    // Deny wins over an approved, healthy bounded read — and over health.
    let deny = confirmed_with(&world, "Deny wins", DENY_WINS).await;
    let p3 = preview(&world, deny).await;
    assert_eq!(p3["status"], "blocked", "{p3}");
    assert_eq!(p3["retryable"], false, "{p3}");
    assert_eq!(
        verdicts(&p3),
        vec![
            v("blocked", "blocked", "revise_plan"),
            v("planning_only", "allowed", "continue_as_prompt_context"),
        ],
        "{p3}"
    );
    assert!(
        p3["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("prohibited"),
        "{p3}"
    );
    approve(&world, deny, true).await.assert_status(409);
    let grant = world.grant(deny).await;
    assert_eq!(grant["state"], "awaiting_human");
    let (phase, status, decisions) = stored(&app, &grant["admission"]["evaluation_id"]).await;
    assert_eq!((phase.as_str(), status.as_str()), ("approval", "blocked"));
    assert_eq!(decisions, p3["decisions"], "blocked approval vs preview");
    put_health(&app, "filesystem", false, false, "gone").await;
    let p4 = preview(&world, deny).await;
    assert_eq!(p4["decisions"], p3["decisions"], "deny wins, health aside");
    assert_eq!(p4["retryable"], false);
}

// ---------------------------------------------------------------------------
// 3. A block visible at approval can never be approved.
// ---------------------------------------------------------------------------

both_backends!(a_block_visible_at_approval_is_never_approved);
async fn a_block_visible_at_approval_is_never_approved(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, true, "").await;
    put_health(&app, "github", true, true, "").await;
    let cases = [
        (
            "required deferred write",
            r#"[{"mcp_id":"github","agent":"qa","requirement":"required","capabilities":["github.issues.write"],"fallback":"block"}]"#,
            vec![v("deferred_live_mcp", "blocked", "revise_plan")],
        ),
        (
            "unknown MCP",
            r#"[{"mcp_id":"gitlab","agent":"qa","requirement":"optional","capabilities":["gitlab.issues.read"],"fallback":"continue_without_mcp","prompt_context":"x"}]"#,
            vec![v("blocked", "blocked", "revise_plan")],
        ),
        (
            "optional with ask_user, beside a warning",
            r#"[{"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
                {"mcp_id":"github","agent":"qa","requirement":"optional","capabilities":["github.branches.merge"],"fallback":"ask_user"}]"#,
            vec![
                v("deferred_live_mcp", "warning", "defer_live_mcp_feature"),
                v("deferred_live_mcp", "blocked", "revise_plan"),
            ],
        ),
        (
            "filesystem context never approved",
            r#"[{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.search"],"fallback":"ask_user"}]"#,
            vec![v(
                "bounded_context_required",
                "blocked",
                "approve_project_filesystem_context",
            )],
        ),
    ];
    for (label, requirements, expected) in cases {
        let id = confirmed_with(&world, label, requirements).await;
        let p = preview(&world, id).await;
        assert_eq!(p["status"], "blocked", "{label}: {p}");
        assert_eq!(p["retryable"], false, "{label}: {p}");
        assert_eq!(verdicts(&p), expected, "{label}: {p}");
        assert_page_agrees(&world, id, &p).await;
        let before = world.grant(id).await;
        assert_eq!(before["admission"], Value::Null, "{label}");

        let mut refused = Vec::new();
        for acknowledge in [false, true, true, false] {
            let resp = approve(&world, id, acknowledge).await;
            assert_eq!(
                resp.status.as_u16(),
                409,
                "{label} (acknowledge {acknowledge}): {}",
                resp.body
            );
            let grant = world.grant(id).await;
            assert_eq!(state_of(&grant), state_of(&before), "{label}");
            assert_eq!(grant["approver"], Value::Null, "{label}");
            assert_eq!(grant["approved_at"], Value::Null, "{label}");
            assert_eq!(grant["admission"]["phase"], "approval", "{label}");
            assert_eq!(grant["admission"]["status"], "blocked", "{label}");
            refused.push(grant["admission"]["evaluation_id"].clone());
        }

        // Every refusal is a stored evaluation in the admissions report.
        let rows = admissions_of(&app, id).await;
        let ids: Vec<Value> = rows.iter().map(|r| r["evaluation_id"].clone()).collect();
        assert_eq!(ids, refused, "{label}: {rows:?}");
        let blocked = expected.iter().filter(|e| e.1 == "blocked").count();
        let warned = expected.iter().filter(|e| e.1 == "warning").count();
        for row in &rows {
            assert_eq!(row["phase"], "approval", "{label}: {row}");
            assert_eq!(row["status"], "blocked", "{label}: {row}");
            assert_eq!(row["retryable"], 0, "{label}: {row}");
            assert_eq!(row["blocked_count"], blocked, "{label}: {row}");
            assert_eq!(row["warning_count"], warned, "{label}: {row}");
            assert_eq!(row["snapshot_id"], rows[0]["snapshot_id"], "{label}");
        }
        for evaluation in &refused {
            let (_, _, decisions) = stored(&app, evaluation).await;
            assert_eq!(decisions, p["decisions"], "{label}");
        }

        // Never active, so never handed off either.
        let resp = world.submit(id, &new_key(), "Nope", "").await;
        resp.assert_error(409, "state_conflict");
        assert_eq!(
            admissions_of(&app, id).await.len(),
            refused.len(),
            "{label}"
        );
    }
    let grants = app
        .get(
            "/api/v1/admin/reports/grants?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    grants.assert_status(200);
    for row in grants.json().as_array().unwrap() {
        assert_eq!(row["state"], "awaiting_human", "{row}");
        assert_eq!(row["approver_login"], Value::Null, "{row}");
        assert_eq!(row["last_admission_status"], "blocked", "{row}");
    }
}

// ---------------------------------------------------------------------------
// 4. MCP health: not installed, fixed, snapshots.
// ---------------------------------------------------------------------------

const HEALTH_PACKAGE: &str = r#"[
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.read"],"fallback":"block"},
 {"mcp_id":"filesystem","agent":"docs","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Issue 1 is the spec."}
]"#;

both_backends!(health_gates_approved_bounded_context);
async fn health_gates_approved_bounded_context(app: TestApp) {
    let world = World::new(&app).await;
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    let id = confirmed_with(&world, "Health", HEALTH_PACKAGE).await;

    // No health row at all: not installed. Github is never health-gated.
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "blocked", "{p}");
    assert_eq!(p["retryable"], true, "{p}");
    assert_eq!(p["snapshot_id"], Value::Null, "nothing stored yet: {p}");
    assert_eq!(
        verdicts(&p),
        vec![
            v("bounded_context_approved", "blocked", "install_or_fix_mcp"),
            v("bounded_context_approved", "warning", "install_or_fix_mcp"),
            v("planning_only", "allowed", "continue_as_prompt_context"),
        ],
        "{p}"
    );
    let reason = p["decisions"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("\"filesystem\"") && reason.contains("not installed"),
        "{reason}"
    );
    assert_eq!(
        p["decisions"][0]["normalized_capabilities"],
        json!(["filesystem.project.read"]),
        "the alias is applied"
    );

    // Approval refused twice under the same health: one shared snapshot.
    approve(&world, id, true).await.assert_status(409);
    let s0 = world.grant(id).await["admission"]["snapshot_id"].clone();
    assert!(s0.is_i64());
    assert_eq!(preview(&world, id).await["snapshot_id"], s0);
    approve(&world, id, true).await.assert_status(409);
    let rows = admissions_of(&app, id).await;
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row["snapshot_id"], s0, "{row}");
        assert_eq!(row["retryable"], 1, "{row}");
        assert_eq!(row["blocked_count"], 1, "{row}");
        assert_eq!(row["warning_count"], 1, "{row}");
    }
    assert_ne!(rows[0]["evaluation_id"], rows[1]["evaluation_id"]);

    // Installed and healthy: allowed, no acknowledgment needed.
    let health = put_health(&app, "filesystem", true, true, "ok").await;
    assert_eq!(health["mcp_id"], "filesystem");
    assert_eq!(health["updated_by"], ADMIN_LOGIN);
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed", "{p}");
    assert_eq!(p["retryable"], false, "{p}");
    assert_eq!(
        p["snapshot_id"],
        Value::Null,
        "new health, no stored snapshot yet"
    );
    assert_eq!(
        verdicts(&p)[..2],
        [
            v(
                "bounded_context_approved",
                "allowed",
                "continue_as_prompt_context"
            ),
            v(
                "bounded_context_approved",
                "allowed",
                "continue_as_prompt_context"
            ),
        ]
    );
    approve(&world, id, false).await.assert_status(303);
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "active");
    assert_eq!(grant["admission"]["status"], "allowed");
    let s1 = grant["admission"]["snapshot_id"].clone();
    assert_ne!(s1, s0, "a health change gives a new snapshot");

    // Setting the same health again changes nothing: same snapshot.
    let again = put_health(&app, "filesystem", true, true, "ok").await;
    assert_eq!(
        again["checked_at"], health["checked_at"],
        "checked_at reads 'since'"
    );
    assert_eq!(preview(&world, id).await["snapshot_id"], s1);
    let receipt = world.submitted(id, &new_key(), "Healthy", "").await;
    assert_eq!(receipt["admission"]["status"], "allowed");
    assert_eq!(receipt["admission"]["snapshot_id"], s1, "shared snapshot");

    // Uninstalled: the handoff blocks, retryable, with a new snapshot.
    put_health(&app, "filesystem", false, false, "uninstalled").await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "blocked");
    assert_eq!(p["retryable"], true);
    assert!(
        p["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not installed"),
        "{p}"
    );
    let key = new_key();
    let resp = world.submit(id, &key, "Uninstalled", "").await;
    resp.assert_error(409, "admission_blocked");
    let blocked = resp.json()["admission"].clone();
    assert_eq!(blocked["retryable"], true);
    assert_eq!(blocked["decisions"], p["decisions"]);
    let s2 = blocked["snapshot_id"].clone();
    assert!(s2.is_i64() && s2 != s0 && s2 != s1, "{blocked}");
    world.readback(id, &key).await.assert_status(404);

    // Unhealthy with a long multi-byte detail: the 409 message stays within
    // 512 bytes (the full reason is in the decision).
    let detail = "é".repeat(500);
    put_health(&app, "filesystem", true, false, &detail).await;
    let resp = world.submit(id, &key, "Uninstalled", "").await;
    resp.assert_error(409, "admission_blocked");
    let body = resp.json();
    let message = body["message"].as_str().unwrap();
    assert!(message.len() <= 512, "{} bytes: {message}", message.len());
    assert!(message.contains("req-0"), "{message}");
    assert!(
        body["admission"]["decisions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains(&detail),
        "the decision's reason keeps the detail"
    );
    world.readback(id, &key).await.assert_status(404);

    // Reinstalled: the same key goes through under yet another snapshot.
    put_health(&app, "filesystem", true, true, "ok").await;
    let resp = world.submit(id, &key, "Uninstalled", "").await;
    resp.assert_status(201);
    let s3 = submission_of(&resp)["admission"]["snapshot_id"].clone();
    assert!(s3 != s0 && s3 != s1 && s3 != s2, "{}", resp.body);

    // A required packet that is blocked by an MCP problem *and* a plan
    // problem is not retryable.
    let mixed = format!(
        "[{}, {}]",
        r#"{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read"],"fallback":"block"}"#,
        r#"{"mcp_id":"github","agent":"qa","requirement":"required","capabilities":["github.issues.read"],"fallback":"block"}"#,
    );
    put_health(&app, "filesystem", true, false, "down").await;
    let other = confirmed_with(&world, "Mixed", &mixed).await;
    let p = preview(&world, other).await;
    assert_eq!(
        verdicts(&p),
        vec![
            v("bounded_context_approved", "blocked", "install_or_fix_mcp"),
            v("blocked", "blocked", "revise_plan"),
        ]
    );
    assert_eq!(p["retryable"], false);
}

// ---------------------------------------------------------------------------
// 5. The project filesystem context form.
// ---------------------------------------------------------------------------

both_backends!(filesystem_context_form);
async fn filesystem_context_form(app: TestApp) {
    let world = World::new(&app).await;
    let path = fs_settings();
    let origin = world.alice.origin();
    put_health(&app, "filesystem", true, true, "").await;
    let id = confirmed_with(
        &world,
        "Reads the project",
        r#"[{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read"],"fallback":"block"}]"#,
    )
    .await;
    assert_eq!(fs_changes(&world.alice).await, Vec::<[String; 3]>::new());
    let grant_state = |p: &Value| p["decisions"][0]["grant_state"].clone();

    // A write collaborator can neither see nor post the form.
    let carol = world.human("carol", Some("write")).await;
    carol.get_page(&path).await.assert_status(403);
    let resp = carol
        .post_form(
            &path,
            &fs_fields("made-up", "approve", &["read"]),
            Some(&origin),
        )
        .await;
    resp.assert_status(403);
    // Nor a reader; someone who cannot see the repository gets 404.
    let rita = world.human("rita", Some("read")).await;
    rita.get_page(&path).await.assert_status(403);
    let olivia = world.human("olivia", None).await;
    olivia.get_page(&path).await.assert_status(404);
    // An admin demoted after loading the form is refused with its nonce.
    let dave = world.human("dave", Some("admin")).await;
    let nonce = fs_nonce(&dave).await;
    app.set_collaborator(OWNER, REPO, "dave", "write").await;
    let resp = dave
        .post_form(
            &path,
            &fs_fields(&nonce, "approve", &["read"]),
            Some(&origin),
        )
        .await;
    resp.assert_status(403);
    assert!(
        fs_changes(&world.alice).await.is_empty(),
        "a refused change was recorded"
    );

    // Invalid fields: 422, nothing recorded.
    for (label, action, caps) in [
        ("no capability", "approve", vec![]),
        ("write", "approve", vec!["write"]),
        ("read and write", "approve", vec!["read", "write"]),
        ("unknown action", "grant", vec!["read"]),
        ("no action", "", vec!["read"]),
    ] {
        let resp = fs_change(&world.alice, action, &caps).await;
        assert_eq!(resp.status.as_u16(), 422, "{label}: {}", resp.body);
        assert!(fs_changes(&world.alice).await.is_empty(), "{label}");
    }
    assert_eq!(grant_state(&preview(&world, id).await)["phase"], "none");

    // Approve {read}: 303; the nonce cannot be replayed.
    let nonce = fs_nonce(&world.alice).await;
    let fields = fs_fields(&nonce, "approve", &["read"]);
    world
        .alice
        .post_form(&path, &fields, Some(&origin))
        .await
        .assert_status(303);
    world
        .alice
        .post_form(&path, &fields, Some(&origin))
        .await
        .assert_status(403);
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed", "{p}");
    assert_eq!(
        grant_state(&p),
        json!({"phase": "approved", "revocation_reason": null})
    );

    // Foreign origin, missing origin, cross-site fetch: 403, nothing recorded.
    let refused: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("foreign Origin", vec![("Origin", "http://evil.example")]),
        ("no Origin or Referer", vec![]),
        (
            "cross-site fetch",
            vec![
                ("Origin", origin.as_str()),
                ("Sec-Fetch-Site", "cross-site"),
            ],
        ),
    ];
    for (label, headers) in refused {
        let nonce = fs_nonce(&world.alice).await;
        let resp = world
            .alice
            .post_form_with(&path, &fs_fields(&nonce, "deny", &[]), &headers)
            .await;
        assert_eq!(resp.status.as_u16(), 403, "{label}: {}", resp.body);
    }
    assert_eq!(fs_changes(&world.alice).await.len(), 1);

    // Deny, remove, another admin's narrower approval, and a re-approval.
    fs_change_ok(&world.alice, "deny", &[]).await;
    let p = preview(&world, id).await;
    assert_eq!(
        verdict(&p["decisions"][0]),
        v(
            "bounded_context_required",
            "blocked",
            "approve_project_filesystem_context"
        )
    );
    assert_eq!(
        grant_state(&p),
        json!({"phase": "denied", "revocation_reason": null})
    );
    fs_change_ok(&world.alice, "remove", &[]).await;
    assert_eq!(
        grant_state(&preview(&world, id).await),
        json!({"phase": "revoked", "revocation_reason": "project_grant_removed"})
    );
    let erin = world.human("erin", Some("admin")).await;
    fs_change_ok(&erin, "approve", &["search", "list"]).await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "blocked");
    assert_eq!(grant_state(&p)["phase"], "revoked");
    fs_change_ok(&world.alice, "approve", &["read", "list", "search"]).await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed");

    // The history shows each change with its actor, newest first.
    assert_eq!(
        fs_changes(&world.alice).await,
        vec![
            change("approved", "list read search", "alice"),
            change("approved", "list search", "erin"),
            change("removed", "", "alice"),
            change("denied", "", "alice"),
            change("approved", "read", "alice"),
        ]
    );
    let page = world.alice.get_page(&path).await;
    assert!(
        page.body.contains("id=\"fs-state\">approved<"),
        "{}",
        page.body
    );

    // Narrowing {read, list} to {read} leaves a read-only package approved.
    fs_change_ok(&world.alice, "approve", &["read", "list"]).await;
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    let p = preview(&world, id).await;
    assert_eq!(
        grant_state(&p),
        json!({"phase": "approved", "revocation_reason": null})
    );
}

// ---------------------------------------------------------------------------
// 6. Admin MCP routes and the preview route's access.
// ---------------------------------------------------------------------------

both_backends!(admin_mcp_routes);
async fn admin_mcp_routes(app: TestApp) {
    let world = World::new(&app).await;
    let admin = Auth::Token(&app.admin_token);
    let good = || Body::Json(json!({"installed": true, "healthy": true, "detail": "ok"}));

    // Not the setup privilege: 403; no credential: 401.
    let read_only = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    for (label, auth) in [
        (
            "alice, every scope, no site admin",
            Auth::Token(&world.alice_token),
        ),
        ("a bot", Auth::Token(&world.bot)),
        ("admin with read:admin only", Auth::Token(&read_only)),
    ] {
        let resp = put_health_as(&app, auth, "filesystem", good()).await;
        assert_eq!(resp.status.as_u16(), 403, "{label}: {}", resp.body);
    }
    put_health_as(&app, Auth::None, "filesystem", good())
        .await
        .assert_error(401, "unauthenticated");
    app.get("/api/v1/admin/mcp", Auth::Token(&world.alice_token))
        .await
        .assert_status(403);
    app.get("/api/v1/admin/mcp", Auth::None)
        .await
        .assert_status(401);

    // Invalid bodies and ids: 400, nothing stored.
    let long_detail = "x".repeat(1001);
    let long_id = "m".repeat(65);
    let bad: Vec<(&str, &str, Body)> = vec![
        (
            "unknown field",
            "filesystem",
            Body::Json(json!({"installed": true, "healthy": true, "detail": "", "since": "now"})),
        ),
        (
            "missing healthy",
            "filesystem",
            Body::Json(json!({"installed": true})),
        ),
        (
            "string for a boolean",
            "filesystem",
            Body::Json(json!({"installed": "yes", "healthy": true})),
        ),
        (
            "not JSON",
            "filesystem",
            Body::Raw(Some("application/json"), b"{installed".to_vec()),
        ),
        (
            "detail over 1000 bytes",
            "filesystem",
            Body::Json(json!({"installed": true, "healthy": true, "detail": long_detail})),
        ),
        ("id with a punctuation mark", "bad%21id", good()),
        ("id over 64 characters", long_id.as_str(), good()),
    ];
    for (label, mcp_id, body) in bad {
        let resp = put_health_as(&app, admin, mcp_id, body).await;
        assert_eq!(resp.status.as_u16(), 400, "{label}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{label}: {}", resp.body);
    }
    let report = app.get("/api/v1/admin/mcp", admin).await;
    report.assert_status(200);
    assert_eq!(report.json()["health"], json!([]), "{}", report.body);

    // Valid: stored, normalized id, listed with the catalog in use.
    put_health(&app, "filesystem", true, false, "probe answered 503").await;
    let github = put_health(&app, " GitHub ", true, true, "").await;
    assert_eq!(github["mcp_id"], "github", "ids are normalized");
    let report = app.get("/api/v1/admin/mcp", Auth::Token(&read_only)).await;
    report.assert_status(200);
    let report = report.json();
    assert!(is_hex64(&report["catalog_version"]), "{report}");
    assert_eq!(report["catalog_mcps"], json!(["filesystem", "github"]));
    let mut listed: Vec<Value> = report["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            json!([
                h["mcp_id"],
                h["installed"],
                h["healthy"],
                h["detail"],
                h["updated_by"]
            ])
        })
        .collect();
    listed.sort_by_key(|h| h[0].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        listed,
        vec![
            json!(["filesystem", true, false, "probe answered 503", ADMIN_LOGIN]),
            json!(["github", true, true, "", ADMIN_LOGIN]),
        ]
    );

    // The preview: bots only, their own grants, read:repository; zero
    // requirements are allowed; its catalog_version is the admin's.
    let id = world.confirmed("No MCP at all").await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed");
    assert_eq!(p["decisions"], json!([]));
    assert_eq!(p["catalog_version"], report["catalog_version"]);
    app.get(&preview_path(id), Auth::Token(&world.rival))
        .await
        .assert_error(404, "not_found");
    app.get(&preview_path(id), Auth::Token(&world.alice_token))
        .await
        .assert_status(403);
    let no_read = app.create_token(BOT, &["write:issue"]).await.token;
    app.get(&preview_path(id), Auth::Token(&no_read))
        .await
        .assert_error(403, "insufficient_scope");
    app.get(&preview_path(id), Auth::None)
        .await
        .assert_error(401, "unauthenticated");
    app.get(&preview_path(999_999), Auth::Token(&world.bot))
        .await
        .assert_error(404, "not_found");
    // A preview stores nothing.
    assert!(admissions(&app).await.is_empty());
}

// ---------------------------------------------------------------------------
// 7. A blocked approval re-renders the grant page with its blockers.
// ---------------------------------------------------------------------------

both_backends!(a_blocked_approval_shows_the_grant_page_with_its_blockers);
async fn a_blocked_approval_shows_the_grant_page_with_its_blockers(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, true, "").await;
    let id = confirmed_with(&world, "Blocked approval page", TINY_TASK_TRACKER).await;
    let resp = approve(&world, id, true).await;
    resp.assert_status(409);
    // browser.md: "An approval that the admission blocks re-renders the page
    // with the blocking decisions and their recovery actions".
    assert!(
        resp.body.contains("id=\"admission-status\"")
            && resp.body.contains("id=\"decision-req-1\""),
        "the 409 is not the grant page with its blocking decision: {}",
        resp.body
    );
}

// ---------------------------------------------------------------------------
// 8. The admissions report comes in evaluation order.
// ---------------------------------------------------------------------------

both_backends!(admissions_report_is_in_evaluation_order);
async fn admissions_report_is_in_evaluation_order(app: TestApp) {
    let world = World::new(&app).await;
    let id = confirmed_with(
        &world,
        "Refused a dozen times",
        r#"[{"mcp_id":"gitlab","agent":"qa","requirement":"required","capabilities":[],"fallback":"block"}]"#,
    )
    .await;
    for _ in 0..12 {
        approve(&world, id, true).await.assert_status(409);
    }
    let ids: Vec<i64> = admissions(&app)
        .await
        .iter()
        .map(|r| r["evaluation_id"].as_i64().expect("numeric evaluation_id"))
        .collect();
    assert_eq!(ids.len(), 12);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(
        ids, sorted,
        "the report is ordered by evaluation_id as a number"
    );
}

// ---------------------------------------------------------------------------
// 9. The MCP health page for site admins.
// ---------------------------------------------------------------------------

both_backends!(mcp_health_page_for_site_admins);
async fn mcp_health_page_for_site_admins(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, false, "probe answered 503").await;
    let report = app
        .get("/api/v1/admin/mcp", Auth::Token(&app.admin_token))
        .await;
    report.assert_status(200);
    let version = report.json()["catalog_version"]
        .as_str()
        .unwrap()
        .to_owned();
    // alice administers a repository but is no site admin: as if absent.
    world.alice.get_page("/admin/mcp").await.assert_status(404);
    let root = Browser::logged_in(&app.base, ADMIN_LOGIN, crate::helpers::ADMIN_PASSWORD).await;
    let page = root.get_page("/admin/mcp").await;
    assert_eq!(
        page.status.as_u16(),
        200,
        "GET /admin/mcp (site admins: MCP health and the catalog in use, browser.md): {}",
        page.body
    );
    for text in ["filesystem", "probe answered 503", version.as_str()] {
        assert!(page.body.contains(text), "{text} missing: {}", page.body);
    }
}

both_backends!(admission_evidence_is_never_changed);
/// The catalog, the health snapshot and the filesystem-context change an
/// evaluation cites are history: the schema refuses to change or delete
/// them (PostgreSQL relies on this instead of foreign keys that lock rows
/// every submission shares).
async fn admission_evidence_is_never_changed(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Evidence").await;
    world
        .submit(id, &new_key(), "Evidence", "")
        .await
        .assert_status(201);
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let cited = conn
        .text_rows(&format!(
            "SELECT CAST(snapshot_id AS TEXT), catalog_version, \
             CAST(e.actor_id AS TEXT), CAST(g.repository_id AS TEXT) \
             FROM admission_evaluations e JOIN grants g ON g.id = e.grant_id \
             WHERE e.grant_id = {id} AND e.phase = 'handoff'"
        ))
        .await;
    let [snapshot, catalog, actor, repository] = &cited[0][..] else {
        panic!("one handoff evaluation: {cited:?}");
    };
    let (snapshot, catalog) = (snapshot.clone().unwrap(), catalog.clone().unwrap());
    let (actor, repository) = (actor.clone().unwrap(), repository.clone().unwrap());
    conn.execute(&format!(
        "INSERT INTO fs_context_changes (repository_id, action, capabilities, actor_id, at) \
         VALUES ({repository}, 'approved', '[]', {actor}, '2026-01-01T00:00:00.000000Z')"
    ))
    .await
    .expect("a change is appended");
    let statements = [
        format!("UPDATE catalogs SET content = '{{}}' WHERE version = '{catalog}'"),
        format!("DELETE FROM catalogs WHERE version = '{catalog}'"),
        format!("UPDATE health_snapshots SET content = '[]' WHERE id = {snapshot}"),
        format!("DELETE FROM health_snapshots WHERE id = {snapshot}"),
        "UPDATE fs_context_changes SET action = 'denied'".to_owned(),
        "DELETE FROM fs_context_changes".to_owned(),
    ];
    for sql in &statements {
        let result = conn.execute(sql).await;
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("admission evidence")),
            "{sql}: {result:?}"
        );
    }
    let kept = conn
        .text_rows(&format!(
            "SELECT (SELECT content FROM catalogs WHERE version = '{catalog}'), \
             (SELECT CAST(COUNT(*) AS TEXT) FROM health_snapshots WHERE id = {snapshot}), \
             (SELECT action FROM fs_context_changes)"
        ))
        .await;
    assert_ne!(kept[0][0].as_deref(), Some("{}"));
    assert_eq!(kept[0][1].as_deref(), Some("1"));
    assert_eq!(kept[0][2].as_deref(), Some("approved"));

    // An evaluation's grant and actor are never deleted either (on
    // PostgreSQL no foreign key guards those references any more). The
    // grant has receipts, so try the bare grant rows' triggers directly on
    // a grant nothing refers to as well.
    let fresh = world.prepare("Nothing refers to me").await;
    for sql in [
        format!("DELETE FROM grants WHERE id = {fresh}"),
        format!("DELETE FROM grants WHERE id = {id}"),
        format!("DELETE FROM users WHERE id = {actor}"),
    ] {
        let result = conn.execute(&sql).await;
        assert!(
            result.as_ref().is_err_and(|e| e.contains("never deleted")),
            "{sql}: {result:?}"
        );
    }
    let left = conn
        .text_rows(&format!(
            "SELECT CAST(COUNT(*) AS TEXT) FROM grants WHERE id IN ({fresh}, {id})"
        ))
        .await;
    assert_eq!(left[0][0].as_deref(), Some("2"));
    conn.close().await;
}

// ---------------------------------------------------------------------------
// The latest evaluation in a grant's JSON.
// ---------------------------------------------------------------------------

both_backends!(each_grant_shows_its_own_latest_evaluation);
async fn each_grant_shows_its_own_latest_evaluation(app: TestApp) {
    let world = World::new(&app).await;
    let older = world.active("Older grant").await;
    let newer = world.active("Newer grant").await;
    let prepared = world.prepare("Prepared, never evaluated").await;
    // The older grant's newest evaluation now comes after every evaluation
    // of the newer grant, and the prepared grant (made last) has none.
    for n in 0..3 {
        world
            .submitted(older, &new_key(), &format!("Handoff {n}"), "body")
            .await;
    }
    let mut sql = SqlConn::connect(&app.database_url()).await;
    let rows = sql
        .text_rows(
            "SELECT CAST(grant_id AS TEXT), CAST(MAX(id) AS TEXT) \
             FROM admission_evaluations GROUP BY grant_id",
        )
        .await;
    sql.close().await;
    let latest = |id: i64| -> Value {
        rows.iter()
            .find(|row| row[0].as_deref() == Some(id.to_string().as_str()))
            .and_then(|row| row[1].as_deref())
            .map_or(Value::Null, |max| json!(max.parse::<i64>().unwrap()))
    };
    assert_ne!(latest(older), Value::Null);
    assert_ne!(latest(newer), Value::Null);
    assert!(latest(older).as_i64() > latest(newer).as_i64());
    assert_eq!(latest(prepared), Value::Null, "{rows:?}");

    // One grant read at a time, and all of them in one list page.
    for id in [older, newer, prepared] {
        let grant = world.grant(id).await;
        assert_eq!(grant["admission"]["evaluation_id"], latest(id), "{grant}");
        if latest(id).is_null() {
            assert_eq!(grant["admission"], Value::Null, "{grant}");
        }
    }
    let list = app
        .get(
            "/api/v1/agent-work-grants?state=all",
            Auth::Token(&world.bot),
        )
        .await;
    list.assert_status(200);
    let grants = list.json();
    let listed = grants.as_array().expect("a list");
    assert_eq!(listed.len(), 3, "{grants}");
    for grant in listed {
        let id = grant["id"].as_i64().expect("id");
        assert_eq!(grant["admission"]["evaluation_id"], latest(id), "{grant}");
    }
}
