//! Per-agent MCP tool grants (policy v2): read and replace a bot's grant set
//! under the setup privilege, seed sets from a TOML policy file at start, and
//! decide a tool call for the MCP endpoint. Every change appends a history
//! row in the same transaction.
//!
//! Repository patterns are stored exactly as given. A malformed one (`*/x`,
//! `a/b*`, whitespace, extra slashes...) is accepted and simply never
//! matches: refusing it would not make the policy any safer (default deny
//! already holds), and keeping it lets an operator see what was written.
//! Such patterns are logged as warnings when set. A pattern with a control
//! character is refused (it could forge a log line).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admin::Setup;
use super::events;
use super::{Ctx, Error, Result};
use crate::domain::policy::{self, Decision, RepoTarget, ToolGrant};
use crate::store::Tx;
use crate::store::policy as store;
use crate::store::principals::{self, UserRow};

/// One grant as the admin API and the CLI show it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolGrantBody {
    /// Unique within the agent's set; 1-64 characters; named in audit records.
    pub id: String,
    /// `owner/name` or `owner/*`, case-insensitive; `[]` means any repository
    /// (and calls that name none). Malformed patterns never match.
    pub repos: Vec<String>,
    /// Tool names among the five MCP tools.
    pub tools: Vec<String>,
}

/// One grant as written to the admin API or the CLI's file.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolGrantInput {
    /// Unique within the agent's set; 1-64 characters; named in audit
    /// records. Without one, the grant is named `grants[<n>]` after its
    /// position (from 0), as in a policy file.
    #[schema(value_type = Option<super::schema::ToolGrantIdText>, inline)]
    pub id: Option<String>,
    /// `owner/name` or `owner/*`, case-insensitive; `[]` means any repository
    /// (and calls that name none). Malformed patterns never match; control
    /// characters are refused.
    #[schema(value_type = Vec<super::schema::RepoPatternText>, inline)]
    pub repos: Vec<String>,
    /// Tool names among the five MCP tools.
    #[schema(value_type = super::schema::ToolNames, inline)]
    pub tools: Vec<String>,
}

/// `PUT /api/v1/admin/agents/{login}/tool-grants`: the agent's whole new set.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolGrantsInput {
    /// At most 64 grants with at most 256 repository patterns in all.
    #[schema(value_type = super::schema::ToolGrantList, inline)]
    #[serde(deserialize_with = "crate::domain::json::objects")]
    pub grants: Vec<ToolGrantInput>,
}

/// A bot's current grant set.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolGrantsView {
    /// The bot's login.
    pub login: String,
    /// The grants, in order (`[]` when never set: the bot may call no tool).
    pub grants: Vec<ToolGrantBody>,
    /// When the set was last changed (null when never set).
    pub updated_at: Option<String>,
    /// Who changed it: a login, `cli` or `policy-file` (null when never set).
    pub updated_by: Option<String>,
}

/// What a policy file changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Agents whose set was replaced.
    pub changed: Vec<String>,
    /// Agents whose stored set already equalled the file's.
    pub unchanged: Vec<String>,
}

/// A tool call checked against the calling agent's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The repository resolved from the call's `owner` and `repo` arguments.
    pub repository: Option<RepoTarget>,
    /// Allow (with the matched grant id) or deny (with the reason).
    pub decision: Decision,
}

/// The grant set an admin wrote: a grant without an `id` is named
/// `grants[<n>]` after its position, as in a policy file.
pub fn to_domain(input: Vec<ToolGrantInput>) -> Vec<ToolGrant> {
    input
        .into_iter()
        .enumerate()
        .map(|(n, g)| ToolGrant {
            id: g.id.unwrap_or_else(|| policy::default_grant_id(n)),
            repos: g.repos,
            tools: g.tools,
        })
        .collect()
}

fn to_body(grants: Vec<ToolGrant>) -> Vec<ToolGrantBody> {
    grants
        .into_iter()
        .map(|g| ToolGrantBody {
            id: g.id,
            repos: g.repos,
            tools: g.tools,
        })
        .collect()
}

