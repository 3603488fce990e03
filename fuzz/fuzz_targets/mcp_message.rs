//! The body of `POST /mcp`, on raw bytes: the gate's check
//! (`http::mcp::check_body`), the SDK's parse of what the gate lets through,
//! and the tool arguments of a `tools/call` (`domain::tools::parse_input`,
//! `domain::policy::resolve_repository`, `domain::tools::argument_names`).
//!
//! - The gate refuses exactly what is not one JSON value (-32700), batches
//!   and JSON that is no JSON-RPC message (-32600), and marks exactly the
//!   `server/discover` requests.
//! - Arguments a tool accepts satisfy the tool's published input schema
//!   (closed members, required members, types, bounds, enums), hold no
//!   U+0000, and are what the parsed input carries; arguments that satisfy
//!   the schema and hold no U+0000 are accepted; the proposal triple parses
//!   exactly when it meets the schema's `const` and `pattern`. Refusals name
//!   a member, never a value.
//! - The repository of a call is its trimmed, non-empty `owner` and `repo`.
//! - Audited argument names are sorted, unique, bounded and printable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use serde_json::{Map, Value};
use writ::domain::policy::resolve_repository;
use writ::domain::tools::{self, Input, MAX_AUDITED_NAMES, Tool};
use writ::http::mcp::check_body;
use writ::service::Error;
use writ::service::agent::Triple;
use writ_fuzz::assert_shown;

/// The keywords of the published schemas, checked for one member value;
/// integers are JSON integers (`1.0` is not one, by design). `const` and
/// `pattern` (the proposal triple) only when `triple`: the native triple
/// parser judges them after `parse_input`.
fn schema_allows(schema: &Value, value: &Value, triple: bool) -> bool {
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    let ok_type = match schema["type"].as_str() {
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("string") => value.is_string(),
        other => panic!("schema type {other:?} not handled"),
    };
    if !ok_type {
        return false;
    }
    if let Some(n) = value
        .as_i64()
        .map(|n| n as i128)
        .or(value.as_u64().map(i128::from))
    {
        let min = schema.get("minimum").and_then(Value::as_i64);
        let max = schema.get("maximum").and_then(Value::as_u64);
        if min.is_some_and(|m| n < i128::from(m)) || max.is_some_and(|m| n > i128::from(m)) {
            return false;
        }
    }
    if triple && schema.get("const").is_some_and(|c| c != value) {
        return false;
    }
    if let Some(pattern) = schema.get("pattern").filter(|_| triple) {
        assert_eq!(pattern, "^[0-9a-f]{64}$", "pattern not handled");
        let s = value.as_str().unwrap_or_default();
        if s.len() != 64 || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return false;
        }
    }
    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as f64;
        if number("minLength").is_some_and(|m| chars < m)
            || number("maxLength").is_some_and(|m| chars > m)
        {
            return false;
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            return options.contains(value);
        }
    }
    true
}

fn schema_accepts(tool: Tool, args: &Map<String, Value>, triple: bool) -> bool {
    let schema = tool.input_schema();
    let properties = schema["properties"].as_object().expect("properties");
    let required = schema["required"].as_array().expect("required");
    required
        .iter()
        .all(|r| args.contains_key(r.as_str().expect("name")))
        && args.iter().all(|(name, value)| {
            properties
                .get(name)
                .is_some_and(|s| schema_allows(s, value, triple))
        })
}

fn has_nul(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.contains('\0'))
}

