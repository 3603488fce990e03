//! The bounds of a client's `X-Request-Id`. The id is echoed in the answer,
//! written to every log line of the request and into audit records, so an
//! id a client chose is kept only when it is at most 128 printable ASCII
//! characters (0x21..=0x7E, no space); any other is dropped before the id
//! layer, which then gives the request a fresh random one.

use axum::extract::Request;
use axum::http::HeaderName;

/// Longest client-chosen request id kept, in characters.
pub const MAX_REQUEST_ID: usize = 128;

/// True when a client's request id may be kept as it is.
pub fn is_acceptable(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// Removes the request id header unless it is one acceptable value (several
/// values are removed too: which one is meant is ambiguous).
pub async fn drop_unacceptable(header: HeaderName, mut req: Request) -> Request {
    let mut values = req.headers().get_all(&header).iter();
    let keep = match (values.next(), values.next()) {
        (Some(one), None) => is_acceptable(one.as_bytes()),
        (None, _) => true,
        (Some(_), Some(_)) => false,
    };
    if !keep {
        req.headers_mut().remove(&header);
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(is_acceptable(b"abc-123_DEF.456"));
        assert!(is_acceptable(b"!~"));
        assert!(is_acceptable("x".repeat(128).as_bytes()));
        assert!(!is_acceptable("x".repeat(129).as_bytes()));
        assert!(!is_acceptable(b""));
        assert!(!is_acceptable(b"a b"));
        assert!(!is_acceptable(b"a\tb"));
        assert!(!is_acceptable(b"a\nb"));
        assert!(!is_acceptable(b"a\x7fb"));
        assert!(!is_acceptable("é".as_bytes()));
    }
}
