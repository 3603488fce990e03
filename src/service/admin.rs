//! Setup privilege: users, tokens, repositories and collaborators. Reached by
//! an admin's `write:admin` token or by the `writ admin` CLI; it never takes
//! part in an agent's or a human's own operations.

use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::{Caller, hash_password};
use super::view::{NewTokenView, RepoAdminView, UserView};
use super::{Ctx, Error, Result, random_hex};
use crate::domain::access::Permission;
use crate::domain::ids::{Login, RepoName, parse_full_name};
use crate::domain::proposal::sha256_hex;
use crate::domain::scope::{Scope, ScopeSet};
use crate::store::principals::{self, NewToken, NewUser, UserRow};
use crate::store::repos::{self, NewRepo, RepoRow};
use crate::store::{Tx, is_unique_violation};

/// The setup privilege, checked: the `writ admin` CLI (working on the
/// database directly), or an admin's token with `write:admin`. Only
/// [`Setup::api`] makes one from a token, so a use case that takes a
/// `Setup` does not check again.
#[derive(Debug, Clone, Copy)]
pub struct Setup(Option<i64>);

impl Setup {
    /// The CLI's privilege.
    pub const CLI: Setup = Setup(None);

    /// The admin whose token holds the privilege (`None` for the CLI): the
    /// actor of the events its changes write.
    pub fn actor(self) -> Option<i64> {
        self.0
    }

    /// The privilege of an admin's token with `write:admin`, or the refusal
    /// (403 `forbidden` for a non-admin, `insufficient_scope` without the
    /// scope).
    pub fn api(caller: &Caller) -> Result<Setup> {
        caller.require_admin(Scope::WriteAdmin)?;
        Ok(Setup(Some(caller.user_id)))
    }
}

/// `POST /api/v1/admin/users` (its schema is in [`super::schema`]: a human
/// or a bot).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUserInput {
    /// `[A-Za-z0-9][A-Za-z0-9_.-]{0,38}`, unique case-insensitively.
    pub login: String,
    /// `human` or `bot`.
    pub kind: String,
    /// Humans only; stored as argon2id.
    pub password: Option<String>,
    /// Site administrator (humans only).
    pub is_admin: Option<bool>,
}

/// `POST /api/v1/admin/users/{login}/tokens`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTokenInput {
    /// A name for people.
    #[schema(value_type = super::schema::TokenNameText, inline)]
    pub name: String,
    /// Scope names, e.g. `read:repository`.
    #[schema(value_type = Vec<super::schema::ScopeText>, inline)]
    pub scopes: Vec<String>,
    /// The token cannot reach private repositories.
    pub public_only: Option<bool>,
    /// `owner/name`s the token is limited to.
    #[schema(value_type = Option<Vec<super::schema::FullNameText>>, inline)]
    pub repositories: Option<Vec<String>>,
}

/// `POST /api/v1/admin/repos`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRepoInput {
    /// Owner login.
    #[schema(value_type = super::schema::OwnerText, inline)]
    pub owner: String,
    /// Repository name.
    #[schema(value_type = super::schema::RepoNameText, inline)]
    pub name: String,
    /// Private or public.
    pub private: bool,
    /// The approver of a grant must not be its issuer.
    pub require_distinct_approver: Option<bool>,
}

/// `PUT /api/v1/repos/{owner}/{repo}/collaborators/{login}`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CollaboratorInput {
    /// `read`, `write` or `admin`.
    #[schema(value_type = super::schema::PermissionText, inline)]
    pub permission: String,
}

fn conflict_or(err: crate::store::StoreError, what: &str) -> Error {
    if is_unique_violation(&err) {
        Error::Conflict(format!("{what} already exists"))
    } else {
        err.into()
    }
}

async fn user_named(tx: &mut Tx, login: &str) -> Result<UserRow> {
    principals::user_by_login(tx, login)
        .await?
        .ok_or(Error::NotFound)
}

/// Refuses a human's password shorter than `min` characters, longer than
/// 1024 bytes, or with NUL.
fn check_password(password: &str, min: usize) -> Result<()> {
    if password.len() > 1024 || password.contains('\0') {
        return Err(Error::Invalid(
            "password must be at most 1024 bytes without NUL".into(),
        ));
    }
    if password.chars().count() < min.max(1) {
        return Err(Error::Invalid(format!(
            "password must be at least {} characters",
            min.max(1)
        )));
    }
    Ok(())
}

