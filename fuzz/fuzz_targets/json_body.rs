//! The JSON request bodies of `/api/v1` (`http::json::parse_json`) and the
//! checks that follow them, on raw bytes.
//!
//! - The strict reader accepts exactly the JSON objects without U+0000 in
//!   any string or member name, and refuses the rest with a message from a
//!   fixed set that never echoes a value (only a bounded, printable member
//!   name).
//! - Each body type accepts only objects whose members it declares, and a
//!   list of grants only objects.
//! - Confirm and submit bodies are judged alike by the native route and by
//!   the MCP tool (`domain::tools::parse_input`), and yield the same digest,
//!   request key, title and body.
//! - The ids carried by bodies parse to exactly their documented forms.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use writ::domain::ids::{Digest, Login, RepoName, RequestKey, parse_full_name};
use writ::domain::tools::{self, Input, Tool};
use writ::http::api::agent::ConfirmBody;
use writ::http::api::issues::{NewIssueBody, TransferBody};
use writ::http::api::submissions::SubmitBody;
use writ::http::json::parse_json;
use writ::service::Error;
use writ::service::admin::{CollaboratorInput, NewRepoInput, NewTokenInput, NewUserInput};
use writ::service::agent::Triple;
use writ::service::health::HealthInput;
use writ::service::policy::ToolGrantsInput;
use writ::service::submit::SubmitInput;
use writ_fuzz::{assert_shown, scan};

/// The messages `parse_json` may give, by prefix.
const TEMPLATES: [&str; 7] = [
    "the body is not valid JSON (line ",
    "the body must be a JSON object",
    "a field has the wrong JSON type or value (line ",
    "unknown field: ",
    "missing field: ",
    "duplicate field: ",
    "strings must not contain U+0000",
];

fn message_of(err: &Error) -> String {
    assert_eq!(err.status(), 400, "{err}");
    assert_eq!(err.code(), "invalid_input", "{err}");
    let message = err.message();
    assert!(
        TEMPLATES.iter().any(|t| message.starts_with(t)),
        "unexpected message {message:?}"
    );
    // A member name is kept to 64 printable ASCII characters.
    if let Some(name) = ["unknown field: ", "missing field: ", "duplicate field: "]
        .iter()
        .find_map(|p| message.strip_prefix(p))
    {
        assert!(name.len() <= 64 && name.bytes().all(|b| b.is_ascii_graphic()));
    }
    message
}

/// Parses `data` as `T`; an accepted body is an object with only `members`.
fn body<T: DeserializeOwned>(data: &[u8], value: Option<&Value>, members: &[&str]) -> Option<T> {
    match parse_json::<T>(data) {
        Ok(parsed) => {
            let Some(Value::Object(map)) = value else {
                panic!("a body that is not a JSON object was accepted");
            };
            for name in map.keys() {
                assert!(members.contains(&name.as_str()), "member {name:?} accepted");
            }
            Some(parsed)
        }
        Err(err) => {
            let message = message_of(&err);
            assert_shown(&message, "parse_json");
            None
        }
    }
}

