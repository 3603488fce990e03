//! The handoff: a bot's work becomes an issue exactly once. One transaction
//! locks the grant, resolves the request key (replay or conflict), judges the
//! grant, runs the handoff admission, and writes the issue, the receipt and
//! the counter together.

use super::admission::{self, PackageView, Phase};
use super::agent::{Triple, facts, locate, locate_for_key};
use super::audit::{self, Access, AuditedTx};
use super::auth::Caller;
use super::events;
use super::view::{GrantView, SubmissionView};
use super::{Ctx, Error, Result};
use crate::domain::grant::{Refusal, decide_submit};
use crate::domain::ids::{GrantId, RequestKey};
use crate::domain::submission::content_digest;
use crate::domain::text::check_title;
use crate::store::admission::EvaluationInputs;
use crate::store::audit::Outcome as CallOutcome;
use crate::store::grants::GrantRow;
use crate::store::handoff::{self, HandedOff, Handoff};
use crate::store::issues::{self, SubmissionRow};

/// A validated submission.
#[derive(Debug, Clone)]
pub struct SubmitInput {
    /// The proposal triple.
    pub triple: Triple,
    /// The bot's idempotency key.
    pub request_key: RequestKey,
    /// 1–255 scalar values, stored byte-for-byte.
    pub title: String,
    /// May be empty, stored byte-for-byte.
    pub body: String,
}

impl SubmitInput {
    /// Validates title and body (NUL was already refused by the JSON reader).
    pub fn new(
        triple: Triple,
        request_key: RequestKey,
        title: String,
        body: String,
    ) -> Result<SubmitInput> {
        check_title(&title).map_err(|m| Error::Invalid(m.to_owned()))?;
        Ok(SubmitInput {
            triple,
            request_key,
            title,
            body,
        })
    }
}

/// Whether a submit made something new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 201: a new issue and receipt were committed.
    Created,
    /// 200: the same key and content were committed before.
    Replayed,
}

/// The answer of submit and readback.
#[derive(Debug)]
pub struct Receipt {
    /// New or replay.
    pub outcome: Outcome,
    /// The grant after the transaction.
    pub grant: GrantView,
    /// The receipt.
    pub submission: SubmissionView,
}

/// Submits work under a grant (see the module doc for the transaction).
pub async fn submit(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    input: &SubmitInput,
) -> Result<Receipt> {
    let content = content_digest(input.triple.digest.as_str(), &input.title, &input.body);
    let mut tx = audit::begin(ctx, caller, Access::Write).await?;
    let key = input.request_key.as_str();
    let located = locate_for_key(&mut tx, caller, owner, repo, id, key).await?;
    let (grant, used) = (located.grant, located.used);
    if used.is_some()
        && let Some(existing) = issues::submission_by_key(&mut tx, grant.id, key).await?
    {
        let answer = replay_or_conflict(ctx, &grant, existing, &content);
        tx.commit_answer(ctx, &answer).await?;
        return answer;
    }
    let created = create(
        ctx,
        &mut tx,
        caller,
        &grant,
        input,
        &content,
        located.inputs,
    )
    .await;
    let refused = matches!(
        created,
        Ok(Created::Blocked(_)) | Err(Error::Refused { .. })
    );
    if refused
        && issues::submission_by_key(&mut tx, grant.id, key)
            .await?
            .is_some()
    {
        // The locking lookup read the key from its statement's snapshot,
        // which under READ COMMITTED predates the grant row it waited for:
        // a racer committed a receipt under this key in between, and its
        // submission may be what now refuses (limit reached, or withdrawn
        // since). A key already used is answered as the winner was, never
        // refused; this transaction (and a blocked evaluation) is dropped.
        drop(tx);
        return resolve_after_race(ctx, caller, owner, repo, id, input, &content).await;
    }
    let (row, receipt) = match created {
        Ok(Created::Done { grant, receipt }) => (grant, receipt),
        Ok(Created::Blocked(blocked)) => {
            // Commit only the evaluation record: the request key stays unused.
            let answer = Err(Error::admission_blocked(
                GrantView::from_row(&grant, &ctx.config.public_base())?,
                blocked,
            ));
            tx.commit_answer(ctx, &answer).await?;
            return answer;
        }
        Ok(Created::Raced) => {
            // Lost a race on (grant_id, request_key): answer as the winner did.
            drop(tx);
            return resolve_after_race(ctx, caller, owner, repo, id, input, &content).await;
        }
        Err(e) => {
            drop(tx);
            return Err(audit::classify_failed_write(ctx, caller, e).await);
        }
    };
    tx.commit(ctx, 201, None).await?;
    Ok(Receipt {
        outcome: Outcome::Created,
        grant: GrantView::from_row(&row, &ctx.config.public_base())?,
        submission: SubmissionView::from_row(&receipt),
    })
}

fn replay_or_conflict(
    ctx: &Ctx,
    grant: &GrantRow,
    existing: SubmissionRow,
    content: &str,
) -> Result<Receipt> {
    if existing.content_digest == content {
        Ok(Receipt {
            outcome: Outcome::Replayed,
            grant: GrantView::from_row(grant, &ctx.config.public_base())?,
            submission: SubmissionView::from_row(&existing),
        })
    } else {
        Err(Error::refused(
            Refusal::RequestKeyConflict,
            GrantView::from_row(grant, &ctx.config.public_base())?,
        ))
    }
}

