//! Users and access tokens.

use sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};

use super::schema::{AccessTokens, Users};
use super::shape::{Shape, slot};
use super::{StoreResult, Tx};

/// A user as stored.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct UserRow {
    /// User id.
    pub id: i64,
    /// Login as created.
    pub login: String,
    /// `human` or `bot`.
    pub kind: String,
    /// Site administrator.
    pub is_admin: bool,
    /// argon2id PHC string, humans only.
    pub password_hash: Option<String>,
    /// Creation time.
    pub created_at: String,
}

const USER_COLUMNS: [Users; 6] = [
    Users::Id,
    Users::Login,
    Users::Kind,
    Users::IsAdmin,
    Users::PasswordHash,
    Users::CreatedAt,
];

/// A new user.
pub struct NewUser<'a> {
    /// Login as typed.
    pub login: &'a str,
    /// `human` or `bot`.
    pub kind: &'a str,
    /// Site administrator.
    pub is_admin: bool,
    /// argon2id PHC string.
    pub password_hash: Option<String>,
    /// Creation time.
    pub now: &'a str,
}

/// Inserts a user and returns its id.
pub async fn insert_user(tx: &mut Tx, user: NewUser<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Users::Table)
        .columns([
            Users::Login,
            Users::LowerLogin,
            Users::Kind,
            Users::IsAdmin,
            Users::PasswordHash,
            Users::CreatedAt,
        ])
        .values_panic([
            user.login.into(),
            user.login.to_ascii_lowercase().into(),
            user.kind.into(),
            user.is_admin.into(),
            user.password_hash.into(),
            user.now.into(),
        ])
        .returning_col(Users::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Finds a user by login, case-insensitively.
pub async fn user_by_login(tx: &mut Tx, login: &str) -> StoreResult<Option<UserRow>> {
    let q = Query::select()
        .columns(USER_COLUMNS)
        .from(Users::Table)
        .and_where(Expr::col(Users::LowerLogin).eq(login.to_ascii_lowercase()))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Finds a user by id.
pub async fn user_by_id(tx: &mut Tx, id: i64) -> StoreResult<Option<UserRow>> {
    let q = Query::select()
        .columns(USER_COLUMNS)
        .from(Users::Table)
        .and_where(Expr::col(Users::Id).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Counts users (an empty database has none).
pub async fn count_users(tx: &mut Tx) -> StoreResult<i64> {
    let q = Query::select()
        .expr(Expr::col(Users::Id).count())
        .from(Users::Table)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Lists bots, by login, for the prepare form.
pub async fn list_bots(tx: &mut Tx) -> StoreResult<Vec<UserRow>> {
    let q = Query::select()
        .columns(USER_COLUMNS)
        .from(Users::Table)
        .and_where(Expr::col(Users::Kind).eq("bot"))
        .order_by(Users::LowerLogin, Order::Asc)
        .limit(500)
        .to_owned();
    tx.fetch_all(&q).await
}

/// A live token joined with its user, as authentication needs it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct TokenAuthRow {
    /// Token id.
    pub token_id: i64,
    /// SHA-256 of the token, hex.
    pub token_hash: String,
    /// Space-separated scope names.
    pub scopes: String,
    /// Public-only reducer.
    pub public_only: bool,
    /// JSON array of lowercase `owner/name`, when limited.
    pub repositories: Option<String>,
    /// Owner id.
    pub user_id: i64,
    /// Owner login.
    pub login: String,
    /// Owner kind.
    pub kind: String,
    /// Owner is a site admin.
    pub is_admin: bool,
}

/// Finds an unrevoked token by the SHA-256 of its text.
pub async fn token_by_hash(tx: &mut Tx, hash: &str) -> StoreResult<Option<TokenAuthRow>> {
    static TOKEN: Shape = Shape::new();
    let q = TOKEN.bind(
        tx.backend(),
        || token_query(slot("hash")),
        &[("hash", hash.into())],
    );
    tx.fetch_optional(&q).await
}

/// True while the token `token_id` is not revoked.
pub async fn token_is_live(tx: &mut Tx, token_id: i64) -> StoreResult<bool> {
    let q = Query::select()
        .expr(Expr::val(1))
        .from(AccessTokens::Table)
        .and_where(Expr::col(AccessTokens::Id).eq(token_id))
        .and_where(Expr::col(AccessTokens::RevokedAt).is_null())
        .to_owned();
    Ok(tx.fetch_optional::<(i32,)>(&q).await?.is_some())
}

/// The condition "the token `token_id` of user `user_id` is not revoked",
/// for a statement that checks it on its way (see
/// `service::auth::authenticate_deferred`).
pub(super) fn token_live(token_id: Expr, user_id: Expr) -> Expr {
    Expr::exists(
        Query::select()
            .expr(Expr::val(1))
            .from(AccessTokens::Table)
            .and_where(Expr::col((AccessTokens::Table, AccessTokens::Id)).eq(token_id))
            .and_where(Expr::col((AccessTokens::Table, AccessTokens::UserId)).eq(user_id))
            .and_where(Expr::col((AccessTokens::Table, AccessTokens::RevokedAt)).is_null())
            .to_owned(),
    )
}

/// The live token with the hash `hash`, with its user.
fn token_query(hash: Expr) -> SelectStatement {
    Query::select()
        .expr_as(
            Expr::col((AccessTokens::Table, AccessTokens::Id)),
            "token_id",
        )
        .column((AccessTokens::Table, AccessTokens::TokenHash))
        .column((AccessTokens::Table, AccessTokens::Scopes))
        .column((AccessTokens::Table, AccessTokens::PublicOnly))
        .column((AccessTokens::Table, AccessTokens::Repositories))
        .column((AccessTokens::Table, AccessTokens::UserId))
        .column((Users::Table, Users::Login))
        .column((Users::Table, Users::Kind))
        .column((Users::Table, Users::IsAdmin))
        .from(AccessTokens::Table)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id))
                .equals((AccessTokens::Table, AccessTokens::UserId)),
        )
        .and_where(Expr::col((AccessTokens::Table, AccessTokens::TokenHash)).eq(hash))
        .and_where(Expr::col((AccessTokens::Table, AccessTokens::RevokedAt)).is_null())
        .to_owned()
}

/// A new token.
pub struct NewToken<'a> {
    /// Owner id.
    pub user_id: i64,
    /// Human-readable name.
    pub name: &'a str,
    /// SHA-256 of the token text, hex.
    pub token_hash: &'a str,
    /// Space-separated scope names.
    pub scopes: &'a str,
    /// Public-only reducer.
    pub public_only: bool,
    /// JSON array of lowercase `owner/name`, when limited.
    pub repositories: Option<String>,
    /// Creation time.
    pub now: &'a str,
}

/// Inserts a token and returns its id.
pub async fn insert_token(tx: &mut Tx, token: NewToken<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(AccessTokens::Table)
        .columns([
            AccessTokens::UserId,
            AccessTokens::Name,
            AccessTokens::TokenHash,
            AccessTokens::Scopes,
            AccessTokens::PublicOnly,
            AccessTokens::Repositories,
            AccessTokens::CreatedAt,
        ])
        .values_panic([
            token.user_id.into(),
            token.name.into(),
            token.token_hash.into(),
            token.scopes.into(),
            token.public_only.into(),
            token.repositories.into(),
            token.now.into(),
        ])
        .returning_col(AccessTokens::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Revokes a user's token; returns how many rows changed (0 or 1).
pub async fn revoke_token(tx: &mut Tx, user_id: i64, token_id: i64, now: &str) -> StoreResult<u64> {
    let q = Query::update()
        .table(AccessTokens::Table)
        .value(AccessTokens::RevokedAt, now)
        .and_where(Expr::col(AccessTokens::Id).eq(token_id))
        .and_where(Expr::col(AccessTokens::UserId).eq(user_id))
        .and_where(Expr::col(AccessTokens::RevokedAt).is_null())
        .to_owned();
    tx.execute(&q).await
}
