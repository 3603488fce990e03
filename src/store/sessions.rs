//! Browser sessions, single-use form nonces and failed-login records.

use sea_query::{Expr, ExprTrait, Query};

use super::schema::{FormNonces, LoginFailures, Sessions};
use super::{StoreResult, Tx};

/// A live session.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct SessionRow {
    pub id: i64,
    pub user_id: Option<i64>,
    pub expires_at: String,
    pub absolute_expires_at: String,
}

/// Inserts a session (user `None` before login) and returns its id.
pub async fn insert_session(
    tx: &mut Tx,
    token_hash: &str,
    user_id: Option<i64>,
    now: &str,
    expires_at: &str,
    absolute_expires_at: &str,
) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Sessions::Table)
        .columns([
            Sessions::TokenHash,
            Sessions::UserId,
            Sessions::CreatedAt,
            Sessions::ExpiresAt,
            Sessions::AbsoluteExpiresAt,
        ])
        .values_panic([
            token_hash.into(),
            user_id.into(),
            now.into(),
            expires_at.into(),
            absolute_expires_at.into(),
        ])
        .returning_col(Sessions::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Finds an unrevoked, unexpired session by the SHA-256 of its cookie.
pub async fn live_session(
    tx: &mut Tx,
    token_hash: &str,
    now: &str,
) -> StoreResult<Option<SessionRow>> {
    let q = Query::select()
        .columns([
            Sessions::Id,
            Sessions::UserId,
            Sessions::ExpiresAt,
            Sessions::AbsoluteExpiresAt,
        ])
        .from(Sessions::Table)
        .and_where(Expr::col(Sessions::TokenHash).eq(token_hash))
        .and_where(Expr::col(Sessions::RevokedAt).is_null())
        .and_where(Expr::col(Sessions::ExpiresAt).gt(now))
        .and_where(Expr::col(Sessions::AbsoluteExpiresAt).gt(now))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Slides a session's expiry forward.
pub async fn touch_session(tx: &mut Tx, id: i64, expires_at: &str) -> StoreResult<()> {
    let q = Query::update()
        .table(Sessions::Table)
        .value(Sessions::ExpiresAt, expires_at)
        .and_where(Expr::col(Sessions::Id).eq(id))
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// Revokes a session.
pub async fn revoke_session(tx: &mut Tx, id: i64, now: &str) -> StoreResult<u64> {
    let q = Query::update()
        .table(Sessions::Table)
        .value(Sessions::RevokedAt, now)
        .and_where(Expr::col(Sessions::Id).eq(id))
        .and_where(Expr::col(Sessions::RevokedAt).is_null())
        .to_owned();
    tx.execute(&q).await
}

/// Stores a nonce bound to a session, an action and a target.
pub async fn insert_nonce(
    tx: &mut Tx,
    session_id: i64,
    nonce_hash: &str,
    action: &str,
    target: &str,
    now: &str,
    expires_at: &str,
) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(FormNonces::Table)
        .columns([
            FormNonces::SessionId,
            FormNonces::NonceHash,
            FormNonces::Action,
            FormNonces::Target,
            FormNonces::CreatedAt,
            FormNonces::ExpiresAt,
        ])
        .values_panic([
            session_id.into(),
            nonce_hash.into(),
            action.into(),
            target.into(),
            now.into(),
            expires_at.into(),
        ])
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// Marks a nonce used if it matches session, action and target and is live;
/// true when exactly this call consumed it.
pub async fn consume_nonce(
    tx: &mut Tx,
    session_id: i64,
    nonce_hash: &str,
    action: &str,
    target: &str,
    now: &str,
) -> StoreResult<bool> {
    let q = Query::update()
        .table(FormNonces::Table)
        .value(FormNonces::UsedAt, now)
        .and_where(Expr::col(FormNonces::NonceHash).eq(nonce_hash))
        .and_where(Expr::col(FormNonces::SessionId).eq(session_id))
        .and_where(Expr::col(FormNonces::Action).eq(action))
        .and_where(Expr::col(FormNonces::Target).eq(target))
        .and_where(Expr::col(FormNonces::UsedAt).is_null())
        .and_where(Expr::col(FormNonces::ExpiresAt).gt(now))
        .to_owned();
    Ok(tx.execute(&q).await? == 1)
}

/// Deletes nonces that expired before `now` (they authorize nothing any more).
pub async fn prune_nonces(tx: &mut Tx, now: &str) -> StoreResult<u64> {
    let q = Query::delete()
        .from_table(FormNonces::Table)
        .and_where(Expr::col(FormNonces::ExpiresAt).lt(now))
        .to_owned();
    tx.execute(&q).await
}

/// Records one failed login.
pub async fn insert_login_failure(tx: &mut Tx, lower_login: &str, now: &str) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(LoginFailures::Table)
        .columns([LoginFailures::LowerLogin, LoginFailures::At])
        .values_panic([lower_login.into(), now.into()])
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// Counts failed logins for a login since `since`.
pub async fn count_login_failures(tx: &mut Tx, lower_login: &str, since: &str) -> StoreResult<i64> {
    let q = Query::select()
        .expr(Expr::col(LoginFailures::Id).count())
        .from(LoginFailures::Table)
        .and_where(Expr::col(LoginFailures::LowerLogin).eq(lower_login))
        .and_where(Expr::col(LoginFailures::At).gt(since))
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Deletes sessions past either expiry (with their nonces) and failed-login
/// records older than `failures_before`: none of them authorizes or
/// throttles anything any more.
pub async fn prune_expired(tx: &mut Tx, now: &str, failures_before: &str) -> StoreResult<()> {
    let expired = || {
        Query::select()
            .column(Sessions::Id)
            .from(Sessions::Table)
            .cond_where(
                sea_query::Cond::any()
                    .add(Expr::col(Sessions::ExpiresAt).lt(now))
                    .add(Expr::col(Sessions::AbsoluteExpiresAt).lt(now)),
            )
            .to_owned()
    };
    let nonces = Query::delete()
        .from_table(FormNonces::Table)
        .and_where(Expr::col(FormNonces::SessionId).in_subquery(expired()))
        .to_owned();
    tx.execute(&nonces).await?;
    let sessions = Query::delete()
        .from_table(Sessions::Table)
        .cond_where(
            sea_query::Cond::any()
                .add(Expr::col(Sessions::ExpiresAt).lt(now))
                .add(Expr::col(Sessions::AbsoluteExpiresAt).lt(now)),
        )
        .to_owned();
    tx.execute(&sessions).await?;
    let failures = Query::delete()
        .from_table(LoginFailures::Table)
        .and_where(Expr::col(LoginFailures::At).lt(failures_before))
        .to_owned();
    tx.execute(&failures).await?;
    Ok(())
}
