//! What each browser page shows, read in one snapshot, plus the nonces of
//! the forms the viewer may post from it.

use super::access::{permission, readable_repo};
use super::agent::{Page, facts};
use super::sessions::{SessionUser, WebSession, issue_nonces};
use super::view::GrantView;
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::grant::{GrantState, HumanEvent, human_transition};
use crate::domain::ids::GrantId;
use crate::store::grants::{self, GrantEventRow, GrantFilter};
use crate::store::repos::{self, RepoRow};
use crate::store::{grant_pages, principals};

/// The dashboard: what waits for me, what I issued, where I work.
pub struct Dashboard {
    /// Confirmed grants on repositories I administer.
    pub awaiting_me: Vec<GrantView>,
    /// Grants I prepared, newest last.
    pub issued: Vec<GrantView>,
    /// Repositories I own or collaborate on.
    pub repos: Vec<RepoRow>,
}

fn signed_in(session: &WebSession) -> Result<&SessionUser> {
    session
        .user
        .as_ref()
        .ok_or(Error::Forbidden("log in to see this page"))
}

fn views(rows: &[grants::GrantRow]) -> Result<Vec<GrantView>> {
    Ok(rows
        .iter()
        .map(GrantView::from_row)
        .collect::<anyhow::Result<_>>()?)
}

/// Reads the dashboard of the signed-in person.
pub async fn dashboard(ctx: &Ctx, session: &WebSession) -> Result<Dashboard> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let repos = repos::repos_of_user(&mut tx, user.id).await?;
    let mut admin_ids = Vec::new();
    for repo in &repos {
        if permission(&mut tx, repo, user.id).await? == Some(Permission::Admin) {
            admin_ids.push(repo.id);
        }
    }
    let awaiting = GrantFilter {
        agent_id: None,
        issuer_id: None,
        repository_id: None,
        readable_by: None,
        public_only: false,
        repository_ids: Some(&admin_ids),
        states: &["awaiting_human"],
    };
    let awaiting_me = grants::list_grants(&mut tx, &awaiting, 100, 0).await?;
    let issued_filter = GrantFilter {
        issuer_id: Some(user.id),
        repository_ids: None,
        readable_by: Some(user.id),
        states: &["awaiting_agent", "awaiting_human", "active", "revoked"],
        ..awaiting
    };
    let issued = grants::list_grants(&mut tx, &issued_filter, 100, 0).await?;
    tx.commit().await?;
    Ok(Dashboard {
        awaiting_me: views(&awaiting_me)?,
        issued: views(&issued)?,
        repos,
    })
}

/// One page of a repository's grants.
pub struct RepoGrants {
    /// The repository.
    pub repo: RepoRow,
    /// The viewer's permission.
    pub perm: Permission,
    /// The page.
    pub page: Page<GrantView>,
}

/// Reads a page of a repository's grants for a reader.
pub async fn repo_grants(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    states: &[&str],
    page: u64,
    limit: u64,
) -> Result<RepoGrants> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    let filter = GrantFilter {
        agent_id: None,
        issuer_id: None,
        repository_id: Some(repo.id),
        readable_by: None,
        public_only: false,
        repository_ids: None,
        states,
    };
    let count = grant_pages::count_grants(&mut tx, &filter).await?;
    let offset = (page - 1).saturating_mul(limit);
    let rows = grant_pages::list_page(&mut tx, &filter, &count, limit, offset).await?;
    tx.commit().await?;
    Ok(RepoGrants {
        repo,
        perm,
        page: Page {
            items: views(&rows)?,
            total: count.total,
        },
    })
}

/// The prepare form: the bots to choose from and its nonce.
pub struct NewGrantPage {
    /// The repository.
    pub repo: RepoRow,
    /// Bot logins.
    pub bots: Vec<String>,
    /// Nonce of the prepare form.
    pub nonce: String,
}

/// Reads the prepare form for a repository writer.
pub async fn new_grant_page(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
) -> Result<NewGrantPage> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    let bots = principals::list_bots(&mut tx).await?;
    tx.commit().await?;
    if perm < Permission::Write {
        return Err(Error::Forbidden(
            "preparing a grant needs write access to the repository",
        ));
    }
    let nonce = issue_nonces(ctx, session.id, &[("prepare", format!("repo:{}", repo.id))])
        .await?
        .remove(0);
    Ok(NewGrantPage {
        repo,
        bots: bots.into_iter().map(|b| b.login).collect(),
        nonce,
    })
}

