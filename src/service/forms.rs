//! The human use cases behind the browser forms: prepare, edit, approve and
//! withdraw. Each consumes its nonce in the same transaction as the change,
//! and every change to an existing grant is a compare-and-swap on
//! `state_revision`.

use sea_query::Value;
use serde_json::json;

use super::access::readable_repo;
use super::admission::{self, Phase};
use super::agent::facts;
use super::events;
use super::sessions::{SessionUser, WebSession, consume_nonce};
use super::view::GrantView;
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::grant::{GrantState, HumanEvent, Refusal, human_transition};
use crate::domain::ids::{GrantId, parse_positive_i64};
use crate::domain::proposal::{
    Limits, MAX_SUBMISSIONS_LIMIT, McpRequirement, Proposal, ProposalAgent, ProposalRepository,
    SCHEMA, VERSION, parse_requirements, validate_requirements,
};
use crate::domain::text::{check_text, printable};
use crate::domain::time::Timestamp;
use crate::store::events::GrantAt;
use crate::store::grants::{self, GrantRow, NewGrant};
use crate::store::repos::RepoRow;
use crate::store::schema::Grants;
use crate::store::{Tx, principals};

/// Longest task or summary accepted, in bytes.
pub const TEXT_MAX_BYTES: usize = 64 * 1024;

/// The prepare/edit fields as posted.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct GrantForm {
    /// Bot login.
    #[serde(default)]
    pub agent: String,
    /// What to do.
    #[serde(default)]
    pub task: String,
    /// Short description.
    #[serde(default)]
    pub summary: String,
    /// Positive integer, default 10.
    #[serde(default)]
    pub max_submissions: String,
    /// RFC 3339, optional.
    #[serde(default)]
    pub expires_at: String,
    /// JSON array as text, optional.
    #[serde(default)]
    pub mcp_requirements: String,
    /// The requirement editor's rows (an alternative to the JSON text).
    #[serde(skip)]
    pub rows: Vec<RequirementRow>,
}

/// One row of the requirement editor, as posted.
#[derive(Debug, Clone, Default)]
pub struct RequirementRow {
    /// MCP id.
    pub mcp_id: String,
    /// Specialist role.
    pub agent: String,
    /// `required` or `optional`.
    pub requirement: String,
    /// Capabilities, separated by commas, spaces or new lines.
    pub capabilities: String,
    /// `continue_without_mcp`, `ask_user` or `block`.
    pub fallback: String,
    /// Prohibited capabilities, separated like `capabilities`.
    pub prohibited: String,
    /// Planning text, optional.
    pub prompt_context: String,
}

impl RequirementRow {
    fn is_blank(&self) -> bool {
        [
            &self.mcp_id,
            &self.agent,
            &self.capabilities,
            &self.prohibited,
            &self.prompt_context,
        ]
        .iter()
        .all(|f| f.trim().is_empty())
    }

