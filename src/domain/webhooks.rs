//! Webhooks' pure rules (docs/events.md "Webhooks"): a subscription's
//! patterns and URL, the safe-target classifier, Standard Webhooks secrets
//! and signatures, the retry schedule, and the Slack line.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::events::parse_type_filter;

/// The longest subscription URL.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 500;
/// The most type or repository patterns of one subscription.
pub const MAX_PATTERNS: usize = 50;
/// Consecutive failed deliveries after which a subscription is disabled.
pub const DISABLE_AFTER_FAILED_DELIVERIES: i64 = 20;
/// How long a rotated-out secret still signs.
pub const ROTATION_OVERLAP_SECONDS: i64 = 24 * 3600;

/// A subscription URL that may be stored: `https://` (or `http://` where
/// private targets are allowed), a host, no credentials, no fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    pub url: url::Url,
    /// The host as in the URL (an IP literal without brackets, or a name).
    pub host: String,
    pub port: u16,
}

/// Checks a subscription URL; the message names what is wrong.
pub fn parse_url(raw: &str, allow_private: bool) -> Result<TargetUrl, String> {
    if raw.len() > MAX_URL_BYTES {
        return Err(format!("url must be at most {MAX_URL_BYTES} bytes"));
    }
    let url = url::Url::parse(raw).map_err(|_| "url must be an absolute URL".to_owned())?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => {
            return Err(
                "url must be https:// (http:// only where private targets are allowed)".into(),
            );
        }
        _ => return Err("url must be https://".into()),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url must not hold credentials".into());
    }
    if url.fragment().is_some() {
        return Err("url must not have a fragment".into());
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err("url must name a host".into()),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| "url must have a port".to_owned())?;
    Ok(TargetUrl { url, host, port })
}

/// What kind of address a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Routable on the internet.
    Public,
    Loopback,
    /// RFC 1918, shared (100.64/10), unique local (fc00::/7), and the
    /// ranges never routed publicly (documentation, benchmarking,
    /// reserved, multicast, broadcast).
    Private,
    LinkLocal,
    Unspecified,
    /// An IPv4 address inside IPv6 (`::ffff:a.b.c.d`, `64:ff9b::/96`).
    Mapped,
}

