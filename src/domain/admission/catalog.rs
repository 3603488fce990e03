//! The MCP capability catalog: data, not code. Parsed from TOML, checked for
//! its invariants, identified by the SHA-256 of its text.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::domain::proposal::sha256_hex;

/// The catalog Writ embeds; operators may replace it.
pub const DEFAULT_CATALOG: &str = include_str!("catalog.toml");

/// How an MCP's safe reads reach the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Writ assembles a read-only context packet (needs a project grant).
    BoundedContextPacket,
    /// Passed as prompt context; consumes no MCP runtime.
    PlanningContextOnly,
}

impl Delivery {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::BoundedContextPacket => "bounded_context_packet",
            Delivery::PlanningContextOnly => "planning_context_only",
        }
    }
}

/// One MCP of the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpEntry {
    /// Delivery of its safe reads.
    pub delivery: Delivery,
    /// Capabilities that are safe reads.
    #[serde(default)]
    pub safe_reads: BTreeSet<String>,
    /// Capabilities that are planning context only (Writ's own write path).
    #[serde(default)]
    pub planning_only: BTreeSet<String>,
    /// Alias → canonical capability.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// Deferred live-MCP families: resource → operations (`root` is the bare
    /// `<mcp>.<op>` form).
    #[serde(default)]
    pub deferred: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    mcp: BTreeMap<String, McpEntry>,
}

/// A loaded, checked catalog.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// MCP id → entry.
    pub mcps: BTreeMap<String, McpEntry>,
    /// SHA-256 of the catalog text.
    pub version: String,
    /// The text it was loaded from.
    pub text: String,
}

/// Operations a safe read may use.
pub const SAFE_OPERATIONS: [&str; 4] = ["read", "list", "search", "get"];

impl Catalog {
    /// Parses and checks a catalog; the error names the broken invariant.
    pub fn load(text: &str) -> Result<Catalog, String> {
        let file: CatalogFile = toml_parse(text)?;
        let catalog = Catalog {
            mcps: file.mcp,
            version: sha256_hex(text.as_bytes()),
            text: text.to_owned(),
        };
        catalog.check()?;
        Ok(catalog)
    }

    /// The embedded default catalog.
    pub fn default_catalog() -> Catalog {
        Catalog::load(DEFAULT_CATALOG).expect("the embedded catalog satisfies its invariants")
    }

    fn check(&self) -> Result<(), String> {
        for (id, entry) in &self.mcps {
            if id.is_empty() || id != &id.to_ascii_lowercase() || id.contains(char::is_whitespace) {
                return Err(format!("MCP id {id:?} must be lowercase without spaces"));
            }
            let prefix = format!("{id}.");
            for cap in entry
                .safe_reads
                .iter()
                .chain(&entry.planning_only)
                .chain(entry.aliases.values())
            {
                if !cap.starts_with(&prefix) {
                    return Err(format!("{cap:?} is not in the {id} namespace"));
                }
            }
            for cap in &entry.safe_reads {
                let op = cap.rsplit('.').next().unwrap_or("");
                if !SAFE_OPERATIONS.contains(&op) {
                    return Err(format!(
                        "safe read {cap:?} uses operation {op:?}, not read|list|search|get"
                    ));
                }
                if entry.deferred_pair(cap, id) {
                    return Err(format!("safe read {cap:?} is also a deferred pair"));
                }
            }
            for alias in entry.aliases.keys() {
                if !alias.starts_with(&prefix) {
                    return Err(format!("alias {alias:?} is not in the {id} namespace"));
                }
            }
        }
        Ok(())
    }
}

impl McpEntry {
    /// True when `cap` (normalized, in this MCP's namespace) is a registered
    /// deferred (resource, operation) pair.
    pub fn deferred_pair(&self, cap: &str, mcp_id: &str) -> bool {
        let Some(rest) = cap.strip_prefix(mcp_id).and_then(|r| r.strip_prefix('.')) else {
            return false;
        };
        let (resource, op) = match rest.split_once('.') {
            None => ("root", rest),
            Some((_, op)) if op.contains('.') => return false,
            Some((resource, op)) => (resource, op),
        };
        !resource.is_empty()
            && !op.is_empty()
            && self
                .deferred
                .get(resource)
                .is_some_and(|ops| ops.contains(op))
    }
}

fn toml_parse(text: &str) -> Result<CatalogFile, String> {
    use figment::Figment;
    use figment::providers::{Format, Toml};
    Figment::from(Toml::string(text))
        .extract::<CatalogFile>()
        .map_err(|e| format!("catalog: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_loads() {
        let c = Catalog::default_catalog();
        assert_eq!(c.version.len(), 64);
        assert_eq!(c.mcps.len(), 2);
        assert!(c.mcps["github"].deferred_pair("github.pull_requests.create", "github"));
        assert!(c.mcps["filesystem"].deferred_pair("filesystem.write", "filesystem"));
        assert!(!c.mcps["github"].deferred_pair("github.actions.merge", "github"));
        assert!(!c.mcps["github"].deferred_pair("github.__proto__.write", "github"));
    }

    #[test]
    fn invariants_refuse_broken_catalogs() {
        let unsafe_read =
            "[mcp.x]\ndelivery = \"planning_context_only\"\nsafe_reads = [\"x.data.write\"]\n";
        assert!(
            Catalog::load(unsafe_read)
                .unwrap_err()
                .contains("operation")
        );
        let overlap = "[mcp.x]\ndelivery = \"planning_context_only\"\nsafe_reads = [\"x.data.read\"]\n[mcp.x.deferred]\ndata = [\"read\"]\n";
        assert!(Catalog::load(overlap).unwrap_err().contains("deferred"));
        let foreign =
            "[mcp.x]\ndelivery = \"planning_context_only\"\nsafe_reads = [\"y.data.read\"]\n";
        assert!(Catalog::load(foreign).unwrap_err().contains("namespace"));
        assert!(Catalog::load("[mcp.x]\ndelivery = \"teleport\"\n").is_err());
    }
}
