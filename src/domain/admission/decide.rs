//! Deciding one requirement (eight ordered steps, first match wins) and the
//! package evaluation built from those decisions. The one admission function:
//! preview, approval and handoff all call [`evaluate`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::catalog::{Catalog, Delivery};
use super::classify::{CapabilityClass, Classified, canonical, classify, normalized};
use super::fs_context::{FsGrantState, FsHistory};
use super::present::{Presentation, present};
use crate::domain::proposal::{Fallback, McpRequirement, Requirement};

/// How a requirement takes part in the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Prompt context only; grants nothing.
    PlanningOnly,
    /// Needs a project filesystem context grant that is not in place.
    BoundedContextRequired,
    /// The project filesystem context grant covers it.
    BoundedContextApproved,
    /// Cannot be admitted as planned.
    Blocked,
    /// Needs a live MCP tool: not available in this version.
    DeferredLiveMcp,
    /// Rows written before this contract; never produced now.
    UnknownLegacy,
}

/// The admission status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Admitted.
    Allowed,
    /// Admitted with something a person should know.
    Warning,
    /// Not admitted.
    Blocked,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Allowed => "allowed",
            Status::Warning => "warning",
            Status::Blocked => "blocked",
        }
    }
}

/// What a person (or the planner) can do about a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// Proceed; the MCP is prompt context only.
    ContinueAsPromptContext,
    /// A repository admin approves project filesystem context.
    ApproveProjectFilesystemContext,
    /// An operator installs or repairs the MCP.
    InstallOrFixMcp,
    /// Change the plan.
    RevisePlan,
    /// Proceed without the deferred live-MCP feature.
    DeferLiveMcpFeature,
}

/// The current health of one MCP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct McpHealth {
    /// Installed on this deployment.
    pub installed: bool,
    /// Answering its probe.
    pub healthy: bool,
    /// Operator or prober text.
    pub detail: String,
    /// When it was last set.
    pub checked_at: String,
}

/// Everything a decision depends on besides the requirement itself.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The catalog in use.
    pub catalog: &'a Catalog,
    /// `owner/name` of the grant's repository.
    pub repository: &'a str,
    /// The repository's project filesystem context history.
    pub fs_history: &'a FsHistory,
    /// Health of every MCP id (absent = not installed).
    pub health: &'a BTreeMap<String, McpHealth>,
}

/// The per-requirement decision (`schema_version` 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub schema_version: u8,
    pub decision_id: String,
    pub mcp_id: String,
    pub agent: String,
    pub requirement: Requirement,
    pub requested_capabilities: Vec<String>,
    pub normalized_capabilities: Vec<String>,
    pub capability_classes: Vec<Classified>,
    pub mode: Mode,
    pub status: Status,
    pub reason: String,
    pub recovery_action: Recovery,
    pub grant_state: Option<FsGrantState>,
    pub evidence_refs: Vec<String>,
    /// Badge, headline and call to action (the one presentation mapping).
    pub presentation: Presentation,
}

/// The package evaluation's computed part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackageDecision {
    /// `blocked` if any decision blocks, else `warning` if any warns, else `allowed`.
    pub status: Status,
    /// True iff something blocks and every block recovers by fixing an MCP.
    pub retryable: bool,
    /// One decision per requirement, in proposal order.
    pub decisions: Vec<Decision>,
}

/// Evaluates a whole package: the one admission function.
pub fn evaluate(inputs: Inputs<'_>, requirements: &[McpRequirement]) -> PackageDecision {
    let prohibited: BTreeSet<String> = requirements
        .iter()
        .flat_map(|r| &r.prohibited_capabilities)
        .map(|c| canonical(inputs.catalog, c))
        .collect();
    let decisions: Vec<Decision> = requirements
        .iter()
        .enumerate()
        .map(|(i, r)| decide(inputs, i, r, &prohibited))
        .collect();
    let status = decisions
        .iter()
        .map(|d| d.status)
        .max()
        .unwrap_or(Status::Allowed);
    let mut blocking = decisions.iter().filter(|d| d.status == Status::Blocked);
    let retryable = blocking
        .next()
        .is_some_and(|first| first.recovery_action == Recovery::InstallOrFixMcp)
        && blocking.all(|d| d.recovery_action == Recovery::InstallOrFixMcp);
    PackageDecision {
        status,
        retryable,
        decisions,
    }
}

struct Verdict {
    mode: Mode,
    status: Status,
    recovery: Recovery,
    reason: String,
}

fn verdict(mode: Mode, status: Status, recovery: Recovery, reason: String) -> Verdict {
    Verdict {
        mode,
        status,
        recovery,
        reason,
    }
}

