//! JSON error bodies `{message, code, url}` (plus `grant` on grant 409s).
//! Internal errors are marked here and logged once, with the request id, by
//! the `log_internal_errors` middleware.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::service::Error;
use crate::service::view::GrantView;

/// Where error codes are explained.
pub const DOCS_URL: &str = "/docs/errors";

/// An error answered as JSON on `/api/v1`.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl<E: Into<Error>> From<E> for ApiError {
    fn from(err: E) -> ApiError {
        ApiError(err.into())
    }
}

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A sentence written by Writ, at most 512 bytes.
    pub message: String,
    /// Stable code, e.g. `proposal_mismatch`.
    pub code: &'static str,
    /// Documentation of the code.
    pub url: String,
    /// The grant's current state, on every 409 of a grant route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant: Option<GrantView>,
    /// The package evaluation that blocked, on `admission_blocked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<crate::service::admission::PackageView>,
}

/// Marks a response whose cause must be logged as an internal error.
#[derive(Clone, Debug)]
pub struct InternalError(pub String);

/// The JSON body of an error, as the native routes answer it (the MCP
/// endpoint puts the same body in a tool result).
pub fn error_body(err: &Error) -> ErrorBody {
    ErrorBody {
        message: err.message(),
        code: err.code(),
        url: format!("{DOCS_URL}#{}", err.code()),
        grant: match &err {
            Error::Refused { grant, .. } | Error::AdmissionBlocked { grant, .. } => {
                Some((**grant).clone())
            }
            _ => None,
        },
        admission: match &err {
            Error::AdmissionBlocked { admission, .. } => Some((**admission).clone()),
            _ => None,
        },
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let err = self.0;
        let status =
            StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = error_body(&err);
        let mut response = (status, Json(body)).into_response();
        match err {
            Error::Unauthenticated => {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"writ\", Basic realm=\"writ\""),
                );
            }
            Error::TooLarge => {
                // The unread rest of the body would poison a pooled connection.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Error::AuditUnavailable(cause) => {
                // Logged here (inside the request's span, with its id); the
                // answer stays 503 `audit_unavailable`: the call was refused
                // and may be retried.
                tracing::error!(error = %format!("{cause:#}"), "audit unavailable: call refused");
                retry_later(&mut response);
            }
            Error::StorageUnavailable(cause) => {
                storage_unavailable(&cause);
                retry_later(&mut response);
            }
            Error::Internal(cause) => {
                response
                    .extensions_mut()
                    .insert(InternalError(format!("{cause:#}")));
            }
            _ => {}
        }
        response
    }
}

/// Seconds a client is asked to wait before retrying a 503.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// Adds `Retry-After` to a 503.
pub fn retry_later(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
}

/// Logs and counts a call refused because the database could not serve
/// (`writ_storage_unavailable_total` in `/metrics`); inside the request's
/// span, so the log line carries its id.
pub fn storage_unavailable(cause: &str) {
    metrics::counter!("writ_storage_unavailable_total").increment(1);
    tracing::warn!(error = %cause, "database unavailable: call refused with 503");
}
