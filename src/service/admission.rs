//! Where admission runs: the one evaluation function of `domain::admission`
//! fed with the repository's filesystem context history and the current MCP
//! health, at preview (computed, not stored), approval and handoff (persisted
//! with an immutable health snapshot inside the caller's transaction).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use utoipa::ToSchema;

use super::agent::locate;
use super::auth::Caller;
use super::{Ctx, Error, Result};
use crate::domain::admission::decide::{Decision, Inputs, McpHealth, Status, evaluate};
use crate::domain::admission::fs_context::{FsChange, FsHistory};
use crate::domain::ids::GrantId;
use crate::domain::proposal::{McpRequirement, Proposal, sha256_hex};
use crate::store::Tx;
use crate::store::admission::{self as store, EvaluationInputs, NewEvaluation};
use crate::store::grants::GrantRow;

/// Where an evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Computed for display; never stored.
    Preview,
    /// Inside the approval transaction.
    Approval,
    /// Inside the submission transaction.
    Handoff,
}

impl Phase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preview => "preview",
            Phase::Approval => "approval",
            Phase::Handoff => "handoff",
        }
    }
}

/// The package evaluation (`schema_version` 1).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PackageView {
    /// Always 1.
    pub schema_version: u8,
    /// `preview`, `approval` or `handoff`.
    pub phase: &'static str,
    /// `allowed`, `warning` or `blocked`.
    pub status: &'static str,
    /// True iff something blocks and every block recovers by fixing an MCP.
    pub retryable: bool,
    /// One decision per requirement, in proposal order.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<Decision>,
    /// The health snapshot (for a preview: the stored snapshot with the same
    /// content, if one exists).
    pub snapshot_id: Option<i64>,
    /// SHA-256 of the catalog used.
    pub catalog_version: String,
    /// Latest project filesystem context change considered.
    pub filesystem_grant_id: Option<i64>,
    /// The persisted evaluation (approval and handoff).
    pub evaluation_id: Option<i64>,
}

impl PackageView {
    /// True when the package is blocked.
    pub fn blocked(&self) -> bool {
        self.status == Status::Blocked.as_str()
    }

    /// True when the package warns.
    pub fn warns(&self) -> bool {
        self.status == Status::Warning.as_str()
    }

    /// How many requirements it blocks.
    pub fn blocked_count(&self) -> usize {
        self.decisions
            .iter()
            .filter(|d| d.status == Status::Blocked)
            .count()
    }
}

/// What an evaluation reads: the repository's context history and health.
struct Gathered {
    fs: FsHistory,
    health: BTreeMap<String, McpHealth>,
    snapshot_content: String,
    snapshot_digest: String,
    /// The newest stored snapshot, when the current health is its content.
    stored_snapshot: Option<i64>,
}

async fn gather(
    tx: &mut Tx,
    repository_id: i64,
    read: Option<EvaluationInputs>,
) -> Result<Gathered> {
    let inputs = match read {
        Some(inputs) => inputs,
        None => store::evaluation_inputs(tx, repository_id).await?,
    };
    let rows = inputs.fs;
    let changes = rows
        .iter()
        .map(|r| match r.action.as_str() {
            "approved" => FsChange::Approved(
                r.capabilities
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<BTreeSet<_>>(),
            ),
            "denied" => FsChange::Denied,
            _ => FsChange::Removed,
        })
        .collect();
    let fs = FsHistory {
        changes,
        latest_id: rows.last().map(|r| r.id),
    };
    let health: BTreeMap<String, McpHealth> = inputs
        .health
        .into_iter()
        .map(|h| {
            let entry = McpHealth {
                installed: h.installed,
                healthy: h.healthy,
                detail: h.detail,
                checked_at: h.checked_at,
            };
            (h.mcp_id, entry)
        })
        .collect();
    let snapshot_content = serde_jcs::to_string(&health).map_err(anyhow::Error::from)?;
    let snapshot_digest = sha256_hex(snapshot_content.as_bytes());
    let stored_snapshot = inputs
        .latest_snapshot
        .filter(|(_, digest)| *digest == snapshot_digest)
        .map(|(id, _)| id);
    Ok(Gathered {
        fs,
        health,
        snapshot_content,
        snapshot_digest,
        stored_snapshot,
    })
}

/// The requirements of a grant's current proposal.
pub fn requirements(grant: &GrantRow) -> Result<Vec<McpRequirement>> {
    let proposal: Proposal = serde_json::from_str(&grant.proposal)
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored proposal: {e}")))?;
    Ok(proposal.mcp_requirements)
}

