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

/// A grant as the dashboard lists it.
pub struct DashboardGrant {
    /// The grant.
    pub grant: GrantView,
    /// What blocks its approval and what to do, in the words of the first
    /// blocking admission decision (previewed against the current health).
    pub blocked: Option<String>,
    /// Its latest receipts, newest first (active grants).
    pub receipts: Vec<super::view::SubmissionView>,
}

/// One dashboard section: how many grants, the most recent few.
pub struct DashboardSection {
    /// Grants in the section in all.
    pub total: i64,
    /// The most recent, newest first.
    pub grants: Vec<DashboardGrant>,
}

/// The dashboard, by what needs the person.
pub struct Dashboard {
    /// Confirmed grants on repositories I administer.
    pub awaiting_me: DashboardSection,
    /// Grants waiting for their bot's confirmation, on repositories I may
    /// write to.
    pub awaiting_agent: DashboardSection,
    /// Approved grants there, with their latest receipts.
    pub active: DashboardSection,
    /// Withdrawn grants there, most recent first.
    pub finished: DashboardSection,
    /// Repositories I own or collaborate on, with my permission.
    pub repos: Vec<(RepoRow, Permission)>,
}

/// Grants a dashboard section shows at most.
const SECTION_SIZE: u64 = 10;

/// Receipts shown per active grant.
const RECEIPTS_SHOWN: usize = 2;

fn signed_in(session: &WebSession) -> Result<&SessionUser> {
    session
        .user
        .as_ref()
        .ok_or(Error::Forbidden("log in to see this page"))
}

fn views(ctx: &Ctx, rows: &[grants::GrantRow]) -> Result<Vec<GrantView>> {
    let base = ctx.config.public_base();
    Ok(rows
        .iter()
        .map(|g| GrantView::from_row(g, &base))
        .collect::<anyhow::Result<_>>()?)
}

/// The repositories of a person with the permission they have on each.
async fn my_repos(tx: &mut crate::store::Tx, user_id: i64) -> Result<Vec<(RepoRow, Permission)>> {
    let mut mine = Vec::new();
    for repo in repos::repos_of_user(tx, user_id).await? {
        if let Some(perm) = permission(tx, &repo, user_id).await? {
            mine.push((repo, perm));
        }
    }
    Ok(mine)
}

/// Reads the dashboard of the signed-in person, in one snapshot.
pub async fn dashboard(ctx: &Ctx, session: &WebSession) -> Result<Dashboard> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let repos = my_repos(&mut tx, user.id).await?;
    let ids = |least: Permission| -> Vec<i64> {
        repos
            .iter()
            .filter(|(_, p)| *p >= least)
            .map(|(r, _)| r.id)
            .collect()
    };
    let (admin_ids, writer_ids) = (ids(Permission::Admin), ids(Permission::Write));
    let mut sections = Vec::new();
    for (repo_ids, state) in [
        (&admin_ids, "awaiting_human"),
        (&writer_ids, "awaiting_agent"),
        (&writer_ids, "active"),
        (&writer_ids, "revoked"),
    ] {
        let states = [state];
        let filter = GrantFilter {
            agent_id: None,
            issuer_id: None,
            repository_id: None,
            readable_by: None,
            public_only: false,
            repository_ids: Some(repo_ids),
            states: &states,
        };
        let total = grant_pages::count_grants(&mut tx, &filter).await?.total;
        let rows = grants::list_grants(&mut tx, &filter, SECTION_SIZE, 0).await?;
        let mut shown = Vec::with_capacity(rows.len());
        for row in rows {
            let blocked = if state == "awaiting_human" {
                super::admission::preview_in(ctx, &mut tx, &row)
                    .await?
                    .decisions
                    .into_iter()
                    .find(|d| d.status == crate::domain::admission::decide::Status::Blocked)
                    .map(|d| {
                        let p = d.presentation;
                        format!("{} {}", p.headline, p.call_to_action)
                    })
            } else {
                None
            };
            let receipts = if state == "active" {
                let mut all = crate::store::issues::submissions_of_grant(&mut tx, row.id).await?;
                all.reverse();
                all.iter()
                    .take(RECEIPTS_SHOWN)
                    .map(super::view::SubmissionView::from_row)
                    .collect()
            } else {
                Vec::new()
            };
            shown.push(DashboardGrant {
                grant: GrantView::from_row(&row, &ctx.config.public_base())?,
                blocked,
                receipts,
            });
        }
        sections.push(DashboardSection {
            total,
            grants: shown,
        });
    }
    tx.commit().await?;
    let mut sections = sections.into_iter();
    let mut next = || sections.next().expect("four sections");
    Ok(Dashboard {
        awaiting_me: next(),
        awaiting_agent: next(),
        active: next(),
        finished: next(),
        repos,
    })
}

/// The repositories of the signed-in person, with their permission.
pub async fn repositories(ctx: &Ctx, session: &WebSession) -> Result<Vec<(RepoRow, Permission)>> {
    let user = signed_in(session)?;
    let mut tx = ctx.store.read().await?;
    let repos = my_repos(&mut tx, user.id).await?;
    tx.commit().await?;
    Ok(repos)
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
            items: views(ctx, &rows)?,
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
        grant: GrantView::from_row(&row, &ctx.config.public_base())?,
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
