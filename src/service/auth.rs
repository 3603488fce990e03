//! Who is calling: API tokens (stored only as SHA-256, compared in constant
//! time) and human passwords (argon2id).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use subtle::ConstantTimeEq;

use super::{Ctx, Error, Result};
use crate::domain::access::Reducer;
use crate::domain::proposal::sha256_hex;
use crate::domain::scope::{Scope, ScopeSet};
use crate::store::principals;

/// A credential as presented in `Authorization`.
#[derive(Debug)]
pub enum Credential<'a> {
    /// `token <t>` or `Bearer <t>`.
    Token(&'a str),
    /// `Basic base64(login:<t>)`: the secret must be a token of that login.
    Basic {
        /// The claimed login.
        login: &'a str,
        /// The token.
        secret: &'a str,
    },
}

/// An authenticated API caller.
#[derive(Debug, Clone)]
pub struct Caller {
    /// User id.
    pub user_id: i64,
    /// Login.
    pub login: String,
    /// True for bot accounts.
    pub is_bot: bool,
    /// Site administrator.
    pub is_admin: bool,
    /// The token used.
    pub token_id: i64,
    /// The token's scopes.
    pub scopes: ScopeSet,
    /// The token's resource reducer.
    pub reducer: Reducer,
    /// The audit record of the call being made, when it is audited: the
    /// use case writes it (and its outcome) in its own transaction; see
    /// [`super::audit`].
    pub audit: Option<std::sync::Arc<super::audit::Record>>,
    /// False when the token was taken from [`TokenCache`] and its
    /// revocation not yet checked (see [`authenticate_deferred`]).
    pub verified: bool,
}

impl Caller {
    /// Refuses unless the token grants every scope in `needed`.
    pub fn require(&self, needed: &[Scope]) -> Result<()> {
        match needed.iter().find(|s| !self.scopes.grants(**s)) {
            Some(missing) => Err(Error::InsufficientScope(missing.as_str())),
            None => Ok(()),
        }
    }

    /// Refuses human callers on bot-only routes.
    pub fn require_bot(&self) -> Result<()> {
        if self.is_bot {
            Ok(())
        } else {
            Err(Error::AgentOnly)
        }
    }

    /// The agent routes' and tools' guard: refuses a human's token
    /// (`agent_only`), then a token without every scope in `needed`.
    pub fn require_agent(&self, needed: &[Scope]) -> Result<()> {
        self.require_bot()?;
        self.require(needed)
    }

    /// Refuses unless this is a site admin's token with `scope`.
    pub fn require_admin(&self, scope: Scope) -> Result<()> {
        if !self.is_admin {
            return Err(Error::Forbidden("this route needs the setup privilege"));
        }
        self.require(&[scope])
    }
}

/// Resolves a credential to its caller, or 401: the token is looked up
/// (and must not be revoked) now.
pub async fn authenticate(ctx: &Ctx, credential: Credential<'_>) -> Result<Caller> {
    let (hash, login) = hashed(credential)?;
    let row = lookup(ctx, &hash).await?;
    caller(&row, login, true)
}

/// [`authenticate`] for a route whose use case checks the token's
/// revocation in its own first statement (the route lookup of
/// `service::agent`): a token this process has seen live is taken from
/// [`TokenCache`] unverified, and its refusals must go through
/// [`super::audit::finish`], which calls [`check_before_refusal`].
pub async fn authenticate_deferred(ctx: &Ctx, credential: Credential<'_>) -> Result<Caller> {
    let (hash, login) = hashed(credential)?;
    match ctx.tokens.get(&hash) {
        Some(row) => caller(&row, login, false),
        None => caller(&*lookup(ctx, &hash).await?, login, true),
    }
}

/// Before a refusal of a caller that may be unverified is answered (or
/// audited): checks its token now, and a revoked one makes the call a 401
/// (`Err`: unaudited, as if it had been refused at the door). A success
/// needs no check: it passed the use case's own (the route lookup).
pub async fn check_before_refusal(ctx: &Ctx, caller: &Caller) -> Result<()> {
    if caller.verified {
        return Ok(());
    }
    let mut conn = ctx.store.single().await?;
    if principals::token_is_live(&mut conn, caller.token_id).await? {
        Ok(())
    } else {
        ctx.tokens.forget(caller.token_id);
        Err(Error::Unauthenticated)
    }
}

