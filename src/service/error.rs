//! The error every use case returns; `http` turns it into a JSON body or a
//! page. Messages are written by Writ: never a credential, a raw database
//! error or a request body.

use crate::domain::grant::Refusal;
use crate::store::StoreError;

use super::view::GrantView;

/// Result of a use case.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a use case did not succeed.
#[derive(Debug)]
pub enum Error {
    /// 401: no credential, or a bad one.
    Unauthenticated,
    /// 403 `agent_only`: a human's token on a bot route.
    AgentOnly,
    /// 403 `insufficient_scope`: missing scope, or the reducer does not reach.
    InsufficientScope(&'static str),
    /// 403 `forbidden`: the principal may not do this.
    Forbidden(&'static str),
    /// 404: missing, or not visible to the caller.
    NotFound,
    /// 400 `invalid_input`.
    Invalid(String),
    /// 400 `unsupported_proposal`.
    UnsupportedProposal(&'static str),
    /// 409 with the grant's current state.
    Refused {
        /// Which rule refused.
        refusal: Refusal,
        /// The grant as it is now.
        grant: Box<GrantView>,
    },
    /// 409 `admission_blocked`, with the grant and the evaluation that blocked.
    AdmissionBlocked {
        /// The grant as it is now.
        grant: Box<GrantView>,
        /// The package evaluation that blocked.
        admission: Box<super::admission::PackageView>,
    },
    /// 409 for non-grant conflicts (duplicate login, repository...).
    Conflict(String),
    /// 413 `payload_too_large`.
    TooLarge,
    /// 422: a form field is invalid (browser forms only).
    Unprocessable(String),
    /// 429: too many failed logins.
    Throttled,
    /// 429 `too_many_waiters`: the token (or the server) holds as many
    /// waiting feed requests as it may.
    TooManyWaiters,
    /// 503 `audit_unavailable`: the audit record could not be written, so
    /// the call was refused (fail closed); logged like an internal error.
    AuditUnavailable(anyhow::Error),
    /// 503 `storage_unavailable`: the database cannot serve now (lost
    /// connection, full disk, I/O error, read-only file); nothing was
    /// changed and the same request may be retried. Logged with its cause.
    StorageUnavailable(String),
    /// 500: logged with the request id, answered generically.
    Internal(anyhow::Error),
}

impl Error {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Error::Unauthenticated => 401,
            Error::AgentOnly | Error::InsufficientScope(_) | Error::Forbidden(_) => 403,
            Error::NotFound => 404,
            Error::Invalid(_) | Error::UnsupportedProposal(_) => 400,
            Error::Refused { .. } | Error::Conflict(_) | Error::AdmissionBlocked { .. } => 409,
            Error::TooLarge => 413,
            Error::Unprocessable(_) => 422,
            Error::Throttled | Error::TooManyWaiters => 429,
            Error::Internal(_) => 500,
            Error::AuditUnavailable(_) | Error::StorageUnavailable(_) => 503,
        }
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Unauthenticated => "unauthenticated",
            Error::AgentOnly => "agent_only",
            Error::InsufficientScope(_) => "insufficient_scope",
            Error::Forbidden(_) => "forbidden",
            Error::NotFound => "not_found",
            Error::Invalid(_) | Error::Unprocessable(_) => "invalid_input",
            Error::UnsupportedProposal(_) => "unsupported_proposal",
            Error::Refused { refusal, .. } => refusal.code(),
            Error::Conflict(_) => "conflict",
            Error::AdmissionBlocked { .. } => "admission_blocked",
            Error::TooLarge => "payload_too_large",
            Error::Throttled => "throttled",
            Error::TooManyWaiters => "too_many_waiters",
            Error::Internal(_) => "internal",
            Error::AuditUnavailable(_) => "audit_unavailable",
            Error::StorageUnavailable(_) => "storage_unavailable",
        }
    }

    /// A bounded sentence for the caller.
    pub fn message(&self) -> String {
        let text = match self {
            Error::Unauthenticated => "authentication required".to_owned(),
            Error::AgentOnly => "this route is for agent (bot) accounts only".to_owned(),
            Error::InsufficientScope(what) => format!("the token does not allow this: {what}"),
            Error::Forbidden(what) => (*what).to_owned(),
            Error::NotFound => "not found".to_owned(),
            Error::Invalid(what) | Error::Unprocessable(what) | Error::Conflict(what) => {
                what.clone()
            }
            Error::UnsupportedProposal(what) => (*what).to_owned(),
            Error::Refused { refusal, .. } => refusal.message().to_owned(),
            Error::AdmissionBlocked { admission, .. } => {
                let first = admission
                    .decisions
                    .iter()
                    .find(|d| d.status == crate::domain::admission::Status::Blocked);
                match first {
                    Some(d) => format!("admission blocked ({}): {}", d.decision_id, d.reason),
                    None => "admission blocked".to_owned(),
                }
            }
            Error::TooLarge => "request body is larger than 1 MiB".to_owned(),
            Error::Throttled => "too many failed attempts; try again later".to_owned(),
            Error::TooManyWaiters => {
                "too many requests are waiting for events; wait for one to end".to_owned()
            }
            Error::Internal(_) => "internal error".to_owned(),
            Error::AuditUnavailable(_) => {
                "the call could not be recorded in the audit, so it was not made; retry later"
                    .to_owned()
            }
            Error::StorageUnavailable(_) => {
                "the database is unavailable; nothing was changed, retry later".to_owned()
            }
        };
        truncate(text, 512)
    }

    /// Shorthand for a 409 `admission_blocked`.
    pub fn admission_blocked(grant: GrantView, admission: super::admission::PackageView) -> Error {
        Error::AdmissionBlocked {
            grant: Box::new(grant),
            admission: Box::new(admission),
        }
    }

    /// Shorthand for a 409 refusal carrying the grant.
    pub fn refused(refusal: Refusal, grant: GrantView) -> Error {
        Error::Refused {
            refusal,
            grant: Box::new(grant),
        }
    }
}

impl From<StoreError> for Error {
    fn from(err: StoreError) -> Error {
        match err {
            StoreError::Unavailable(why) => Error::StorageUnavailable(why),
            other => Error::Internal(other.into()),
        }
    }
}

impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Error {
        Error::Internal(err)
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

impl From<crate::domain::ids::ParseError> for Error {
    fn from(err: crate::domain::ids::ParseError) -> Error {
        Error::Invalid(err.0.to_owned())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Internal(cause) => write!(f, "internal error: {cause:#}"),
            Error::AuditUnavailable(cause) => write!(f, "audit unavailable: {cause:#}"),
            Error::StorageUnavailable(cause) => write!(f, "storage unavailable: {cause}"),
            other => write!(f, "{} ({})", other.message(), other.code()),
        }
    }
}

impl std::error::Error for Error {}
