//! The agent (bot) use cases: list, get and confirm grants.

use serde_json::Value;

use super::access::{readable, readable_repo};
use super::audit::{self, Access};
use super::auth::Caller;
use super::events;
use super::view::GrantView;
use super::{Ctx, Error, Result};
use crate::domain::grant::{ConfirmOutcome, GrantFacts, GrantState, decide_confirm};
use crate::domain::ids::{Digest, GrantId};
use crate::domain::proposal::{SCHEMA, VERSION};
use crate::domain::time::Timestamp;
use crate::store::admission::EvaluationInputs;
use crate::store::batch::run_local;
use crate::store::events::GrantAt;
use crate::store::grants::{self, GrantFilter, GrantRow};
use crate::store::schema::Grants;
use crate::store::{Tx, grant_pages, repos};

/// The proposal triple a bot repeats to confirm or submit.
#[derive(Debug, Clone)]
pub struct Triple {
    /// The digest the bot read.
    pub digest: Digest,
}

impl Triple {
    /// Validates the three raw JSON values: wrong JSON types are
    /// `invalid_input`, another schema or version is `unsupported_proposal`.
    pub fn parse(schema: &Value, version: &Value, digest: &Value) -> Result<Triple> {
        let schema = schema
            .as_str()
            .ok_or_else(|| Error::Invalid("proposal_schema must be a string".into()))?;
        let version_ok = version.is_i64() || version.is_u64();
        if !version_ok {
            return Err(Error::Invalid(
                "proposal_version must be the JSON integer 1".into(),
            ));
        }
        let digest = digest
            .as_str()
            .ok_or_else(|| Error::Invalid("proposal_digest must be a string".into()))?;
        if schema != SCHEMA {
            return Err(Error::UnsupportedProposal(
                "proposal_schema must be agent_work_grant.v1",
            ));
        }
        if version.as_i64() != Some(VERSION) {
            return Err(Error::UnsupportedProposal("proposal_version must be 1"));
        }
        let digest = Digest::parse(digest).map_err(|e| Error::Invalid(e.to_string()))?;
        Ok(Triple { digest })
    }
}

/// Validated list parameters.
#[derive(Debug, Clone)]
pub struct ListParams {
    /// 1-based page.
    pub page: u64,
    /// Effective page size (already defaulted and clamped).
    pub limit: u64,
    /// States to include.
    pub states: Vec<&'static str>,
}

/// One page of a list and the total it was cut from.
#[derive(Debug)]
pub struct Page<T> {
    /// The rows of this page.
    pub items: Vec<T>,
    /// Rows matching in total.
    pub total: i64,
}

/// Lists the caller's grants on repositories it can read now and its token
/// reaches, by id ascending.
pub async fn list(ctx: &Ctx, caller: &Caller, params: &ListParams) -> Result<Page<GrantView>> {
    let mut tx = audit::begin(ctx, caller, Access::Read).await?;
    let limited_ids = match &caller.reducer.repositories {
        Some(names) => Some(resolve_repo_ids(&mut tx, names).await?),
        None => None,
    };
    let filter = GrantFilter {
        agent_id: Some(caller.user_id),
        issuer_id: None,
        repository_id: None,
        readable_by: Some(caller.user_id),
        public_only: caller.reducer.public_only,
        repository_ids: limited_ids.as_deref(),
        states: &params.states,
    };
    let count = grant_pages::count_grants(&mut tx, &filter).await?;
    let offset = (params.page - 1).saturating_mul(params.limit);
    let rows = grant_pages::list_page(&mut tx, &filter, &count, params.limit, offset).await?;
    tx.commit_ok(ctx).await?;
    let items = rows
        .iter()
        .map(|g| GrantView::from_row(g, &ctx.config.public_base()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Page {
        items,
        total: count.total,
    })
}

/// The ids of the repositories `owner/name` that exist.
pub(super) async fn resolve_repo_ids(tx: &mut Tx, names: &[String]) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(names.len());
    for full in names {
        if let Some((owner, name)) = full.split_once('/')
            && let Some(repo) = repos::repo_by_name(tx, owner, name).await?
        {
            ids.push(repo.id);
        }
    }
    Ok(ids)
}

