//! Table-driven tests of the decision table: every step and branch.

use std::collections::{BTreeMap, BTreeSet};

use super::catalog::Catalog;
use super::decide::{Inputs, McpHealth, Mode, Recovery, Status, evaluate};
use super::fs_context::{FsChange, FsHistory, FsPhase};
use crate::domain::proposal::McpRequirement;

fn req(json: &str) -> McpRequirement {
    serde_json::from_str(json).unwrap()
}

fn fs(caps: &[&str]) -> FsHistory {
    FsHistory {
        changes: vec![FsChange::Approved(
            caps.iter().map(|c| (*c).to_owned()).collect(),
        )],
        latest_id: Some(1),
    }
}

fn healthy(ids: &[&str]) -> BTreeMap<String, McpHealth> {
    ids.iter()
        .map(|id| {
            let h = McpHealth {
                installed: true,
                healthy: true,
                detail: String::new(),
                checked_at: "t".into(),
            };
            ((*id).to_owned(), h)
        })
        .collect()
}

const FS_REQ: &str = r#"{"mcp_id":"filesystem","agent":"frontend","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block"}"#;
const FS_OPT: &str = r#"{"mcp_id":"filesystem","agent":"frontend","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp"}"#;

struct Row {
    name: &'static str,
    reqs: Vec<&'static str>,
    fs: FsHistory,
    health: BTreeMap<String, McpHealth>,
    want: (Mode, Status, Recovery),
}

