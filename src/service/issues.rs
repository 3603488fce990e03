//! Issues: read by any reader, opened by writers (never attributed to a
//! grant), deleted and transferred only by the setup privilege.

use super::access::readable_repo;
use super::admin::Setup;
use super::auth::Caller;
use super::events;
use super::view::IssueView;
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::ids::parse_full_name;
use crate::domain::submission::ReceiptStatus;
use crate::domain::text::check_title;
use crate::store::Tx;
use crate::store::events::GrantAt;
use crate::store::issues::{self, NewIssue};
use crate::store::repos::{self, RepoRow};

async fn reachable_repo(
    tx: &mut Tx,
    caller: &Caller,
    owner: &str,
    repo: &str,
) -> Result<(RepoRow, Permission)> {
    let (repo, perm) = readable_repo(tx, owner, repo, caller.user_id).await?;
    if !caller.reducer.reaches(&repo.full_name(), repo.private) {
        return Err(Error::InsufficientScope(
            "the token does not reach this repository",
        ));
    }
    Ok((repo, perm))
}

/// Reads one issue by index.
pub async fn get(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    index: i64,
) -> Result<IssueView> {
    let mut tx = ctx.store.read().await?;
    let (repo, _) = reachable_repo(&mut tx, caller, owner, repo).await?;
    let issue = issues::issue_by_index(&mut tx, repo.id, index)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(IssueView::from_row(&issue, &repo))
}

/// One page of a repository's issues, by index, and the total.
pub async fn list(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    page: u64,
    limit: u64,
) -> Result<(Vec<IssueView>, i64)> {
    let mut tx = ctx.store.read().await?;
    let (repo, _) = reachable_repo(&mut tx, caller, owner, repo).await?;
    let (rows, total) =
        issues::list_issues(&mut tx, repo.id, limit, (page - 1).saturating_mul(limit)).await?;
    tx.commit().await?;
    Ok((
        rows.iter().map(|i| IssueView::from_row(i, &repo)).collect(),
        total,
    ))
}

/// Opens an ordinary issue (no attribution, whoever opens it).
pub async fn create(
    ctx: &Ctx,
    caller: &Caller,
    owner: &str,
    repo: &str,
    title: &str,
    body: &str,
) -> Result<IssueView> {
    check_title(title).map_err(|m| Error::Invalid(m.to_owned()))?;
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let (repo, perm) = reachable_repo(&mut tx, caller, owner, repo).await?;
    if perm < Permission::Write {
        return Err(Error::Forbidden(
            "opening an issue needs write access to the repository",
        ));
    }
    let index = issues::allocate_index(&mut tx, repo.id).await?;
    let id = issues::insert_issue(
        &mut tx,
        NewIssue {
            repository_id: repo.id,
            index,
            title,
            body,
            poster_id: caller.user_id,
            now: &at,
        },
    )
    .await?;
    let issue = issues::issue_by_id(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(IssueView::from_row(&issue, &repo))
}

/// Deletes an issue (setup privilege); its index is never reused and its
/// receipts then read `issue_deleted`.
pub async fn delete(ctx: &Ctx, setup: Setup, owner: &str, repo: &str, index: i64) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    let repo = repos::repo_by_name(&mut tx, owner, repo)
        .await?
        .ok_or(Error::NotFound)?;
    let issue = issues::issue_by_index(&mut tx, repo.id, index)
        .await?
        .ok_or(Error::NotFound)?;
    issues::delete_issue(&mut tx, issue.id).await?;
    receipts_changed(ctx, &mut tx, setup, issue.id, ReceiptStatus::IssueDeleted).await?;
    tx.commit().await?;
    Ok(())
}

/// The `receipt.changed` event of every receipt of the issue `issue_id`,
/// which now reads `status`.
async fn receipts_changed(
    ctx: &Ctx,
    tx: &mut Tx,
    setup: Setup,
    issue_id: i64,
    status: ReceiptStatus,
) -> Result<()> {
    let at = ctx.now().to_text();
    for r in issues::receipts_of_issue(tx, issue_id).await? {
        let grant = GrantAt {
            id: r.grant_id,
            from_state: None,
            state: &r.state,
            state_revision: r.state_revision,
            proposal_digest: &r.proposal_digest,
        };
        let data = serde_json::json!({
            "request_key": r.request_key,
            "receipt_status": status.as_str(),
        });
        let repository = Some(r.repository_id);
        let actor = setup.actor();
        events::emit(
            tx,
            "receipt.changed",
            &at,
            actor,
            repository,
            Some(grant),
            data,
        )
        .await?;
    }
    Ok(())
}

/// Transfers an issue to another repository under that repository's next
/// index (setup privilege); its receipts then read `issue_binding_changed`.
pub async fn transfer(
    ctx: &Ctx,
    setup: Setup,
    owner: &str,
    repo: &str,
    index: i64,
    to: &str,
) -> Result<IssueView> {
    let (to_owner, to_name) = parse_full_name(to)?;
    let mut tx = ctx.store.write().await?;
    let from = repos::repo_by_name(&mut tx, owner, repo)
        .await?
        .ok_or(Error::NotFound)?;
    let target = repos::repo_by_name(&mut tx, to_owner.as_str(), to_name.as_str())
        .await?
        .ok_or_else(|| Error::Conflict("the target repository does not exist".into()))?;
    let issue = issues::issue_by_index(&mut tx, from.id, index)
        .await?
        .ok_or(Error::NotFound)?;
    if target.id == from.id {
        return Err(Error::Conflict(
            "the issue is already in that repository".into(),
        ));
    }
    let new_index = issues::allocate_index(&mut tx, target.id).await?;
    issues::move_issue(&mut tx, issue.id, target.id, new_index).await?;
    let moved_status = ReceiptStatus::IssueBindingChanged;
    receipts_changed(ctx, &mut tx, setup, issue.id, moved_status).await?;
    let moved = issues::issue_by_id(&mut tx, issue.id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(IssueView::from_row(&moved, &target))
}
