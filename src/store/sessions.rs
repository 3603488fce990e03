//! Browser sessions, single-use form nonces and failed-login records.

use sea_query::{Expr, ExprTrait, LockBehavior, LockType, OnConflict, Order, Query};

use super::schema::{FormNonces, LoginAddresses, LoginFailures, Sessions};
use super::{Backend, StoreResult, Tx};

/// A live session.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct SessionRow {
    pub id: i64,
    pub user_id: Option<i64>,
    pub expires_at: String,
    pub absolute_expires_at: String,
}

/// A new session's row.
pub struct NewSession<'a> {
    pub token_hash: &'a str,
    /// `None` before login.
    pub user_id: Option<i64>,
    /// The client address a pre-login session was opened from.
    pub address: Option<&'a str>,
    pub now: &'a str,
    pub expires_at: &'a str,
    pub absolute_expires_at: &'a str,
}

/// Inserts a session and returns its id.
pub async fn insert_session(tx: &mut Tx, new: &NewSession<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Sessions::Table)
        .columns([
            Sessions::TokenHash,
            Sessions::UserId,
            Sessions::Address,
            Sessions::CreatedAt,
            Sessions::ExpiresAt,
            Sessions::AbsoluteExpiresAt,
        ])
        .values_panic([
            new.token_hash.into(),
            new.user_id.into(),
            new.address.into(),
            new.now.into(),
            new.expires_at.into(),
            new.absolute_expires_at.into(),
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

/// True when the session still exists; on PostgreSQL its row is locked
/// against deletion until the transaction ends (on SQLite the write
/// transaction already serializes).
pub async fn session_exists_locked(tx: &mut Tx, id: i64) -> StoreResult<bool> {
    let mut q = Query::select();
    q.column(Sessions::Id)
        .from(Sessions::Table)
        .and_where(Expr::col(Sessions::Id).eq(id));
    if tx.backend() == Backend::Postgres {
        q.lock(LockType::Share);
    }
    Ok(tx.fetch_optional::<(i64,)>(&q.to_owned()).await?.is_some())
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

/// True when the nonce is live and unused for this session, action and
/// target (a read: nothing is consumed).
pub async fn nonce_live(
    tx: &mut Tx,
    session_id: i64,
    nonce_hash: &str,
    action: &str,
    target: &str,
    now: &str,
) -> StoreResult<bool> {
    let q = Query::select()
        .column(FormNonces::Id)
        .from(FormNonces::Table)
        .and_where(Expr::col(FormNonces::NonceHash).eq(nonce_hash))
        .and_where(Expr::col(FormNonces::SessionId).eq(session_id))
        .and_where(Expr::col(FormNonces::Action).eq(action))
        .and_where(Expr::col(FormNonces::Target).eq(target))
        .and_where(Expr::col(FormNonces::UsedAt).is_null())
        .and_where(Expr::col(FormNonces::ExpiresAt).gt(now))
        .to_owned();
    Ok(tx.fetch_optional::<(i64,)>(&q).await?.is_some())
}

/// Deletes a session's nonces for `action` but the newest `keep`.
pub async fn trim_nonces(
    tx: &mut Tx,
    session_id: i64,
    action: &str,
    keep: u64,
) -> StoreResult<u64> {
    let newest = Query::select()
        .column(FormNonces::Id)
        .from(FormNonces::Table)
        .and_where(Expr::col(FormNonces::SessionId).eq(session_id))
        .and_where(Expr::col(FormNonces::Action).eq(action))
        .order_by(FormNonces::Id, Order::Desc)
        .limit(keep)
        .to_owned();
    let q = Query::delete()
        .from_table(FormNonces::Table)
        .and_where(Expr::col(FormNonces::SessionId).eq(session_id))
        .and_where(Expr::col(FormNonces::Action).eq(action))
        .and_where(Expr::col(FormNonces::Id).not_in_subquery(newest))
        .to_owned();
    tx.execute(&q).await
}

/// Deletes the oldest pre-login sessions (with their nonces) beyond the
/// newest `keep` among those matching `address` (all when `None`). On
/// PostgreSQL the doomed rows are first locked, skipping rows another
/// transaction holds (another trim deleting them, or a nonce being issued
/// to that session), so trims at once never deadlock nor delete a session
/// whose nonce is being written.
pub async fn trim_prelogin_sessions(
    tx: &mut Tx,
    address: Option<&str>,
    keep: u64,
) -> StoreResult<u64> {
    let mut newest = Query::select();
    newest
        .column(Sessions::Id)
        .from(Sessions::Table)
        .and_where(Expr::col(Sessions::UserId).is_null())
        .order_by(Sessions::Id, Order::Desc)
        .limit(keep);
    let mut doomed = Query::select();
    doomed
        .column(Sessions::Id)
        .from(Sessions::Table)
        .and_where(Expr::col(Sessions::UserId).is_null());
    if let Some(address) = address {
        newest.and_where(Expr::col(Sessions::Address).eq(address));
        doomed.and_where(Expr::col(Sessions::Address).eq(address));
    }
    doomed
        .and_where(Expr::col(Sessions::Id).not_in_subquery(newest.to_owned()))
        .order_by(Sessions::Id, Order::Asc);
    if tx.backend() == Backend::Postgres {
        doomed.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    let ids: Vec<i64> = tx
        .fetch_all::<(i64,)>(&doomed.to_owned())
        .await?
        .into_iter()
        .map(|(id,)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let nonces = Query::delete()
        .from_table(FormNonces::Table)
        .and_where(Expr::col(FormNonces::SessionId).is_in(ids.clone()))
        .to_owned();
    tx.execute(&nonces).await?;
    let sessions = Query::delete()
        .from_table(Sessions::Table)
        .and_where(Expr::col(Sessions::Id).is_in(ids))
        .to_owned();
    tx.execute(&sessions).await
}

/// Records one failed login from a client address.
pub async fn insert_login_failure(
    tx: &mut Tx,
    lower_login: &str,
    address: &str,
    now: &str,
) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(LoginFailures::Table)
        .columns([
            LoginFailures::LowerLogin,
            LoginFailures::Address,
            LoginFailures::At,
        ])
        .values_panic([lower_login.into(), address.into(), now.into()])
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// Failed logins for a login since `since` (only those from `address` when
/// given): how many, and the time of the oldest.
pub async fn login_failures(
    tx: &mut Tx,
    lower_login: &str,
    address: Option<&str>,
    since: &str,
) -> StoreResult<(i64, Option<String>)> {
    let mut q = Query::select();
    q.expr(Expr::col(LoginFailures::Id).count())
        .expr(Expr::col(LoginFailures::At).min())
        .from(LoginFailures::Table)
        .and_where(Expr::col(LoginFailures::LowerLogin).eq(lower_login))
        .and_where(Expr::col(LoginFailures::At).gt(since));
    if let Some(address) = address {
        q.and_where(Expr::col(LoginFailures::Address).eq(address));
    }
    tx.fetch_one::<(i64, Option<String>)>(&q.to_owned()).await
}

/// True when the user has logged in from this address before.
pub async fn known_login_address(tx: &mut Tx, user_id: i64, address: &str) -> StoreResult<bool> {
    let q = Query::select()
        .column(LoginAddresses::UserId)
        .from(LoginAddresses::Table)
        .and_where(Expr::col(LoginAddresses::UserId).eq(user_id))
        .and_where(Expr::col(LoginAddresses::Address).eq(address))
        .to_owned();
    Ok(tx.fetch_optional::<(i64,)>(&q).await?.is_some())
}

/// Remembers that the user logged in from this address.
pub async fn remember_login_address(
    tx: &mut Tx,
    user_id: i64,
    address: &str,
    now: &str,
) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(LoginAddresses::Table)
        .columns([
            LoginAddresses::UserId,
            LoginAddresses::Address,
            LoginAddresses::LastLoginAt,
        ])
        .values_panic([user_id.into(), address.into(), now.into()])
        .on_conflict(
            OnConflict::columns([LoginAddresses::UserId, LoginAddresses::Address])
                .update_column(LoginAddresses::LastLoginAt)
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await.map(|_| ())
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