fn rows() -> Vec<Row> {
    use Mode::{BoundedContextApproved, BoundedContextRequired, DeferredLiveMcp, PlanningOnly};
    use Recovery::*;
    use Status::{Allowed, Warning};
    const BLOCKED: Mode = Mode::Blocked;
    let none = FsHistory::default;
    let h = || healthy(&["filesystem", "github"]);
    let r = |name, reqs: Vec<&'static str>, fs, health, want| Row {
        name,
        reqs,
        fs,
        health,
        want,
    };
    vec![
        // 1. unknown MCP, whatever the fallback
        r(
            "unknown mcp",
            vec![
                r#"{"mcp_id":"gitlab","agent":"qa","requirement":"optional","capabilities":["gitlab.issues.read"],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "prototype mcp",
            vec![
                r#"{"mcp_id":"__proto__","agent":"qa","requirement":"optional","capabilities":[],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        // 2. unknown capability (typo, malformed, unregistered pair, prototype-like)
        r(
            "typo",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"optional","capabilities":["filesystem.project.raed"],"fallback":"continue_without_mcp"}"#,
            ],
            fs(&["read"]),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "malformed",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem..write"],"fallback":"block"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "unregistered pair",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"required","capabilities":["github.actions.merge"],"fallback":"ask_user"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "proto capability",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"optional","capabilities":["github.__proto__.write"],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "foreign namespace",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp"}"#,
            ],
            fs(&["read"]),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        // 3. deny wins, even over optional + continue_without_mcp, alias-aware, across requirements
        r(
            "deny wins over optional",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"continue_without_mcp","prohibited_capabilities":["filesystem.read"]}"#,
            ],
            fs(&["read"]),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "deny from another requirement",
            vec![
                FS_OPT,
                r#"{"mcp_id":"github","agent":"review","requirement":"optional","capabilities":[],"fallback":"continue_without_mcp","prohibited_capabilities":["FileSystem.Project.Read"]}"#,
            ],
            fs(&["read"]),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        // 4. deferred live MCP
        r(
            "deferred optional",
            vec![
                r#"{"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (DeferredLiveMcp, Warning, DeferLiveMcpFeature),
        ),
        r(
            "deferred required",
            vec![
                r#"{"mcp_id":"github","agent":"review","requirement":"required","capabilities":["github.pull_requests.create"],"fallback":"block"}"#,
            ],
            none(),
            h(),
            (DeferredLiveMcp, Status::Blocked, RevisePlan),
        ),
        r(
            "deferred optional ask_user",
            vec![
                r#"{"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.issues.write"],"fallback":"ask_user"}"#,
            ],
            none(),
            h(),
            (DeferredLiveMcp, Status::Blocked, RevisePlan),
        ),
        r(
            "deferred filesystem root",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"optional","capabilities":["filesystem.delete"],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (DeferredLiveMcp, Warning, DeferLiveMcpFeature),
        ),
        // 5. bounded context packet against the project grant
        r(
            "fs approved",
            vec![FS_REQ],
            fs(&["read", "search"]),
            h(),
            (BoundedContextApproved, Allowed, ContinueAsPromptContext),
        ),
        r(
            "fs alias approved",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.read"],"fallback":"block"}"#,
            ],
            fs(&["read"]),
            h(),
            (BoundedContextApproved, Allowed, ContinueAsPromptContext),
        ),
        r(
            "fs none required",
            vec![FS_REQ],
            none(),
            h(),
            (
                BoundedContextRequired,
                Status::Blocked,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs none optional",
            vec![FS_OPT],
            none(),
            h(),
            (
                BoundedContextRequired,
                Warning,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs partial required",
            vec![FS_REQ],
            fs(&["read"]),
            h(),
            (
                BoundedContextRequired,
                Status::Blocked,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs denied required",
            vec![FS_REQ],
            FsHistory {
                changes: vec![FsChange::Denied],
                latest_id: Some(1),
            },
            h(),
            (
                BoundedContextRequired,
                Status::Blocked,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs denied optional",
            vec![FS_OPT],
            FsHistory {
                changes: vec![FsChange::Denied],
                latest_id: Some(1),
            },
            h(),
            (
                BoundedContextRequired,
                Warning,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs removed required",
            vec![FS_REQ],
            FsHistory {
                changes: vec![
                    FsChange::Approved(["read", "search"].map(String::from).into()),
                    FsChange::Removed,
                ],
                latest_id: Some(2),
            },
            h(),
            (
                BoundedContextRequired,
                Status::Blocked,
                ApproveProjectFilesystemContext,
            ),
        ),
        r(
            "fs ask_user optional",
            vec![
                r#"{"mcp_id":"filesystem","agent":"qa","requirement":"optional","capabilities":["filesystem.project.read"],"fallback":"ask_user"}"#,
            ],
            none(),
            h(),
            (
                BoundedContextRequired,
                Status::Blocked,
                ApproveProjectFilesystemContext,
            ),
        ),
        // 8. health overlay on an approved packet
        r(
            "fs approved not installed",
            vec![FS_REQ],
            fs(&["read", "search"]),
            healthy(&["github"]),
            (BoundedContextApproved, Status::Blocked, InstallOrFixMcp),
        ),
        r(
            "fs approved unhealthy optional",
            vec![FS_OPT],
            fs(&["read"]),
            BTreeMap::from([(
                "filesystem".to_owned(),
                McpHealth {
                    installed: true,
                    healthy: false,
                    detail: "timeout".into(),
                    checked_at: "t".into(),
                },
            )]),
            (BoundedContextApproved, Warning, InstallOrFixMcp),
        ),
        // 6. github reads as planning context, never health-gated
        r(
            "github read with prompt",
            vec![
                r#"{"mcp_id":"github","agent":"docs","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Read the open issues about due dates."}"#,
            ],
            none(),
            BTreeMap::new(),
            (PlanningOnly, Allowed, ContinueAsPromptContext),
        ),
        r(
            "github read no prompt required",
            vec![
                r#"{"mcp_id":"github","agent":"docs","requirement":"required","capabilities":["github.issues.read"],"fallback":"block"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "github read no prompt optional",
            vec![
                r#"{"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.search"],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (PlanningOnly, Warning, ContinueAsPromptContext),
        ),
        // 7. planning only, or nothing
        r(
            "project write is planning",
            vec![
                r#"{"mcp_id":"filesystem","agent":"frontend","requirement":"required","capabilities":["filesystem.project.write"],"fallback":"block"}"#,
            ],
            none(),
            h(),
            (PlanningOnly, Warning, ContinueAsPromptContext),
        ),
        r(
            "no capability no prompt required",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"required","capabilities":[],"fallback":"block"}"#,
            ],
            none(),
            h(),
            (BLOCKED, Status::Blocked, RevisePlan),
        ),
        r(
            "no capability with prompt",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"required","capabilities":[],"fallback":"block","prompt_context":"Follow the style guide."}"#,
            ],
            none(),
            h(),
            (PlanningOnly, Warning, ContinueAsPromptContext),
        ),
        r(
            "no capability optional",
            vec![
                r#"{"mcp_id":"github","agent":"qa","requirement":"optional","capabilities":[],"fallback":"continue_without_mcp"}"#,
            ],
            none(),
            h(),
            (PlanningOnly, Warning, ContinueAsPromptContext),
        ),
    ]
}

#[test]
fn decision_table() {
    let catalog = Catalog::default_catalog();
    let rows = rows();
    for row in &rows {
        let reqs: Vec<McpRequirement> = row.reqs.iter().map(|j| req(j)).collect();
        let inputs = Inputs {
            catalog: &catalog,
            repository: "acme/widgets",
            fs_history: &row.fs,
            health: &row.health,
        };
        let package = evaluate(inputs, &reqs);
        let d = &package.decisions[0];
        assert_eq!(
            (d.mode, d.status, d.recovery_action),
            row.want,
            "{}: {}",
            row.name,
            d.reason
        );
        assert!(!d.reason.is_empty() && d.reason.len() < 512, "{}", row.name);
        assert_eq!(d.decision_id, "req-0");
    }
    assert!(rows.len() >= 30);
}

#[test]
fn package_status_and_retryable() {
    let catalog = Catalog::default_catalog();
    let none = FsHistory::default();
    let health = healthy(&["github"]);
    let inputs = |fs: &'static FsHistory, health: &'static BTreeMap<String, McpHealth>| Inputs {
        catalog: Box::leak(Box::new(catalog.clone())),
        repository: "acme/widgets",
        fs_history: fs,
        health,
    };
    let empty = evaluate(
        inputs(
            Box::leak(Box::new(none.clone())),
            Box::leak(Box::new(health.clone())),
        ),
        &[],
    );
    assert_eq!((empty.status, empty.retryable), (Status::Allowed, false));
    // Only a health block: retryable.
    let approved: &'static FsHistory = Box::leak(Box::new(fs(&["read", "search"])));
    let only_health = evaluate(
        inputs(approved, Box::leak(Box::new(health.clone()))),
        &[req(FS_REQ)],
    );
    assert_eq!(
        (only_health.status, only_health.retryable),
        (Status::Blocked, true)
    );
    // A health block plus a plan block: not retryable.
    let mixed = evaluate(
        inputs(approved, Box::leak(Box::new(health.clone()))),
        &[
            req(FS_REQ),
            req(
                r#"{"mcp_id":"nope","agent":"qa","requirement":"required","capabilities":[],"fallback":"block"}"#,
            ),
        ],
    );
    assert_eq!((mixed.status, mixed.retryable), (Status::Blocked, false));
    // Warnings only.
    let warn = evaluate(
        inputs(Box::leak(Box::new(none)), Box::leak(Box::new(health))),
        &[req(FS_OPT)],
    );
    assert_eq!((warn.status, warn.retryable), (Status::Warning, false));
}

#[test]
fn tiny_task_tracker_package() {
    let catalog = Catalog::default_catalog();
    let reqs: Vec<McpRequirement> = serde_json::from_str(TINY_TASK_TRACKER).unwrap();
    let health = healthy(&["filesystem", "github"]);
    let run = |fs: &FsHistory| {
        evaluate(
            Inputs {
                catalog: &catalog,
                repository: "acme/tracker",
                fs_history: fs,
                health: &health,
            },
            &reqs,
        )
    };
    let before = run(&FsHistory::default());
    let statuses: Vec<Status> = before.decisions.iter().map(|d| d.status).collect();
    assert_eq!(
        statuses,
        [
            Status::Allowed,
            Status::Blocked,
            Status::Warning,
            Status::Allowed
        ]
    );
    assert_eq!(
        before.decisions[1].recovery_action,
        Recovery::ApproveProjectFilesystemContext
    );
    assert_eq!(before.decisions[2].mode, Mode::DeferredLiveMcp);
    let after = run(&fs(&["read", "search"]));
    assert_eq!(after.status, Status::Warning);
    assert_eq!(after.decisions[1].mode, Mode::BoundedContextApproved);
    assert_eq!(
        after.decisions[1].evidence_refs,
        [
            "filesystem:acme/tracker:filesystem.project.read",
            "filesystem:acme/tracker:filesystem.project.search"
        ]
    );
    let narrowed = FsHistory {
        changes: vec![
            FsChange::Approved(BTreeSet::from(["read".into(), "search".into()])),
            FsChange::Approved(BTreeSet::from(["read".into()])),
        ],
        latest_id: Some(2),
    };
    let blocked = run(&narrowed);
    let d = &blocked.decisions[1];
    assert_eq!(
        (d.status, d.grant_state.as_ref().unwrap().phase),
        (Status::Blocked, FsPhase::Revoked)
    );
    assert_eq!(
        d.grant_state.as_ref().unwrap().revocation_reason,
        Some("project_grant_narrowed")
    );
    // The typo variant blocks with revise_plan.
    let mut typo = reqs.clone();
    typo[1].capabilities[1] = "filesystem.project.serach".into();
    let t = evaluate(
        Inputs {
            catalog: &catalog,
            repository: "acme/tracker",
            fs_history: &fs(&["read", "search"]),
            health: &health,
        },
        &typo,
    );
    assert_eq!(
        (t.decisions[1].status, t.decisions[1].recovery_action),
        (Status::Blocked, Recovery::RevisePlan)
    );
}

/// The spec's tiny task-tracker package (also used by the HTTP tests).
pub const TINY_TASK_TRACKER: &str = r#"[
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Open issues describe the due-date feature."},
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.read"],"fallback":"continue_without_mcp","prompt_context":"Docs live under docs/."}
]"#;

#[test]
fn decisions_serialize_with_the_spec_fields() {
    let catalog = Catalog::default_catalog();
    let health = healthy(&["filesystem"]);
    let fs = fs(&["read", "search"]);
    let package = evaluate(
        Inputs {
            catalog: &catalog,
            repository: "acme/widgets",
            fs_history: &fs,
            health: &health,
        },
        &[req(FS_REQ)],
    );
    let v = serde_json::to_value(&package.decisions[0]).unwrap();
    for field in [
        "schema_version",
        "decision_id",
        "mcp_id",
        "agent",
        "requirement",
        "requested_capabilities",
        "normalized_capabilities",
        "capability_classes",
        "mode",
        "status",
        "reason",
        "recovery_action",
        "grant_state",
        "evidence_refs",
    ] {
        assert!(v.get(field).is_some(), "{field}");
    }
    assert_eq!(v["capability_classes"][0]["class"], "bounded_read_only");
    assert_eq!(
        v["capability_classes"][0]["delivery_kind"],
        "bounded_context_packet"
    );
    assert_eq!(v["grant_state"]["phase"], "approved");
}
