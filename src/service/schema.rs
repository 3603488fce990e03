//! OpenAPI schemas of the values Writ validates, built from the constants
//! the parsers use, so the document cannot promise more or less than the
//! server accepts. Each type here stands for a value in a
//! `#[schema(value_type = ..)]` or a `params(..)` annotation.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema,
    SchemaFormat, SchemaType, Type,
};

use crate::domain::access::Permission;
use crate::domain::ids::{
    DIGEST_HEX_LEN, LOGIN_MAX_LEN, NAME_PUNCTUATION, REPO_NAME_MAX_LEN, REQUEST_KEY_PATTERN,
    RESERVED_LOGINS,
};
use crate::domain::policy::{MAX_GRANT_ID, MAX_GRANTS, MAX_PATTERN_LEN, TOOLS};
use crate::domain::proposal::{SCHEMA, VERSION};
use crate::domain::scope::Scope;
use crate::domain::text::{TITLE_MAX_SCALARS, WHITESPACE};

macro_rules! schema_types {
    ($($(#[$doc:meta])* $name:ident => $body:expr;)*) => {$(
        $(#[$doc])*
        pub struct $name;
        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                RefOr::T($body)
            }
        }
        impl utoipa::ToSchema for $name {}
    )*};
}

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
}

fn one_of<S: Into<serde_json::Value>>(values: impl IntoIterator<Item = S>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}` (escaped for ECMA-262 and Rust).
fn name_pattern(max: usize) -> String {
    let punctuation: String = NAME_PUNCTUATION
        .chars()
        .map(|c| match c {
            '-' | '\\' | ']' | '^' => format!("\\{c}"),
            _ => c.to_string(),
        })
        .collect();
    format!("[A-Za-z0-9][A-Za-z0-9{punctuation}]{{0,{}}}", max - 1)
}

/// A case-insensitive spelling of an ASCII word: `[aA][pP][iI]`.
fn any_case(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                regex_escape(c)
            }
        })
        .collect()
}

fn regex_escape(c: char) -> String {
    if "^$\\.*+?()[]{}|/".contains(c) {
        format!("\\{c}")
    } else {
        c.to_string()
    }
}

/// `\uXXXX` for a character class (ECMA-262 and Python read it alike).
fn class_char(c: char) -> String {
    format!("\\u{:04x}", c as u32)
}

/// A login followed by `end` (`$`, or `/` in `owner/name`): the name form,
/// and none of the reserved logins.
fn login_then(end: &str) -> String {
    let reserved: Vec<String> = RESERVED_LOGINS.iter().map(|r| any_case(r)).collect();
    format!(
        "(?!(?:{}){end}){}{end}",
        reserved.join("|"),
        name_pattern(LOGIN_MAX_LEN)
    )
}

/// A login's pattern.
pub fn login_pattern() -> String {
    format!("^{}", login_then("$"))
}

/// A repository name's pattern.
pub fn repo_name_pattern() -> String {
    format!("^{}$", name_pattern(REPO_NAME_MAX_LEN))
}

/// Text with at least one character that is not whitespace, and no NUL.
pub fn not_blank_pattern() -> String {
    let ws: String = WHITESPACE.iter().map(|c| class_char(*c)).collect();
    format!("^[^\\u0000]*[^{ws}\\u0000][^\\u0000]*$")
}

/// Text without control characters (`char::is_control`: Cc).
const NO_CONTROL_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

fn login_schema(description: &str) -> ObjectBuilder {
    string(description)
        .pattern(Some(login_pattern()))
        .min_length(Some(1))
        .max_length(Some(LOGIN_MAX_LEN))
}

fn repo_name_schema(description: &str) -> ObjectBuilder {
    string(description)
        .pattern(Some(repo_name_pattern()))
        .min_length(Some(1))
        .max_length(Some(REPO_NAME_MAX_LEN))
}

fn positive_id(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(1))
        .description(Some(description))
}

schema_types! {
    /// A positive 64-bit id (grant, issue index, token).
    PositiveId => positive_id("a positive 64-bit integer").into();
    /// A login (path parameter or body member).
    LoginText => login_schema("a login: the name form, not a reserved name; compared case-insensitively").into();
    /// A repository owner's login in a path (any name form; unknown is 404).
    OwnerText => string("the owner's login").pattern(Some(format!("^{}$", name_pattern(LOGIN_MAX_LEN))))
        .min_length(Some(1)).max_length(Some(LOGIN_MAX_LEN)).into();
    /// A repository name.
    RepoNameText => repo_name_schema("a repository name").into();
    /// `owner/name`.
    FullNameText => string("a repository written owner/name")
        .pattern(Some(format!("^{}{}$", login_then("/"), name_pattern(REPO_NAME_MAX_LEN))))
        .into();
    /// A canonical lowercase UUIDv4.
    RequestKeyText => string("a canonical lowercase UUIDv4, chosen by the bot and kept forever")
        .pattern(Some(REQUEST_KEY_PATTERN)).into();
    /// A proposal digest.
    DigestText => string("lowercase hex SHA-256 of the proposal's RFC 8785 canonical JSON")
        .pattern(Some(format!("^[0-9a-f]{{{DIGEST_HEX_LEN}}}$"))).into();
    /// The proposal schema name.
    ProposalSchemaText => one_of([SCHEMA]).description(Some("the proposal schema")).into();
    /// The proposal version.
    ProposalVersionNumber => ObjectBuilder::new().schema_type(Type::Integer)
        .enum_values(Some([VERSION])).description(Some("the proposal version, the JSON integer 1")).into();
    /// An issue title.
    TitleText => string("1-255 Unicode scalar values, not only whitespace, no U+0000")
        .min_length(Some(1)).max_length(Some(TITLE_MAX_SCALARS))
        .pattern(Some(not_blank_pattern())).into();
    /// Free text: anything but U+0000 (the JSON reader refuses it anywhere).
    FreeText => string("free text, may be empty; no U+0000")
        .pattern(Some("^[^\\u0000]*$")).into();
    /// A token's name.
    TokenNameText => string("a name for people: 1-255 bytes of UTF-8, not only whitespace, no U+0000")
        .min_length(Some(1)).max_length(Some(255))
        .pattern(Some(not_blank_pattern())).into();
    /// A scope name.
    ScopeText => one_of(Scope::names_all()).description(Some("a scope name")).into();
    /// A collaborator permission.
    PermissionText => one_of(Permission::ALL.map(Permission::as_str)).description(Some("read, write or admin")).into();
    /// A human's password (the minimum length is the deployment's `min_password_length`).
    Password => string("a human's password: at least `min_password_length` characters, at most 1024 bytes, no U+0000")
        .min_length(Some(1)).max_length(Some(1024)).pattern(Some("^[^\\u0000]*$")).into();
    /// An MCP id.
    McpIdText => string("an MCP id: 1-64 characters of [A-Za-z0-9_.-] (stored lowercase)")
        .pattern(Some("^[A-Za-z0-9_.\\-]{1,64}$")).min_length(Some(1)).max_length(Some(64)).into();
    /// A tool grant's id.
    ToolGrantIdText => string("unique within the agent's set; 1-64 characters without control characters")
        .min_length(Some(1)).max_length(Some(MAX_GRANT_ID)).pattern(Some(NO_CONTROL_PATTERN)).into();
    /// A repository pattern of a tool grant.
    RepoPatternText => string("owner/name or owner/*, case-insensitive, at most 256 bytes of UTF-8 (maxLength counts characters); malformed patterns never match")
        .max_length(Some(MAX_PATTERN_LEN)).pattern(Some(NO_CONTROL_PATTERN)).into();
    /// The tools of one tool grant.
    ToolNames => ArrayBuilder::new()
        .items(one_of(TOOLS))
        .min_items(Some(1)).max_items(Some(TOOLS.len())).unique_items(true)
        .description(Some("tool names among the five MCP tools, each at most once")).into();
    /// The grant list of a tool-grant set.
    ToolGrantList => ArrayBuilder::new()
        .items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("ToolGrantInput")))
        .max_items(Some(MAX_GRANTS))
        .description(Some("at most 64 grants with at most 256 repository patterns in all, ids unique")).into();
    /// A report's name.
    ReportNameText => one_of(crate::store::reports::Report::NAMES).description(Some("the report")).into();
    /// A report's format.
    ReportFormatText => one_of(["csv", "json"]).description(Some("csv (default) or json")).into();
    /// An RFC 3339 time.
    DateTimeText => string("an RFC 3339 time")
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))).into();
    /// A list page number.
    PageNumber => ObjectBuilder::new().schema_type(Type::Integer)
        .minimum(Some(1)).maximum(Some(crate::domain::tools::MAX_PAGE))
        .description(Some("1-based page")).into();
    /// A list page size.
    PageLimit => ObjectBuilder::new().schema_type(Type::Integer)
        .description(Some("page size: default 30; a value of 0 or less means the default; a value above the maximum (default 50), however large, is clamped to it")).into();
    /// A grant state filter.
    StateFilter => one_of(crate::domain::grant::GrantState::ALL.iter().map(|s| s.as_str()).chain(["all"]))
        .description(Some("awaiting_agent, awaiting_human, active, revoked or all; default: all but revoked")).into();
    /// The feed's cursor (`next_after`).
    EventCursorText => string("the next_after of an earlier answer")
        .pattern(Some(format!("^[0-9]{{1,{n}}}\\.[0-9]{{1,{n}}}$", n = crate::domain::events::CURSOR_DIGITS))).into();
    /// The feed's `type` filter.
    EventTypeFilterText => string("comma-separated event types and prefix.* patterns, no spaces")
        .pattern(Some(format!("^{item}(?:,{item})*$", item = event_type_item()))).into();
    /// One event type or `prefix.*` pattern (a webhook subscription's `types`).
    EventTypePatternText => string("an event type or a prefix.* pattern")
        .pattern(Some(format!("^{}$", event_type_item()))).into();
    /// A webhook subscription's repository pattern.
    WebhookRepoPatternText => string("owner/name or owner/*: letters, digits, '-', '_' and '.', 1-100 each")
        .pattern(Some("^[A-Za-z0-9._-]{1,100}/(?:\\*|[A-Za-z0-9._-]{1,100})$")).into();
    /// A webhook subscription's description.
    WebhookDescriptionText => string("free text, at most 500 characters, no U+0000")
        .max_length(Some(crate::domain::webhooks::MAX_DESCRIPTION_CHARS))
        .pattern(Some("^[^\\u0000]*$")).into();
    /// A webhook's format.
    WebhookFormatText => one_of(["standard", "slack"]).description(Some("standard (default) or slack")).into();
    /// The feed's page size.
    FeedLimit => ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(100))
        .description(Some("1 to 100 (default 50)")).into();
    /// The feed's wait.
    FeedWait => ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).maximum(Some(60))
        .description(Some("0 to 60 seconds: with nothing new, hold the request until an event commits")).into();
}

/// Sets what the deployment's settings decide: the password minimum
/// (`min_password_length`, at least 1, as the server enforces it).
pub fn configure(doc: &mut utoipa::openapi::OpenApi, min_password_length: usize) {
    let schemas = doc.components.as_mut().map(|c| &mut c.schemas);
    if let Some(RefOr::T(Schema::Object(password))) =
        schemas.and_then(|s| s.get_mut(<Password as utoipa::ToSchema>::name().as_ref()))
    {
        password.min_length = Some(min_password_length.max(1));
    }
}

impl utoipa::PartialSchema for super::admin::NewUserInput {
    /// A human (an optional password, maybe an admin) or a bot (no
    /// password, never an admin).
    fn schema() -> RefOr<Schema> {
        let user = |kind: &str| {
            ObjectBuilder::new()
                .property("login", login_schema("unique case-insensitively"))
                .property("kind", one_of([kind]))
                .required("login")
                .required("kind")
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        let nothing = || ObjectBuilder::new().schema_type(Type::Null);
        let human = user("human")
            .description(Some("a human"))
            .property(
                "password",
                OneOfBuilder::new().item(nothing()).item(RefOr::Ref(
                    utoipa::openapi::Ref::from_schema_name(<Password as utoipa::ToSchema>::name()),
                )),
            )
            .property(
                "is_admin",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
                    .description(Some("site administrator")),
            );
        let bot = user("bot")
            .description(Some("a bot: no password, never an admin"))
            .property("password", nothing())
            .property(
                "is_admin",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
                    .enum_values(Some([
                        serde_json::Value::Bool(false),
                        serde_json::Value::Null,
                    ])),
            );
        RefOr::T(Schema::OneOf(
            OneOfBuilder::new()
                .item(human)
                .item(bot)
                .description(Some("`POST /api/v1/admin/users`"))
                .build(),
        ))
    }
}

impl utoipa::ToSchema for super::admin::NewUserInput {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            <Password as utoipa::ToSchema>::name().into_owned(),
            <Password as utoipa::PartialSchema>::schema(),
        ));
    }
}

/// One event type or `prefix.*` pattern, as an ECMA-262 alternation: the
/// types of [`crate::domain::events::TYPES`] and every prefix of theirs
/// that ends in a dot.
fn event_type_item() -> String {
    use crate::domain::events::TYPES;
    let mut items: Vec<String> = TYPES.iter().map(|t| t.replace('.', "\\.")).collect();
    for t in TYPES {
        for (i, _) in t.match_indices('.') {
            let pattern = format!("{}\\.\\*", t[..i].replace('.', "\\."));
            if !items.contains(&pattern) {
                items.push(pattern);
            }
        }
    }
    format!("(?:{})", items.join("|"))
}
