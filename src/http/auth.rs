//! Reads `Authorization` (`token`, `Bearer`, or `Basic login:token`) and
//! resolves the caller. Cookies never authenticate an API route.

use axum::http::{HeaderMap, header};
use base64::Engine;

use crate::service::auth::{Caller, Credential, authenticate};
use crate::service::{Ctx, Error, Result};

/// Resolves the API caller from the request headers, or 401.
pub async fn api_caller(ctx: &Ctx, headers: &HeaderMap) -> Result<Caller> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Error::Unauthenticated);
    };
    let value = value.to_str().map_err(|_| Error::Unauthenticated)?;
    let (scheme, rest) = value.split_once(' ').ok_or(Error::Unauthenticated)?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
        authenticate(ctx, Credential::Token(rest)).await
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| Error::Unauthenticated)?;
        let decoded = String::from_utf8(decoded).map_err(|_| Error::Unauthenticated)?;
        let (login, secret) = decoded.split_once(':').ok_or(Error::Unauthenticated)?;
        authenticate(ctx, Credential::Basic { login, secret }).await
    } else {
        Err(Error::Unauthenticated)
    }
}