/// The class of `ip` (a pure function: nothing is resolved or connected).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if ip.is_private()
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224
    {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let segments = ip.segments();
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.to_ipv4_mapped().is_some() || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        AddressClass::Mapped
    } else if segments[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if segments[0] & 0xfe00 == 0xfc00
        || segments[0] & 0xff00 == 0xff00
        || (segments[0] == 0x2001 && segments[1] == 0x0db8)
        || segments[..6] == [0, 0, 0, 0, 0, 0]
    {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

/// The address a reserved name stands for, if it is one (RFC 6761):
/// `localhost` is loopback, and names under `.invalid` never resolve.
/// `Err` for `.invalid`; `Ok(None)` for any other name.
pub fn reserved_name(host: &str) -> Result<Option<IpAddr>, String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "invalid" || host.ends_with(".invalid") {
        return Err("the target's host name is under .invalid, which never resolves".into());
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Ok(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    Ok(None)
}

/// Whether Writ may connect to `ip`: public addresses always, the others
/// only where private targets are allowed.
pub fn may_connect(ip: IpAddr, allow_private: bool) -> bool {
    allow_private || classify(ip) == AddressClass::Public
}

/// A subscription's `types`: each an event type or a `prefix.*` pattern;
/// the exact types they name (empty: every type).
pub fn parse_types(patterns: &[String]) -> Result<Vec<&'static str>, String> {
    if patterns.len() > MAX_PATTERNS {
        return Err(format!("types: at most {MAX_PATTERNS} patterns"));
    }
    let mut types = Vec::new();
    for p in patterns {
        let named = (!p.contains(','))
            .then(|| parse_type_filter(p))
            .flatten()
            .ok_or_else(|| format!("types: {:?} is no event type or prefix.* pattern", shown(p)))?;
        for t in named {
            if !types.contains(&t) {
                types.push(t);
            }
        }
    }
    Ok(types)
}

/// A repository pattern: `owner/name` or `owner/*`, lowercased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPattern {
    pub owner: String,
    /// `None` for `owner/*`.
    pub name: Option<String>,
}

/// A subscription's `repos` (empty: every repository, and the events of
/// none).
pub fn parse_repos(patterns: &[String]) -> Result<Vec<RepoPattern>, String> {
    if patterns.len() > MAX_PATTERNS {
        return Err(format!("repos: at most {MAX_PATTERNS} patterns"));
    }
    let part_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    patterns
        .iter()
        .map(|p| {
            let bad = || format!("repos: {:?} must be owner/name or owner/*", shown(p));
            let (owner, name) = p.split_once('/').ok_or_else(bad)?;
            if !part_ok(owner) || !(name == "*" || part_ok(name)) {
                return Err(bad());
            }
            Ok(RepoPattern {
                owner: owner.to_ascii_lowercase(),
                name: (name != "*").then(|| name.to_ascii_lowercase()),
            })
        })
        .collect()
}

fn shown(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// A new signing secret from `bytes` (24 to 64 random bytes): `whsec_` and
/// their base64.
pub fn new_secret(bytes: &[u8]) -> String {
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// The HMAC key of a secret: the base64-decoded part after `whsec_`.
pub fn key_of(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix("whsec_")?).ok()
}

/// One Standard Webhooks signature: `v1,` and the base64 of
/// HMAC-SHA256(key, "{id}.{timestamp}.{body}").
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: one signature per key (the current
/// secret's first), space-separated.
pub fn signature_header(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| signature(k, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The delay before attempt `made + 1`, after `made` attempts (≥ 1): the
/// schedule's entry (its last one repeated), moved by up to ±20 % by
/// `jitter` (in −1..=1).
pub fn retry_delay(made: u32, schedule: &[u64], jitter: f64) -> Duration {
    let index = (made.max(1) as usize - 1).min(schedule.len().saturating_sub(1));
    let base = schedule.get(index).copied().unwrap_or(60) as f64;
    Duration::from_secs_f64((base * (1.0 + 0.2 * jitter.clamp(-1.0, 1.0))).max(0.0))
}

/// The one-line text of the `slack` format.
pub fn slack_text(
    kind: &str,
    repository: Option<&str>,
    grant: Option<(i64, &str)>,
    actor: Option<&str>,
    page: Option<&str>,
) -> String {
    let mut text = format!("Writ: {kind}");
    if let Some(repo) = repository {
        text.push_str(&format!(" on {repo}"));
    }
    if let Some((id, state)) = grant {
        text.push_str(&format!(", grant #{id} ({state})"));
    }
    if let Some(actor) = actor {
        text.push_str(&format!(" by {actor}"));
    }
    if let Some(page) = page {
        text.push_str(&format!(" <{page}>"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_are_classified_without_connecting() {
        use AddressClass::*;
        for (addr, class) in [
            ("93.184.216.34", Public),
            ("8.8.8.8", Public),
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", Private),
            ("192.0.2.1", Private),
            ("198.18.0.1", Private),
            ("224.0.0.1", Private),
            ("255.255.255.255", Private),
            ("169.254.169.254", LinkLocal),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::1", Loopback),
            ("::", Unspecified),
            ("fe80::1", LinkLocal),
            ("fd00::1", Private),
            ("fc12::1", Private),
            ("ff02::1", Private),
            ("2001:db8::1", Private),
            ("::ffff:127.0.0.1", Mapped),
            ("::ffff:8.8.8.8", Mapped),
            ("64:ff9b::a00:1", Mapped),
            ("2606:4700:4700::1111", Public),
        ] {
            assert_eq!(classify(ip(addr)), class, "{addr}");
            assert_eq!(may_connect(ip(addr), false), class == Public, "{addr}");
            assert!(may_connect(ip(addr), true), "{addr}");
        }
    }

    #[test]
    fn urls_must_be_https_unless_private_targets_are_allowed() {
        let t = parse_url("https://hooks.example.com:8443/writ?x=1", false).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("hooks.example.com", 8443));
        assert_eq!(parse_url("https://[::1]/", false).unwrap().host, "::1");
        assert!(parse_url("http://hooks.example.com/", false).is_err());
        assert_eq!(parse_url("http://127.0.0.1:9/", true).unwrap().port, 9);
        for bad in [
            "ftp://x/",
            "hooks.example.com",
            "https://user:pw@hooks.example.com/",
            "https://hooks.example.com/#frag",
            "https://",
        ] {
            assert!(parse_url(bad, true).is_err(), "{bad}");
        }
        assert!(parse_url(&format!("https://a.example/{}", "x".repeat(2048)), true).is_err());
    }

    #[test]
    fn patterns_name_types_and_repositories() {
        let types = parse_types(&["grant.*".into(), "submission.created".into()]).unwrap();
        assert_eq!(types.len(), 7);
        assert!(parse_types(&["grant.*,x".into()]).is_err());
        assert!(parse_types(&["nope".into()]).is_err());
        assert_eq!(parse_types(&[]).unwrap(), Vec::<&str>::new());
        let repos = parse_repos(&["Alice/*".into(), "acme/Widgets".into()]).unwrap();
        assert_eq!(
            repos,
            [
                RepoPattern {
                    owner: "alice".into(),
                    name: None
                },
                RepoPattern {
                    owner: "acme".into(),
                    name: Some("widgets".into())
                },
            ]
        );
        for bad in ["alice", "alice/", "/x", "a/b/c", "a b/c", "*/x"] {
            assert!(parse_repos(&[bad.into()]).is_err(), "{bad}");
        }
    }

    /// The Standard Webhooks specification's example: secret, id,
    /// timestamp, body and the signature it gives.
    #[test]
    fn signatures_match_the_standard_webhooks_example() {
        let key = key_of("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let two = signature_header(&[key.clone(), vec![1, 2, 3]], "m", 1, b"{}");
        assert_eq!(two.split(' ').count(), 2);
        assert!(two.starts_with(&signature(&key, "m", 1, b"{}")));
        assert_eq!(key_of("no-prefix"), None);
        let secret = new_secret(&[7u8; 32]);
        assert!(secret.starts_with("whsec_"));
        assert_eq!(key_of(&secret).unwrap(), vec![7u8; 32]);
    }

    #[test]
    fn retries_follow_the_schedule_with_bounded_jitter() {
        let schedule = [5, 30, 120];
        assert_eq!(retry_delay(1, &schedule, 0.0), Duration::from_secs(5));
        assert_eq!(retry_delay(2, &schedule, 0.0), Duration::from_secs(30));
        assert_eq!(retry_delay(9, &schedule, 0.0), Duration::from_secs(120));
        assert_eq!(retry_delay(1, &schedule, 1.0), Duration::from_secs(6));
        assert_eq!(retry_delay(1, &schedule, -1.0), Duration::from_secs(4));
        assert_eq!(retry_delay(1, &schedule, 9.0), Duration::from_secs(6));
    }
}