/// Finds the caller's grant on a repository it can read and its token
/// reaches: 404 for a missing or unreadable repository and for another
/// bot's grant, 403 when the reducer does not reach the repository.
pub async fn locate(
    tx: &mut Tx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    lock: bool,
) -> Result<GrantRow> {
    let route = Route {
        owner,
        repo,
        id,
        lock,
        request_key: None,
    };
    find(tx, caller, route).await.map(|found| found.grant)
}

/// What [`locate_for_key`] finds.
pub struct ForKey {
    /// The locked grant.
    pub grant: GrantRow,
    /// The grant's receipt under the request key, if there is one.
    pub used: Option<i64>,
    /// The handoff admission's inputs, read with the grant (for a submit).
    pub inputs: Option<EvaluationInputs>,
}

/// [`locate`] with the lock, for a submit: also the id of the grant's
/// receipt under `request_key`, if any, read in the same statement.
pub async fn locate_for_key(
    tx: &mut Tx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    request_key: &str,
) -> Result<ForKey> {
    let route = Route {
        owner,
        repo,
        id,
        lock: true,
        request_key: Some(request_key),
    };
    find(tx, caller, route).await
}

struct Route<'a> {
    owner: &'a str,
    repo: &'a str,
    id: GrantId,
    lock: bool,
    request_key: Option<&'a str>,
}

/// One statement finds the grant through its route with the repository
/// facts the read rule needs; only when it finds nothing is the repository
/// looked up alone, to tell a 404 or 403 for the repository from a 404 for
/// the grant (the same answers, in the same order, as looking up the
/// repository first).
async fn find(tx: &mut Tx, caller: &Caller, route: Route<'_>) -> Result<ForKey> {
    let query = grants::AgentGrantQuery {
        id: route.id.0,
        owner: route.owner,
        name: route.repo,
        agent_id: caller.user_id,
        token_id: caller.token_id,
        request_key: route.request_key,
        lock: route.lock,
        admission_inputs: route.request_key.is_some(),
    };
    let Some(grants::Found { found, inputs }) = grants::agent_grant_in_repo(tx, query).await?
    else {
        reachable_repo(tx, caller, route.owner, route.repo).await?;
        return Err(Error::NotFound);
    };
    let repo = found.repo();
    readable(
        &repo,
        found.collaborator_permission.as_deref(),
        caller.user_id,
    )?;
    reaches(caller, &repo)?;
    Ok(ForKey {
        grant: found.grant,
        used: found.key_submission_id,
        inputs,
    })
}

async fn reachable_repo(
    tx: &mut Tx,
    caller: &Caller,
    owner: &str,
    repo: &str,
) -> Result<repos::RepoRow> {
    let (repo, _) = readable_repo(tx, owner, repo, caller.user_id).await?;
    reaches(caller, &repo)?;
    Ok(repo)
}

fn reaches(caller: &Caller, repo: &repos::RepoRow) -> Result<()> {
    if caller.reducer.reaches(&repo.full_name(), repo.private) {
        Ok(())
    } else {
        Err(Error::InsufficientScope(
            "the token does not reach this repository",
        ))
    }
}

/// Reads one of the caller's grants.
pub async fn get(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
) -> Result<GrantView> {
    let who = caller.clone();
    let route = (owner.to_owned(), repo.to_owned());
    let on_writer = audit::read_on_writer(ctx, caller, 200, move |tx| {
        run_local(locate(tx, &who, &route.0, &route.1, id, false)).unwrap_or_else(|| {
            Err(Error::Internal(anyhow::anyhow!(
                "a grant read on the writer's thread waited"
            )))
        })
    });
    if let Some(row) = on_writer.await {
        return Ok(GrantView::from_row(&row?, &ctx.config.public_base())?);
    }
    let mut tx = audit::begin(ctx, caller, Access::ReadOne).await?;
    let row = locate(&mut tx, caller, owner, repo, id, false).await?;
    tx.commit_ok(ctx).await?;
    Ok(GrantView::from_row(&row, &ctx.config.public_base())?)
}

