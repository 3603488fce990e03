//! The five agent tools, shared by the MCP endpoint and the stdio adapter:
//! names, descriptions, strict input schemas and the input check that runs
//! before any native work. Pure: no IO.
//!
//! Inputs are strict: an object with only the documented members, the
//! required ones present, strings where strings are expected, and integers
//! that are JSON integers (no `1.0`, no `"1"`), positive and within i64 for
//! ids and pages. Values are otherwise judged by the native code path (the
//! proposal triple, the request key and the title go through the same
//! parsers as the native routes), so the two answer alike.

use serde_json::{Map, Value, json};

use crate::domain::scope::Scope;

/// Page size of the list tool (the native default).
pub const LIST_LIMIT: u64 = 30;

/// Largest page number (the native list's bound: a larger page is 400).
pub const MAX_PAGE: u64 = 1_000_000_000;

/// Longest `owner` or `repo` argument accepted, in characters.
pub const MAX_NAME_CHARS: usize = 100;

/// One of the five tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `list_agent_work_grants`
    List,
    /// `get_agent_work_grant`
    Get,
    /// `confirm_agent_work_grant`
    Confirm,
    /// `submit_agent_work_proposal`
    Submit,
    /// `get_agent_work_submission`
    Readback,
}

impl Tool {
    /// All five, in the order `tools/list` shows them.
    pub const ALL: [Tool; 5] = [
        Tool::List,
        Tool::Get,
        Tool::Confirm,
        Tool::Submit,
        Tool::Readback,
    ];

    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::List => "list_agent_work_grants",
            Tool::Get => "get_agent_work_grant",
            Tool::Confirm => "confirm_agent_work_grant",
            Tool::Submit => "submit_agent_work_proposal",
            Tool::Readback => "get_agent_work_submission",
        }
    }

    /// Finds a tool by name; names match case-insensitively, like the
    /// policy's tool lists.
    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// The token scopes the tool (and its native route) needs
    /// (native-api.md, "Agent routes").
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            Tool::List | Tool::Get => &[Scope::ReadRepository],
            Tool::Confirm | Tool::Submit => &[Scope::ReadRepository, Scope::WriteIssue],
            Tool::Readback => &[Scope::ReadRepository, Scope::ReadIssue],
        }
    }

    /// True for the tools whose native operation writes.
    pub fn writes(self) -> bool {
        matches!(self, Tool::Confirm | Tool::Submit)
    }

    /// What the tool does, for `tools/list`.
    pub fn description(self) -> &'static str {
        match self {
            Tool::List => {
                "List your agent work grants (30 per page, by id). Returns grants, total_count, \
                 has_more and next_page; the list is not a snapshot."
            }
            Tool::Get => {
                "Read one of your agent work grants: its state, proposal and proposal_digest. \
                 With wait_for_change (seconds, at most 25) and the state_revision you hold, \
                 the answer comes as soon as the grant's revision differs, or at the end with \
                 the grant unchanged."
            }
            Tool::Confirm => {
                "Confirm the proposal you read, repeating its schema, version and digest \
                 exactly. Safe to retry with the same digest."
            }
            Tool::Submit => {
                "Submit work under an active grant: creates exactly one issue per request_key. \
                 Choose a fresh UUIDv4 request_key per piece of work and reuse it on every retry; \
                 if delivery is uncertain, read back with get_agent_work_submission."
            }
            Tool::Readback => {
                "Read back the receipt of a submission by its request_key, in every grant state."
            }
        }
    }

    fn members(self) -> &'static [Member] {
        use Member as M;
        match self {
            Tool::List => &[M::Page, M::State],
            Tool::Get => &[
                M::Owner,
                M::Repo,
                M::GrantId,
                M::WaitForChange,
                M::StateRevision,
            ],
            Tool::Confirm => &[
                M::Owner,
                M::Repo,
                M::GrantId,
                M::Schema,
                M::Version,
                M::Digest,
            ],
            Tool::Submit => &[
                M::Owner,
                M::Repo,
                M::GrantId,
                M::Schema,
                M::Version,
                M::Digest,
                M::RequestKey,
                M::Title,
                M::Body,
            ],
            Tool::Readback => &[M::Owner, M::Repo, M::GrantId, M::RequestKey],
        }
    }

    /// The JSON Schema of the tool's arguments (`additionalProperties:
    /// false`, every member but the list's required).
    pub fn input_schema(self) -> Map<String, Value> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for member in self.members() {
            properties.insert(member.name().to_owned(), member.schema());
            if !member.optional() {
                required.push(Value::from(member.name()));
            }
        }
        let schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
        match schema {
            Value::Object(map) => map,
            _ => unreachable!("a JSON object literal"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Page,
    State,
    Owner,
    Repo,
    GrantId,
    Schema,
    Version,
    Digest,
    RequestKey,
    Title,
    Body,
    WaitForChange,
    StateRevision,
}

impl Member {
    fn optional(self) -> bool {
        matches!(
            self,
            Member::Page | Member::State | Member::WaitForChange | Member::StateRevision
        )
    }

    fn name(self) -> &'static str {
        match self {
            Member::Page => "page",
            Member::State => "state",
            Member::Owner => "owner",
            Member::Repo => "repo",
            Member::GrantId => "grant_id",
            Member::Schema => "proposal_schema",
            Member::Version => "proposal_version",
            Member::Digest => "proposal_digest",
            Member::RequestKey => "request_key",
            Member::Title => "title",
            Member::Body => "body",
            Member::WaitForChange => "wait_for_change",
            Member::StateRevision => "state_revision",
        }
    }

    fn schema(self) -> Value {
        let positive = json!({"type": "integer", "minimum": 1, "maximum": i64::MAX});
        let page = json!({"type": "integer", "minimum": 1, "maximum": MAX_PAGE});
        let name = json!({"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS});
        match self {
            Member::Page => page,
            Member::State => json!({
                "type": "string",
                "enum": ["awaiting_agent", "awaiting_human", "active", "revoked", "all"],
                "description": "default: every state but revoked",
            }),
            Member::Owner => name,
            Member::Repo => name,
            Member::GrantId => positive,
            Member::Schema => json!({"type": "string", "const": "agent_work_grant.v1"}),
            Member::Version => json!({"type": "integer", "const": 1}),
            Member::Digest => json!({"type": "string", "pattern": "^[0-9a-f]{64}$"}),
            Member::RequestKey => json!({
                "type": "string",
                "description": "canonical lowercase UUIDv4 chosen by you, reused on retries",
            }),
            Member::Title => json!({"type": "string", "minLength": 1}),
            Member::Body => json!({"type": "string"}),
            Member::WaitForChange => json!({
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_TOOL_WAIT,
                "description": "seconds to wait for the grant's state_revision to differ from \
                                state_revision (required with it)",
            }),
            Member::StateRevision => json!({
                "type": "integer",
                "minimum": 0,
                "maximum": i64::MAX,
                "description": "the state_revision you hold (with wait_for_change)",
            }),
        }
    }

    fn kind(self) -> Kind {
        match self {
            Member::Page | Member::GrantId => Kind::Positive,
            Member::Version | Member::StateRevision => Kind::Integer,
            Member::WaitForChange => Kind::Wait,
            Member::Owner | Member::Repo => Kind::Name,
            _ => Kind::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Positive,
    Integer,
    /// 0 to [`MAX_TOOL_WAIT`] seconds.
    Wait,
    Name,
    Text,
}

/// The repository and grant a call names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Owner login, as given.
    pub owner: String,
    /// Repository name, as given.
    pub repo: String,
    /// Positive grant id.
    pub grant_id: i64,
}

/// The proposal triple, as raw JSON values for the native parser.
#[derive(Debug, Clone, PartialEq)]
pub struct TripleArgs {
    /// `proposal_schema` (a string).
    pub schema: Value,
    /// `proposal_version` (a JSON integer).
    pub version: Value,
    /// `proposal_digest` (a string).
    pub digest: Value,
}

/// A call's checked arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// List a page.
    List {
        /// 1-based page.
        page: u64,
        /// The state filter as given.
        state: Option<String>,
    },
    /// Read one grant, after waiting for a change if asked.
    Get(Target, Option<WaitForChange>),
    /// Confirm the proposal.
    Confirm(Target, TripleArgs),
    /// Submit work.
    Submit {
        /// The grant.
        target: Target,
        /// The proposal triple.
        triple: TripleArgs,
        /// The bot's request key.
        request_key: String,
        /// Issue title.
        title: String,
        /// Issue body.
        body: String,
    },
    /// Read back a receipt.
    Readback {
        /// The grant.
        target: Target,
        /// The request key.
        request_key: String,
    },
}

impl Input {
    /// The grant a call names, if any.
    pub fn target(&self) -> Option<&Target> {
        match self {
            Input::List { .. } => None,
            Input::Get(t, _) | Input::Confirm(t, _) => Some(t),
            Input::Submit { target, .. } | Input::Readback { target, .. } => Some(target),
        }
    }
}

/// The longest `wait_for_change` of the MCP tool, in seconds: below the
/// stdio adapter's request timeout.
pub const MAX_TOOL_WAIT: u64 = 25;

/// A read that first waits (at most `seconds`) until the grant's state
/// revision differs from `revision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitForChange {
    pub seconds: u64,
    pub revision: i64,
}

/// `wait_for_change` and `state_revision`, both or neither.
fn wait_for_change(args: &Map<String, Value>) -> Result<Option<WaitForChange>, InputError> {
    match (
        args.get("wait_for_change").and_then(Value::as_u64),
        args.get("state_revision").and_then(Value::as_i64),
    ) {
        (Some(seconds), Some(revision)) => Ok(Some(WaitForChange { seconds, revision })),
        (None, None) => Ok(None),
        _ => Err(InputError(
            "wait_for_change and state_revision go together".into(),
        )),
    }
}

/// Why arguments were refused; the message names the member, never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A printable, bounded form of a member name for messages.
fn shown(name: &str) -> String {
    let safe: String = name
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect();
    if safe.is_empty() { "?".into() } else { safe }
}

fn check_member(member: Member, value: &Value) -> Result<(), InputError> {
    let name = member.name();
    let bad = |what: &str| Err(InputError(format!("{name} must be {what}")));
    if value.as_str().is_some_and(|s| s.contains('\0')) {
        return Err(InputError(format!("{name} must not contain U+0000")));
    }
    match member.kind() {
        Kind::Positive if member == Member::Page => match value.as_u64() {
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(()),
            _ => bad(&format!("a JSON integer from 1 to {MAX_PAGE}")),
        },
        Kind::Positive => match value.as_i64() {
            Some(n) if n >= 1 && (value.is_i64() || value.is_u64()) => Ok(()),
            _ => bad("a positive JSON integer within i64"),
        },
        Kind::Integer if member == Member::StateRevision => match value.as_i64() {
            Some(n) if n >= 0 => Ok(()),
            _ => bad("a JSON integer of at least 0"),
        },
        Kind::Integer => {
            if value.is_i64() || value.is_u64() {
                Ok(())
            } else {
                bad("a JSON integer")
            }
        }
        Kind::Wait => match value.as_u64() {
            Some(n) if n <= MAX_TOOL_WAIT => Ok(()),
            _ => bad(&format!("a JSON integer from 0 to {MAX_TOOL_WAIT}")),
        },
        Kind::Name => match value.as_str() {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => Ok(()),
            Some(_) => bad(&format!("a string of 1 to {MAX_NAME_CHARS} characters")),
            None => bad("a string"),
        },
        Kind::Text => {
            if !value.is_string() {
                return bad("a string");
            }
            if member == Member::Title && value.as_str() == Some("") {
                // The schema's minLength; blank titles are refused later,
                // with the native route's message.
                return bad("a non-empty string");
            }
            if member == Member::State {
                let ok = matches!(
                    value.as_str(),
                    Some("awaiting_agent" | "awaiting_human" | "active" | "revoked" | "all")
                );
                if !ok {
                    return bad("awaiting_agent, awaiting_human, active, revoked or all");
                }
            }
            Ok(())
        }
    }
}

/// Checks a call's arguments against the tool's schema. `None` (no
/// `arguments` member) is an empty object.
pub fn parse_input(tool: Tool, args: Option<&Map<String, Value>>) -> Result<Input, InputError> {
    let empty = Map::new();
    let args = args.unwrap_or(&empty);
    let members = tool.members();
    if let Some(unknown) = args
        .keys()
        .find(|k| !members.iter().any(|m| m.name() == k.as_str()))
    {
        return Err(InputError(format!("unknown argument: {}", shown(unknown))));
    }
    for member in members {
        match args.get(member.name()) {
            Some(value) => check_member(*member, value)?,
            None if member.optional() => {}
            None => return Err(InputError(format!("missing argument: {}", member.name()))),
        }
    }
    let text = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let target = || Target {
        owner: text("owner"),
        repo: text("repo"),
        grant_id: args.get("grant_id").and_then(Value::as_i64).unwrap_or(0),
    };
    let triple = || TripleArgs {
        schema: args["proposal_schema"].clone(),
        version: args["proposal_version"].clone(),
        digest: args["proposal_digest"].clone(),
    };
    Ok(match tool {
        Tool::List => Input::List {
            page: args.get("page").and_then(Value::as_u64).unwrap_or(1),
            state: args.get("state").and_then(Value::as_str).map(str::to_owned),
        },
        Tool::Get => Input::Get(target(), wait_for_change(args)?),
        Tool::Confirm => Input::Confirm(target(), triple()),
        Tool::Submit => Input::Submit {
            target: target(),
            triple: triple(),
            request_key: text("request_key"),
            title: text("title"),
            body: text("body"),
        },
        Tool::Readback => Input::Readback {
            target: target(),
            request_key: text("request_key"),
        },
    })
}

/// Most argument names kept in an audit record.
pub const MAX_AUDITED_NAMES: usize = 32;

/// The names of a call's arguments for the audit (never their values):
/// sorted, each made printable and cut to 64 characters, at most
/// [`MAX_AUDITED_NAMES`].
pub fn argument_names<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = names.map(|n| shown(n)).collect();
    out.sort();
    out.dedup();
    out.truncate(MAX_AUDITED_NAMES);
    out
}