async fn resolve_after_race(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    input: &SubmitInput,
    content: &str,
) -> Result<Receipt> {
    let mut tx = audit::begin(ctx, caller, Access::Write).await?;
    let grant = locate(&mut tx, caller, owner, repo, id, false).await?;
    let existing = issues::submission_by_key(&mut tx, grant.id, input.request_key.as_str())
        .await?
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("unique violation without a receipt")))?;
    let answer = replay_or_conflict(ctx, &grant, existing, content);
    tx.commit_answer(ctx, &answer).await?;
    answer
}

/// What [`create`] did.
enum Created {
    /// The issue, the receipt and the counter are written: the grant and the
    /// receipt as they now stand in the transaction.
    Done {
        grant: Box<GrantRow>,
        receipt: Box<SubmissionRow>,
    },
    /// The handoff admission blocked: only the evaluation was written.
    Blocked(PackageView),
    /// Another transaction committed a receipt under the same request key
    /// first (the unique `(grant_id, request_key)` refused this one).
    Raced,
}

/// Writes the issue, the receipt and the counter (or, when the handoff
/// admission blocks, only the evaluation). The grant row is locked, so the
/// answer is built from the values written here rather than read back.
async fn create(
    ctx: &Ctx,
    tx: &mut AuditedTx<'_>,
    caller: &Caller,
    grant: &GrantRow,
    input: &SubmitInput,
    content: &str,
    inputs: Option<EvaluationInputs>,
) -> Result<Created> {
    let at = ctx.now();
    decide_submit(&facts(grant)?, &input.triple.digest, at).map_err(|r| {
        GrantView::from_row(grant, &ctx.config.public_base())
            .map(|g| Error::refused(r, g))
            .unwrap_or_else(Error::from)
    })?;
    let text = at.to_text();
    let pending = admission::evaluate_in(ctx, tx, grant, Phase::Handoff, &text, inputs).await?;
    if pending.package.blocked() {
        let package =
            admission::store_pending(ctx, tx, grant, pending, caller.user_id, &text).await?;
        let data = serde_json::json!({ "blocked_count": package.blocked_count() });
        let unchanged = events::unchanged(grant);
        events::on_grant(
            tx,
            "submission.admission_blocked",
            caller.user_id,
            grant.repository_id,
            unchanged,
            data,
            &text,
        )
        .await?;
        return Ok(Created::Blocked(package));
    }
    let full_name = format!("{}/{}", grant.repo_owner, grant.repo_name);
    let url_prefix = format!("{}/{full_name}/issues/", ctx.config.public_base());
    let count = grant.submission_count + 1;
    let audit = tx.outcome_target(ctx);
    let written = handoff::hand_off(
        tx,
        &Handoff {
            evaluation: pending.record(ctx, grant, caller.user_id, &text),
            title: &input.title,
            body: &input.body,
            request_key: input.request_key.as_str(),
            content_digest: content,
            agent_id: caller.user_id,
            repository_id: grant.repository_id,
            repository_full_name: &full_name,
            issue_url_prefix: &url_prefix,
            submission_count: count,
            grant_state: &grant.state,
            state_revision: grant.state_revision,
            audit: audit.as_ref().map(|(end, at)| {
                (
                    *end,
                    CallOutcome {
                        native_status: Some(201),
                        error_code: None,
                        at,
                    },
                )
            }),
        },
    )
    .await;
    let written = match written {
        Err(e) if e.is_unique() => return Ok(Created::Raced),
        other => other?,
    };
    tx.outcome_written();
    let HandedOff {
        evaluation_id,
        issue_id,
        issue_index: index,
        submission_id,
    } = written;
    let evaluation_id = Some(evaluation_id);
    let package = pending.package;
    let url = format!("{url_prefix}{index}");
    let after = GrantRow {
        submission_count: count,
        updated_at: text.clone(),
        admission_id: evaluation_id,
        admission_phase: Some(package.phase.to_owned()),
        admission_status: Some(package.status.to_owned()),
        admission_snapshot_id: package.snapshot_id,
        admission_evaluated_at: Some(text.clone()),
        ..grant.clone()
    };
    let receipt = SubmissionRow {
        id: submission_id,
        grant_id: grant.id,
        request_key: input.request_key.as_str().to_owned(),
        content_digest: content.to_owned(),
        proposal_digest: input.triple.digest.as_str().to_owned(),
        agent_id: caller.user_id,
        agent_login: grant.agent_login.clone(),
        issue_id,
        issue_index: index,
        repository_id: grant.repository_id,
        repository_full_name: full_name,
        issue_url: url,
        evaluation_id,
        created_at: text,
        current_repository_id: Some(grant.repository_id),
        current_index: Some(index),
        evaluation_phase: Some(package.phase.to_owned()),
        evaluation_status: Some(package.status.to_owned()),
        evaluation_snapshot_id: package.snapshot_id,
    };
    Ok(Created::Done {
        grant: Box::new(after),
        receipt: Box::new(receipt),
    })
}

/// Reads back a receipt by request key, in every grant state.
pub async fn readback(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    key: &RequestKey,
) -> Result<Receipt> {
    let mut tx = audit::begin(ctx, caller, Access::Read).await?;
    let grant = locate(&mut tx, caller, owner, repo, id, false).await?;
    let receipt = issues::submission_by_key(&mut tx, grant.id, key.as_str())
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit_ok(ctx).await?;
    Ok(Receipt {
        outcome: Outcome::Replayed,
        grant: GrantView::from_row(&grant, &ctx.config.public_base())?,
        submission: SubmissionView::from_row(&receipt),
    })
}
