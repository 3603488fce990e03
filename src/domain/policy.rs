//! Per-agent MCP tool grants (policy v2): which tools a bot may call through
//! `/mcp`, on which repositories. Pure: the grant model, the TOML policy file,
//! validation of a grant set, repository resolution and the allow/deny
//! decision. See `docs/policy.md`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

/// The five MCP tools, one per agent route.
pub const TOOLS: [&str; 5] = [
    "list_agent_work_grants",
    "get_agent_work_grant",
    "confirm_agent_work_grant",
    "submit_agent_work_proposal",
    "get_agent_work_submission",
];

/// Most grants one agent may hold.
pub const MAX_GRANTS: usize = 64;
/// Most repository patterns across one agent's grants.
pub const MAX_PATTERNS: usize = 256;
/// Longest grant id, in characters.
pub const MAX_GRANT_ID: usize = 64;
/// Longest repository pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 256;

/// One grant: these tools on these repositories (`[]` = any repository,
/// including calls that name none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolGrant {
    /// Named in audit records; unique within the agent's set.
    pub id: String,
    /// `owner/name` or `owner/*`, matched case-insensitively.
    pub repos: Vec<String>,
    /// Tool names, matched case-insensitively.
    pub tools: Vec<String>,
}

/// One agent's entry of a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPolicy {
    /// The bot's login.
    pub login: String,
    /// Its whole grant set.
    pub grants: Vec<ToolGrant>,
}

/// The repository a call targets, from its `owner` and `repo` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoTarget {
    /// Owner login, trimmed.
    pub owner: String,
    /// Repository name, trimmed.
    pub repo: String,
}

impl RepoTarget {
    /// `owner/repo`, as recorded in the audit.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }
}

/// Why a call was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The agent holds no grant at all.
    NoGrants,
    /// Not one of the five tools.
    UnknownTool,
    /// No grant names the tool.
    ToolNotGranted,
    /// Grants name the tool, but none covers the resolved repository.
    RepositoryNotGranted,
    /// The call names no repository and every grant naming the tool is
    /// restricted to repositories.
    NoRepository,
}

impl Denial {
    /// Stable reason code for the audit record.
    pub fn code(&self) -> &'static str {
        match self {
            Denial::NoGrants => "no_grants",
            Denial::UnknownTool => "unknown_tool",
            Denial::ToolNotGranted => "tool_not_in_any_grant",
            Denial::RepositoryNotGranted => "repository_not_in_grant",
            Denial::NoRepository => "no_repository",
        }
    }

    /// A sentence for the caller.
    pub fn message(&self) -> &'static str {
        match self {
            Denial::NoGrants => "the agent holds no tool grant",
            Denial::UnknownTool => "no such tool",
            Denial::ToolNotGranted => "no grant of the agent names this tool",
            Denial::RepositoryNotGranted => {
                "no grant naming this tool covers the requested repository"
            }
            Denial::NoRepository => {
                "the call names no repository and no grant naming this tool allows any repository"
            }
        }
    }
}

/// The outcome of checking one call against an agent's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by this grant (the first matching one, in set order).
    Allow {
        /// The matched grant's id.
        grant_id: String,
    },
    /// Denied (default deny).
    Deny(Denial),
}

