//! The proposal a human prepares and a bot agrees to, and its digest: the
//! lowercase hex SHA-256 of its RFC 8785 (JCS) canonical JSON.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::ids::Digest;

/// The only proposal schema Writ speaks.
pub const SCHEMA: &str = "agent_work_grant.v1";
/// The only proposal version Writ speaks.
pub const VERSION: i64 = 1;
/// Largest `max_submissions` accepted (within I-JSON's exact integers).
pub const MAX_SUBMISSIONS_LIMIT: i64 = 1_000_000;
/// Largest number of MCP requirements in one proposal.
pub const MAX_REQUIREMENTS: usize = 64;
/// Largest number of capabilities named by one requirement.
pub const MAX_CAPABILITIES: usize = 64;

/// The exact object the digest covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Always [`VERSION`].
    pub version: i64,
    /// The grant this proposal belongs to, so a digest never confirms another.
    pub grant_id: i64,
    /// The repository the work targets.
    pub repository: ProposalRepository,
    /// The bot that may do the work.
    pub agent: ProposalAgent,
    /// What to do, whole UTF-8.
    pub task: String,
    /// A short description, whole UTF-8.
    pub summary: String,
    /// Bounds on the work.
    pub limits: Limits,
    /// The MCP servers the work needs, and how.
    pub mcp_requirements: Vec<McpRequirement>,
}

/// `{id, full_name}` of the repository inside a proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalRepository {
    /// Repository id.
    pub id: i64,
    /// `owner/name` at preparation time.
    pub full_name: String,
}

/// `{id, login}` of the agent inside a proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalAgent {
    /// The bot's user id.
    pub id: i64,
    /// The bot's login.
    pub login: String,
}

/// Limits of a grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// How many submissions the grant admits.
    pub max_submissions: i64,
    /// RFC 3339 UTC instant after which confirm and submit are refused.
    pub expires_at: Option<String>,
}

/// `required` or `optional`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    /// The work needs the MCP.
    Required,
    /// The work can use the MCP.
    Optional,
}

/// What happens when the MCP is not available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Proceed without it (only meaningful for optional requirements).
    ContinueWithoutMcp,
    /// Stop and ask a person.
    AskUser,
    /// Stop.
    Block,
}

/// One MCP requirement of a proposal; its array position is its identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpRequirement {
    /// The MCP server id, e.g. `filesystem`.
    pub mcp_id: String,
    /// The specialist role inside the work, 1–64 characters.
    pub agent: String,
    /// Required or optional.
    pub requirement: Requirement,
    /// Capabilities as written by the planner (normalized by the classifier).
    pub capabilities: Vec<String>,
    /// What to do without the MCP.
    pub fallback: Fallback,
    /// Capabilities that must never be used by the package.
    #[serde(default)]
    pub prohibited_capabilities: Vec<String>,
    /// Planning text handed to the agent; grants nothing.
    #[serde(default)]
    pub prompt_context: Option<String>,
}

impl Proposal {
    /// The RFC 8785 canonical JSON of this proposal.
    pub fn canonical_json(&self) -> String {
        // Serializing plain strings, integers, arrays and objects cannot fail.
        serde_jcs::to_string(self).expect("a proposal always serializes")
    }

    /// The proposal digest: lowercase hex SHA-256 of the canonical JSON.
    pub fn digest(&self) -> Digest {
        Digest::from_computed(sha256_hex(self.canonical_json().as_bytes()))
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Parses the requirement list a human typed as JSON: an array of objects
/// (serde alone would also read a requirement from an array of its fields).
pub fn parse_requirements(text: &str) -> Result<Vec<McpRequirement>, serde_json::Error> {
    let mut parser = serde_json::Deserializer::from_str(text);
    let reqs = super::json::objects(&mut parser)?;
    parser.end()?;
    Ok(reqs)
}

/// Validates the requirement list a human typed; returns the first problem.
pub fn validate_requirements(reqs: &[McpRequirement]) -> Result<(), String> {
    if reqs.len() > MAX_REQUIREMENTS {
        return Err(format!("at most {MAX_REQUIREMENTS} MCP requirements"));
    }
    for (i, r) in reqs.iter().enumerate() {
        let at = format!("mcp_requirements[{i}]");
        if r.mcp_id.trim().is_empty() || r.mcp_id.chars().count() > 64 {
            return Err(format!("{at}.mcp_id must be 1-64 characters"));
        }
        if r.agent.trim().is_empty() || r.agent.chars().count() > 64 {
            return Err(format!("{at}.agent must be 1-64 characters"));
        }
        if r.capabilities.len() > MAX_CAPABILITIES
            || r.prohibited_capabilities.len() > MAX_CAPABILITIES
        {
            return Err(format!(
                "{at} names more than {MAX_CAPABILITIES} capabilities"
            ));
        }
        let texts = r
            .capabilities
            .iter()
            .chain(&r.prohibited_capabilities)
            .map(String::as_str)
            .chain([r.mcp_id.as_str(), r.agent.as_str()])
            .chain(r.prompt_context.as_deref());
        for text in texts {
            if text.contains('\0') || text.len() > 64 * 1024 {
                return Err(format!("{at} holds a NUL character or an oversized text"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTORS: &str = include_str!("../../tests/data/digest-vectors.json");

    #[test]
    fn spec_vectors() {
        let doc: serde_json::Value = serde_json::from_str(VECTORS).unwrap();
        let vectors = doc["vectors"].as_array().unwrap();
        assert!(vectors.len() >= 3);
        for v in vectors {
            let proposal: Proposal = serde_json::from_value(v["proposal"].clone()).unwrap();
            assert_eq!(proposal.canonical_json(), v["canonical"].as_str().unwrap());
            assert_eq!(
                proposal.digest().as_str(),
                v["proposal_digest"].as_str().unwrap()
            );
        }
    }

    #[test]
    fn digest_covers_grant_id() {
        let doc: serde_json::Value = serde_json::from_str(VECTORS).unwrap();
        let mut p: Proposal =
            serde_json::from_value(doc["vectors"][0]["proposal"].clone()).unwrap();
        let before = p.digest();
        p.grant_id += 1;
        assert_ne!(before, p.digest());
    }

    #[test]
    fn requirement_defaults_and_strictness() {
        let r: McpRequirement = serde_json::from_str(
            r#"{"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":[],"fallback":"ask_user"}"#,
        )
        .unwrap();
        assert!(r.prohibited_capabilities.is_empty() && r.prompt_context.is_none());
        assert!(
            serde_json::from_str::<McpRequirement>(
                r#"{"mcp_id":"x","agent":"a","requirement":"optional","capabilities":[],"fallback":"block","extra":1}"#
            )
            .is_err()
        );
        assert!(
            parse_requirements(r#"[["github","docs","optional",[],"ask_user"]]"#).is_err(),
            "a requirement written as an array of its fields (found by fuzzing)"
        );
        let listed = parse_requirements(&format!("[{}]", serde_json::to_string(&r).unwrap()));
        assert_eq!(listed.unwrap(), vec![r.clone()]);
        let long = McpRequirement {
            agent: "a".repeat(65),
            ..r.clone()
        };
        assert!(validate_requirements(&[long]).is_err());
        assert!(validate_requirements(&[r]).is_ok());
    }
}