    fn parse(&self, n: usize) -> Result<McpRequirement> {
        let bad = |m: String| Error::Unprocessable(format!("requirement row {}: {m}", n + 1));
        let list = |raw: &str| -> Vec<String> {
            raw.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let quoted = |v: &str| serde_json::to_string(v).unwrap_or_default();
        let requirement = serde_json::from_str(&quoted(self.requirement.trim()))
            .map_err(|_| bad("requirement must be required or optional".into()))?;
        let fallback = serde_json::from_str(&quoted(self.fallback.trim()))
            .map_err(|_| bad("fallback must be continue_without_mcp, ask_user or block".into()))?;
        Ok(McpRequirement {
            mcp_id: self.mcp_id.trim().to_owned(),
            agent: self.agent.trim().to_owned(),
            requirement,
            capabilities: list(&self.capabilities),
            fallback,
            prohibited_capabilities: list(&self.prohibited),
            prompt_context: (!self.prompt_context.trim().is_empty())
                .then(|| self.prompt_context.clone()),
        })
    }
}

/// The prepare/edit fields once validated.
#[derive(Debug, Clone)]
pub struct GrantInput {
    agent: String,
    task: String,
    summary: String,
    max_submissions: i64,
    expires_at: Option<Timestamp>,
    mcp_requirements: Vec<McpRequirement>,
}

impl GrantForm {
    /// Validates every field; problems are 422 with a sentence naming the field.
    pub fn parse(&self, at: Timestamp) -> Result<GrantInput> {
        let bad = |m: &str| Error::Unprocessable(m.to_owned());
        if self.agent.trim().is_empty() {
            return Err(bad("agent: choose the bot that will do the work"));
        }
        if self.task.trim().is_empty() {
            return Err(bad("task: describe the work"));
        }
        check_text(&self.task, TEXT_MAX_BYTES).map_err(|m| bad(&format!("task: {m}")))?;
        check_text(&self.summary, TEXT_MAX_BYTES).map_err(|m| bad(&format!("summary: {m}")))?;
        let max_submissions = match self.max_submissions.trim() {
            "" => 10,
            raw => parse_positive_i64(raw)
                .filter(|v| *v <= MAX_SUBMISSIONS_LIMIT)
                .ok_or_else(|| bad("max_submissions: a whole number from 1 to 1000000"))?,
        };
        let expires_at = match self.expires_at.trim() {
            "" => None,
            raw => {
                let t = Timestamp::parse_rfc3339(raw).ok_or_else(|| {
                    bad("expires_at: an RFC 3339 time such as 2026-12-31T00:00:00Z")
                })?;
                if t <= at {
                    return Err(bad("expires_at: must be in the future"));
                }
                Some(t)
            }
        };
        let rows: Vec<&RequirementRow> = self.rows.iter().filter(|r| !r.is_blank()).collect();
        let mcp_requirements = match self.mcp_requirements.trim() {
            "" => {
                let reqs = rows
                    .iter()
                    .enumerate()
                    .map(|(n, r)| r.parse(n))
                    .collect::<Result<Vec<_>>>()?;
                validate_requirements(&reqs).map_err(|m| bad(&format!("mcp_requirements: {m}")))?;
                reqs
            }
            _ if !rows.is_empty() => {
                return Err(bad(
                    "mcp_requirements: use either the requirement rows or the JSON text, not both",
                ));
            }
            raw => {
                let reqs = parse_requirements(raw).map_err(|e| {
                    // serde's sentence quotes the offending name or value:
                    // keep it readable, but without control characters.
                    bad(&format!(
                        "mcp_requirements: not a valid requirement array ({})",
                        printable(&e.to_string(), 200)
                    ))
                })?;
                validate_requirements(&reqs).map_err(|m| bad(&format!("mcp_requirements: {m}")))?;
                reqs
            }
        };
        Ok(GrantInput {
            agent: self.agent.trim().to_owned(),
            task: self.task.clone(),
            summary: self.summary.clone(),
            max_submissions,
            expires_at,
            mcp_requirements,
        })
    }
}

fn signed_in(session: &WebSession) -> Result<&SessionUser> {
    session
        .user
        .as_ref()
        .ok_or(Error::Forbidden("log in to do this"))
}

/// Builds the proposal for a grant id from validated input.
fn build_proposal(
    grant_id: i64,
    repo: &RepoRow,
    agent: (i64, &str),
    input: &GrantInput,
) -> Proposal {
    Proposal {
        schema: SCHEMA.to_owned(),
        version: VERSION,
        grant_id,
        repository: ProposalRepository {
            id: repo.id,
            full_name: repo.full_name(),
        },
        agent: ProposalAgent {
            id: agent.0,
            login: agent.1.to_owned(),
        },
        task: input.task.clone(),
        summary: input.summary.clone(),
        limits: Limits {
            max_submissions: input.max_submissions,
            expires_at: input.expires_at.map(|t| t.to_proposal_text()),
        },
        mcp_requirements: input.mcp_requirements.clone(),
    }
}

async fn bot_named(tx: &mut Tx, login: &str) -> Result<(i64, String)> {
    principals::user_by_login(tx, login)
        .await?
        .filter(|u| u.kind == "bot")
        .map(|u| (u.id, u.login))
        .ok_or_else(|| Error::Unprocessable("agent: not a bot account".into()))
}

fn proposal_values(p: &Proposal, input: &GrantInput) -> Vec<(Grants, Value)> {
    vec![
        (Grants::Proposal, p.canonical_json().into()),
        (Grants::ProposalDigest, p.digest().as_str().into()),
        (Grants::AgentId, p.agent.id.into()),
        (Grants::MaxSubmissions, input.max_submissions.into()),
        (
            Grants::ExpiresAt,
            input.expires_at.map(|t| t.to_text()).into(),
        ),
    ]
}

/// Prepares a grant (`awaiting_agent`, revision 1); returns its id.
pub async fn prepare(
    ctx: &Ctx,
    session: &WebSession,
    nonce: &str,
    owner: &str,
    repo: &str,
    form: &GrantForm,
) -> Result<i64> {
    let user = signed_in(session)?;
    let at = ctx.now();
    let input = form.parse(at)?;
    let mut tx = ctx.store.write().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    consume_nonce(
        ctx,
        &mut tx,
        session.id,
        nonce,
        "prepare",
        &format!("repo:{}", repo.id),
    )
    .await?;
    let id = prepare_in(&mut tx, user.id, &repo, perm, &input, at).await?;
    tx.commit().await?;
    Ok(id)
}

/// The prepare step itself, inside the caller's transaction (the browser
/// form, or the demo seed of the setup privilege).
pub async fn prepare_in(
    tx: &mut Tx,
    issuer_id: i64,
    repo: &RepoRow,
    perm: Permission,
    input: &GrantInput,
    at: Timestamp,
) -> Result<i64> {
    if perm < Permission::Write {
        return Err(Error::Forbidden(
            "preparing a grant needs write access to the repository",
        ));
    }
    let agent = bot_named(tx, &input.agent).await?;
    let text = at.to_text();
    let id = grants::insert_grant(
        tx,
        NewGrant {
            repository_id: repo.id,
            agent_id: agent.0,
            issuer_id,
            max_submissions: input.max_submissions,
            expires_at: None,
            now: &text,
        },
    )
    .await?;
    let proposal = build_proposal(id, repo, (agent.0, &agent.1), input);
    grants::update_grant(tx, id, None, proposal_values(&proposal, input)).await?;
    record(
        tx,
        (repo.id, id),
        "grant.prepared",
        issuer_id,
        (None, GrantState::AwaitingAgent),
        1,
        proposal.digest().as_str(),
        json!({}),
        &text,
    )
    .await?;
    Ok(id)
}

/// Writes a grant's event: `kind` took it from `from` to `to` at revision
/// `revision`, with proposal `digest`.
#[allow(clippy::too_many_arguments)]
async fn record(
    tx: &mut Tx,
    (repository_id, grant_id): (i64, i64),
    kind: &str,
    actor_id: i64,
    (from, to): (Option<&str>, GrantState),
    revision: i64,
    digest: &str,
    data: serde_json::Value,
    at: &str,
) -> Result<()> {
    let after = GrantAt {
        id: grant_id,
        from_state: from,
        state: to.as_str(),
        state_revision: revision,
        proposal_digest: digest,
    };
    events::on_grant(tx, kind, actor_id, repository_id, after, data, at).await
}

/// A grant located for a human form: the repository, the person's
/// permission on it, and the grant locked for the change.
struct Located {
    repo: RepoRow,
    perm: Permission,
    grant: GrantRow,
}

/// What every grant form posts: its nonce, the grant it names and the
/// revision it displayed.
#[derive(Debug, Clone, Copy)]
pub struct FormTarget<'a> {
    /// The form's single-use nonce.
    pub nonce: &'a str,
    /// Repository owner from the path.
    pub owner: &'a str,
    /// Repository name from the path.
    pub repo: &'a str,
    /// The grant.
    pub id: GrantId,
    /// The `state_revision` the form displayed.
    pub revision: i64,
}