fn decode(json: &str) -> Result<Vec<ToolGrant>> {
    serde_json::from_str(json)
        .map_err(|e| Error::Internal(anyhow::anyhow!("stored tool grants do not parse: {e}")))
}

async fn bot_named(tx: &mut Tx, login: &str) -> Result<UserRow> {
    let user = principals::user_by_login(tx, login)
        .await?
        .ok_or(Error::NotFound)?;
    // Only bots are agents: a human's login names no agent.
    if user.kind != "bot" {
        return Err(Error::NotFound);
    }
    Ok(user)
}

async fn view_of(tx: &mut Tx, user: &UserRow) -> Result<ToolGrantsView> {
    let row = store::grants_of(tx, user.id).await?;
    Ok(match row {
        Some(row) => ToolGrantsView {
            login: user.login.clone(),
            grants: to_body(decode(&row.grants)?),
            updated_at: Some(row.updated_at),
            updated_by: Some(row.updated_by),
        },
        None => ToolGrantsView {
            login: user.login.clone(),
            grants: Vec::new(),
            updated_at: None,
            updated_by: None,
        },
    })
}

fn warn_malformed(login: &str, grants: &[ToolGrant]) {
    for pattern in policy::malformed_patterns(grants) {
        // `&str` fields: quoted and escaped in the log line, never raw.
        tracing::warn!(
            agent = login,
            pattern,
            "malformed repository pattern: it never matches"
        );
    }
}

/// A bot's current set (for `read:admin` tokens and the CLI).
pub async fn get(ctx: &Ctx, login: &str) -> Result<ToolGrantsView> {
    let mut tx = ctx.store.read().await?;
    let user = bot_named(&mut tx, login).await?;
    let view = view_of(&mut tx, &user).await?;
    tx.commit().await?;
    Ok(view)
}

/// Every bot's current set, by login (the admin page).
pub async fn every_bot(ctx: &Ctx) -> Result<Vec<ToolGrantsView>> {
    let mut tx = ctx.store.read().await?;
    let mut views = Vec::new();
    for bot in principals::list_bots(&mut tx).await? {
        views.push(view_of(&mut tx, &bot).await?);
    }
    tx.commit().await?;
    Ok(views)
}

/// Replaces a bot's whole set (`write:admin`, or the CLI) and records the
/// change with its author `by`.
pub async fn put(
    ctx: &Ctx,
    setup: Setup,
    login: &str,
    input: ToolGrantsInput,
    by: &str,
) -> Result<ToolGrantsView> {
    let grants = to_domain(input.grants);
    policy::validate(&grants).map_err(Error::Invalid)?;
    let json = serde_json::to_string(&grants).map_err(anyhow::Error::from)?;
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let user = bot_named(&mut tx, login).await?;
    store::replace_grants(&mut tx, user.id, &json, by, &at).await?;
    tool_grants_changed(&mut tx, setup.actor(), &user.login, &at).await?;
    let view = view_of(&mut tx, &user).await?;
    tx.commit().await?;
    warn_malformed(&user.login, &grants);
    Ok(view)
}

/// The event of an agent's tool grants replaced.
async fn tool_grants_changed(tx: &mut Tx, actor: Option<i64>, agent: &str, at: &str) -> Result<()> {
    let data = serde_json::json!({ "agent": agent });
    events::emit(tx, "tool_grants.changed", at, actor, None, None, data).await
}

