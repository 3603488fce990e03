//! Browser sessions (only the cookie's SHA-256 is stored), login with
//! throttling, logout, and single-use form nonces.

use super::auth::verify_password;
use super::{Ctx, Error, Result, now, random_hex};
use crate::domain::proposal::sha256_hex;
use crate::domain::time::Timestamp;
use crate::store::Tx;
use crate::store::principals;
use crate::store::sessions as store;

/// A person logged in through the browser.
#[derive(Debug, Clone)]
pub struct SessionUser {
    /// User id.
    pub id: i64,
    /// Login.
    pub login: String,
    /// Site administrator.
    pub is_admin: bool,
}

/// A live browser session; `user` is `None` before login.
#[derive(Debug, Clone)]
pub struct WebSession {
    /// Session id.
    pub id: i64,
    /// The logged-in human, if any.
    pub user: Option<SessionUser>,
}

/// A new session's cookie value (shown to the browser once).
#[derive(Debug, Clone)]
pub struct NewCookie(pub String);

/// Resolves a session cookie; slides its expiry at most once a minute.
pub async fn resolve(ctx: &Ctx, cookie: &str) -> Result<Option<WebSession>> {
    if cookie.len() != 64 {
        return Ok(None);
    }
    let at = now();
    let hash = sha256_hex(cookie.as_bytes());
    let mut tx = ctx.store.read().await?;
    let Some(row) = store::live_session(&mut tx, &hash, &at.to_text()).await? else {
        return Ok(None);
    };
    let user = match row.user_id {
        Some(id) => principals::user_by_id(&mut tx, id)
            .await?
            .map(|u| SessionUser {
                id: u.id,
                login: u.login,
                is_admin: u.is_admin,
            }),
        None => None,
    };
    tx.commit().await?;
    let slid = at.plus_seconds(ctx.config.session_idle_seconds);
    let due = Timestamp::parse_text(&row.expires_at)
        .is_none_or(|exp| slid.datetime() - exp.datetime() > time::Duration::minutes(1));
    if row.user_id.is_some() && due {
        let mut tx = ctx.store.write().await?;
        store::touch_session(&mut tx, row.id, &slid.to_text()).await?;
        tx.commit().await?;
    }
    Ok(Some(WebSession { id: row.id, user }))
}

async fn insert_session(ctx: &Ctx, tx: &mut Tx, user_id: Option<i64>) -> Result<(i64, NewCookie)> {
    let at = now();
    let cookie = random_hex();
    let idle = if user_id.is_some() {
        ctx.config.session_idle_seconds
    } else {
        ctx.config.nonce_seconds
    };
    let id = store::insert_session(
        tx,
        &sha256_hex(cookie.as_bytes()),
        user_id,
        &at.to_text(),
        &at.plus_seconds(idle).to_text(),
        &at.plus_seconds(ctx.config.session_absolute_seconds)
            .to_text(),
    )
    .await?;
    Ok((id, NewCookie(cookie)))
}

/// Starts a pre-login session (the login form's nonce is bound to it).
pub async fn start_anonymous(ctx: &Ctx) -> Result<(WebSession, NewCookie)> {
    let mut tx = ctx.store.write().await?;
    // Each new pre-login session also sweeps what has expired, so visits to
    // the login page cannot grow the tables without bound.
    let at = now();
    let window = at
        .plus_seconds(-ctx.config.login_throttle_seconds)
        .to_text();
    store::prune_expired(&mut tx, &at.to_text(), &window).await?;
    let (id, cookie) = insert_session(ctx, &mut tx, None).await?;
    tx.commit().await?;
    Ok((WebSession { id, user: None }, cookie))
}