impl Decision {
    /// True for `Allow`.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// A parsed repository pattern; anything else is malformed and never matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern<'a> {
    Exact(&'a str, &'a str),
    Owner(&'a str),
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}`, the shape of logins and names.
fn is_name(raw: &str, max: usize) -> bool {
    let b = raw.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn parse_pattern(raw: &str) -> Option<Pattern<'_>> {
    let (owner, repo) = raw.split_once('/')?;
    if !is_name(owner, 39) {
        return None;
    }
    if repo == "*" {
        Some(Pattern::Owner(owner))
    } else if is_name(repo, 100) {
        Some(Pattern::Exact(owner, repo))
    } else {
        None
    }
}

/// True when `raw` is a well-formed pattern (`owner/name` or `owner/*`).
pub fn is_well_formed(raw: &str) -> bool {
    parse_pattern(raw).is_some()
}

/// True when the pattern matches the target (never for a malformed one).
pub fn pattern_matches(raw: &str, target: &RepoTarget) -> bool {
    match parse_pattern(raw) {
        Some(Pattern::Exact(owner, repo)) => {
            owner.eq_ignore_ascii_case(&target.owner) && repo.eq_ignore_ascii_case(&target.repo)
        }
        Some(Pattern::Owner(owner)) => owner.eq_ignore_ascii_case(&target.owner),
        None => false,
    }
}

/// The repository of a call: its `owner` and `repo` arguments, both strings
/// that are non-empty once trimmed. Nothing else is consulted.
pub fn resolve_repository(args: &serde_json::Map<String, serde_json::Value>) -> Option<RepoTarget> {
    let part = |key: &str| {
        args.get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Some(RepoTarget {
        owner: part("owner")?,
        repo: part("repo")?,
    })
}

fn grant_has_tool(grant: &ToolGrant, tool: &str) -> bool {
    grant.tools.iter().any(|t| t.eq_ignore_ascii_case(tool))
}

fn grant_covers(grant: &ToolGrant, target: Option<&RepoTarget>) -> bool {
    if grant.repos.is_empty() {
        return true;
    }
    match target {
        Some(target) => grant.repos.iter().any(|p| pattern_matches(p, target)),
        None => false,
    }
}

/// Decides one call: allowed iff some grant names the tool and covers the
/// repository. Default deny.
pub fn decide(grants: &[ToolGrant], tool: &str, target: Option<&RepoTarget>) -> Decision {
    if !TOOLS.iter().any(|t| t.eq_ignore_ascii_case(tool)) {
        return Decision::Deny(Denial::UnknownTool);
    }
    if grants.is_empty() {
        return Decision::Deny(Denial::NoGrants);
    }
    let naming: Vec<&ToolGrant> = grants.iter().filter(|g| grant_has_tool(g, tool)).collect();
    if naming.is_empty() {
        return Decision::Deny(Denial::ToolNotGranted);
    }
    match naming.into_iter().find(|g| grant_covers(g, target)) {
        Some(g) => Decision::Allow {
            grant_id: g.id.clone(),
        },
        None if target.is_none() => Decision::Deny(Denial::NoRepository),
        None => Decision::Deny(Denial::RepositoryNotGranted),
    }
}

/// Checks a whole grant set; the message names the first problem. Malformed
/// repository patterns are accepted (they never match; see
/// [`malformed_patterns`]), but not ones with control characters, which
/// would forge lines of the log that names them.
pub fn validate(grants: &[ToolGrant]) -> Result<(), String> {
    if grants.len() > MAX_GRANTS {
        return Err(format!("at most {MAX_GRANTS} grants per agent"));
    }
    let patterns: usize = grants.iter().map(|g| g.repos.len()).sum();
    if patterns > MAX_PATTERNS {
        return Err(format!(
            "at most {MAX_PATTERNS} repository patterns per agent"
        ));
    }
    let mut ids = HashSet::new();
    for grant in grants {
        let n = grant.id.chars().count();
        if n == 0 || n > MAX_GRANT_ID || grant.id.chars().any(char::is_control) {
            return Err(format!(
                "grant id must be 1-{MAX_GRANT_ID} characters without control characters"
            ));
        }
        if !ids.insert(grant.id.as_str()) {
            return Err(format!("grant id {:?} is used twice", grant.id));
        }
        if grant.tools.is_empty() {
            return Err(format!("grant {:?} names no tool", grant.id));
        }
        let mut tools = HashSet::new();
        for tool in &grant.tools {
            let Some(known) = TOOLS.iter().find(|t| t.eq_ignore_ascii_case(tool)) else {
                return Err(format!(
                    "grant {:?}: tool must be one of {}",
                    grant.id,
                    TOOLS.join(", ")
                ));
            };
            if !tools.insert(*known) {
                return Err(format!("grant {:?} names {known} twice", grant.id));
            }
        }
        for pattern in &grant.repos {
            if pattern.len() > MAX_PATTERN_LEN || pattern.chars().any(char::is_control) {
                return Err(format!(
                    "grant {:?}: a repository pattern is longer than {MAX_PATTERN_LEN} bytes or contains a control character",
                    grant.id
                ));
            }
        }
    }
    Ok(())
}

/// The patterns of a set that are malformed and therefore never match.
pub fn malformed_patterns(grants: &[ToolGrant]) -> Vec<&str> {
    grants
        .iter()
        .flat_map(|g| g.repos.iter())
        .filter(|p| !is_well_formed(p))
        .map(String::as_str)
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoot {
    mcp: FileMcp,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMcp {
    #[serde(default)]
    agents: Vec<FileAgent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAgent {
    id: String,
    grants: Option<Vec<FileGrant>>,
    tools: Option<Vec<String>>,
    repos: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGrant {
    id: Option<String>,
    repos: Vec<String>,
    tools: Vec<String>,
}

/// The id of the `n`th grant (from 0) of a set that gives it none.
pub fn default_grant_id(n: usize) -> String {
    format!("grants[{n}]")
}

/// Parses a TOML policy file (`[[mcp.agents]]` with nested
/// `[[mcp.agents.grants]]`, or flat `tools` + `repos` as one grant `flat`)
/// and validates each agent's set. Unknown keys are refused, so a typo never
/// silently widens a grant.
pub fn parse_policy_toml(text: &str) -> Result<Vec<AgentPolicy>, String> {
    use figment::Figment;
    use figment::providers::{Format, Toml};
    let root: FileRoot = Figment::from(Toml::string(text))
        .extract()
        .map_err(|e| format!("policy file: {e}"))?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(root.mcp.agents.len());
    for agent in root.mcp.agents {
        if !seen.insert(agent.id.to_ascii_lowercase()) {
            return Err(format!("policy file: agent {:?} appears twice", agent.id));
        }
        let grants = match (agent.grants, agent.tools, agent.repos) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(format!(
                    "policy file: agent {:?} mixes grants with flat tools/repos",
                    agent.id
                ));
            }
            (Some(grants), None, None) => grants
                .into_iter()
                .enumerate()
                .map(|(n, g)| ToolGrant {
                    id: g.id.unwrap_or_else(|| default_grant_id(n)),
                    repos: g.repos,
                    tools: g.tools,
                })
                .collect(),
            (None, Some(tools), Some(repos)) => vec![ToolGrant {
                id: "flat".to_owned(),
                repos,
                tools,
            }],
            (None, Some(_), None) | (None, None, Some(_)) => {
                return Err(format!(
                    "policy file: agent {:?}: flat tools and repos go together",
                    agent.id
                ));
            }
            (None, None, None) => Vec::new(),
        };
        validate(&grants).map_err(|e| format!("policy file: agent {:?}: {e}", agent.id))?;
        out.push(AgentPolicy {
            login: agent.id,
            grants,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