/// The grant page: the grant, its timeline and the forms the viewer may use.
pub struct GrantPage {
    /// The repository.
    pub repo: RepoRow,
    /// The grant.
    pub grant: GrantView,
    /// Its timeline, oldest first.
    pub events: Vec<GrantEventRow>,
    /// Nonce of the edit form, when the viewer may edit now.
    pub edit_nonce: Option<String>,
    /// Nonce of the approve form, when the viewer may approve now.
    pub approve_nonce: Option<String>,
    /// Nonce of the withdraw form, when the viewer may withdraw now.
    pub withdraw_nonce: Option<String>,
    /// Why the viewer cannot approve, when that is the only thing missing.
    pub approve_blocked_reason: Option<&'static str>,
    /// The admission preview against the current health.
    pub admission: super::admission::PackageView,
    /// The viewer administers the repository.
    pub viewer_is_admin: bool,
    /// Nonce of the inline project filesystem context form (admins, when a
    /// decision needs it).
    pub fs_nonce: Option<String>,
    /// The grant's receipts, oldest first.
    pub receipts: Vec<super::view::SubmissionView>,
}

/// Reads a grant page for a repository reader.
pub async fn grant_page(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    id: GrantId,
) -> Result<GrantPage> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    let row = grants::grant_by_id(&mut tx, id.0)
        .await?
        .filter(|g| g.repository_id == repo.id)
        .ok_or(Error::NotFound)?;
    let events = grants::events_of(&mut tx, row.id).await?;
    let admission = super::admission::preview_in(ctx, &mut tx, &row).await?;
    let receipts = crate::store::issues::submissions_of_grant(&mut tx, row.id)
        .await?
        .iter()
        .map(super::view::SubmissionView::from_row)
        .collect();
    tx.commit().await?;
    let needs_fs = admission.decisions.iter().any(|d| {
        d.recovery_action
            == crate::domain::admission::decide::Recovery::ApproveProjectFilesystemContext
    });
    let state = facts(&row)?.state;
    let steward = row.issuer_id == user.id || perm == Permission::Admin;
    let allowed = |event| human_transition(event, state).is_ok();
    let can_edit = steward && allowed(HumanEvent::Edit);
    let can_withdraw = steward && allowed(HumanEvent::Withdraw);
    let distinct_block = repo.require_distinct_approver && row.issuer_id == user.id;
    let can_approve = perm == Permission::Admin && allowed(HumanEvent::Approve) && !distinct_block;
    let approve_blocked_reason = (state == GrantState::AwaitingHuman
        && perm == Permission::Admin
        && distinct_block)
        .then_some(
            "This repository requires a second person: someone other than the issuer must approve.",
        );
    let target = format!("grant:{}", row.id);
    let mut forms = Vec::new();
    for (wanted, action) in [
        (can_edit, "edit"),
        (can_approve, "approve"),
        (can_withdraw, "withdraw"),
    ] {
        if wanted {
            forms.push((action, target.clone()));
        }
    }
    let can_fs = needs_fs && perm == Permission::Admin;
    if can_fs {
        forms.push(("fs_context", format!("repo:{}", repo.id)));
    }
    let mut nonces = issue_nonces(ctx, session.id, &forms).await?.into_iter();
    let mut next = |wanted: bool| if wanted { nonces.next() } else { None };
    let edit_nonce = next(can_edit);
    let approve_nonce = next(can_approve);
    let withdraw_nonce = next(can_withdraw);
    let fs_nonce = next(can_fs);
    Ok(GrantPage {
        repo,
        grant: GrantView::from_row(&row)?,
        events,
        edit_nonce,
        approve_nonce,
        withdraw_nonce,
        approve_blocked_reason,
        admission,
        viewer_is_admin: perm == Permission::Admin,
        fs_nonce,
        receipts,
    })
}

/// An issue page: the issue as readers see it, with its attribution.
pub async fn issue_page(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    index: i64,
) -> Result<super::view::IssueView> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let (repo, _) = readable_repo(&mut tx, owner, repo, user.id).await?;
    let issue = crate::store::issues::issue_by_index(&mut tx, repo.id, index)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(super::view::IssueView::from_row(&issue, &repo))
}
