//! Strict JSON request bodies: `application/json` only, at most 1 MiB, a
//! JSON object, unknown fields and wrong types refused, NUL refused anywhere.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::service::{Error, Result};

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Reads and parses a JSON body into `T` (which denies unknown fields).
pub async fn strict_json<T: DeserializeOwned>(headers: &HeaderMap, body: Body) -> Result<T> {
    let bytes = read_body(headers, body).await?;
    parse_json(&bytes)
}

/// Reads a JSON body's bytes after checking its content type and size.
pub async fn read_body(headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(Error::Invalid(
            "Content-Type must be application/json".into(),
        ));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(Error::TooLarge);
    }
    axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|e| {
        if e.into_inner().is::<http_body_util::LengthLimitError>() {
            Error::TooLarge
        } else {
            Error::Invalid("could not read the request body".into())
        }
    })
}

/// Parses JSON bytes strictly; the message names the problem, never the input.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let value: T = serde_json::from_slice(bytes).map_err(|e| Error::Invalid(describe(&e)))?;
    // serde reads a struct from an array of its fields too (`["acme/x"]`
    // for `{"to": "acme/x"}`); every body is an object.
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(Error::Invalid("the body must be a JSON object".into()));
    }
    if contains_nul(bytes) {
        return Err(Error::Invalid("strings must not contain U+0000".into()));
    }
    Ok(value)
}

/// True when the JSON text escapes U+0000 (raw NUL is invalid JSON already).
fn contains_nul(bytes: &[u8]) -> bool {
    // `\u0000` written with any hex case; a preceding odd run of backslashes
    // would make it literal text, so count them.
    let mut i = 0;
    while i + 6 <= bytes.len() {
        if bytes[i] == b'\\' {
            if bytes[i + 1] == b'u' && bytes[i + 2..i + 6] == *b"0000" {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

fn describe(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax | Category::Eof => "the body is not valid JSON",
        Category::Data => {
            let text = e.to_string();
            if text.starts_with("unknown field") {
                return format!("unknown field: {}", field_name(&text));
            }
            if text.starts_with("missing field") {
                return format!("missing field: {}", field_name(&text));
            }
            if text.starts_with("duplicate field") {
                return format!("duplicate field: {}", field_name(&text));
            }
            "a field has the wrong JSON type or value"
        }
        Category::Io => "could not read the request body",
    };
    format!("{what} (line {}, column {})", e.line(), e.column())
}

/// The backquoted field name serde puts first in its message, bounded.
fn field_name(text: &str) -> String {
    let name = text.split('`').nth(1).unwrap_or("?");
    let safe: String = name
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect();
    safe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Transfer {
        to: String,
    }

    /// Found by the `json_body` fuzz target: `[""]` was read as a body.
    #[test]
    fn bodies_are_objects() {
        let ok = parse_json::<Transfer>(br#" {"to":"acme/x"}"#).unwrap();
        assert_eq!(ok.to, "acme/x");
        for body in [&br#"["acme/x"]"#[..], br#" ["acme/x"] "#] {
            let err = parse_json::<Transfer>(body).unwrap_err();
            assert_eq!(err.message(), "the body must be a JSON object");
        }
        let err = parse_json::<Transfer>(br#"[1]"#).unwrap_err();
        assert_eq!(err.code(), "invalid_input");
    }

    #[test]
    fn nul_detection() {
        assert!(contains_nul(br#"{"a":"x\u0000"}"#));
        assert!(!contains_nul(br#"{"a":"x\\u0000"}"#));
        assert!(!contains_nul(br#"{"a":"\u0001"}"#));
    }
}