/// Issues single-use nonces for `(action, target)` pairs, in one transaction.
pub async fn issue_nonces(
    ctx: &Ctx,
    session_id: i64,
    forms: &[(&str, String)],
) -> Result<Vec<String>> {
    let at = now();
    let expires = at.plus_seconds(ctx.config.nonce_seconds).to_text();
    let mut tx = ctx.store.write().await?;
    store::prune_nonces(&mut tx, &at.to_text()).await?;
    let mut nonces = Vec::with_capacity(forms.len());
    for (action, target) in forms {
        let nonce = random_hex();
        store::insert_nonce(
            &mut tx,
            session_id,
            &sha256_hex(nonce.as_bytes()),
            action,
            target,
            &at.to_text(),
            &expires,
        )
        .await?;
        nonces.push(nonce);
    }
    tx.commit().await?;
    Ok(nonces)
}

/// Consumes a nonce inside the caller's transaction; 403 unless it was
/// issued to this session for this action and target, is live and unused.
pub async fn consume_nonce(
    tx: &mut Tx,
    session_id: i64,
    nonce: &str,
    action: &str,
    target: &str,
) -> Result<()> {
    if nonce.len() != 64 {
        return Err(Error::Forbidden(
            "this form has expired or was already used; reload the page",
        ));
    }
    let hash = sha256_hex(nonce.as_bytes());
    if store::consume_nonce(tx, session_id, &hash, action, target, &now().to_text()).await? {
        Ok(())
    } else {
        Err(Error::Forbidden(
            "this form has expired or was already used; reload the page",
        ))
    }
}

/// Why a login did not open a session.
#[derive(Debug)]
pub enum LoginFailure {
    /// Wrong password, unknown login or a bot: one sentence for all.
    BadCredentials,
    /// Too many failures for this login.
    Throttled,
}

/// Logs a human in: the pre-login session's nonce is consumed, the password
/// checked, and on success a new session replaces the pre-login one (no
/// fixation). Failures are recorded for throttling.
pub async fn login(
    ctx: &Ctx,
    pre: &WebSession,
    nonce: &str,
    login: &str,
    password: &str,
) -> Result<std::result::Result<NewCookie, LoginFailure>> {
    let lower = login.to_ascii_lowercase();
    let window_start = now()
        .plus_seconds(-ctx.config.login_throttle_seconds)
        .to_text();
    let mut tx = ctx.store.read().await?;
    let user = if login.len() <= 39 {
        principals::user_by_login(&mut tx, login).await?
    } else {
        None
    };
    tx.commit().await?;
    let human = user.filter(|u| u.kind == "human");
    let stored = human.as_ref().and_then(|u| u.password_hash.clone());
    let password = password.to_owned();
    let verified =
        tokio::task::spawn_blocking(move || verify_password(stored.as_deref(), &password))
            .await
            .map_err(anyhow::Error::from)?;

    let mut tx = ctx.store.write().await?;
    consume_nonce(&mut tx, pre.id, nonce, "login", "").await?;
    let failures = store::count_login_failures(&mut tx, &lower, &window_start).await?;
    if failures >= ctx.config.login_throttle_failures {
        tx.commit().await?;
        return Ok(Err(LoginFailure::Throttled));
    }
    let user = match (verified, human) {
        (true, Some(user)) => user,
        _ => {
            if lower.len() <= 64 {
                store::insert_login_failure(&mut tx, &lower, &now().to_text()).await?;
            }
            tx.commit().await?;
            return Ok(Err(LoginFailure::BadCredentials));
        }
    };
    store::revoke_session(&mut tx, pre.id, &now().to_text()).await?;
    let (_, cookie) = insert_session(ctx, &mut tx, Some(user.id)).await?;
    tx.commit().await?;
    Ok(Ok(cookie))
}

/// Logs out: the nonce is consumed and the session revoked server-side.
pub async fn logout(ctx: &Ctx, session: &WebSession, nonce: &str) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    consume_nonce(&mut tx, session.id, nonce, "logout", "").await?;
    store::revoke_session(&mut tx, session.id, &now().to_text()).await?;
    tx.commit().await?;
    Ok(())
}