async fn locate_for_form(
    ctx: &Ctx,
    tx: &mut Tx,
    session: &WebSession,
    target: FormTarget<'_>,
    action: &str,
) -> Result<Located> {
    let user = signed_in(session)?;
    let (repo, perm) = readable_repo(tx, target.owner, target.repo, user.id).await?;
    let grant = grants::grant_by_id_locked(tx, target.id.0)
        .await?
        .filter(|g| g.repository_id == repo.id)
        .ok_or(Error::NotFound)?;
    consume_nonce(
        ctx,
        tx,
        session.id,
        target.nonce,
        action,
        &format!("grant:{}", grant.id),
    )
    .await?;
    Ok(Located { repo, perm, grant })
}

/// Checks the posted revision and the transition; returns the new state.
fn judge(
    ctx: &Ctx,
    grant: &GrantRow,
    posted_revision: i64,
    event: HumanEvent,
) -> Result<GrantState> {
    let view = || GrantView::from_row(grant, &ctx.config.public_base());
    if posted_revision != grant.state_revision {
        return Err(Error::refused(Refusal::StateConflict, view()?));
    }
    let state = facts(grant)?.state;
    human_transition(event, state).map_err(|r| match view() {
        Ok(v) => Error::refused(r, v),
        Err(e) => e.into(),
    })
}

