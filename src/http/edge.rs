//! Rules every request meets before any handler, and every answer after:
//! a path or query that decodes to U+0000 or to bytes that are not UTF-8 is
//! refused with 400 before any query runs (PostgreSQL refuses the byte in
//! text, SQLite would store or compare it: both must answer the same), and
//! every 4xx on an API path carries the JSON error body, whichever layer
//! wrote it (the router's 405, an extractor's rejection).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, DOCS_URL};
use super::web;
use crate::service::Error;

/// True for a path the JSON API or the MCP endpoint serves (also when a
/// client doubled the leading slash, `//api/v1/…`).
pub fn is_api_path(path: &str) -> bool {
    let path = path.trim_start_matches('/');
    path.starts_with("api/") || path == "api" || path == "mcp" || path.starts_with("mcp/")
}

/// Why a percent-encoded path or query is refused, if it is.
pub fn refusal(encoded: &str) -> Option<&'static str> {
    match percent_encoding::percent_decode_str(encoded).decode_utf8() {
        Err(_) => Some("the URL must be UTF-8 once percent-decoded"),
        Ok(text) if text.contains('\0') => Some("the URL must not contain U+0000"),
        Ok(_) => None,
    }
}

/// True when an answer already has a JSON body.
pub fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// Refuses a request whose path or query is not text (see the module doc):
/// 400 `invalid_input`, as JSON on API paths and as a page elsewhere.
pub async fn refuse_binary_urls(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let why = refusal(uri.path()).or_else(|| uri.query().and_then(refusal));
    match why {
        None => next.run(req).await,
        Some(why) => {
            let err = Error::Invalid(why.to_owned());
            if is_api_path(uri.path()) {
                ApiError(err).into_response()
            } else {
                web::error_response(&err, web::templates::Chrome::default())
            }
        }
    }
}

/// Gives a 4xx answer on an API path that is not JSON yet (the router's
/// 405, a rejection written as plain text) the JSON error body of its
/// status; its headers (`Allow`, …) are kept. The original text is not
/// echoed: it may quote the request.
pub async fn json_api_errors(req: Request, next: Next) -> Response {
    if !is_api_path(req.uri().path()) || req.uri().path().trim_start_matches('/') == "mcp" {
        return next.run(req).await;
    }
    let response = next.run(req).await;
    let status = response.status();
    if !status.is_client_error() || is_json(&response) {
        return response;
    }
    let (code, message) = match status {
        StatusCode::NOT_FOUND => ("not_found", "not found"),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this route does not take that method; see the Allow header",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body is larger than 1 MiB"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ("invalid_input", "Content-Type must be application/json")
        }
        StatusCode::UNAUTHORIZED => ("unauthenticated", "authentication required"),
        StatusCode::FORBIDDEN => ("forbidden", "not allowed"),
        _ => ("invalid_input", "the request is malformed"),
    };
    let body = serde_json::json!({
        "message": message,
        "code": code,
        "url": format!("{DOCS_URL}#{code}"),
    });
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(
        parts,
        Body::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_non_utf8_urls_are_refused() {
        assert!(refusal("/api/v1/repos/acme%00/widgets").is_some());
        assert!(refusal("state=all%00").is_some());
        assert!(refusal("/acme/widgets%FF").is_some());
        assert!(refusal("/api/v1/repos/acme/widgets").is_none());
        assert!(refusal("state=caf%C3%A9").is_none());
    }

    #[test]
    fn api_paths_include_doubled_slashes_and_mcp() {
        assert!(is_api_path("/api/v1/agent-work-grants"));
        assert!(is_api_path("//api/v1/agent-work-grants"));
        assert!(is_api_path("/mcp"));
        assert!(!is_api_path("/acme/widgets"));
        assert!(!is_api_path("/apiary/x"));
    }
}
