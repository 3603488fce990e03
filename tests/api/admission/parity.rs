//! Parity: preview, approval and handoff decide identically.

use serde_json::{Value, json};

use super::{
    admissions_of, approve, assert_page_agrees, confirmed_with, fs_change_ok, preview, put_health,
    stored, v, verdict, verdicts,
};
use crate::helpers::TestApp;
use crate::world::{BOT, World, is_timestamp, new_key};

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

/// Project filesystem context {read, list} approved, and the filesystem MCP
/// healthy.
async fn approved_and_healthy(world: &World<'_>) {
    fs_change_ok(&world.alice, "approve", &["read", "list"]).await;
    put_health(world.app, "filesystem", true, true, "").await;
}

/// builder-bot's confirmed grant with [`EVERY_CLASS`], its context approved
/// and healthy.
async fn every_class(world: &World<'_>) -> i64 {
    approved_and_healthy(world).await;
    confirmed_with(world, "Every capability class", EVERY_CLASS).await
}

both_backends!(every_capability_class_is_previewed);
async fn every_capability_class_is_previewed(app: TestApp) {
    let world = World::new(&app).await;
    let id = every_class(&world).await;

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
}

both_backends!(approval_and_handoff_store_the_preview_decisions);
async fn approval_and_handoff_store_the_preview_decisions(app: TestApp) {
    let world = World::new(&app).await;
    let id = every_class(&world).await;
    let p = preview(&world, id).await;

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
}

both_backends!(an_unhealthy_mcp_blocks_preview_and_handoff_alike);
async fn an_unhealthy_mcp_blocks_preview_and_handoff_alike(app: TestApp) {
    let world = World::new(&app).await;
    let id = every_class(&world).await;
    let p = preview(&world, id).await;
    approve(&world, id, true).await.assert_status(303);
    let approval = world.grant(id).await["admission"].clone();
    world
        .submitted(id, &new_key(), "Parity", "Same inputs")
        .await;

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
}

both_backends!(deny_wins_over_an_approved_healthy_read_and_over_health);
async fn deny_wins_over_an_approved_healthy_read_and_over_health(app: TestApp) {
    let world = World::new(&app).await;
    approved_and_healthy(&world).await;

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
