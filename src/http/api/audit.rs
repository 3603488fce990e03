//! Audit evidence routes (docs/audit.md): the signing keys, a record's
//! inclusion proof, and the verification of every seal.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;

use super::segments;
use crate::domain::ids::parse_positive_i64;
use crate::domain::scope::Scope;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::service::seal::{self, KeyView, Proof, Verification};
use crate::service::{Ctx, Error};

/// Every public key that has signed a seal, by `key_id`, oldest first
/// (public: a verifier needs no account).
#[utoipa::path(get, path = "/api/v1/audit/keys", tag = "audit", operation_id = "audit_keys",
    responses((status = 200, body = Vec<KeyView>)))]
pub async fn keys(State(ctx): State<Ctx>) -> Result<Json<Vec<KeyView>>, ApiError> {
    Ok(Json(seal::keys(&ctx).await?))
}

/// A record's inclusion proof: its leaf object, its seal, its index and the
/// RFC 9162 audit path (`read:admin`); 409 while it is not sealed yet.
#[utoipa::path(get, path = "/api/v1/admin/audit/calls/{call_id}/proof", tag = "audit", operation_id = "audit_call_proof",
    params(("call_id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = Proof), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("token" = [])))]
pub async fn proof(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Proof>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_admin(Scope::ReadAdmin)?;
    let id = parse_positive_i64(&segments(path)?)
        .ok_or_else(|| Error::Invalid("call id must be a positive decimal integer".into()))?;
    Ok(Json(seal::proof(&ctx, id).await?))
}

/// Recomputes every seal from the records in the database, as `writ audit
/// verify` does (`read:admin`); `ok` is false with the first mismatch; 404
/// when there is no seal `from - 1` to start after.
#[utoipa::path(get, path = "/api/v1/admin/audit/verify", tag = "audit", operation_id = "audit_verify",
    params(("from" = Option<crate::service::schema::PositiveId>, Query, description = "the first seal to verify (default 1)")),
    responses((status = 200, body = Verification), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn verify(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<Verification>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_admin(Scope::ReadAdmin)?;
    let mut from = None;
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        if key != "from" {
            return Err(Error::Invalid("unknown query parameter".into()).into());
        }
        let seq = parse_positive_i64(&value)
            .ok_or_else(|| Error::Invalid("from must be a positive decimal integer".into()))?;
        if from.replace(seq).is_some() {
            return Err(Error::Invalid("a query parameter is repeated".into()).into());
        }
    }
    Ok(Json(seal::verify(&ctx.store, from.unwrap_or(1)).await?))
}
