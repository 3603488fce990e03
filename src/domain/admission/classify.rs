//! Classifying one capability: normalize once, apply the alias, then the
//! first of six ordered rules wins.

use std::borrow::Cow;

use serde::Serialize;

use super::catalog::{Catalog, Delivery};

/// The class of one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapabilityClass {
    /// Prompt context or Writ's own write path; grants nothing.
    PlanningOnly,
    /// A safe read, delivered as a bounded packet or as planning context.
    BoundedReadOnly,
    /// A live MCP tool: a deferred product boundary.
    DeferredLiveMcp,
    /// Not something Writ knows: never treated as safe.
    Unknown,
}

/// A classified capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Classified {
    /// The normalized capability.
    pub capability: String,
    /// Its class.
    pub class: CapabilityClass,
    /// Delivery, for bounded reads.
    pub delivery_kind: Option<Delivery>,
}

/// Trim, lowercase, inner whitespace runs to `_`.
pub fn normalize(raw: &str) -> String {
    normalized(raw).into_owned()
}

/// [`normalize`], borrowing `raw` when it is normal already (ASCII, no
/// uppercase, no whitespace: the common case, with no allocation).
pub fn normalized(raw: &str) -> Cow<'_, str> {
    let trimmed = raw.trim();
    // Fast path: ASCII without whitespace, the common case (one pass).
    // Whitespace is Unicode's, as in the slow path: `is_ascii_whitespace`
    // leaves out U+000B (vertical tab).
    let (mut plain, mut upper) = (true, false);
    for b in trimmed.bytes() {
        if !b.is_ascii() || char::from(b).is_whitespace() {
            plain = false;
            break;
        }
        upper |= b.is_ascii_uppercase();
    }
    if plain {
        return if upper {
            Cow::Owned(trimmed.to_ascii_lowercase())
        } else {
            Cow::Borrowed(trimmed)
        };
    }
    let mut out = String::with_capacity(raw.len());
    let mut in_space = false;
    for c in trimmed.chars() {
        if c.is_whitespace() {
            if !in_space {
                out.push('_');
            }
            in_space = true;
        } else {
            out.extend(c.to_lowercase());
            in_space = false;
        }
    }
    Cow::Owned(out)
}

/// Normalizes and applies the alias of the MCP named by the capability's
/// namespace (so prohibitions compare alias-aware across requirements).
pub fn canonical(catalog: &Catalog, raw: &str) -> String {
    let cap = normalize(raw);
    let namespace = cap.split('.').next().unwrap_or("");
    match catalog
        .mcps
        .get(namespace)
        .and_then(|e| e.aliases.get(&cap))
    {
        Some(target) => target.clone(),
        None => cap,
    }
}

/// Classifies one capability of a requirement for MCP `mcp_id` (normalized).
pub fn classify(catalog: &Catalog, mcp_id: &str, raw: &str) -> Classified {
    let capability = canonical(catalog, raw);
    let (class, delivery_kind) = class_of(catalog, mcp_id, &capability);
    Classified {
        capability,
        class,
        delivery_kind,
    }
}

