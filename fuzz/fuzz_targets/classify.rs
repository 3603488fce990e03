//! The admission classifier (`domain::admission::classify`) on text:
//! `mcp_id`, U+001F, the capability, and optionally U+001F and a catalog in
//! TOML (`Catalog::load`; the embedded catalog when absent or refused).
//!
//! - Normalization is the spec's: trim, lowercase, every inner whitespace
//!   run to one `_`; it is idempotent, and the borrowing fast path equals it.
//! - The class is a function of the normalized capability: case, padding
//!   and the kind of whitespace do not change it.
//! - A class other than `unknown` needs the requirement's MCP in the
//!   catalog and the capability in its namespace; a bounded read is one of
//!   the catalog's safe reads, with a safe operation and the MCP's delivery,
//!   and never a deferred pair; planning-only is one of its planning-only
//!   capabilities; a deferred live MCP is a registered pair.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use writ::domain::admission::Catalog;
use writ::domain::admission::catalog::SAFE_OPERATIONS;
use writ::domain::admission::classify::{
    CapabilityClass, canonical, classify, normalize, normalized,
};
use writ_fuzz::fields;

/// The embedded catalog, loaded once.
fn embedded() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(Catalog::default_catalog)
}

/// The spec's normalization, written out (each character lowercased on its
/// own, as `char::to_lowercase` does).
fn reference(raw: &str) -> String {
    let mut out = String::new();
    let mut words = raw.split(char::is_whitespace).filter(|w| !w.is_empty());
    if let Some(first) = words.next() {
        out.extend(first.chars().flat_map(char::to_lowercase));
        for word in words {
            out.push('_');
            out.extend(word.chars().flat_map(char::to_lowercase));
        }
    }
    out
}

fn check(catalog: &Catalog, mcp_id: &str, raw: &str) {
    let norm = normalize(raw);
    assert_eq!(norm, reference(raw), "normalize({raw:?})");
    assert_eq!(normalized(raw), norm.as_str());
    assert_eq!(normalize(&norm), norm, "normalize is not idempotent");

    let got = classify(catalog, mcp_id, raw);
    assert_eq!(got.capability, canonical(catalog, raw));
    for variant in [
        norm.clone(),
        raw.to_ascii_uppercase(),
        format!(" \t{raw}\n "),
        raw.replace(' ', "\u{3000}\u{b} "),
    ] {
        assert_eq!(
            classify(catalog, mcp_id, &variant),
            got,
            "{raw:?} vs {variant:?}"
        );
    }

    let entry = catalog.mcps.get(mcp_id);
    let in_namespace = got
        .capability
        .strip_prefix(mcp_id)
        .is_some_and(|rest| rest.starts_with('.'));
    if got.class != CapabilityClass::Unknown {
        assert!(entry.is_some(), "classified for an MCP outside the catalog");
        assert!(in_namespace, "classified outside the {mcp_id} namespace");
    }
    assert_eq!(
        got.delivery_kind.is_some(),
        got.class == CapabilityClass::BoundedReadOnly
    );
    let Some(entry) = entry else { return };
    match got.class {
        CapabilityClass::BoundedReadOnly => {
            assert!(entry.safe_reads.contains(&got.capability));
            let op = got.capability.rsplit('.').next().unwrap_or("");
            assert!(SAFE_OPERATIONS.contains(&op), "unsafe operation {op:?}");
            assert_eq!(got.delivery_kind, Some(entry.delivery));
            assert!(!entry.deferred_pair(&got.capability, mcp_id));
        }
        CapabilityClass::PlanningOnly => {
            assert!(entry.planning_only.contains(&got.capability));
        }
        CapabilityClass::DeferredLiveMcp => {
            assert!(entry.deferred_pair(&got.capability, mcp_id));
            assert!(!entry.planning_only.contains(&got.capability));
        }
        CapabilityClass::Unknown => {
            if in_namespace {
                assert!(!entry.safe_reads.contains(&got.capability));
                assert!(!entry.planning_only.contains(&got.capability));
                assert!(!entry.deferred_pair(&got.capability, mcp_id));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let [mcp_id, raw, toml] = fields(text, 3)[..] else {
        unreachable!("three fields")
    };
    let loaded = Catalog::load(toml).ok().filter(|_| !toml.is_empty());
    let catalog = loaded.as_ref().unwrap_or_else(|| embedded());
    check(catalog, mcp_id, raw);
    // The requirement's MCP id as a planner might write it.
    check(catalog, mcp_id.trim(), raw);
});