/// Creates a user.
pub async fn create_user(ctx: &Ctx, _: Setup, input: NewUserInput) -> Result<UserView> {
    let login = Login::parse(&input.login).map_err(|e| Error::Invalid(e.to_string()))?;
    let is_admin = input.is_admin.unwrap_or(false);
    let password_hash = match (input.kind.as_str(), input.password) {
        ("human", Some(pw)) => {
            check_password(&pw, ctx.config.min_password_length)?;
            Some(
                tokio::task::spawn_blocking(move || hash_password(&pw))
                    .await
                    .map_err(anyhow::Error::from)??,
            )
        }
        ("human", None) => None,
        ("bot", None) if !is_admin => None,
        ("bot", None) => return Err(Error::Invalid("a bot cannot be a site admin".into())),
        ("bot", Some(_)) => {
            return Err(Error::Invalid(
                "bots have no password; they use tokens".into(),
            ));
        }
        _ => return Err(Error::Invalid("kind must be human or bot".into())),
    };
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let id = principals::insert_user(
        &mut tx,
        NewUser {
            login: login.as_str(),
            kind: &input.kind,
            is_admin,
            password_hash,
            now: &at,
        },
    )
    .await
    .map_err(|e| conflict_or(e, "a user with this login"))?;
    let row = principals::user_by_id(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(UserView::from_row(&row))
}

/// Creates a token for a user; the text is returned this once.
pub async fn create_token(
    ctx: &Ctx,
    _: Setup,
    login: &str,
    input: NewTokenInput,
) -> Result<NewTokenView> {
    if input.name.trim().is_empty() || input.name.len() > 255 || input.name.contains('\0') {
        return Err(Error::Invalid("name must be 1-255 bytes".into()));
    }
    let scopes =
        ScopeSet::parse(input.scopes.iter().map(String::as_str)).map_err(Error::Invalid)?;
    let repositories = match input.repositories {
        Some(list) => {
            let mut lower = Vec::with_capacity(list.len());
            for full in &list {
                parse_full_name(full).map_err(|e| Error::Invalid(e.to_string()))?;
                lower.push(full.to_ascii_lowercase());
            }
            Some(serde_json::to_string(&lower).map_err(anyhow::Error::from)?)
        }
        None => None,
    };
    let token = format!("writ_{}", random_hex());
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let user = user_named(&mut tx, login).await?;
    let names = scopes.names().join(" ");
    let id = principals::insert_token(
        &mut tx,
        NewToken {
            user_id: user.id,
            name: &input.name,
            token_hash: &sha256_hex(token.as_bytes()),
            scopes: &names,
            public_only: input.public_only.unwrap_or(false),
            repositories,
            now: &at,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(NewTokenView {
        id,
        name: input.name,
        scopes: scopes.names().into_iter().map(str::to_owned).collect(),
        token,
    })
}

/// Revokes a user's token.
pub async fn revoke_token(ctx: &Ctx, _: Setup, login: &str, token_id: i64) -> Result<()> {
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let user = user_named(&mut tx, login).await?;
    if principals::revoke_token(&mut tx, user.id, token_id, &at).await? == 0 {
        return Err(Error::NotFound);
    }
    tx.commit().await?;
    Ok(())
}

fn repo_view(r: &RepoRow) -> RepoAdminView {
    RepoAdminView {
        id: r.id,
        owner: r.owner_login.clone(),
        name: r.name.clone(),
        full_name: r.full_name(),
        private: r.private,
        require_distinct_approver: r.require_distinct_approver,
    }
}

/// Creates a repository owned by an existing user.
pub async fn create_repo(ctx: &Ctx, _: Setup, input: NewRepoInput) -> Result<RepoAdminView> {
    let name = RepoName::parse(&input.name).map_err(|e| Error::Invalid(e.to_string()))?;
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let owner = principals::user_by_login(&mut tx, &input.owner)
        .await?
        .ok_or_else(|| Error::Conflict("owner is not a user".into()))?;
    let id = repos::insert_repo(
        &mut tx,
        NewRepo {
            owner_id: owner.id,
            name: name.as_str(),
            private: input.private,
            require_distinct_approver: input.require_distinct_approver.unwrap_or(false),
            now: &at,
        },
    )
    .await
    .map_err(|e| conflict_or(e, "a repository with this name"))?;
    let row = repos::repo_by_id(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(repo_view(&row))
}

/// Adds or changes a collaborator.
pub async fn set_collaborator(
    ctx: &Ctx,
    _: Setup,
    owner: &str,
    repo: &str,
    login: &str,
    input: CollaboratorInput,
) -> Result<()> {
    let permission = Permission::parse(&input.permission)
        .ok_or_else(|| Error::Invalid("permission must be read, write or admin".into()))?;
    let mut tx = ctx.store.write().await?;
    let repo = repos::repo_by_name(&mut tx, owner, repo)
        .await?
        .ok_or(Error::NotFound)?;
    let user = user_named(&mut tx, login).await?;
    repos::set_collaborator(&mut tx, repo.id, user.id, permission.as_str()).await?;
    tx.commit().await?;
    Ok(())
}

/// Removes a collaborator.
pub async fn remove_collaborator(
    ctx: &Ctx,
    _: Setup,
    owner: &str,
    repo: &str,
    login: &str,
) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    let repo = repos::repo_by_name(&mut tx, owner, repo)
        .await?
        .ok_or(Error::NotFound)?;
    let user = user_named(&mut tx, login).await?;
    if repos::remove_collaborator(&mut tx, repo.id, user.id).await? == 0 {
        return Err(Error::NotFound);
    }
    tx.commit().await?;
    Ok(())
}

/// Creates the first admin (a human) and returns its new `write:admin` token.
pub async fn bootstrap(ctx: &Ctx, login: &str, password: Option<&str>) -> Result<String> {
    create_user(
        ctx,
        Setup::CLI,
        NewUserInput {
            login: login.to_owned(),
            kind: "human".into(),
            password: password.map(str::to_owned),
            is_admin: Some(true),
        },
    )
    .await?;
    let token = create_token(
        ctx,
        Setup::CLI,
        login,
        NewTokenInput {
            name: "bootstrap".into(),
            scopes: vec!["write:admin".into()],
            public_only: None,
            repositories: None,
        },
    )
    .await?;
    Ok(token.token)
}
