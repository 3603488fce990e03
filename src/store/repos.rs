//! Repositories and collaborators.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query, SelectStatement};

use super::schema::{Collaborators, Repositories, Users};
use super::{StoreResult, Tx};

/// A repository joined with its owner's login.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct RepoRow {
    /// Repository id.
    pub id: i64,
    /// Owner's user id.
    pub owner_id: i64,
    /// Owner's login.
    pub owner_login: String,
    /// Name as created.
    pub name: String,
    /// Private repositories are readable only by owner and collaborators.
    #[serde(deserialize_with = "super::sqlite::boolean")]
    pub private: bool,
    /// The approver of a grant must not be its issuer.
    #[serde(deserialize_with = "super::sqlite::boolean")]
    pub require_distinct_approver: bool,
    /// Creation time.
    pub created_at: String,
}

impl RepoRow {
    /// `owner/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner_login, self.name)
    }
}

fn select_repo() -> SelectStatement {
    Query::select()
        .column((Repositories::Table, Repositories::Id))
        .column((Repositories::Table, Repositories::OwnerId))
        .expr_as(Expr::col((Users::Table, Users::Login)), "owner_login")
        .column((Repositories::Table, Repositories::Name))
        .column((Repositories::Table, Repositories::Private))
        .column((Repositories::Table, Repositories::RequireDistinctApprover))
        .column((Repositories::Table, Repositories::CreatedAt))
        .from(Repositories::Table)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id))
                .equals((Repositories::Table, Repositories::OwnerId)),
        )
        .to_owned()
}

/// Finds a repository by `owner` and `name`, case-insensitively.
pub async fn repo_by_name(tx: &mut Tx, owner: &str, name: &str) -> StoreResult<Option<RepoRow>> {
    let q = select_repo()
        .and_where(Expr::col((Users::Table, Users::LowerLogin)).eq(owner.to_ascii_lowercase()))
        .and_where(
            Expr::col((Repositories::Table, Repositories::LowerName)).eq(name.to_ascii_lowercase()),
        )
        .to_owned();
    tx.fetch_optional(&q).await
}

/// A repository with a user's collaborator entry on it, if any.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct RepoAccessRow {
    /// The repository.
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub repo: RepoRow,
    /// The user's collaborator permission, if the user is one.
    pub collaborator_permission: Option<String>,
}

/// Finds a repository by `owner` and `name` (case-insensitively) with
/// `user_id`'s collaborator permission on it, in one statement.
pub async fn repo_by_name_for(
    tx: &mut Tx,
    owner: &str,
    name: &str,
    user_id: i64,
) -> StoreResult<Option<RepoAccessRow>> {
    let mut q = select_repo();
    with_collaborator_permission(&mut q, user_id);
    let q = q
        .and_where(Expr::col((Users::Table, Users::LowerLogin)).eq(owner.to_ascii_lowercase()))
        .and_where(
            Expr::col((Repositories::Table, Repositories::LowerName)).eq(name.to_ascii_lowercase()),
        )
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Adds `user_id`'s collaborator permission on the query's repository
/// (`repositories` in it) as `collaborator_permission` (NULL when none).
pub(super) fn with_collaborator_permission(q: &mut SelectStatement, user_id: impl Into<Expr>) {
    q.expr_as(
        Expr::col((Collaborators::Table, Collaborators::Permission)),
        "collaborator_permission",
    )
    .left_join(
        Collaborators::Table,
        Expr::col((Collaborators::Table, Collaborators::RepositoryId))
            .equals((Repositories::Table, Repositories::Id))
            .and(Expr::col((Collaborators::Table, Collaborators::UserId)).eq(user_id.into())),
    );
}

/// Finds a repository by id.
pub async fn repo_by_id(tx: &mut Tx, id: i64) -> StoreResult<Option<RepoRow>> {
    let q = select_repo()
        .and_where(Expr::col((Repositories::Table, Repositories::Id)).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Repositories a user owns or collaborates on, by full name.
pub async fn repos_of_user(tx: &mut Tx, user_id: i64) -> StoreResult<Vec<RepoRow>> {
    let member = Query::select()
        .column(Collaborators::RepositoryId)
        .from(Collaborators::Table)
        .and_where(Expr::col(Collaborators::UserId).eq(user_id))
        .to_owned();
    let q = select_repo()
        .cond_where(
            Expr::col((Repositories::Table, Repositories::OwnerId))
                .eq(user_id)
                .or(Expr::col((Repositories::Table, Repositories::Id)).in_subquery(member)),
        )
        .order_by((Users::Table, Users::LowerLogin), Order::Asc)
        .order_by((Repositories::Table, Repositories::LowerName), Order::Asc)
        .limit(500)
        .to_owned();
    tx.fetch_all(&q).await
}

/// A new repository.
pub struct NewRepo<'a> {
    /// Owner's user id.
    pub owner_id: i64,
    /// Name as typed.
    pub name: &'a str,
    /// Private or public.
    pub private: bool,
    /// Second-person approval.
    pub require_distinct_approver: bool,
    /// Creation time.
    pub now: &'a str,
}

/// Inserts a repository and returns its id.
pub async fn insert_repo(tx: &mut Tx, repo: NewRepo<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Repositories::Table)
        .columns([
            Repositories::OwnerId,
            Repositories::Name,
            Repositories::LowerName,
            Repositories::Private,
            Repositories::RequireDistinctApprover,
            Repositories::CreatedAt,
        ])
        .values_panic([
            repo.owner_id.into(),
            repo.name.into(),
            repo.name.to_ascii_lowercase().into(),
            repo.private.into(),
            repo.require_distinct_approver.into(),
            repo.now.into(),
        ])
        .returning_col(Repositories::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// The explicit collaborator permission of a user, if any.
pub async fn collaborator_permission(
    tx: &mut Tx,
    repository_id: i64,
    user_id: i64,
) -> StoreResult<Option<String>> {
    let q = Query::select()
        .column(Collaborators::Permission)
        .from(Collaborators::Table)
        .and_where(Expr::col(Collaborators::RepositoryId).eq(repository_id))
        .and_where(Expr::col(Collaborators::UserId).eq(user_id))
        .to_owned();
    Ok(tx.fetch_optional::<(String,)>(&q).await?.map(|r| r.0))
}

/// Adds or changes a collaborator entry.
pub async fn set_collaborator(
    tx: &mut Tx,
    repository_id: i64,
    user_id: i64,
    permission: &str,
) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(Collaborators::Table)
        .columns([
            Collaborators::RepositoryId,
            Collaborators::UserId,
            Collaborators::Permission,
        ])
        .values_panic([repository_id.into(), user_id.into(), permission.into()])
        .on_conflict(
            OnConflict::columns([Collaborators::RepositoryId, Collaborators::UserId])
                .update_column(Collaborators::Permission)
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// Removes a collaborator entry; returns how many rows went (0 or 1).
pub async fn remove_collaborator(
    tx: &mut Tx,
    repository_id: i64,
    user_id: i64,
) -> StoreResult<u64> {
    let q = Query::delete()
        .from_table(Collaborators::Table)
        .and_where(Expr::col(Collaborators::RepositoryId).eq(repository_id))
        .and_where(Expr::col(Collaborators::UserId).eq(user_id))
        .to_owned();
    tx.execute(&q).await
}