fn check_ids(text: &str) {
    if let Ok(key) = RequestKey::parse(text) {
        let b = text.as_bytes();
        assert_eq!(key.as_str(), text);
        assert!(b.len() == 36 && b[14] == b'4' && matches!(b[19], b'8' | b'9' | b'a' | b'b'));
        assert!(text.split('-').map(str::len).eq([8, 4, 4, 4, 12]));
        assert!(
            text.bytes()
                .all(|c| c == b'-' || c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
    }
    let hex = text.len() == 64 && text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    assert_eq!(Digest::parse(text).is_ok(), hex, "digest {text:?}");
    let name = |max: usize| {
        let b = text.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && b[0].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
    };
    assert_eq!(RepoName::parse(text).is_ok(), name(100), "repo {text:?}");
    if Login::parse(text).is_ok() {
        assert!(name(39), "login {text:?}");
    }
    if let Ok((owner, repo)) = parse_full_name(text) {
        assert_eq!(format!("{}/{}", owner.as_str(), repo.as_str()), text);
    }
}

fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The arguments an MCP call would carry for this body: its members plus
/// the route's owner, repo and grant id.
fn mcp_args(map: &Map<String, Value>) -> Option<Map<String, Value>> {
    let route = ["owner", "repo", "grant_id"];
    if route.iter().any(|k| map.contains_key(*k)) {
        return None;
    }
    let mut args = map.clone();
    args.insert("owner".into(), "acme".into());
    args.insert("repo".into(), "widgets".into());
    args.insert("grant_id".into(), 7.into());
    Some(args)
}

fn native_confirm(data: &[u8]) -> Result<Triple, Error> {
    let body: ConfirmBody = parse_json(data)?;
    Triple::parse(
        &body.proposal_schema,
        &body.proposal_version,
        &body.proposal_digest,
    )
}

fn mcp_confirm(args: &Map<String, Value>) -> Result<Triple, Error> {
    match tools::parse_input(Tool::Confirm, Some(args)).map_err(|e| Error::Invalid(e.0))? {
        Input::Confirm(_, t) => Triple::parse(&t.schema, &t.version, &t.digest),
        other => panic!("confirm parsed as {other:?}"),
    }
}

fn native_submit(data: &[u8]) -> Result<SubmitInput, Error> {
    parse_json::<SubmitBody>(data)?.into_input()
}

fn mcp_submit(args: &Map<String, Value>) -> Result<SubmitInput, Error> {
    match tools::parse_input(Tool::Submit, Some(args)).map_err(|e| Error::Invalid(e.0))? {
        Input::Submit {
            triple,
            request_key,
            title,
            body,
            ..
        } => SubmitInput::new(
            Triple::parse(&triple.schema, &triple.version, &triple.digest)?,
            RequestKey::parse(&request_key)?,
            title,
            body,
        ),
        other => panic!("submit parsed as {other:?}"),
    }
}

fn agree<T>(native: Result<T, Error>, mcp: Result<T, Error>, same: impl Fn(&T, &T) -> bool) {
    match (&native, &mcp) {
        (Ok(a), Ok(b)) => assert!(same(a, b), "native and MCP parsed differently"),
        (Err(a), Err(b)) => {
            assert_eq!(a.status(), b.status(), "native {a} / MCP {b}");
            assert_shown(&a.message(), "native");
            assert_shown(&b.message(), "MCP");
        }
        (Ok(_), Err(e)) => panic!("native accepted what MCP refused: {e}"),
        (Err(e), Ok(_)) => panic!("MCP accepted what native refused: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let scanned = scan(data);
    let value: Option<Value> = serde_json::from_slice(data).ok();
    assert_eq!(
        scanned.is_some(),
        value.is_some(),
        "scan and Value disagree"
    );

    // The strict reader: exactly the JSON objects without U+0000.
    match (parse_json::<Value>(data), scanned) {
        (Ok(parsed), Some(s)) => {
            assert!(s.object, "accepted a body that is not an object");
            assert!(!s.nul, "accepted a U+0000");
            assert_eq!(Some(&parsed), value.as_ref());
        }
        (Ok(_), None) => panic!("accepted a body that is not JSON"),
        (Err(err), Some(s)) => {
            let expected = if s.object {
                assert!(s.nul, "refused a JSON object without U+0000: {err}");
                "strings must not contain U+0000"
            } else {
                "the body must be a JSON object"
            };
            assert_eq!(message_of(&err), expected);
        }
        (Err(err), None) => {
            message_of(&err);
        }
    }

    // Every body type: only its members, messages from the fixed set.
    let v = value.as_ref();
    let confirm = ["proposal_schema", "proposal_version", "proposal_digest"];
    let submit = [
        "proposal_schema",
        "proposal_version",
        "proposal_digest",
        "request_key",
        "title",
        "body",
    ];
    body::<ConfirmBody>(data, v, &confirm);
    body::<SubmitBody>(data, v, &submit);
    if let Some(issue) = body::<NewIssueBody>(data, v, &["title", "body"]) {
        assert!(!issue.title.contains('\0') && !issue.body.contains('\0'));
    }
    body::<TransferBody>(data, v, &["to"]);
    body::<NewUserInput>(data, v, &["login", "kind", "password", "is_admin"]);
    body::<NewTokenInput>(data, v, &["name", "scopes", "public_only", "repositories"]);
    body::<NewRepoInput>(
        data,
        v,
        &["owner", "name", "private", "require_distinct_approver"],
    );
    body::<CollaboratorInput>(data, v, &["permission"]);
    body::<HealthInput>(data, v, &["installed", "healthy", "detail"]);
    if let Some(input) = body::<ToolGrantsInput>(data, v, &["grants"]) {
        let listed = v.and_then(|v| v["grants"].as_array()).expect("grants");
        assert!(
            listed.iter().all(Value::is_object),
            "a grant that is not an object"
        );
        let grants = writ::service::policy::to_domain(input.grants);
        for (n, grant) in grants.iter().enumerate() {
            assert!(!grant.id.is_empty(), "grant {n} has no id");
        }
        if let Err(message) = writ::domain::policy::validate(&grants) {
            assert_shown(&Error::Invalid(message).message(), "tool grants");
        }
    }

    // Native route and MCP tool agree (a repeated member is refused by the
    // native reader and kept last-wins by any JSON-RPC parser: left out).
    if let (Some(s), Some(Value::Object(map))) = (scanned, v)
        && !s.repeated_member
        && let Some(args) = mcp_args(map)
    {
        agree(native_confirm(data), mcp_confirm(&args), |a, b| {
            a.digest == b.digest
        });
        agree(native_submit(data), mcp_submit(&args), |a, b| {
            a.triple.digest == b.triple.digest
                && a.request_key == b.request_key
                && a.title == b.title
                && a.body == b.body
        });
    }

    // The ids bodies carry.
    if let Some(v) = v {
        let mut texts = Vec::new();
        strings(v, &mut texts);
        for text in texts.iter().take(16) {
            check_ids(text);
        }
    }
});