/// Parses the posted `state_revision`.
pub fn parse_revision(raw: &str) -> Result<i64> {
    parse_positive_i64(raw.trim()).ok_or_else(|| {
        Error::Unprocessable("state_revision: missing or not a positive integer".into())
    })
}

async fn cas(
    ctx: &Ctx,
    tx: &mut Tx,
    grant: &GrantRow,
    mut values: Vec<(Grants, Value)>,
    to: GrantState,
    at: &str,
) -> Result<i64> {
    let revision = grant.state_revision + 1;
    values.push((Grants::State, to.as_str().into()));
    values.push((Grants::StateRevision, revision.into()));
    values.push((Grants::UpdatedAt, at.into()));
    if grants::update_grant(tx, grant.id, Some(grant.state_revision), values).await? != 1 {
        let current = grants::grant_by_id(tx, grant.id)
            .await?
            .ok_or(Error::NotFound)?;
        return Err(Error::refused(
            Refusal::StateConflict,
            GrantView::from_row(&current, &ctx.config.public_base())?,
        ));
    }
    Ok(revision)
}

/// Edits a grant's proposal: back to `awaiting_agent`, confirmation cleared.
pub async fn edit(
    ctx: &Ctx,
    session: &WebSession,
    target: FormTarget<'_>,
    form: &GrantForm,
) -> Result<()> {
    let user = signed_in(session)?;
    let at = ctx.now();
    let input = form.parse(at)?;
    let mut tx = ctx.store.write().await?;
    let l = locate_for_form(ctx, &mut tx, session, target, "edit").await?;
    if l.grant.issuer_id != user.id && l.perm < Permission::Admin {
        return Err(Error::Forbidden(
            "only the issuer or a repository admin can edit this grant",
        ));
    }
    let to = judge(ctx, &l.grant, target.revision, HumanEvent::Edit)?;
    let agent = bot_named(&mut tx, &input.agent).await?;
    let proposal = build_proposal(l.grant.id, &l.repo, (agent.0, &agent.1), &input);
    let mut values = proposal_values(&proposal, &input);
    values.push((Grants::ConfirmedAt, Option::<String>::None.into()));
    let text = at.to_text();
    let rev = cas(ctx, &mut tx, &l.grant, values, to, &text).await?;
    record(
        &mut tx,
        (l.repo.id, l.grant.id),
        "grant.edited",
        user.id,
        (Some(&l.grant.state), to),
        rev,
        proposal.digest().as_str(),
        json!({}),
        &text,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Approves a confirmed grant: `awaiting_human` → `active`; repo admins only.
pub async fn approve(
    ctx: &Ctx,
    session: &WebSession,
    target: FormTarget<'_>,
    acknowledged: bool,
) -> Result<()> {
    let user = signed_in(session)?;
    let at = ctx.now();
    let mut tx = ctx.store.write().await?;
    let l = locate_for_form(ctx, &mut tx, session, target, "approve").await?;
    if l.perm < Permission::Admin {
        return Err(Error::Forbidden(
            "only a repository admin can approve a grant",
        ));
    }
    if l.repo.require_distinct_approver && l.grant.issuer_id == user.id {
        return Err(Error::Forbidden(
            "this repository requires a second person: the issuer cannot approve",
        ));
    }
    let to = judge(ctx, &l.grant, target.revision, HumanEvent::Approve)?;
    // Admission at approval: the same evaluation as preview and handoff,
    // persisted with its snapshot in this transaction.
    let package = admission::persist_in(
        ctx,
        &mut tx,
        &l.grant,
        Phase::Approval,
        user.id,
        &ctx.now().to_text(),
    )
    .await?;
    if package.blocked() {
        // The refusal is recorded (the evaluation and its snapshot, and its
        // event); the grant stays as it was.
        let data = json!({
            "admission_status": package.status,
            "blocked_count": package.blocked_count(),
        });
        let at = at.to_text();
        let unchanged = events::unchanged(&l.grant);
        events::on_grant(
            &mut tx,
            "grant.approval_refused",
            user.id,
            l.repo.id,
            unchanged,
            data,
            &at,
        )
        .await?;
        let grant = GrantView::from_row(&l.grant, &ctx.config.public_base())?;
        tx.commit().await?;
        return Err(Error::admission_blocked(grant, package));
    }
    if package.warns() && !acknowledged {
        return Err(Error::Unprocessable(
            "acknowledge_warnings: the admission warns; tick the acknowledgment to approve".into(),
        ));
    }
    let text = at.to_text();
    let values = vec![
        (Grants::ApproverId, user.id.into()),
        (Grants::ApprovedAt, text.clone().into()),
    ];
    let rev = cas(ctx, &mut tx, &l.grant, values, to, &text).await?;
    record(
        &mut tx,
        (l.repo.id, l.grant.id),
        "grant.approved",
        user.id,
        (Some(&l.grant.state), to),
        rev,
        &l.grant.proposal_digest,
        json!({ "admission_status": package.status }),
        &text,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Withdraws a grant for good; issuer or repo admin.
pub async fn withdraw(
    ctx: &Ctx,
    session: &WebSession,
    target: FormTarget<'_>,
    reason: &str,
) -> Result<()> {
    let user = signed_in(session)?;
    check_text(reason, 4096).map_err(|m| Error::Unprocessable(format!("reason: {m}")))?;
    let reason = (!reason.trim().is_empty()).then(|| reason.to_owned());
    let at = ctx.now();
    let mut tx = ctx.store.write().await?;
    let l = locate_for_form(ctx, &mut tx, session, target, "withdraw").await?;
    if l.grant.issuer_id != user.id && l.perm < Permission::Admin {
        return Err(Error::Forbidden(
            "only the issuer or a repository admin can withdraw this grant",
        ));
    }
    let to = judge(ctx, &l.grant, target.revision, HumanEvent::Withdraw)?;
    let text = at.to_text();
    let values = vec![
        (Grants::RevokedAt, text.clone().into()),
        (Grants::RevokedBy, user.id.into()),
        (Grants::RevokeReason, reason.clone().into()),
    ];
    let rev = cas(ctx, &mut tx, &l.grant, values, to, &text).await?;
    record(
        &mut tx,
        (l.repo.id, l.grant.id),
        "grant.withdrawn",
        user.id,
        (Some(&l.grant.state), to),
        rev,
        &l.grant.proposal_digest,
        json!({ "reason": reason }),
        &text,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A requirement list that does not parse is refused with a message
    /// free of control characters, though serde quotes the offending name
    /// (found by the `proposal` fuzz target: a `\n` in a member name).
    #[test]
    fn requirement_json_errors_hold_no_control_characters() {
        let form = GrantForm {
            agent: "builder-bot".into(),
            task: "t".into(),
            mcp_requirements: r#"[{"mcp_id":"github","ag\nt":"x"}]"#.into(),
            ..GrantForm::default()
        };
        let at = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let Err(Error::Unprocessable(message)) = form.parse(at) else {
            panic!("an unknown member was accepted");
        };
        assert!(message.starts_with("mcp_requirements: not a valid requirement array"));
        assert!(message.contains("unknown field `agt`"), "{message}");
        assert!(!message.chars().any(char::is_control), "{message:?}");
    }
}
