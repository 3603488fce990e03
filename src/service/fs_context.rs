//! Project filesystem context grants: approved with capabilities, denied, or
//! removed by a repository admin in the browser; the history is append-only.

use std::collections::BTreeSet;

use super::access::readable_repo;
use super::events;
use super::sessions::{WebSession, consume_nonce, issue_nonces};
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::admission::fs_context::{FS_CAPABILITIES, change_phase};
use crate::store::admission::{self as store, FsChangeRow};
use crate::store::repos::RepoRow;

/// The settings page's data.
pub struct FsPage {
    /// The repository.
    pub repo: RepoRow,
    /// Current state: `approved`, `denied`, `removed` or `none`.
    pub current: String,
    /// Capabilities the current approval covers.
    pub capabilities: BTreeSet<String>,
    /// History, newest first.
    pub history: Vec<FsChangeRow>,
    /// Nonce of the settings form.
    pub nonce: String,
}

fn target(repo: &RepoRow) -> String {
    format!("repo:{}", repo.id)
}

/// The capabilities of the approval in force (none after a denial or a
/// removal).
fn in_force(history: &[FsChangeRow]) -> BTreeSet<String> {
    match history.last() {
        Some(last) if last.action == "approved" => last
            .capabilities
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// Reads the settings page for a repository admin (403 for other readers).
pub async fn page(ctx: &Ctx, session: &WebSession, owner: &str, repo: &str) -> Result<FsPage> {
    let user = session
        .user
        .as_ref()
        .ok_or(Error::Forbidden("log in to see this page"))?;
    let mut tx = ctx.store.read().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    let history = store::fs_history(&mut tx, repo.id).await?;
    tx.commit().await?;
    if perm < Permission::Admin {
        return Err(Error::Forbidden(
            "only a repository admin can change project filesystem context",
        ));
    }
    let current = history
        .last()
        .map_or_else(|| "none".to_owned(), |last| last.action.clone());
    let capabilities = in_force(&history);
    let nonce = issue_nonces(ctx, session.id, &[("fs_context", target(&repo))])
        .await?
        .remove(0);
    Ok(FsPage {
        repo,
        current,
        capabilities,
        history: history.into_iter().rev().collect(),
        nonce,
    })
}

/// Applies `approve` (with capabilities), `deny` or `remove`.
pub async fn change(
    ctx: &Ctx,
    session: &WebSession,
    nonce: &str,
    owner: &str,
    repo: &str,
    action: &str,
    capabilities: &[String],
) -> Result<()> {
    let user = session
        .user
        .as_ref()
        .ok_or(Error::Forbidden("log in to do this"))?;
    let caps: BTreeSet<String> = capabilities.iter().map(|c| c.trim().to_owned()).collect();
    if let Some(bad) = caps.iter().find(|c| !FS_CAPABILITIES.contains(&c.as_str())) {
        return Err(Error::Unprocessable(format!(
            "capabilities: {bad:?} is not read, list or search"
        )));
    }
    let stored_action = match action {
        "approve" if caps.is_empty() => {
            return Err(Error::Unprocessable(
                "capabilities: choose at least one of read, list, search".into(),
            ));
        }
        "approve" => "approved",
        "deny" => "denied",
        "remove" => "removed",
        _ => {
            return Err(Error::Unprocessable(
                "action must be approve, deny or remove".into(),
            ));
        }
    };
    let mut tx = ctx.store.write().await?;
    let (repo, perm) = readable_repo(&mut tx, owner, repo, user.id).await?;
    consume_nonce(
        ctx,
        &mut tx,
        session.id,
        nonce,
        "fs_context",
        &target(&repo),
    )
    .await?;
    if perm < Permission::Admin {
        return Err(Error::Forbidden(
            "only a repository admin can change project filesystem context",
        ));
    }
    let history = store::fs_history(&mut tx, repo.id).await?;
    let phase = change_phase(&in_force(&history), stored_action, &caps);
    let listed = if stored_action == "approved" {
        caps.into_iter().collect::<Vec<_>>().join(" ")
    } else {
        String::new()
    };
    let at = ctx.now().to_text();
    store::insert_fs_change(&mut tx, repo.id, stored_action, &listed, user.id, &at).await?;
    let data = serde_json::json!({ "phase": phase });
    events::emit(
        &mut tx,
        "filesystem_context.changed",
        &at,
        Some(user.id),
        Some(repo.id),
        None,
        data,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
