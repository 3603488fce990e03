//! `POST /mcp` over real HTTP. This module holds the shared fixtures: raw
//! POSTs, a small JSON-RPC client, tool grants and the audit table. The
//! tests, by behaviour: the handshake, transport refusals, the tool-grant
//! matching rules and the policy through real `tools/call`s, strict inputs,
//! the grant flow end to end and listing, the tool-call audit (its records,
//! its table, failing closed, reads beside submissions), and an MCP client
//! Writ did not write (the official Python SDK, `tests/mcp_python`).

mod audit;
mod audit_table;
mod concurrency;
mod fail_closed;
mod flow;
mod grants;
mod handshake;
mod inputs;
mod matching;
mod python_sdk;
mod transport;
mod wait;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{Auth, Body, Resp, TestApp};
use crate::world::{BOT, BOT_SCOPES, OWNER, REPO};

const LIST: &str = "list_agent_work_grants";
const GET: &str = "get_agent_work_grant";
const CONFIRM: &str = "confirm_agent_work_grant";
const SUBMIT: &str = "submit_agent_work_proposal";
const READBACK: &str = "get_agent_work_submission";
const ALL_TOOLS: [&str; 5] = [LIST, GET, CONFIRM, SUBMIT, READBACK];
const SCHEMA: &str = "agent_work_grant.v1";
/// The protocol revisions with an `initialize` handshake.
const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless revision probed with `server/discover`.
const DISCOVER_VERSION: &str = "2026-07-28";
/// A second private repository of acme that builder-bot can write.
const GADGETS: &str = "gadgets";
/// Longest any single MCP exchange may take before it counts as a hang.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Helpers: raw POSTs, a small JSON-RPC client, tool grants, the audit table.
// ---------------------------------------------------------------------------