fn check_input(tool: Tool, args: &Map<String, Value>) {
    let schema_ok = schema_accepts(tool, args, false);
    match tools::parse_input(tool, Some(args)) {
        Ok(input) => {
            assert!(
                schema_ok,
                "{} accepted arguments its schema refuses",
                tool.name()
            );
            let triple = match &input {
                Input::Confirm(_, t) | Input::Submit { triple: t, .. } => {
                    Some(Triple::parse(&t.schema, &t.version, &t.digest).is_ok())
                }
                _ => None,
            };
            if let Some(parsed) = triple {
                let strict = schema_accepts(tool, args, true);
                assert_eq!(parsed, strict, "triple parser and schema disagree");
            }
            assert!(!args.values().any(has_nul), "accepted U+0000");
            let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
            if let Some(t) = input.target() {
                assert_eq!(
                    (t.owner.as_str(), t.repo.as_str()),
                    (text("owner"), text("repo"))
                );
                assert_eq!(Some(t.grant_id), args["grant_id"].as_i64());
                assert!(t.grant_id >= 1);
            }
            match input {
                Input::List { page, state } => {
                    assert!((1..=tools::MAX_PAGE).contains(&page));
                    assert_eq!(state.as_deref(), args.get("state").and_then(Value::as_str));
                }
                Input::Submit {
                    request_key,
                    title,
                    body,
                    ..
                } => {
                    assert_eq!(request_key, text("request_key"));
                    assert_eq!(
                        (title.as_str(), body.as_str()),
                        (text("title"), text("body"))
                    );
                }
                Input::Readback { request_key, .. } => {
                    assert_eq!(request_key, text("request_key"));
                }
                Input::Get(..) | Input::Confirm(..) => {}
            }
        }
        Err(err) => {
            assert!(
                !schema_ok || args.values().any(has_nul),
                "{} refused schema-valid arguments: {err}",
                tool.name()
            );
            let message = Error::Invalid(err.0.clone()).message();
            assert_shown(&message, "parse_input");
            let named = message.starts_with("unknown argument: ")
                || message.starts_with("missing argument: ")
                || tool.input_schema()["properties"]
                    .as_object()
                    .expect("properties")
                    .keys()
                    .any(|m| message.starts_with(&format!("{m} must ")));
            assert!(named, "message names no member: {message:?}");
        }
    }
}

fn check_arguments(name: &str, args: Option<&Map<String, Value>>) {
    let empty = Map::new();
    let map = args.unwrap_or(&empty);
    if let Some(tool) = Tool::parse(name) {
        assert!(tool.name().eq_ignore_ascii_case(name));
    }
    // Every tool, whatever the call named: the parser sees more inputs.
    for tool in Tool::ALL {
        check_input(tool, map);
    }
    match resolve_repository(map) {
        Some(t) => {
            let part = |k: &str| map[k].as_str().expect("a string").trim();
            assert_eq!(
                (t.owner.as_str(), t.repo.as_str()),
                (part("owner"), part("repo"))
            );
            assert!(!t.owner.is_empty() && !t.repo.is_empty());
        }
        None => {
            let part = |k: &str| map.get(k).and_then(Value::as_str).map(str::trim);
            assert!(
                part("owner").is_none_or(str::is_empty) || part("repo").is_none_or(str::is_empty)
            );
        }
    }
    let names = tools::argument_names(map.keys());
    assert!(names.len() <= MAX_AUDITED_NAMES);
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "not sorted and unique"
    );
    for n in &names {
        assert!(n.len() <= 64 && !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic()));
    }
}

fuzz_target!(|data: &[u8]| {
    let value: Option<Value> = serde_json::from_slice(data).ok();
    let gate = check_body(data);
    match (&gate, &value) {
        (Ok(admitted), Some(v)) => {
            assert!(!v.is_array(), "a batch passed the gate");
            assert!(
                serde_json::from_value::<ClientJsonRpcMessage>(v.clone()).is_ok(),
                "JSON that is no JSON-RPC message passed the gate"
            );
            let discover = v.get("method").and_then(Value::as_str) == Some("server/discover");
            assert_eq!(admitted.discover, discover);
        }
        (Ok(_), None) => panic!("a body that is not JSON passed the gate"),
        (Err(refused), Some(v)) => {
            assert_eq!(refused.code, -32600);
            assert!(
                v.is_array() || serde_json::from_value::<ClientJsonRpcMessage>(v.clone()).is_err(),
                "refused a JSON-RPC message: {refused:?}"
            );
        }
        (Err(refused), None) => assert_eq!(refused.code, -32700),
    }
    if let Err(refused) = &gate {
        assert_shown(refused.message, "gate");
        return;
    }
    // What the SDK parses next, and the arguments of a tool call.
    if let Ok(ClientJsonRpcMessage::Request(request)) =
        serde_json::from_slice::<ClientJsonRpcMessage>(data)
        && let ClientRequest::CallToolRequest(call) = request.request
    {
        check_arguments(&call.params.name, call.params.arguments.as_ref());
        return;
    }
    // Any other object: its `params.arguments` (or itself) as arguments.
    if let Some(Value::Object(map)) = &value {
        let args = map
            .get("params")
            .and_then(|p| p.get("arguments"))
            .and_then(Value::as_object)
            .unwrap_or(map);
        let name = map
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        check_arguments(name, Some(args));
    }
});
