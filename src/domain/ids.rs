//! Newtypes that parse at the edge, so an invalid value cannot travel further.

use std::fmt;

/// Why a raw value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub &'static str);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A positive signed 64-bit id written canonically: `[1-9][0-9]*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantId(pub i64);

impl GrantId {
    /// Parses a decimal path segment; zero, signs, leading zeros, spaces and
    /// overflow are refused.
    pub fn parse(raw: &str) -> Result<GrantId, ParseError> {
        parse_positive_i64(raw)
            .map(GrantId)
            .ok_or(ParseError("grant id must be a positive decimal integer"))
    }
}

/// Parses `[1-9][0-9]*` that fits an i64.
pub fn parse_positive_i64(raw: &str) -> Option<i64> {
    let bytes = raw.as_bytes();
    if bytes.is_empty() || bytes[0] == b'0' || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    raw.parse::<i64>().ok().filter(|v| *v > 0)
}

/// The request key's form as a regular expression (ECMA-262 and Rust
/// `regex` read it alike); [`RequestKey::parse`] accepts exactly what it
/// matches (checked by a unit test).
pub const REQUEST_KEY_PATTERN: &str =
    "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$";

/// Length of a digest in hex characters.
pub const DIGEST_HEX_LEN: usize = 64;

/// Longest login, in bytes (ASCII).
pub const LOGIN_MAX_LEN: usize = 39;

/// Longest repository name, in bytes (ASCII).
pub const REPO_NAME_MAX_LEN: usize = 100;

/// The characters a login or repository name may contain after its first,
/// besides ASCII letters and digits.
pub const NAME_PUNCTUATION: &str = "_.-";

/// A canonical lowercase UUIDv4 request key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestKey(String);