fn hashed(credential: Credential<'_>) -> Result<(String, Option<&str>)> {
    let (secret, login) = match credential {
        Credential::Token(t) => (t, None),
        Credential::Basic { login, secret } => (secret, Some(login)),
    };
    if secret.is_empty() || secret.len() > 256 {
        return Err(Error::Unauthenticated);
    }
    Ok((sha256_hex(secret.as_bytes()), login))
}

/// The live token with this hash, from the database (remembered in the
/// cache).
async fn lookup(ctx: &Ctx, hash: &str) -> Result<Arc<principals::TokenAuthRow>> {
    // One statement: no transaction needed around it.
    let mut conn = ctx.store.single().await?;
    let row = principals::token_by_hash(&mut conn, hash).await?;
    drop(conn);
    let row = row.ok_or(Error::Unauthenticated)?;
    if !bool::from(row.token_hash.as_bytes().ct_eq(hash.as_bytes())) {
        return Err(Error::Unauthenticated);
    }
    let row = Arc::new(row);
    ctx.tokens.remember(Arc::clone(&row));
    Ok(row)
}

fn caller(row: &principals::TokenAuthRow, login: Option<&str>, verified: bool) -> Result<Caller> {
    if login.is_some_and(|l| !l.eq_ignore_ascii_case(&row.login)) {
        return Err(Error::Unauthenticated);
    }
    let scopes = ScopeSet::parse(row.scopes.split_whitespace())
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored scopes: {e}")))?;
    let repositories = match &row.repositories {
        Some(json) => Some(
            serde_json::from_str::<Vec<String>>(json)
                .map_err(|e| Error::Internal(anyhow::anyhow!("stored reducer: {e}")))?,
        ),
        None => None,
    };
    Ok(Caller {
        user_id: row.user_id,
        login: row.login.clone(),
        is_bot: row.kind == "bot",
        is_admin: row.is_admin,
        token_id: row.token_id,
        scopes,
        reducer: Reducer {
            public_only: row.public_only,
            repositories,
        },
        audit: None,
        verified,
    })
}

/// Tokens this process has seen live, by the SHA-256 of their text.
///
/// Everything of a token and its user is fixed at creation (Writ changes
/// neither; users are never deleted) except the token's revocation, so an
/// entry is right forever but for that, and every use of one checks it in
/// the database: in the use case's first statement
/// ([`authenticate_deferred`]), or at once ([`authenticate`]). This is a
/// cache of facts that cannot change, not a lock or a decision: several
/// processes may share one PostgreSQL, and a token revoked by any of them
/// is refused by all at its next use.
#[derive(Debug, Default)]
pub struct TokenCache {
    by_hash: Mutex<HashMap<String, Arc<principals::TokenAuthRow>>>,
}

/// Most tokens remembered; past it the cache starts over.
const MAX_TOKENS: usize = 10_000;

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<principals::TokenAuthRow>>> {
        self.by_hash.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, hash: &str) -> Option<Arc<principals::TokenAuthRow>> {
        self.lock().get(hash).cloned()
    }

    fn remember(&self, row: Arc<principals::TokenAuthRow>) {
        let mut tokens = self.lock();
        if tokens.len() >= MAX_TOKENS {
            tokens.clear();
        }
        tokens.insert(row.token_hash.clone(), row);
    }

    fn forget(&self, token_id: i64) {
        self.lock().retain(|_, row| row.token_id != token_id);
    }
}

/// Hashes a password with argon2id and a random salt (PHC string).
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("argon2: {e}"))
}

/// Verifies a password; with no stored hash it still spends one argon2
/// verification so that unknown logins and bots take as long as a wrong
/// password.
pub fn verify_password(stored: Option<&str>, password: &str) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("writ-timing-equalizer").unwrap_or_default());
    let (phc, real) = match stored {
        Some(s) => (s, true),
        None => (dummy.as_str(), false),
    };
    let ok = PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false);
    ok && real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        let h = hash_password("pw").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password(Some(&h), "pw"));
        assert!(!verify_password(Some(&h), "nope"));
        assert!(!verify_password(None, "writ-timing-equalizer"));
    }
}
