//! The proposal and its digest (`domain::proposal`: RFC 8785 canonical JSON,
//! SHA-256), and the MCP requirement list a human types into the grant form
//! (`service::forms::GrantForm::parse`, `domain::proposal::validate_requirements`),
//! on raw bytes: a JSON object is read as a proposal, any text as the
//! form's requirement field.
//!
//! - parse → canonical → parse → canonical is a fixed point, and the second
//!   parse gives back the same proposal, for every proposal whose integers
//!   stay within I-JSON's ±(2^53 − 1), as the spec requires (JCS writes
//!   numbers as doubles: beyond that range two ids share one text).
//! - The canonical text is JSON with no insignificant whitespace, members
//!   sorted by UTF-16 code units at every level, and serde_json's escaping.
//! - The digest is the lowercase hex SHA-256 of the canonical text, and it
//!   does not change when the members are reordered or the text re-indented.
//! - Changing any covered field changes the canonical text and the digest.
//! - The form accepts a requirement list exactly when it is an array of
//!   objects that parses and `validate_requirements` holds; a valid list
//!   keeps every bound.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use writ::domain::ids::Digest;
use writ::domain::proposal::{
    MAX_CAPABILITIES, MAX_REQUIREMENTS, McpRequirement, Proposal, parse_requirements,
    validate_requirements,
};
use writ::domain::time::Timestamp;
use writ::service::Error;
use writ::service::forms::GrantForm;
use writ_fuzz::assert_shown;

/// Keys in RFC 8785 order: by UTF-16 code units.
fn jcs_sorted(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            let keys: Vec<Vec<u16>> = map.keys().map(|k| k.encode_utf16().collect()).collect();
            keys.windows(2).all(|w| w[0] < w[1]) && map.values().all(jcs_sorted)
        }
        Value::Array(items) => items.iter().all(jcs_sorted),
        _ => true,
    }
}

/// The same value with every object's members in another order.
fn reordered(value: &Value, turn: usize) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if !entries.is_empty() {
                let n = turn % entries.len();
                entries.rotate_left(n);
                entries.reverse();
            }
            let out: Map<String, Value> = entries
                .into_iter()
                .map(|(k, v)| (k.clone(), reordered(v, turn / 3 + 1)))
                .collect();
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| reordered(v, turn)).collect()),
        other => other.clone(),
    }
}

/// Largest integer I-JSON (RFC 7493) holds exactly: 2^53 − 1.
const MAX_EXACT: i64 = (1 << 53) - 1;

/// Every integer of the proposal is within I-JSON's exact range, as the
/// spec requires. JCS writes numbers as IEEE doubles (RFC 8785 §3.2.2.3),
/// so larger ones are rounded and no longer identify a proposal.
fn i_json(p: &Proposal) -> bool {
    [
        p.version,
        p.grant_id,
        p.repository.id,
        p.agent.id,
        p.limits.max_submissions,
    ]
    .iter()
    .all(|n| n.unsigned_abs() <= MAX_EXACT as u64)
}

fn check_proposal(data: &[u8], p: &Proposal) {
    let canonical = p.canonical_json();
    let digest = p.digest();
    assert_eq!(
        digest.as_str(),
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    assert!(Digest::parse(digest.as_str()).is_ok());
    if !i_json(p) {
        return;
    }
    let again: Proposal = serde_json::from_str(&canonical)
        .unwrap_or_else(|e| panic!("canonical JSON does not parse back: {e}\n{canonical}"));
    assert_eq!(&again, p, "canonical JSON parses to another proposal");
    assert_eq!(again.canonical_json(), canonical, "not a fixed point");

    let value: Value = serde_json::from_str(&canonical).expect("canonical is JSON");
    assert!(
        jcs_sorted(&value),
        "members not in RFC 8785 order: {canonical}"
    );
    assert_eq!(
        serde_json::to_string(&value).expect("serializes"),
        canonical,
        "whitespace or escaping differs from the compact form"
    );

    // Stable under member order and whitespace.
    let original: Value = serde_json::from_slice(data).expect("a proposal is JSON");
    for turn in [1, data.len()] {
        let text = serde_json::to_string_pretty(&reordered(&original, turn)).expect("text");
        let moved: Proposal = serde_json::from_str(&text).expect("reordered proposal parses");
        assert_eq!(moved.digest(), digest, "digest moved with member order");
    }

    // Every covered field counts.
    let mut changed = p.clone();
    changed.grant_id = if p.grant_id < MAX_EXACT {
        p.grant_id + 1
    } else {
        1
    };
    assert_ne!(changed.digest(), digest);
    let mut changed = p.clone();
    changed.summary.push(' ');
    assert_ne!(changed.canonical_json(), canonical);
    if let Some(first) = p.mcp_requirements.first() {
        let mut changed = p.clone();
        changed.mcp_requirements.push(first.clone());
        assert_ne!(changed.digest(), digest);
    }

    // The requirements, as the form would take them.
    let text = serde_json::to_string(&p.mcp_requirements).expect("serializes");
    check_form(&text);
}

fn check_requirements(reqs: &[McpRequirement]) {
    match validate_requirements(reqs) {
        Ok(()) => {
            assert!(reqs.len() <= MAX_REQUIREMENTS);
            for r in reqs {
                for id in [&r.mcp_id, &r.agent] {
                    assert!(!id.trim().is_empty() && id.chars().count() <= 64);
                }
                assert!(r.capabilities.len() <= MAX_CAPABILITIES);
                assert!(r.prohibited_capabilities.len() <= MAX_CAPABILITIES);
                let texts = r
                    .capabilities
                    .iter()
                    .chain(&r.prohibited_capabilities)
                    .chain(r.prompt_context.as_ref());
                for t in texts {
                    assert!(!t.contains('\0') && t.len() <= 64 * 1024);
                }
            }
        }
        Err(message) => assert_shown(&Error::Unprocessable(message).message(), "requirements"),
    }
}

fn check_form(text: &str) {
    let form = GrantForm {
        agent: "builder-bot".into(),
        task: "t".into(),
        mcp_requirements: text.into(),
        ..GrantForm::default()
    };
    let at = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").expect("a time");
    let parsed = form.parse(at);
    let expected = match text.trim() {
        "" => true,
        raw => {
            let objects = serde_json::from_str::<Vec<Value>>(raw)
                .is_ok_and(|items| items.iter().all(Value::is_object));
            objects
                && serde_json::from_str::<Vec<McpRequirement>>(raw)
                    .is_ok_and(|reqs| validate_requirements(&reqs).is_ok())
        }
    };
    match parsed {
        Ok(_) => assert!(expected, "the form accepted an invalid requirement list"),
        Err(err) => {
            assert!(
                !expected,
                "the form refused a valid requirement list: {err}"
            );
            assert_eq!(err.status(), 422);
            assert_shown(&err.message(), "grant form");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = serde_json::from_slice::<Proposal>(data) {
        check_requirements(&p.mcp_requirements);
        check_proposal(data, &p);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(reqs) = parse_requirements(text) {
            let items: Vec<Value> = serde_json::from_str(text).expect("a JSON array");
            assert!(
                items.iter().all(Value::is_object),
                "a requirement not an object"
            );
            let direct: Vec<McpRequirement> = serde_json::from_str(text).expect("requirements");
            assert_eq!(reqs, direct);
            check_requirements(&reqs);
        }
        check_form(text);
    }
});