/// Waits, at most `wait`, until the caller's grant's state revision
/// differs from `held`, holding no database connection between looks (it
/// looks again when an event commits, and every few seconds). Returns at
/// once when the grant cannot be read: the read that follows says why.
pub async fn wait_for_change(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    held: i64,
    wait: std::time::Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut commits = ctx.store.events().subscribe();
    let mut waiting = None;
    loop {
        let row = {
            let mut tx = ctx.store.single().await?;
            locate(&mut tx, caller, owner, repo, id, false).await
        };
        match row {
            Ok(row) if row.state_revision == held => {}
            _ => return Ok(()),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || ctx.waiters.is_closing() {
            return Ok(());
        }
        if waiting.is_none() {
            waiting = Some(ctx.waiters.enter(caller.token_id)?);
        }
        let nap = (deadline - now).min(events::SAFETY_POLL);
        ctx.waiters.nap(&mut commits, nap).await;
    }
}

/// The facts the domain judges a grant on.
pub fn facts(row: &GrantRow) -> Result<GrantFacts<'_>> {
    let state = GrantState::parse(&row.state)
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("stored state {:?}", row.state)))?;
    Ok(GrantFacts {
        state,
        digest: &row.proposal_digest,
        expires_at: row.expires_at.as_deref().and_then(Timestamp::parse_text),
        submission_count: row.submission_count,
        max_submissions: row.max_submissions,
    })
}

/// Confirms the current proposal: `awaiting_agent` → `awaiting_human`; a
/// retry with the same digest after that answers the grant unchanged.
pub async fn confirm(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    id: GrantId,
    triple: &Triple,
) -> Result<GrantView> {
    let at = ctx.now();
    let mut tx = audit::begin(ctx, caller, Access::Write).await?;
    let row = locate(&mut tx, caller, owner, repo, id, true).await?;
    match decide_confirm(&facts(&row)?, &triple.digest, at) {
        Err(refusal) => Err(Error::refused(
            refusal,
            GrantView::from_row(&row, &ctx.config.public_base())?,
        )),
        Ok(ConfirmOutcome::AlreadyConfirmed) => {
            tx.commit_ok(ctx).await?;
            Ok(GrantView::from_row(&row, &ctx.config.public_base())?)
        }
        Ok(ConfirmOutcome::Transition) => {
            let text = at.to_text();
            let revision = row.state_revision + 1;
            let changed = grants::update_grant(
                &mut tx,
                row.id,
                Some(row.state_revision),
                vec![
                    (Grants::State, GrantState::AwaitingHuman.as_str().into()),
                    (Grants::StateRevision, revision.into()),
                    (Grants::ConfirmedAt, text.clone().into()),
                    (Grants::UpdatedAt, text.clone().into()),
                ],
            )
            .await?;
            if changed != 1 {
                return Err(Error::Internal(anyhow::anyhow!(
                    "confirm lost its row lock"
                )));
            }
            let after = GrantAt {
                id: row.id,
                from_state: Some(&row.state),
                state: GrantState::AwaitingHuman.as_str(),
                state_revision: revision,
                proposal_digest: &row.proposal_digest,
            };
            let data = serde_json::json!({});
            events::on_grant(
                &mut tx,
                "grant.confirmed",
                caller.user_id,
                row.repository_id,
                after,
                data,
                &text,
            )
            .await?;
            let updated = grants::grant_by_id(&mut tx, row.id)
                .await?
                .ok_or(Error::NotFound)?;
            tx.commit_ok(ctx).await?;
            Ok(GrantView::from_row(&updated, &ctx.config.public_base())?)
        }
    }
}
