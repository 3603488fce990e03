//! Project filesystem context grants: approved with capabilities, denied, or
//! removed by a repository admin in the browser; the history is append-only.

use std::collections::BTreeSet;

use super::access::readable_repo;
use super::sessions::{WebSession, consume_nonce, issue_nonces};
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::admission::fs_context::FS_CAPABILITIES;
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
    let (current, capabilities) = match history.last() {
        Some(last) => (
            last.action.clone(),
            if last.action == "approved" {
                last.capabilities
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect()
            } else {
                BTreeSet::new()
            },
        ),
        None => ("none".to_owned(), BTreeSet::new()),
    };
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
    let listed = if stored_action == "approved" {
        caps.into_iter().collect::<Vec<_>>().join(" ")
    } else {
        String::new()
    };
    store::insert_fs_change(
        &mut tx,
        repo.id,
        stored_action,
        &listed,
        user.id,
        &ctx.now().to_text(),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
