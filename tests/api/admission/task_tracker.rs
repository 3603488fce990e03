//! The required regression: the tiny task-tracker flow, from a preview
//! blocked by the missing project filesystem context to handoffs under a
//! narrowed and a re-approved context.

use serde_json::{Value, json};

use super::{
    TINY_TASK_TRACKER, admissions_of, approve, assert_page_agrees, check_package, confirmed_with,
    fs_change_ok, preview, put_health, stored, v, verdict, verdicts,
};
use crate::db::SqlConn;
use crate::helpers::TestApp;
use crate::world::{World, is_timestamp, new_key, state_of, submission_of};

/// The same package with a typo in qa's capabilities.
const TINY_TASK_TRACKER_TYPO: &str = r#"[
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Open issues describe the due-date feature."},
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.serach"],"fallback":"block"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.read"],"fallback":"continue_without_mcp","prompt_context":"Docs live under docs/."}
]"#;

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

/// The issues of acme/widgets (count).
async fn issue_count(world: &World<'_>) -> usize {
    world.all_issues().await.len()
}

/// builder-bot's confirmed grant with the tiny task-tracker package, the
/// filesystem MCP installed and healthy.
async fn tracker(world: &World<'_>) -> i64 {
    put_health(world.app, "filesystem", true, true, "probe answered 200").await;
    confirmed_with(world, "Build a tiny task tracker", TINY_TASK_TRACKER).await
}

/// Persisted evaluations are never updated or deleted: those stored `early`
/// are still there as they were, and at least `added` came after them.
async fn assert_evaluations_kept(app: &TestApp, early: &[Vec<Option<String>>], added: usize) {
    let late = all_stored(app).await;
    assert_eq!(late[..early.len()], early[..], "stored evaluations changed");
    assert!(late.len() >= early.len() + added, "{late:?}");
}

both_backends!(tiny_task_tracker_preview_is_blocked_by_the_missing_filesystem_context);
async fn tiny_task_tracker_preview_is_blocked_by_the_missing_filesystem_context(app: TestApp) {
    let world = World::new(&app).await;
    let id = tracker(&world).await;

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
}

both_backends!(tiny_task_tracker_approval_is_refused_and_stored);
async fn tiny_task_tracker_approval_is_refused_and_stored(app: TestApp) {
    let world = World::new(&app).await;
    let id = tracker(&world).await;
    let p = preview(&world, id).await;

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
}

both_backends!(tiny_task_tracker_is_approved_with_the_acknowledgment_once_its_context_is);
async fn tiny_task_tracker_is_approved_with_the_acknowledgment_once_its_context_is(app: TestApp) {
    let world = World::new(&app).await;
    let id = tracker(&world).await;
    approve(&world, id, true).await.assert_status(409);
    let grant = world.grant(id).await;
    let refused = grant["admission"].clone();
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

    assert_evaluations_kept(&app, &early, 1).await;
}

both_backends!(tiny_task_tracker_handoff_blocks_while_its_context_is_narrowed);
async fn tiny_task_tracker_handoff_blocks_while_its_context_is_narrowed(app: TestApp) {
    let world = World::new(&app).await;
    let id = tracker(&world).await;
    fs_change_ok(&world.alice, "approve", &["read", "search"]).await;
    let before_approval = preview(&world, id).await;
    approve(&world, id, true).await.assert_status(303);
    let grant = world.grant(id).await;
    let early = all_stored(&app).await;

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

    assert_evaluations_kept(&app, &early, 3).await;
}

both_backends!(tiny_task_tracker_with_a_typo_is_blocked_at_preview_and_approval);
async fn tiny_task_tracker_with_a_typo_is_blocked_at_preview_and_approval(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, true, "probe answered 200").await;

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
}