/// `POST {base}/mcp` with these headers and raw body, read in full.
async fn post_mcp_raw(
    app: &TestApp,
    client: &Client,
    authorization: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Resp {
    let mut request = client
        .post(app.url("/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body);
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let exchange = async { Resp::read(request.send().await.expect("send /mcp request")).await };
    tokio::time::timeout(EXCHANGE_LIMIT, exchange)
        .await
        .unwrap_or_else(|_| panic!("/mcp did not answer within {EXCHANGE_LIMIT:?}"))
}

/// `POST /mcp` with the bot's bearer token and a JSON body.
async fn post_mcp(app: &TestApp, token: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
    let bearer = format!("Bearer {token}");
    post_mcp_raw(
        app,
        &app.client,
        Some(&bearer),
        headers,
        body.to_string().into_bytes(),
    )
    .await
}

/// A 200 `application/json` JSON-RPC response to the request with `id`.
#[track_caller]
fn rpc_response(resp: &Resp, id: &Value) -> Value {
    resp.assert_status(200);
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "content type {content_type}; body {}",
        resp.body
    );
    let json = resp.json();
    assert_eq!(json["jsonrpc"], "2.0", "{}", resp.body);
    assert_eq!(&json["id"], id, "{}", resp.body);
    json
}

/// One tool call's answer.
#[derive(Debug)]
struct ToolResult {
    is_error: bool,
    /// `structuredContent`.
    content: Value,
    /// Text content after the JSON: what the agent should tell its human.
    said: Vec<String>,
}

impl ToolResult {
    /// A success with this native status: its structured content.
    #[track_caller]
    fn ok(&self, status: u16) -> &Value {
        assert!(!self.is_error, "unexpected tool error: {}", self.content);
        assert_eq!(
            self.content["native_status"], status,
            "native status: {}",
            self.content
        );
        &self.content
    }

    /// A native error with this status and code: its structured content.
    #[track_caller]
    fn error(&self, status: u16, code: &str) -> &Value {
        assert!(self.is_error, "expected an error, got {}", self.content);
        assert_eq!(self.content["code"], code, "error code: {}", self.content);
        assert_eq!(
            self.content["native_status"], status,
            "native status: {}",
            self.content
        );
        &self.content
    }

    /// A policy denial with this reason: its structured content.
    #[track_caller]
    fn denied(&self, reason: &str) -> &Value {
        assert!(self.is_error, "expected a denial, got {}", self.content);
        assert_eq!(self.content["code"], "tool_not_granted", "{}", self.content);
        assert_eq!(self.content["reason"], reason, "{}", self.content);
        assert!(
            self.content.get("native_status").is_none(),
            "a denial never reaches the native operation: {}",
            self.content
        );
        &self.content
    }

    /// Allowed by the policy: whatever the native operation answered.
    #[track_caller]
    fn allowed(&self) -> &Value {
        assert_ne!(
            self.content["code"], "tool_not_granted",
            "unexpected denial: {}",
            self.content
        );
        assert!(
            self.content["native_status"].is_u64(),
            "no native_status: {}",
            self.content
        );
        &self.content
    }

    fn native_status(&self) -> u64 {
        self.content["native_status"].as_u64().unwrap_or(0)
    }
}

/// A JSON-RPC client of `/mcp` for one bearer token.
struct Mcp<'a> {
    app: &'a TestApp,
    token: String,
    next_id: AtomicI64,
}

impl<'a> Mcp<'a> {
    fn new(app: &'a TestApp, token: &str) -> Mcp<'a> {
        Mcp {
            app,
            token: token.to_owned(),
            next_id: AtomicI64::new(1),
        }
    }

    fn id(&self) -> Value {
        json!(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends one request; answers its whole JSON-RPC response.
    async fn request_with_id(&self, id: Value, method: &str, params: Option<Value>) -> Value {
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            body["params"] = params;
        }
        let resp = post_mcp(self.app, &self.token, &[], &body).await;
        rpc_response(&resp, &id)
    }

    /// The `result` of a request (asserting there is no `error`).
    async fn result(&self, method: &str, params: Option<Value>) -> Value {
        let json = self.request_with_id(self.id(), method, params).await;
        assert!(json.get("error").is_none(), "{method}: {json}");
        json["result"].clone()
    }

    /// The names and definitions `tools/list` shows.
    async fn tools(&self) -> Vec<Value> {
        let result = self.result("tools/list", None).await;
        result["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {result}"))
            .clone()
    }

    async fn tool_names(&self) -> Vec<String> {
        self.tools()
            .await
            .iter()
            .map(|t| t["name"].as_str().expect("tool name").to_owned())
            .collect()
    }

    /// `tools/call` with this JSON-RPC id and raw `params`.
    async fn call_params(&self, id: Value, params: Value) -> ToolResult {
        let json = self.request_with_id(id, "tools/call", Some(params)).await;
        assert!(json.get("error").is_none(), "tools/call: {json}");
        tool_result(&json["result"])
    }

    async fn call_with_id(&self, id: Value, tool: &str, args: Value) -> ToolResult {
        self.call_params(id, json!({"name": tool, "arguments": args}))
            .await
    }

    async fn call(&self, tool: &str, args: Value) -> ToolResult {
        self.call_with_id(self.id(), tool, args).await
    }
}

/// A `tools/call` result: checks that the text content repeats the
/// structured content.
#[track_caller]
fn tool_result(result: &Value) -> ToolResult {
    let content = result["structuredContent"].clone();
    assert!(content.is_object(), "no structuredContent: {result}");
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {result}"));
    let as_text: Value = serde_json::from_str(text).expect("text content is JSON");
    assert_eq!(as_text, content, "text and structured content differ");
    let said = result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .skip(1)
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    ToolResult {
        is_error: result["isError"].as_bool().unwrap_or(false),
        content,
        said,
    }
}

/// `{owner, repo, grant_id}`
fn target(owner: &str, repo: &str, id: i64) -> Value {
    json!({"owner": owner, "repo": repo, "grant_id": id})
}

/// The confirm arguments for a digest.
fn confirm_args(owner: &str, repo: &str, id: i64, digest: &str) -> Value {
    json!({
        "owner": owner, "repo": repo, "grant_id": id,
        "proposal_schema": SCHEMA, "proposal_version": 1, "proposal_digest": digest,
    })
}

/// The submit arguments.
fn submit_args(id: i64, digest: &str, key: &str, title: &str, body: &str) -> Value {
    json!({
        "owner": OWNER, "repo": REPO, "grant_id": id,
        "proposal_schema": SCHEMA, "proposal_version": 1, "proposal_digest": digest,
        "request_key": key, "title": title, "body": body,
    })
}

/// Replaces builder-bot's (or another bot's) tool grants.
async fn put_grants(app: &TestApp, login: &str, grants: Value) {
    app.send(
        Method::PUT,
        &format!("/api/v1/admin/agents/{login}/tool-grants"),
        Auth::Token(&app.admin_token),
        Body::Json(json!({"grants": grants})),
    )
    .await
    .assert_status(200);
}

/// acme/gadgets, private, builder-bot a writer.
async fn gadgets(app: &TestApp) {
    app.create_repo(OWNER, GADGETS, true).await;
    app.set_collaborator(OWNER, GADGETS, BOT, "write").await;
}

/// A bot with a token of [`BOT_SCOPES`] (no repositories, no grants).
async fn lone_bot(app: &TestApp) -> String {
    app.create_user(BOT, "bot", None).await;
    app.create_token(BOT, BOT_SCOPES).await.token
}

/// One audit row: column name -> text (NULL as `None`).
type Row = BTreeMap<String, Option<String>>;

/// Every column of the audit table, in table order.
async fn audit_columns(conn: &mut SqlConn) -> Vec<String> {
    let sql = match conn {
        SqlConn::Sqlite(_) => "SELECT name FROM pragma_table_info('tool_calls') ORDER BY cid",
        SqlConn::Postgres(_) => {
            "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
             WHERE table_name = 'tool_calls' AND table_schema = current_schema() \
             ORDER BY ordinal_position"
        }
    };
    let columns: Vec<String> = conn
        .text_rows(sql)
        .await
        .into_iter()
        .map(|r| r[0].clone().expect("column name"))
        .collect();
    assert!(columns.len() >= 17, "tool_calls columns: {columns:?}");
    columns
}

/// Every row of `tool_calls`, every column as text, by id.
async fn audit_rows(app: &TestApp) -> Vec<Row> {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let columns = audit_columns(&mut conn).await;
    let select: Vec<String> = columns
        .iter()
        .map(|c| format!("CAST({c} AS TEXT)"))
        .collect();
    // Ordered by the integer column (an output column named `id` is text).
    let sql = format!(
        "SELECT {} FROM tool_calls ORDER BY tool_calls.id",
        select.join(", ")
    );
    let rows = conn.text_rows(&sql).await;
    conn.close().await;
    rows.into_iter()
        .map(|r| columns.iter().cloned().zip(r).collect())
        .collect()
}

/// The newest audit row.
async fn last_call(app: &TestApp) -> Row {
    audit_rows(app).await.pop().expect("an audit row")
}

/// A column of a row (`None` for NULL).
#[track_caller]
fn col<'r>(row: &'r Row, name: &str) -> Option<&'r str> {
    row.get(name)
        .unwrap_or_else(|| panic!("no column {name} in {row:?}"))
        .as_deref()
}

/// The argument names a row recorded.
#[track_caller]
fn arg_names(row: &Row) -> Vec<String> {
    serde_json::from_str(col(row, "arg_names").expect("arg_names")).expect("a JSON array")
}