/// Applies a TOML policy file (one transaction): each agent it names gets
/// the file's set, recorded as `policy-file`; sets already equal are left
/// alone; agents it does not name are untouched. Unknown logins and humans
/// are an error naming them, and nothing is applied.
pub async fn seed_from_file(ctx: &Ctx, path: &std::path::Path) -> Result<SeedReport> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Invalid(format!("cannot read policy file {}: {e}", path.display())))?;
    let agents = policy::parse_policy_toml(&text).map_err(Error::Invalid)?;
    let at = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    let mut users = Vec::with_capacity(agents.len());
    let mut unknown = Vec::new();
    for agent in &agents {
        match principals::user_by_login(&mut tx, &agent.login).await? {
            Some(user) if user.kind == "bot" => users.push(user),
            _ => unknown.push(agent.login.as_str()),
        }
    }
    if !unknown.is_empty() {
        return Err(Error::Invalid(format!(
            "policy file names logins that are not bots: {}",
            unknown.join(", ")
        )));
    }
    let mut report = SeedReport::default();
    for (agent, user) in agents.iter().zip(&users) {
        let current = match store::grants_of(&mut tx, user.id).await? {
            Some(row) => Some(decode(&row.grants)?),
            None => None,
        };
        if current.as_ref() == Some(&agent.grants) {
            report.unchanged.push(user.login.clone());
            continue;
        }
        let json = serde_json::to_string(&agent.grants).map_err(anyhow::Error::from)?;
        store::replace_grants(&mut tx, user.id, &json, "policy-file", &at).await?;
        tool_grants_changed(&mut tx, None, &user.login, &at).await?;
        report.changed.push(user.login.clone());
    }
    tx.commit().await?;
    for (agent, user) in agents.iter().zip(&users) {
        warn_malformed(&user.login, &agent.grants);
    }
    Ok(report)
}

/// Checks one tool call of agent `agent_id` inside the caller's transaction
/// (the MCP endpoint's), so the decision and its audit record share it.
pub async fn allowed_in(
    tx: &mut Tx,
    agent_id: i64,
    tool: &str,
    args: &serde_json::Map<String, serde_json::Value>,
) -> Result<Check> {
    let grants = match store::grants_of(tx, agent_id).await? {
        Some(row) => decode(&row.grants)?,
        None => Vec::new(),
    };
    let repository = policy::resolve_repository(args);
    let decision = policy::decide(&grants, tool, repository.as_ref());
    Ok(Check {
        repository,
        decision,
    })
}

/// Checks one tool call in its own read transaction.
pub async fn allowed(
    ctx: &Ctx,
    agent_id: i64,
    tool: &str,
    args: &serde_json::Map<String, serde_json::Value>,
) -> Result<Check> {
    let mut tx = ctx.store.read().await?;
    let check = allowed_in(&mut tx, agent_id, tool, args).await?;
    tx.commit().await?;
    Ok(check)
}

/// The tools named by at least one of the agent's grants (what its
/// `tools/list` shows), in the canonical order.
pub async fn granted_tools(ctx: &Ctx, agent_id: i64) -> Result<Vec<crate::domain::tools::Tool>> {
    let mut tx = ctx.store.read().await?;
    let grants = match store::grants_of(&mut tx, agent_id).await? {
        Some(row) => decode(&row.grants)?,
        None => Vec::new(),
    };
    tx.commit().await?;
    Ok(crate::domain::tools::Tool::ALL
        .into_iter()
        .filter(|tool| {
            grants
                .iter()
                .any(|g| g.tools.iter().any(|t| t.eq_ignore_ascii_case(tool.name())))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `json_body` fuzz target: a grant written as an array of
    /// its fields was read as a grant.
    #[test]
    fn grants_are_objects() {
        let parse = |text: &str| serde_json::from_str::<ToolGrantsInput>(text);
        let set =
            parse(r#"{"grants":[{"repos":["acme/x"],"tools":["get_agent_work_grant"]}]}"#).unwrap();
        assert_eq!(to_domain(set.grants)[0].id, "grants[0]");
        assert!(parse(r#"{"grants":[["g",["acme/x"],["get_agent_work_grant"]]]}"#).is_err());
        let err = parse(r#"{"grants":[{"repos":[],"tools":[],"scope":1}]}"#).unwrap_err();
        assert!(
            err.to_string().starts_with("unknown field `scope`"),
            "{err}"
        );
    }
}
