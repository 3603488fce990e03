//! Repository visibility for a user, decided with `domain::access`.

use super::{Error, Result};
use crate::domain::access::{AccessFacts, Permission, effective_permission};
use crate::store::Tx;
use crate::store::repos::{self, RepoRow};

/// The user's effective permission on a repository right now.
pub async fn permission(tx: &mut Tx, repo: &RepoRow, user_id: i64) -> Result<Option<Permission>> {
    let collaborator = repos::collaborator_permission(tx, repo.id, user_id).await?;
    Ok(effective(repo, collaborator.as_deref(), user_id))
}

fn effective(repo: &RepoRow, collaborator: Option<&str>, user_id: i64) -> Option<Permission> {
    effective_permission(AccessFacts {
        is_owner: repo.owner_id == user_id,
        private: repo.private,
        collaborator: collaborator.and_then(Permission::parse),
    })
}

/// The user's permission on `repo` from facts read already; 404 when the
/// user cannot read it, exactly as if it did not exist.
pub fn readable(repo: &RepoRow, collaborator: Option<&str>, user_id: i64) -> Result<Permission> {
    effective(repo, collaborator, user_id).ok_or(Error::NotFound)
}

/// The repository `owner/name` if the user can read it now; 404 otherwise,
/// exactly as if it did not exist.
pub async fn readable_repo(
    tx: &mut Tx,
    owner: &str,
    name: &str,
    user_id: i64,
) -> Result<(RepoRow, Permission)> {
    let found = repos::repo_by_name_for(tx, owner, name, user_id)
        .await?
        .ok_or(Error::NotFound)?;
    let perm = effective(
        &found.repo,
        found.collaborator_permission.as_deref(),
        user_id,
    )
    .ok_or(Error::NotFound)?;
    Ok((found.repo, perm))
}