/// The parts joined, in one allocation of the right size (the decisions'
/// texts are built on every evaluation; `format!` grew them piecewise).
fn concat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

fn quoted(caps: &[&str]) -> String {
    caps.iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decides one requirement; first matching step wins.
pub fn decide(
    inputs: Inputs<'_>,
    index: usize,
    req: &McpRequirement,
    prohibited: &BTreeSet<String>,
) -> Decision {
    let mcp_id = normalized(&req.mcp_id);
    let mcp_id = mcp_id.as_ref();
    let classes: Vec<Classified> = req
        .capabilities
        .iter()
        .map(|c| classify(inputs.catalog, mcp_id, c))
        .collect();
    let can_proceed =
        req.requirement == Requirement::Optional && req.fallback == Fallback::ContinueWithoutMcp;
    let has = |class: CapabilityClass| classes.iter().any(|c| c.class == class);
    let of = |class: CapabilityClass| -> Vec<&str> {
        classes
            .iter()
            .filter(|c| c.class == class)
            .map(|c| c.capability.as_str())
            .collect()
    };
    let packet: Vec<&str> = classes
        .iter()
        .filter(|c| c.delivery_kind == Some(Delivery::BoundedContextPacket))
        .map(|c| c.capability.as_str())
        .collect();
    let planning_reads: Vec<&str> = classes
        .iter()
        .filter(|c| c.delivery_kind == Some(Delivery::PlanningContextOnly))
        .map(|c| c.capability.as_str())
        .collect();
    let needed_ops: BTreeSet<&str> = packet.iter().filter_map(|c| c.rsplit('.').next()).collect();
    let fs_state = (!packet.is_empty()).then(|| inputs.fs_history.state_for(&needed_ops));
    let has_prompt = req
        .prompt_context
        .as_deref()
        .is_some_and(|p| !p.trim().is_empty());
    let soft = |blocked_reason: String, warning_reason: String| {
        if can_proceed {
            (Status::Warning, warning_reason)
        } else {
            (Status::Blocked, blocked_reason)
        }
    };

    let v = if !inputs.catalog.mcps.contains_key(mcp_id) {
        // 1. unknown MCP
        verdict(
            Mode::Blocked,
            Status::Blocked,
            Recovery::RevisePlan,
            format!("MCP \"{mcp_id}\" is not in the catalog; revise the plan to use a known MCP."),
        )
    } else if has(CapabilityClass::Unknown) {
        // 2. an unknown capability
        let unknown = of(CapabilityClass::Unknown);
        verdict(
            Mode::Blocked,
            Status::Blocked,
            Recovery::RevisePlan,
            format!(
                "MCP \"{mcp_id}\" does not support {}; revise the plan.",
                quoted(&unknown)
            ),
        )
    } else if let Some(banned) = classes.iter().find(|c| prohibited.contains(&c.capability)) {
        // 3. deny wins, unconditionally
        verdict(
            Mode::Blocked,
            Status::Blocked,
            Recovery::RevisePlan,
            format!(
                "\"{}\" is prohibited for this package, and a prohibition is never softened; revise the plan.",
                banned.capability
            ),
        )
    } else if has(CapabilityClass::DeferredLiveMcp) {
        // 4. a deferred live-MCP feature
        let deferred = quoted(&of(CapabilityClass::DeferredLiveMcp));
        let (status, reason) = soft(
            format!(
                "{deferred} would need a live MCP tool, which is not available in this version; the requirement cannot proceed without it, so revise the plan."
            ),
            format!(
                "{deferred} would need a live MCP tool, which is not available in this version; the work continues without it."
            ),
        );
        let recovery = if can_proceed {
            Recovery::DeferLiveMcpFeature
        } else {
            Recovery::RevisePlan
        };
        verdict(Mode::DeferredLiveMcp, status, recovery, reason)
    } else if let Some(state) = &fs_state {
        // 5. a bounded context packet, judged against the project grant
        bounded_packet(inputs, mcp_id, state, &needed_ops, can_proceed)
    } else if !planning_reads.is_empty() {
        // 6. reads delivered as planning context; never health-gated
        let reads = quoted(&planning_reads);
        if has_prompt {
            verdict(
                Mode::PlanningOnly,
                Status::Allowed,
                Recovery::ContinueAsPromptContext,
                format!("{reads} are used as prompt context only; no MCP access is granted."),
            )
        } else if can_proceed {
            verdict(
                Mode::PlanningOnly,
                Status::Warning,
                Recovery::ContinueAsPromptContext,
                format!("{reads} have no prompt context; the work continues without them."),
            )
        } else {
            verdict(
                Mode::Blocked,
                Status::Blocked,
                Recovery::RevisePlan,
                format!(
                    "{reads} can only be delivered as prompt context, and the requirement has none; add prompt context or revise the plan."
                ),
            )
        }
    } else if classes.is_empty() && !has_prompt && !can_proceed {
        // 7a. nothing requested, nothing to hand over, and it cannot proceed
        verdict(
            Mode::Blocked,
            Status::Blocked,
            Recovery::RevisePlan,
            format!(
                "The requirement on \"{mcp_id}\" names no capability and no prompt context, and cannot proceed without the MCP; revise the plan."
            ),
        )
    } else {
        // 7b. planning only
        let what = if classes.is_empty() {
            "This requirement".to_owned()
        } else {
            quoted(&of(CapabilityClass::PlanningOnly))
        };
        verdict(
            Mode::PlanningOnly,
            Status::Warning,
            Recovery::ContinueAsPromptContext,
            format!(
                "{what} is planning context only: Writ's own path does the writing and no MCP access is granted."
            ),
        )
    };

    let mut evidence_refs: Vec<String> = packet
        .iter()
        .chain(&planning_reads)
        .map(|c| concat(&[mcp_id, ":", inputs.repository, ":", c]))
        .collect();
    if has_prompt {
        evidence_refs.push(format!("prompt_context:req-{index}"));
    }
    let presentation = present(v.mode, v.status, v.recovery);
    Decision {
        schema_version: 1,
        decision_id: format!("req-{index}"),
        mcp_id: req.mcp_id.clone(),
        agent: req.agent.clone(),
        requirement: req.requirement,
        requested_capabilities: req.capabilities.clone(),
        normalized_capabilities: classes.iter().map(|c| c.capability.clone()).collect(),
        capability_classes: classes,
        mode: v.mode,
        status: v.status,
        reason: {
            let mut reason =
                String::with_capacity(presentation.headline.len() + 1 + v.reason.len());
            reason.push_str(presentation.headline);
            reason.push(' ');
            reason.push_str(&v.reason);
            reason
        },
        recovery_action: v.recovery,
        grant_state: fs_state,
        evidence_refs,
        presentation,
    }
}

/// Step 5, and the health overlay of step 8.
fn bounded_packet(
    inputs: Inputs<'_>,
    mcp_id: &str,
    state: &FsGrantState,
    needed: &BTreeSet<&str>,
    can_proceed: bool,
) -> Verdict {
    use super::fs_context::FsPhase;
    let mut ops = String::new();
    for (i, op) in needed.iter().enumerate() {
        if i > 0 {
            ops.push_str(", ");
        }
        ops.push_str(op);
    }
    let repo = inputs.repository;
    if state.phase == FsPhase::Approved {
        // 8. health overlay on an allowed, approved packet
        let health = inputs.health.get(mcp_id);
        let problem = match health {
            None => Some(format!("MCP \"{mcp_id}\" is not installed")),
            Some(h) if !h.installed => Some(format!(
                "MCP \"{mcp_id}\" is not installed (since {})",
                h.checked_at
            )),
            Some(h) if !h.healthy => Some(format!(
                "MCP \"{mcp_id}\" is unhealthy since {}: {}",
                h.checked_at, h.detail
            )),
            Some(_) => None,
        };
        return match problem {
            None => verdict(
                Mode::BoundedContextApproved,
                Status::Allowed,
                Recovery::ContinueAsPromptContext,
                concat(&[
                    "Project filesystem context for ",
                    repo,
                    " is approved for ",
                    &ops,
                    "; Writ assembles a read-only packet.",
                ]),
            ),
            Some(p) if can_proceed => verdict(
                Mode::BoundedContextApproved,
                Status::Warning,
                Recovery::InstallOrFixMcp,
                format!("{p}; the work continues without the packet."),
            ),
            Some(p) => verdict(
                Mode::BoundedContextApproved,
                Status::Blocked,
                Recovery::InstallOrFixMcp,
                format!("{p}; install or fix it, then retry."),
            ),
        };
    }
    let why = match (state.phase, state.revocation_reason) {
        (FsPhase::Denied, _) => "a repository admin denied it",
        (FsPhase::Revoked, Some("project_grant_narrowed")) => {
            "the grant was narrowed below what this package requires"
        }
        (FsPhase::Revoked, _) => "the grant that covered it was removed",
        _ => "none is approved",
    };
    let (status, tail) = if can_proceed {
        (Status::Warning, "the work continues without it")
    } else {
        (Status::Blocked, "a repository admin must approve it")
    };
    verdict(
        Mode::BoundedContextRequired,
        status,
        Recovery::ApproveProjectFilesystemContext,
        concat(&[
            "Repository ",
            repo,
            ", capabilities ",
            &ops,
            ": ",
            why,
            "; ",
            tail,
            ".",
        ]),
    )
}
