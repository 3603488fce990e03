//! MCP health: not installed, fixed, snapshots; the health page for site
//! admins.

use serde_json::{Value, json};

use super::{
    admissions_of, approve, confirmed_with, fs_change_ok, preview, put_health, v, verdicts,
};
use crate::browser::Browser;
use crate::helpers::{ADMIN_LOGIN, Auth, TestApp};
use crate::world::{World, new_key, submission_of};

const HEALTH_PACKAGE: &str = r#"[
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.read"],"fallback":"block"},
 {"mcp_id":"filesystem","agent":"docs","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Issue 1 is the spec."}
]"#;

/// Project filesystem context {read} approved, and builder-bot's confirmed
/// grant with [`HEALTH_PACKAGE`] (no MCP health set yet).
async fn health_grant(world: &World<'_>) -> i64 {
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    confirmed_with(world, "Health", HEALTH_PACKAGE).await
}

both_backends!(an_mcp_without_health_is_not_installed_and_its_refusals_share_a_snapshot);
async fn an_mcp_without_health_is_not_installed_and_its_refusals_share_a_snapshot(app: TestApp) {
    let world = World::new(&app).await;
    let id = health_grant(&world).await;

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
}

both_backends!(health_changes_gate_the_handoff_under_new_snapshots);
async fn health_changes_gate_the_handoff_under_new_snapshots(app: TestApp) {
    let world = World::new(&app).await;
    let id = health_grant(&world).await;
    approve(&world, id, true).await.assert_status(409);
    let s0 = world.grant(id).await["admission"]["snapshot_id"].clone();

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
}

both_backends!(a_packet_blocked_by_an_mcp_and_by_the_plan_is_not_retryable);
async fn a_packet_blocked_by_an_mcp_and_by_the_plan_is_not_retryable(app: TestApp) {
    let world = World::new(&app).await;
    fs_change_ok(&world.alice, "approve", &["read"]).await;

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