fn view(
    ctx: &Ctx,
    grant: &GrantRow,
    gathered: &Gathered,
    phase: Phase,
    snapshot_id: Option<i64>,
    evaluation_id: Option<i64>,
) -> Result<PackageView> {
    let repository = format!("{}/{}", grant.repo_owner, grant.repo_name);
    let inputs = Inputs {
        catalog: &ctx.catalog,
        repository: &repository,
        fs_history: &gathered.fs,
        health: &gathered.health,
    };
    let package = evaluate(inputs, &requirements(grant)?);
    Ok(PackageView {
        schema_version: 1,
        phase: phase.as_str(),
        status: package.status.as_str(),
        retryable: package.retryable,
        decisions: package.decisions,
        snapshot_id,
        catalog_version: ctx.catalog.version.clone(),
        filesystem_grant_id: gathered.fs.latest_id,
        evaluation_id,
    })
}

/// The preview inside an open transaction; writes nothing.
pub async fn preview_in(ctx: &Ctx, tx: &mut Tx, grant: &GrantRow) -> Result<PackageView> {
    let gathered = gather(tx, grant.repository_id, None).await?;
    let snapshot_id = match gathered.stored_snapshot {
        Some(id) => Some(id),
        None => store::find_snapshot(tx, &gathered.snapshot_digest).await?,
    };
    view(ctx, grant, &gathered, Phase::Preview, snapshot_id, None)
}

/// An evaluation made inside the caller's transaction and not stored yet:
/// the snapshot it judged is captured, the record is ready to insert (alone,
/// with [`persist_in`], or together with the handoff's writes).
pub struct Pending {
    /// The package as it will be answered (without its evaluation id).
    pub package: PackageView,
    phase: Phase,
    snapshot_id: i64,
    decisions: String,
}

impl Pending {
    /// The evaluation record, made by `actor_id` at `at`.
    pub fn record<'a>(
        &'a self,
        ctx: &'a Ctx,
        grant: &'a GrantRow,
        actor_id: i64,
        at: &'a str,
    ) -> NewEvaluation<'a> {
        let count = |s: Status| {
            self.package
                .decisions
                .iter()
                .filter(|d| d.status == s)
                .count() as i64
        };
        NewEvaluation {
            grant_id: grant.id,
            phase: self.phase.as_str(),
            status: self.package.status,
            retryable: self.package.retryable,
            blocked_count: count(Status::Blocked),
            warning_count: count(Status::Warning),
            snapshot_id: self.snapshot_id,
            catalog_version: &ctx.catalog.version,
            filesystem_grant_id: self.package.filesystem_grant_id,
            proposal_digest: &grant.proposal_digest,
            decisions: &self.decisions,
            actor_id,
            now: at,
        }
    }
}

/// Evaluates (approval or handoff) inside the caller's transaction at `at`:
/// reads the inputs (unless they were `read` in this transaction already,
/// for the grant's repository), captures the snapshot if it is new,
/// decides. The evaluation record is not written yet (see [`Pending`]).
pub async fn evaluate_in(
    ctx: &Ctx,
    tx: &mut Tx,
    grant: &GrantRow,
    phase: Phase,
    at: &str,
    read: Option<EvaluationInputs>,
) -> Result<Pending> {
    let gathered = gather(tx, grant.repository_id, read).await?;
    let snapshot_id = match gathered.stored_snapshot {
        Some(id) => id,
        None => {
            store::capture_snapshot(
                tx,
                &gathered.snapshot_digest,
                &gathered.snapshot_content,
                at,
            )
            .await?
        }
    };
    let package = view(ctx, grant, &gathered, phase, Some(snapshot_id), None)?;
    let decisions = serde_json::to_string(&package.decisions).map_err(anyhow::Error::from)?;
    Ok(Pending {
        package,
        phase,
        snapshot_id,
        decisions,
    })
}

/// Evaluates and persists (approval or handoff) inside the caller's
/// transaction: the snapshot is captured and the evaluation stored with it,
/// evaluated at `at`.
pub async fn persist_in(
    ctx: &Ctx,
    tx: &mut Tx,
    grant: &GrantRow,
    phase: Phase,
    actor_id: i64,
    at: &str,
) -> Result<PackageView> {
    let pending = evaluate_in(ctx, tx, grant, phase, at, None).await?;
    store_pending(ctx, tx, grant, pending, actor_id, at).await
}

/// Stores a [`Pending`] evaluation alone and returns its package with the id.
pub async fn store_pending(
    ctx: &Ctx,
    tx: &mut Tx,
    grant: &GrantRow,
    pending: Pending,
    actor_id: i64,
    at: &str,
) -> Result<PackageView> {
    let id = store::insert_evaluation(tx, pending.record(ctx, grant, actor_id, at)).await?;
    let mut package = pending.package;
    package.evaluation_id = Some(id);
    Ok(package)
}

/// `GET .../admission`: the bot's preview of its grant, computed, not stored.
pub async fn preview(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
) -> Result<PackageView> {
    let mut tx = ctx.store.read().await?;
    let grant = locate(&mut tx, caller, owner, repo, id, false).await?;
    let package = preview_in(ctx, &mut tx, &grant).await?;
    tx.commit().await?;
    Ok(package)
}
