//! Browser form bodies must be UTF-8 once percent-decoded. The form
//! extractors decode lossily (an invalid sequence becomes U+FFFD), which
//! would store text the user never typed; this layer refuses such a body
//! with 422 before any handler runs, so nothing changes.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;

use super::error_response;
use super::templates::Chrome;
use crate::http::json::BODY_LIMIT;
use crate::service::Error;

/// True when every key and value of an `application/x-www-form-urlencoded`
/// body is UTF-8 after percent-decoding. The separators `&`, `=` and `+`
/// are ASCII, so decoding the body as a whole decides it for every part.
pub fn decodes_as_utf8(body: &[u8]) -> bool {
    percent_encoding::percent_decode(body).decode_utf8().is_ok()
}

fn is_form(req: &Request) -> bool {
    req.method() == Method::POST
        && req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| {
                essence
                    .trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
}

/// Reads a form POST's body (at most 1 MiB, else 413) and refuses it with
/// 422 unless it is UTF-8; otherwise hands it on unchanged.
pub async fn refuse_invalid_utf8(req: Request, next: Next) -> Response {
    if !is_form(&req) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let too_large = e.into_inner().is::<http_body_util::LengthLimitError>();
            let err = if too_large {
                Error::TooLarge
            } else {
                Error::Unprocessable("the form could not be read".into())
            };
            let mut response = error_response(&err, Chrome::default());
            if too_large {
                // The unread rest of the body would poison the connection.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            return response;
        }
    };
    if !decodes_as_utf8(&bytes) {
        return error_response(
            &Error::Unprocessable("the form is not valid UTF-8 text; nothing was changed".into()),
            Chrome::default(),
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::decodes_as_utf8;

    #[test]
    fn utf8_after_percent_decoding() {
        assert!(decodes_as_utf8(b""));
        assert!(decodes_as_utf8(b"login=alice&password=a+b%26c"));
        assert!(decodes_as_utf8(b"task=%C3%A9t%C3%A9"));
        assert!(decodes_as_utf8("task=été".as_bytes()));
        assert!(decodes_as_utf8(b"task=%EF%BF%BD"));
        assert!(decodes_as_utf8(b"bad=%zz"));
        assert!(!decodes_as_utf8(b"task=%FF"));
        assert!(!decodes_as_utf8(b"task=%C3"));
        assert!(!decodes_as_utf8(b"task=%C3&x=%A9"));
        assert!(!decodes_as_utf8(b"%80=x"));
        assert!(!decodes_as_utf8(b"task=\xff"));
        assert!(!decodes_as_utf8(b"task=%ED%A0%80"));
    }
}
