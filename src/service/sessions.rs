//! Browser sessions (only the cookie's SHA-256 is stored), login with
//! throttling, logout, and single-use form nonces.

use super::auth::verify_password;
use super::{Ctx, Error, Result, random_hex};
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
    let at = ctx.now();
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

async fn insert_session(
    ctx: &Ctx,
    tx: &mut Tx,
    user_id: Option<i64>,
    address: Option<&str>,
) -> Result<(i64, NewCookie)> {
    let at = ctx.now();
    let cookie = random_hex();
    let idle = if user_id.is_some() {
        ctx.config.session_idle_seconds
    } else {
        ctx.config.nonce_seconds
    };
    let id = store::insert_session(
        tx,
        &store::NewSession {
            token_hash: &sha256_hex(cookie.as_bytes()),
            user_id,
            address,
            now: &at.to_text(),
            expires_at: &at.plus_seconds(idle).to_text(),
            absolute_expires_at: &at
                .plus_seconds(ctx.config.session_absolute_seconds)
                .to_text(),
        },
    )
    .await?;
    Ok((id, NewCookie(cookie)))
}

/// Starts a pre-login session for a client address, with its first login
/// nonce, in one transaction. Pre-login sessions are bounded: past
/// `prelogin_sessions_per_address` from one address, or
/// `prelogin_sessions_total` in all, the oldest are deleted with their
/// nonces (docs/runbook.md).
pub async fn start_anonymous(ctx: &Ctx, address: &str) -> Result<(WebSession, NewCookie, String)> {
    let mut tx = ctx.store.write().await?;
    // Each new pre-login session also sweeps what has expired, so visits to
    // the login page cannot grow the tables without bound.
    let at = ctx.now();
    let window = at
        .plus_seconds(-ctx.config.login_throttle_seconds)
        .to_text();
    store::prune_expired(&mut tx, &at.to_text(), &window).await?;
    let per_address = u64::try_from(ctx.config.prelogin_sessions_per_address.max(1)).unwrap_or(1);
    let total = u64::try_from(ctx.config.prelogin_sessions_total.max(1)).unwrap_or(1);
    // Room for the new one.
    store::trim_prelogin_sessions(&mut tx, Some(address), per_address - 1).await?;
    store::trim_prelogin_sessions(&mut tx, None, total - 1).await?;
    let (id, cookie) = insert_session(ctx, &mut tx, None, Some(address)).await?;
    let nonce = insert_nonces(ctx, &mut tx, id, &[("login", String::new())])
        .await?
        .remove(0);
    tx.commit().await?;
    Ok((WebSession { id, user: None }, cookie, nonce))
}

/// Live login-form nonces kept per pre-login session (one per open tab);
/// issuing another deletes the oldest.
const LOGIN_NONCES_PER_SESSION: u64 = 8;

/// Issues single-use nonces for `(action, target)` pairs, in one transaction.
/// A login nonce needs its pre-login session still there (the caps may
/// have deleted it): else 403, open the login page again.
pub async fn issue_nonces(
    ctx: &Ctx,
    session_id: i64,
    forms: &[(&str, String)],
) -> Result<Vec<String>> {
    let mut tx = ctx.store.write().await?;
    if forms.iter().any(|(action, _)| *action == "login")
        && !store::session_exists_locked(&mut tx, session_id).await?
    {
        return Err(Error::Forbidden("open the login page again"));
    }
    store::prune_nonces(&mut tx, &ctx.now().to_text()).await?;
    let nonces = insert_nonces(ctx, &mut tx, session_id, forms).await?;
    tx.commit().await?;
    Ok(nonces)
}

