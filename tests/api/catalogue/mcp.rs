//! `POST /mcp`'s part of the catalogue, derived from `tools/list`: every
//! member of each tool's arguments and of the JSON-RPC envelope around
//! them.

use serde_json::{Value, json};

use super::api::member;
use super::cases::{Case, Expect, json_junk, pointers, replaced};
use super::fixture::Fixture;
use super::probe::{Probe, Send};
use super::schema::Checker;

/// The tools builder-bot sees, with their input schemas.
pub async fn tools(fx: &Fixture<'_>) -> Vec<(String, Value)> {
    let app = fx.app();
    let resp = app
        .client
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {}", fx.world.bot))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .expect("tools/list");
    assert_eq!(resp.status(), 200);
    let json: Value = resp.json().await.expect("tools/list is JSON");
    let tools: Vec<(String, Value)> = json["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {json}"))
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("tool name").to_owned(),
                t["inputSchema"].clone(),
            )
        })
        .collect();
    assert_eq!(tools.len(), 5, "builder-bot sees every tool: {json}");
    tools
}

/// A `tools/call` request and the schema it answers to. `arguments: null`
/// is no arguments, valid when the tool needs none.
fn envelope(checker: &Checker, tool: &str, args: Value, input: &Value) -> (Value, Value) {
    let arguments = if checker.valid(input, &json!({})) {
        json!({"anyOf": [input, {"type": "null"}]})
    } else {
        input.clone()
    };
    let request = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": args},
    });
    let schema = json!({
        "type": "object",
        "required": ["jsonrpc", "id", "method", "params"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer"]},
            "method": {"const": "tools/call"},
            "params": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"const": tool}, "arguments": arguments},
            },
        },
    });
    (request, schema)
}

/// Every probe of `/mcp`.
pub fn probes(tools: &[(String, Value)], checker: &Checker, fx: &Fixture<'_>) -> Vec<Probe> {
    let mut out = Vec::new();
    for (tool, input) in tools {
        let base = || {
            let args = fx
                .tool_base(tool)
                .unwrap_or_else(|| panic!("the catalogue has no valid arguments for {tool}"));
            envelope(checker, tool, args, input)
        };
        let route = format!("POST /mcp tools/call {tool}");
        let (shape, _) = base();
        for pointer in pointers(&shape) {
            for case in Case::ALL {
                let (request, schema) = base();
                let Some(junk) = json_junk(case, member(&request, &pointer)) else {
                    continue;
                };
                let (body, judged) = replaced(&request, &pointer, &junk);
                let expect = match judged {
                    Some(v) if case != Case::Nul => Expect::from_valid(checker.valid(&schema, &v)),
                    _ => Expect::Refuse,
                };
                out.push(Probe {
                    route: route.clone(),
                    field: format!(
                        "body {}",
                        if pointer.is_empty() {
                            "(whole)"
                        } else {
                            &pointer
                        }
                    ),
                    case: Some(case),
                    expect,
                    send: Send::Mcp { body },
                });
            }
        }
        let (request, _) = base();
        out.push(Probe {
            route,
            field: "-".into(),
            case: None,
            expect: Expect::MayAccept,
            send: Send::Mcp {
                body: serde_json::to_vec(&request).expect("JSON"),
            },
        });
    }
    out
}