impl RequestKey {
    /// Accepts exactly `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx` in lowercase hex:
    /// a UUID (the `uuid` crate parses it) that is version 4, of the RFC 9562
    /// variant, and written in its canonical lowercase hyphenated form.
    pub fn parse(raw: &str) -> Result<RequestKey, ParseError> {
        const ERR: ParseError = ParseError("request_key must be a canonical lowercase UUIDv4");
        let uuid = uuid::Uuid::try_parse(raw).map_err(|_| ERR)?;
        let canonical = uuid
            .hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer())
            == raw;
        if !canonical
            || uuid.get_version() != Some(uuid::Version::Random)
            || uuid.get_variant() != uuid::Variant::RFC4122
        {
            return Err(ERR);
        }
        Ok(RequestKey(raw.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical text of the UUIDv4 made of 16 random bytes (the
    /// version and variant bits are set by `uuid`).
    pub fn from_random(bytes: [u8; 16]) -> RequestKey {
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        RequestKey(uuid.hyphenated().to_string())
    }
}

/// 64 lowercase hex characters: a SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digest(String);

impl Digest {
    /// Accepts exactly 64 lowercase hex characters.
    pub fn parse(raw: &str) -> Result<Digest, ParseError> {
        if raw.len() == DIGEST_HEX_LEN
            && raw.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        {
            Ok(Digest(raw.to_owned()))
        } else {
            Err(ParseError(
                "proposal_digest must be 64 lowercase hex characters",
            ))
        }
    }

    /// Wraps a digest computed by Writ itself.
    pub fn from_computed(hex: String) -> Digest {
        debug_assert_eq!(hex.len(), 64);
        Digest(hex)
    }

    /// The digest as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A user login: `[A-Za-z0-9][A-Za-z0-9_.-]{0,38}`; compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login(String);

impl Login {
    /// Parses a login as typed; names of Writ's own top-level routes are
    /// reserved so that `/{owner}/...` pages never shadow them.
    pub fn parse(raw: &str) -> Result<Login, ParseError> {
        if is_reserved(raw) {
            return Err(ParseError("this login is reserved"));
        }
        if is_name(raw, LOGIN_MAX_LEN) {
            Ok(Login(raw.to_owned()))
        } else {
            Err(ParseError(
                "login must match [A-Za-z0-9][A-Za-z0-9_.-]{0,38}",
            ))
        }
    }

    /// The login as typed.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lowercase form used for uniqueness and lookup.
    pub fn lower(&self) -> String {
        self.0.to_ascii_lowercase()
    }
}

/// A repository name: `[A-Za-z0-9][A-Za-z0-9_.-]{0,99}`, not `.`/`..`-like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoName(String);

impl RepoName {
    /// Parses a repository name as typed.
    pub fn parse(raw: &str) -> Result<RepoName, ParseError> {
        if is_name(raw, REPO_NAME_MAX_LEN) {
            Ok(RepoName(raw.to_owned()))
        } else {
            Err(ParseError(
                "repository name must match [A-Za-z0-9][A-Za-z0-9_.-]{0,99}",
            ))
        }
    }

    /// The name as typed.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Top-level path names no user may take, compared case-insensitively.
pub const RESERVED_LOGINS: [&str; 11] = [
    "admin", "api", "assets", "docs", "healthz", "mcp", "metrics", "readyz", "static", "user",
    "users",
];

/// True when `raw` is a reserved login (case-insensitive).
pub fn is_reserved(raw: &str) -> bool {
    RESERVED_LOGINS.iter().any(|r| r.eq_ignore_ascii_case(raw))
}

fn is_name(raw: &str, max: usize) -> bool {
    let b = raw.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || NAME_PUNCTUATION.as_bytes().contains(c))
}

/// Splits `owner/name` into its two validated parts.
pub fn parse_full_name(raw: &str) -> Result<(Login, RepoName), ParseError> {
    let (owner, name) = raw
        .split_once('/')
        .ok_or(ParseError("repository must be written owner/name"))?;
    Ok((Login::parse(owner)?, RepoName::parse(name)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_request_keys_are_canonical() {
        for bytes in [[0u8; 16], [0xff; 16], *b"0123456789abcdef"] {
            let key = RequestKey::from_random(bytes);
            assert_eq!(RequestKey::parse(key.as_str()), Ok(key.clone()));
        }
        assert_eq!(
            RequestKey::from_random([0; 16]).as_str(),
            "00000000-0000-4000-8000-000000000000"
        );
    }

    #[test]
    fn grant_ids() {
        for ok in ["1", "42", "9223372036854775807"] {
            assert!(GrantId::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "01",
            " 1",
            "1 ",
            "9223372036854775808",
            "true",
            "1.0",
            "1e3",
            "١",
        ] {
            assert!(GrantId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn request_keys() {
        assert!(RequestKey::parse("0f8fad5b-d9cb-469f-a165-70867728950e").is_ok());
        for bad in [
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "0f8fad5b-d9cb-169f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-c165-70867728950e",
            "0f8fad5bd9cb469fa16570867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950",
        ] {
            assert!(RequestKey::parse(bad).is_err(), "{bad}");
        }
    }

    /// The parser accepts exactly what [`REQUEST_KEY_PATTERN`] matches: every
    /// single-character change of a valid key, and some lengths, agree.
    #[test]
    fn request_key_parser_is_its_pattern() {
        let re = regex::Regex::new(REQUEST_KEY_PATTERN).unwrap();
        let valid = RequestKey::from_random(*b"0123456789abcdef");
        let base: Vec<char> = valid.as_str().chars().collect();
        for i in 0..base.len() {
            for c in "0489abcfgA-{ \n".chars() {
                let mut v = base.clone();
                v[i] = c;
                let s: String = v.into_iter().collect();
                assert_eq!(re.is_match(&s), RequestKey::parse(&s).is_ok(), "{s:?}");
            }
        }
        for s in ["", &valid.as_str()[1..], &format!("{}0", valid.as_str())] {
            assert_eq!(re.is_match(s), RequestKey::parse(s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn digests() {
        assert!(Digest::parse(&"a".repeat(64)).is_ok());
        assert!(Digest::parse(&"A".repeat(64)).is_err());
        assert!(Digest::parse(&"a".repeat(63)).is_err());
        assert!(Digest::parse(&"g".repeat(64)).is_err());
    }

    #[test]
    fn names() {
        assert!(Login::parse("builder-bot").is_ok());
        assert!(Login::parse(&"a".repeat(39)).is_ok());
        assert!(Login::parse(&"a".repeat(40)).is_err());
        assert!(Login::parse("-x").is_err());
        assert!(Login::parse("API").is_err());
        assert!(Login::parse("a/b").is_err());
        assert!(RepoName::parse("..").is_err());
        assert!(parse_full_name("acme/widgets").is_ok());
        assert!(parse_full_name("acme/../x").is_err());
    }
}
