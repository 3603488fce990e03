//! A block visible at approval can never be approved, and a blocked
//! approval re-renders the grant page with its blockers.

use serde_json::Value;

use super::{
    TINY_TASK_TRACKER, admissions_of, approve, assert_page_agrees, confirmed_with, preview,
    put_health, stored, v, verdicts,
};
use crate::helpers::{Auth, TestApp};
use crate::world::{World, new_key, state_of};

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