/// What a list page adds to its result: whether more pages follow and the
/// next page's number (derived from the total count, never from a link).
pub fn next_page(page: u64, limit: u64, total: i64) -> (bool, Option<u64>) {
    let total = u64::try_from(total).unwrap_or(0);
    let more = page.saturating_mul(limit) < total;
    (more, more.then_some(page + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("object"),
        }
    }

    fn submit_args() -> Value {
        json!({
            "owner": "acme", "repo": "tracker", "grant_id": 7,
            "proposal_schema": "agent_work_grant.v1", "proposal_version": 1,
            "proposal_digest": "a".repeat(64),
            "request_key": "0b6f5c2e-8d5e-4d8e-9b7a-2f4a1c3e5d6f",
            "title": "t", "body": ""
        })
    }

    #[test]
    fn names_round_trip_and_match_case_insensitively() {
        for tool in Tool::ALL {
            assert_eq!(Tool::parse(tool.name()), Some(tool));
            assert_eq!(Tool::parse(&tool.name().to_uppercase()), Some(tool));
        }
        assert_eq!(Tool::parse("create_issue"), None);
        let names: Vec<_> = Tool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, crate::domain::policy::TOOLS);
    }

    #[test]
    fn schemas_are_closed_and_list_required_members() {
        let schema = Tool::Submit.input_schema();
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["required"].as_array().map(Vec::len), Some(9));
        assert_eq!(Tool::List.input_schema()["required"], json!([]));
    }

    #[test]
    fn a_whole_submit_parses() {
        let args = obj(submit_args());
        let input = parse_input(Tool::Submit, Some(&args)).unwrap();
        let Input::Submit { target, title, .. } = &input else {
            panic!("submit")
        };
        assert_eq!(target.grant_id, 7);
        assert_eq!(title, "t");
    }

    #[test]
    fn strict_inputs_are_refused_with_the_member_named() {
        let cases = [
            ("grant_id", json!(1.0), "grant_id must be"),
            ("grant_id", json!("7"), "grant_id must be"),
            ("grant_id", json!(0), "grant_id must be"),
            ("grant_id", json!(-3), "grant_id must be"),
            ("grant_id", json!(u64::MAX), "grant_id must be"),
            ("proposal_version", json!("1"), "proposal_version must be"),
            ("proposal_version", json!(1.0), "proposal_version must be"),
            ("owner", json!(""), "owner must be"),
            ("owner", json!(7), "owner must be"),
            ("repo", json!("r".repeat(101)), "repo must be"),
            ("title", json!(null), "title must be"),
            ("title", json!(""), "title must be a non-empty string"),
            ("body", json!(["x"]), "body must be"),
            ("title", json!("a\u{0}b"), "title must not contain U+0000"),
        ];
        for (key, value, expected) in cases {
            let mut args = obj(submit_args());
            args.insert(key.into(), value.clone());
            let err = parse_input(Tool::Submit, Some(&args)).unwrap_err();
            assert!(err.0.starts_with(expected), "{key}={value}: {err}");
        }
        let mut args = obj(submit_args());
        args.insert("extra".into(), json!(1));
        assert_eq!(
            parse_input(Tool::Submit, Some(&args)).unwrap_err().0,
            "unknown argument: extra"
        );
        let mut args = obj(submit_args());
        args.remove("request_key");
        assert_eq!(
            parse_input(Tool::Submit, Some(&args)).unwrap_err().0,
            "missing argument: request_key"
        );
    }

    #[test]
    fn list_defaults_and_checks() {
        assert_eq!(
            parse_input(Tool::List, None).unwrap(),
            Input::List {
                page: 1,
                state: None
            }
        );
        let args = obj(json!({"page": 3, "state": "all"}));
        assert_eq!(
            parse_input(Tool::List, Some(&args)).unwrap(),
            Input::List {
                page: 3,
                state: Some("all".into())
            }
        );
        for bad in [
            json!({"page": 0}),
            json!({"state": "open"}),
            json!({"limit": 5}),
        ] {
            assert!(parse_input(Tool::List, Some(&obj(bad))).is_err());
        }
    }

    #[test]
    fn argument_names_are_bounded_and_never_values() {
        let args = obj(json!({"title": "secret", "owner": "a", "x\ny": 1}));
        assert_eq!(argument_names(args.keys()), vec!["owner", "title", "xy"]);
    }

    #[test]
    fn next_page_comes_from_the_total() {
        assert_eq!(next_page(1, 30, 0), (false, None));
        assert_eq!(next_page(1, 30, 30), (false, None));
        assert_eq!(next_page(1, 30, 31), (true, Some(2)));
        assert_eq!(next_page(2, 30, 61), (true, Some(3)));
        assert_eq!(next_page(5, 30, 61), (false, None));
    }
}