async fn insert_nonces(
    ctx: &Ctx,
    tx: &mut Tx,
    session_id: i64,
    forms: &[(&str, String)],
) -> Result<Vec<String>> {
    let at = ctx.now();
    let expires = at.plus_seconds(ctx.config.nonce_seconds).to_text();
    let mut nonces = Vec::with_capacity(forms.len());
    for (action, target) in forms {
        let nonce = random_hex();
        store::insert_nonce(
            tx,
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
    for (action, _) in forms {
        if *action == "login" {
            store::trim_nonces(tx, session_id, action, LOGIN_NONCES_PER_SESSION).await?;
        }
    }
    Ok(nonces)
}

/// Consumes a nonce inside the caller's transaction; 403 unless it was
/// issued to this session for this action and target, is live and unused.
pub async fn consume_nonce(
    ctx: &Ctx,
    tx: &mut Tx,
    session_id: i64,
    nonce: &str,
    action: &str,
    target: &str,
) -> Result<()> {
    if nonce.len() != 64 {
        return Err(FORM_USED);
    }
    let hash = sha256_hex(nonce.as_bytes());
    if store::consume_nonce(tx, session_id, &hash, action, target, &ctx.now().to_text()).await? {
        Ok(())
    } else {
        Err(FORM_USED)
    }
}

/// Why a login did not open a session.
#[derive(Debug)]
pub enum LoginFailure {
    /// Wrong password, unknown login or a bot: one sentence for all.
    BadCredentials,
    /// Too many failures for this login from this address, or for this
    /// login from everywhere; try again after this many seconds.
    Throttled(i64),
    /// Every password-hashing slot stayed busy; try again after this many
    /// seconds. Nothing was checked or consumed.
    Busy(i64),
}

/// The bounds on password hashing in this process: how many run at once,
/// and one verification at a time per login nonce. Resource limits of one
/// process, not database invariants (the nonce is consumed, and the
/// throttle decided, in the login's transaction).
#[derive(Debug)]
pub struct LoginGate {
    hashes: tokio::sync::Semaphore,
    permits: usize,
    nonces: std::sync::Mutex<std::collections::HashSet<String>>,
    hashed: std::sync::atomic::AtomicU64,
}

impl LoginGate {
    /// `concurrency` hashes at once; 0 means one per core.
    pub fn new(concurrency: u32) -> LoginGate {
        let permits = match concurrency {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n as usize,
        };
        LoginGate {
            hashes: tokio::sync::Semaphore::new(permits),
            permits,
            nonces: std::sync::Mutex::default(),
            hashed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Password verifications this process has run.
    pub fn hashes_run(&self) -> u64 {
        self.hashed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes every hashing slot (waiting for those in use), as a saturated
    /// server would have them; for tests and tools.
    pub async fn occupy_all(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.hashes
            .acquire_many(u32::try_from(self.permits).unwrap_or(u32::MAX))
            .await
            .expect("the semaphore is never closed")
    }

    fn nonces(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.nonces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks a nonce as being verified; `None` while another request of
    /// this process verifies it.
    fn claim(&self, nonce_hash: &str) -> Option<NonceClaim<'_>> {
        self.nonces()
            .insert(nonce_hash.to_owned())
            .then(|| NonceClaim(self, nonce_hash.to_owned()))
    }
}

struct NonceClaim<'a>(&'a LoginGate, String);

impl Drop for NonceClaim<'_> {
    fn drop(&mut self) {
        self.0.nonces().remove(&self.1);
    }
}

const FORM_USED: Error =
    Error::Forbidden("this form has expired or was already used; reload the page");

/// Seconds until a throttle whose oldest counted failure was at `oldest`
/// lets attempts through again (at least 1).
fn retry_after(ctx: &Ctx, oldest: Option<&str>, at: Timestamp) -> i64 {
    let window = ctx.config.login_throttle_seconds;
    let waited = oldest
        .and_then(Timestamp::parse_text)
        .map_or(0, |t| (at.datetime() - t.datetime()).whole_seconds());
    (window - waited).clamp(1, window.max(1))
}

/// The login throttle (docs/runbook.md "Login throttling"): `Some(seconds
/// to wait)` when attempts for `lower` from `address` are refused now.
/// Strict per (login, address): `login_throttle_failures` failures in the
/// window. Loose per login, from everywhere: `login_throttle_login_ceiling`
/// failures, except for an address this user has logged in from before.
async fn throttled(
    ctx: &Ctx,
    tx: &mut Tx,
    lower: &str,
    user_id: Option<i64>,
    address: &str,
    at: Timestamp,
) -> Result<Option<i64>> {
    let since = at
        .plus_seconds(-ctx.config.login_throttle_seconds)
        .to_text();
    let (mine, oldest) = store::login_failures(tx, lower, Some(address), &since).await?;
    if mine >= ctx.config.login_throttle_failures {
        return Ok(Some(retry_after(ctx, oldest.as_deref(), at)));
    }
    let (all, oldest) = store::login_failures(tx, lower, None, &since).await?;
    if all >= ctx.config.login_throttle_login_ceiling {
        let known = match user_id {
            Some(id) => store::known_login_address(tx, id, address).await?,
            None => false,
        };
        if !known {
            return Ok(Some(retry_after(ctx, oldest.as_deref(), at)));
        }
    }
    Ok(None)
}

/// Logs a human in from a client address (`domain::net::address_key`).
///
/// Cheap checks come first, in one read: the nonce must be live for this
/// pre-login session and the throttle open, else the answer comes without
/// hashing. The password is then verified under a bounded number of
/// hashing slots (`LoginFailure::Busy` past `login_hash_wait_ms`), one
/// request per nonce at a time, outside any transaction. Finally one write
/// transaction consumes the nonce, decides the throttle again, and records
/// the failure or swaps the pre-login session for a new one (no fixation).
pub async fn login(
    ctx: &Ctx,
    pre: &WebSession,
    nonce: &str,
    login: &str,
    password: &str,
    address: &str,
) -> Result<std::result::Result<NewCookie, LoginFailure>> {
    if nonce.len() != 64 {
        return Err(FORM_USED);
    }
    let nonce_hash = sha256_hex(nonce.as_bytes());
    let lower = login.to_ascii_lowercase();
    let at = ctx.now();
    let mut tx = ctx.store.read().await?;
    if !store::nonce_live(&mut tx, pre.id, &nonce_hash, "login", "", &at.to_text()).await? {
        return Err(FORM_USED);
    }
    let user = if login.len() <= 39 {
        principals::user_by_login(&mut tx, login).await?
    } else {
        None
    };
    let human = user.filter(|u| u.kind == "human");
    if let Some(wait) = throttled(
        ctx,
        &mut tx,
        &lower,
        human.as_ref().map(|u| u.id),
        address,
        at,
    )
    .await?
    {
        tx.commit().await?;
        return Ok(Err(LoginFailure::Throttled(wait)));
    }
    tx.commit().await?;

    let gate = &ctx.login_gate;
    let Some(_claim) = gate.claim(&nonce_hash) else {
        return Err(FORM_USED);
    };
    let wait = std::time::Duration::from_millis(ctx.config.login_hash_wait_ms);
    let Ok(Ok(permit)) = tokio::time::timeout(wait, gate.hashes.acquire()).await else {
        metrics::counter!("writ_login_busy_total").increment(1);
        return Ok(Err(LoginFailure::Busy(1)));
    };
    let stored = human.as_ref().and_then(|u| u.password_hash.clone());
    let password = password.to_owned();
    gate.hashed
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!("writ_login_password_hashes_total").increment(1);
    let verified =
        tokio::task::spawn_blocking(move || verify_password(stored.as_deref(), &password))
            .await
            .map_err(anyhow::Error::from)?;
    drop(permit);

    let at = ctx.now();
    let mut tx = ctx.store.write().await?;
    consume_nonce(ctx, &mut tx, pre.id, nonce, "login", "").await?;
    if let Some(wait) = throttled(
        ctx,
        &mut tx,
        &lower,
        human.as_ref().map(|u| u.id),
        address,
        at,
    )
    .await?
    {
        tx.commit().await?;
        return Ok(Err(LoginFailure::Throttled(wait)));
    }
    let user = match (verified, human) {
        (true, Some(user)) => user,
        _ => {
            if lower.len() <= 64 {
                store::insert_login_failure(&mut tx, &lower, address, &at.to_text()).await?;
            }
            tx.commit().await?;
            return Ok(Err(LoginFailure::BadCredentials));
        }
    };
    store::remember_login_address(&mut tx, user.id, address, &at.to_text()).await?;
    store::revoke_session(&mut tx, pre.id, &at.to_text()).await?;
    let (_, cookie) = insert_session(ctx, &mut tx, Some(user.id), None).await?;
    tx.commit().await?;
    Ok(Ok(cookie))
}

/// Logs out: the nonce is consumed and the session revoked server-side.
pub async fn logout(ctx: &Ctx, session: &WebSession, nonce: &str) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    consume_nonce(ctx, &mut tx, session.id, nonce, "logout", "").await?;
    store::revoke_session(&mut tx, session.id, &ctx.now().to_text()).await?;
    tx.commit().await?;
    Ok(())
}