/// The six ordered rules on a canonical capability; the first match wins.
fn class_of(
    catalog: &Catalog,
    mcp_id: &str,
    capability: &str,
) -> (CapabilityClass, Option<Delivery>) {
    // 1. the requirement's MCP is not in the catalog
    let Some(entry) = catalog.mcps.get(mcp_id) else {
        return (CapabilityClass::Unknown, None);
    };
    // 2. not in that MCP's namespace
    let in_namespace = capability
        .strip_prefix(mcp_id)
        .is_some_and(|rest| rest.starts_with('.'));
    if !in_namespace {
        return (CapabilityClass::Unknown, None);
    }
    // 3. Writ's own write path
    if entry.planning_only.contains(capability) {
        return (CapabilityClass::PlanningOnly, None);
    }
    // 4. a registered deferred pair
    if entry.deferred_pair(capability, mcp_id) {
        return (CapabilityClass::DeferredLiveMcp, None);
    }
    // 5. a safe read
    if entry.safe_reads.contains(capability) {
        return (CapabilityClass::BoundedReadOnly, Some(entry.delivery));
    }
    // 6. anything else
    (CapabilityClass::Unknown, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use CapabilityClass::*;

    #[test]
    fn normalization() {
        assert_eq!(
            normalize("  FileSystem.Project.READ "),
            "filesystem.project.read"
        );
        assert_eq!(
            normalize("github.pull \t requests.read"),
            "github.pull_requests.read"
        );
    }

    /// Every whitespace character of the slow path counts on the fast path
    /// too (found by the `classify` fuzz target: U+000B was kept).
    #[test]
    fn vertical_tab_is_whitespace() {
        assert_eq!(
            normalize("github.pull\u{b}requests.read"),
            "github.pull_requests.read"
        );
        let catalog = Catalog::default_catalog();
        assert_eq!(
            classify(&catalog, "github", "github.pull\u{b}requests.read").class,
            BoundedReadOnly
        );
    }

    /// Every example row of the spec, plus the edges of each rule.
    #[test]
    fn classification_table() {
        let catalog = Catalog::default_catalog();
        let rows: &[(&str, &str, CapabilityClass, Option<Delivery>)] = &[
            (
                "filesystem",
                "filesystem.project.read",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                "filesystem.project.list",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                "filesystem.project.search",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                "filesystem.read",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                "filesystem.list",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                "filesystem.search",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            (
                "filesystem",
                " FILESYSTEM.Project.Read ",
                BoundedReadOnly,
                Some(Delivery::BoundedContextPacket),
            ),
            ("filesystem", "filesystem.project.write", PlanningOnly, None),
            ("filesystem", "filesystem.write", DeferredLiveMcp, None),
            ("filesystem", "filesystem.delete", DeferredLiveMcp, None),
            ("filesystem", "filesystem.admin", DeferredLiveMcp, None),
            ("filesystem", "filesystem.move", DeferredLiveMcp, None),
            ("filesystem", "filesystem.create", DeferredLiveMcp, None),
            (
                "filesystem",
                "filesystem.project.delete",
                DeferredLiveMcp,
                None,
            ),
            (
                "filesystem",
                "filesystem.project.admin",
                DeferredLiveMcp,
                None,
            ),
            (
                "filesystem",
                "filesystem.project.move",
                DeferredLiveMcp,
                None,
            ),
            (
                "filesystem",
                "filesystem.project.create",
                DeferredLiveMcp,
                None,
            ),
            ("filesystem", "filesystem..write", Unknown, None),
            ("filesystem", "filesystem.project.raed", Unknown, None),
            ("filesystem", "filesystem.project", Unknown, None),
            ("filesystem", "filesystem.", Unknown, None),
            ("filesystem", "github.issues.read", Unknown, None),
            (
                "github",
                "github.issues.read",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.pull_requests.read",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.contents.read",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.contents.list",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.contents.search",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.repository.read",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.repository.list",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.repository.search",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            (
                "github",
                "github.actions.read",
                BoundedReadOnly,
                Some(Delivery::PlanningContextOnly),
            ),
            ("github", "github.issues.write", DeferredLiveMcp, None),
            ("github", "github.issues.close", DeferredLiveMcp, None),
            (
                "github",
                "github.pull_requests.create",
                DeferredLiveMcp,
                None,
            ),
            (
                "github",
                "github.pull_requests.merge",
                DeferredLiveMcp,
                None,
            ),
            ("github", "github.pull_requests.list", DeferredLiveMcp, None),
            ("github", "github.contents.delete", DeferredLiveMcp, None),
            ("github", "github.repository.update", DeferredLiveMcp, None),
            ("github", "github.actions.dispatch", DeferredLiveMcp, None),
            ("github", "github.branches.read", DeferredLiveMcp, None),
            ("github", "github.settings.get", DeferredLiveMcp, None),
            ("github", "github.secrets.rotate", DeferredLiveMcp, None),
            ("github", "github.workflows.run", DeferredLiveMcp, None),
            ("github", "github.actions.merge", Unknown, None),
            ("github", "github.__proto__.write", Unknown, None),
            ("github", "github.constructor.read", Unknown, None),
            ("github", "github.issues.read.extra", Unknown, None),
            ("github", "github.write", Unknown, None),
            ("github", "filesystem.project.read", Unknown, None),
            ("gitlab", "gitlab.issues.read", Unknown, None),
            ("__proto__", "__proto__.read", Unknown, None),
        ];
        for (mcp, cap, class, delivery) in rows {
            let got = classify(&catalog, mcp, cap);
            assert_eq!(
                (got.class, got.delivery_kind),
                (*class, *delivery),
                "{mcp} {cap}"
            );
        }
        assert_eq!(
            classify(&catalog, "filesystem", "filesystem.read").capability,
            "filesystem.project.read"
        );
    }
}
