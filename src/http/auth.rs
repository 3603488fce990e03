//! Reads `Authorization` (`token`, `Bearer`, or `Basic login:token`) and
//! resolves the caller. Cookies never authenticate an API route.

use axum::http::{HeaderMap, header};
use base64::Engine;

use crate::service::auth::{Caller, Credential, authenticate, authenticate_deferred};
use crate::service::{Ctx, Error, Result};

/// Resolves the API caller from the request headers, or 401.
pub async fn api_caller(ctx: &Ctx, headers: &HeaderMap) -> Result<Caller> {
    resolve(ctx, headers, false).await
}

/// [`api_caller`] for the routes whose use case checks the token's
/// revocation in its route lookup: the caller may be unverified, and
/// `service::audit::finish` checks the token before it answers or audits
/// a refusal.
pub async fn api_caller_deferred(ctx: &Ctx, headers: &HeaderMap) -> Result<Caller> {
    resolve(ctx, headers, true).await
}

async fn resolve(ctx: &Ctx, headers: &HeaderMap, deferred: bool) -> Result<Caller> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Error::Unauthenticated);
    };
    let value = value.to_str().map_err(|_| Error::Unauthenticated)?;
    let (scheme, rest) = value.split_once(' ').ok_or(Error::Unauthenticated)?;
    let rest = rest.trim();
    let decoded;
    let credential =
        if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
            Credential::Token(rest)
        } else if scheme.eq_ignore_ascii_case("basic") {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| Error::Unauthenticated)?;
            decoded = String::from_utf8(bytes).map_err(|_| Error::Unauthenticated)?;
            let (login, secret) = decoded.split_once(':').ok_or(Error::Unauthenticated)?;
            Credential::Basic { login, secret }
        } else {
            return Err(Error::Unauthenticated);
        };
    if deferred {
        authenticate_deferred(ctx, credential).await
    } else {
        authenticate(ctx, credential).await
    }
}
