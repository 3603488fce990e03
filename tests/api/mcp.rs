//! `POST /mcp` over real HTTP: the handshake and transport refusals, the
//! tool-grant matching rules through real `tools/call`s, strict inputs, the
//! grant flow end to end, listing, the tool-call audit, and an MCP client
//! Writ did not write (the official Python SDK, `tests/mcp_python`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, Body, OTHER_DIGEST, Resp, TestApp, grant_path, plain_client};
use crate::world::{
    ALICE, ALL_SCOPES, BOT, BOT_SCOPES, OWNER, REPO, RIVAL, World, keys_of, new_key, submit_body,
    submit_path,
};

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

/// How a raw POST frames its body.
#[derive(Clone, Copy)]
enum Framing {
    /// `Content-Length`, the body in one piece.
    Length,
    /// `Transfer-Encoding: chunked`, no `Content-Length`.
    Chunked,
}

/// POSTs a ping padded to `len` bytes to `/mcp` over a raw connection: the
/// status. The server may answer (413) and close before the whole body is
/// sent, which an HTTP client library reports as a broken pipe instead of
/// the answer; this reads the answer whatever happened to the writes.
async fn raw_post(app: &TestApp, authorization: &str, len: usize, framing: Framing) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":""#;
    let tail = r#""}}}"#;
    let mut body = head.as_bytes().to_vec();
    body.resize(len.max(head.len() + tail.len()) - tail.len(), b'x');
    body.extend_from_slice(tail.as_bytes());
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
            .await
            .expect("connect");
        let framing_header = match framing {
            Framing::Length => format!("Content-Length: {}", body.len()),
            Framing::Chunked => "Transfer-Encoding: chunked".to_owned(),
        };
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {authorization}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             {framing_header}\r\nConnection: close\r\n\r\n",
            app.port()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write head");
        for chunk in body.chunks(64 * 1024) {
            let framed = match framing {
                Framing::Length => chunk.to_vec(),
                Framing::Chunked => {
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(chunk);
                    framed.extend_from_slice(b"\r\n");
                    framed
                }
            };
            if stream.write_all(&framed).await.is_err() {
                break;
            }
        }
        if let Framing::Chunked = framing {
            let _ = stream.write_all(b"0\r\n\r\n").await;
        }
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer);
        text.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
    };
    tokio::time::timeout(EXCHANGE_LIMIT, exchange)
        .await
        .expect("raw POST did not finish")
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
    ToolResult {
        is_error: result["isError"].as_bool().unwrap_or(false),
        content,
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

// ---------------------------------------------------------------------------
// Handshake and transport.
// ---------------------------------------------------------------------------

both_backends!(handshake_negotiates_each_version);
async fn handshake_negotiates_each_version(app: TestApp) {
    let token = lone_bot(&app).await;
    for (n, version) in HANDSHAKE_VERSIONS.iter().enumerate() {
        let id = json!(n + 1);
        let init = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "writ-tests", "version": "1"},
            },
        });
        let resp = post_mcp(&app, &token, &[], &init).await;
        let result = rpc_response(&resp, &id)["result"].clone();
        assert_eq!(result["protocolVersion"], *version, "{result}");
        assert_eq!(result["serverInfo"]["name"], "writ", "{result}");
        assert!(result["capabilities"]["tools"].is_object(), "{result}");

        // The session-less follow-ups of that client, with the version header.
        let headers = [("MCP-Protocol-Version", *version)];
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let resp = post_mcp(&app, &token, &headers, &note).await;
        resp.assert_status(202);
        assert!(resp.body.is_empty(), "{}", resp.body);
        let ping = json!({"jsonrpc": "2.0", "id": "ping-1", "method": "ping"});
        let resp = post_mcp(&app, &token, &headers, &ping).await;
        assert_eq!(rpc_response(&resp, &json!("ping-1"))["result"], json!({}));
        let list = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"});
        let resp = post_mcp(&app, &token, &headers, &list).await;
        assert_eq!(
            rpc_response(&resp, &json!(99))["result"]["tools"],
            json!([])
        );
    }

    // Without the header (a 2025-03-26 client) ping works too.
    let mcp = Mcp::new(&app, &token);
    assert_eq!(mcp.result("ping", None).await, json!({}));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_mcp(&app, &token, &[], &note).await.assert_status(202);

    // A version Writ does not speak is answered with one it does.
    let old = mcp
        .result(
            "initialize",
            Some(json!({
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "writ-tests", "version": "1"},
            })),
        )
        .await;
    let offered = old["protocolVersion"].as_str().unwrap_or_default();
    assert!(HANDSHAKE_VERSIONS.contains(&offered), "{old}");

    // An unknown method is a JSON-RPC error, not an HTTP one.
    let json = mcp
        .request_with_id(json!(7), "resources/unknown", None)
        .await;
    assert_eq!(json["error"]["code"], -32601, "{json}");
}

both_backends!(server_discover_is_answered_in_json_rpc);
async fn server_discover_is_answered_in_json_rpc(app: TestApp) {
    let token = lone_bot(&app).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": DISCOVER_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "writ-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    // The probe as current official clients send it.
    let probe = json!({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": meta},
    });
    let headers = [
        ("MCP-Protocol-Version", DISCOVER_VERSION),
        ("Mcp-Method", "server/discover"),
    ];
    let resp = post_mcp(&app, &token, &headers, &probe).await;
    let json = rpc_response(&resp, &json!(1));
    match (json.get("result"), json.get("error")) {
        (Some(result), None) => {
            let supported = result["supportedVersions"]
                .as_array()
                .unwrap_or_else(|| panic!("no supportedVersions: {json}"));
            for version in HANDSHAKE_VERSIONS.iter().chain([&DISCOVER_VERSION]) {
                assert!(supported.contains(&json!(version)), "{version}: {json}");
            }
            assert!(result["capabilities"]["tools"].is_object(), "{json}");
        }
        (None, Some(error)) => assert_eq!(error["code"], -32601, "{json}"),
        _ => panic!("neither result nor error: {json}"),
    }

    // The same stateless revision then serves tools/list.
    let list = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": meta},
    });
    let headers = [
        ("MCP-Protocol-Version", DISCOVER_VERSION),
        ("Mcp-Method", "tools/list"),
    ];
    let resp = post_mcp(&app, &token, &headers, &list).await;
    assert_eq!(rpc_response(&resp, &json!(2))["result"]["tools"], json!([]));

    // A bare probe (no params, no header) is a JSON-RPC error on a 200.
    let bare = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover"});
    let resp = post_mcp(&app, &token, &[], &bare).await;
    let json = rpc_response(&resp, &json!(3));
    let code = json["error"]["code"].as_i64();
    assert!(
        json.get("result").is_some() || matches!(code, Some(-32601 | -32602)),
        "{json}"
    );

    // Malformed probes (no `_meta`, or `_meta` without the version header)
    // are refused in JSON-RPC: never a hang, never a bare HTTP error. The
    // 2026-07-28 transport answers them with HTTP 400 and a JSON-RPC error
    // naming the request.
    let malformed = [
        (json!({}), vec![]),
        (json!({"_meta": meta}), vec![]),
        (json!({}), vec![("MCP-Protocol-Version", DISCOVER_VERSION)]),
    ];
    for (n, (params, headers)) in malformed.into_iter().enumerate() {
        let id = json!(10 + n);
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params});
        let resp = post_mcp(&app, &token, &headers, &body).await;
        let status = resp.status.as_u16();
        assert!(
            status == 200 || status == 400,
            "probe {n}: status {status}: {}",
            resp.body
        );
        let json = resp.json();
        assert_eq!(json["id"], id, "probe {n}: {json}");
        let code = json["error"]["code"].as_i64().unwrap_or(0);
        assert!(
            [-32601, -32602, -32600, -32020].contains(&code),
            "probe {n}: {json}"
        );
    }
}

both_backends!(transport_refusals);
async fn transport_refusals(app: TestApp) {
    let world = World::new(&app).await;
    let bearer = format!("Bearer {}", world.bot);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    // JSON-RPC batches are refused.
    for batch in [
        format!("[{ping}]"),
        format!(" \n[{ping}, {ping}]"),
        "[]".to_owned(),
    ] {
        let resp = post_mcp_raw(&app, &app.client, Some(&bearer), &[], batch.into_bytes()).await;
        resp.assert_status(400);
        let json = resp.json();
        assert_eq!(json["jsonrpc"], "2.0", "{json}");
        assert_eq!(json["error"]["code"], -32600, "{json}");
    }

    // Bodies: exactly 1 MiB is read; one byte more is 413.
    let limit = 1024 * 1024;
    let sized = |len: usize| {
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":""#;
        let tail = r#""}}}"#;
        let pad = len - head.len() - tail.len();
        format!("{head}{}{tail}", "x".repeat(pad)).into_bytes()
    };
    let fresh = plain_client(false);
    let resp = post_mcp_raw(&app, &fresh, Some(&bearer), &[], sized(limit)).await;
    assert_eq!(rpc_response(&resp, &json!(1))["result"], json!({}));
    // Larger bodies go over a raw connection: the server answers 413 without
    // reading the rest, and may close while the client is still writing.
    for len in [limit + 1, 3 * limit] {
        let status = raw_post(&app, &bearer, len, Framing::Length).await;
        assert_eq!(status, 413, "{len}-byte body");
    }

    // A body streamed without Content-Length is bounded the same way.
    let status = raw_post(&app, &bearer, 2 * limit, Framing::Chunked).await;
    assert_eq!(status, 413, "chunked 2 MiB body");
    let status = raw_post(&app, &bearer, 1000, Framing::Chunked).await;
    assert_eq!(status, 200, "small chunked body");

    // Only POST is served (stateless, no SSE stream), with or without a token.
    for method in [Method::GET, Method::DELETE, Method::PUT] {
        for auth in [Auth::None, Auth::Bearer(&world.bot)] {
            let resp = app.send(method.clone(), "/mcp", auth, Body::None).await;
            assert_eq!(
                resp.status.as_u16(),
                405,
                "{method} {auth:?}: {}",
                resp.body
            );
        }
    }
    // The DNS-rebinding guard: a foreign Host is refused.
    let resp = post_mcp_raw(
        &app,
        &app.client,
        Some(&bearer),
        &[("Host", "evil.example")],
        ping.to_string().into_bytes(),
    )
    .await;
    assert_eq!(resp.status.as_u16(), 403, "{}", resp.body);

    // Credentials: none, a bad one, a human's token, a browser session.
    let body = ping.to_string().into_bytes();
    let resp = post_mcp_raw(&app, &app.client, None, &[], body.clone()).await;
    resp.assert_error(401, "unauthenticated");
    assert!(resp.header("www-authenticate").is_some(), "{resp:?}");
    let bad = format!("Bearer {}x", world.bot);
    post_mcp_raw(&app, &app.client, Some(&bad), &[], body.clone())
        .await
        .assert_error(401, "unauthenticated");
    let human = format!("Bearer {}", world.alice_token);
    post_mcp_raw(&app, &app.client, Some(&human), &[], body.clone())
        .await
        .assert_error(403, "agent_only");
    let admin = format!("Bearer {}", app.admin_token);
    post_mcp_raw(&app, &app.client, Some(&admin), &[], body.clone())
        .await
        .assert_error(403, "agent_only");
    // Basic with a human's password is never accepted; with her token it is
    // still a human.
    let basic = |login: &str, secret: &str| {
        use base64::Engine as _;
        let raw = format!("{login}:{secret}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    };
    post_mcp_raw(
        &app,
        &app.client,
        Some(&basic(ALICE, crate::world::ALICE_PW)),
        &[],
        body.clone(),
    )
    .await
    .assert_error(401, "unauthenticated");
    post_mcp_raw(
        &app,
        &app.client,
        Some(&basic(ALICE, &world.alice_token)),
        &[],
        body.clone(),
    )
    .await
    .assert_error(403, "agent_only");
    // The bot's own token in the other accepted forms.
    for authorization in [format!("token {}", world.bot), basic(BOT, &world.bot)] {
        let resp = post_mcp_raw(&app, &app.client, Some(&authorization), &[], body.clone()).await;
        assert_eq!(rpc_response(&resp, &json!(1))["result"], json!({}));
    }
    // alice's browser carries her session cookie: never a credential here.
    post_mcp_raw(&app, &world.alice.client, None, &[], body.clone())
        .await
        .assert_error(401, "unauthenticated");
    // A revoked bot token is refused.
    let spare = app.create_token(BOT, BOT_SCOPES).await;
    app.delete_token(BOT, spare.id).await;
    let revoked = format!("Bearer {}", spare.token);
    post_mcp_raw(&app, &app.client, Some(&revoked), &[], body)
        .await
        .assert_error(401, "unauthenticated");
    // None of these was a tools/call: nothing audited.
    assert!(audit_rows(&app).await.is_empty());
}

// ---------------------------------------------------------------------------
// Tool grants: the matching rules through real tools/calls.
// ---------------------------------------------------------------------------

both_backends!(default_deny_without_grants);
async fn default_deny_without_grants(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Default deny").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let mcp = Mcp::new(&app, &world.bot);
    let key = new_key();
    let calls = [
        (LIST, json!({})),
        (GET, target(OWNER, REPO, id)),
        (CONFIRM, confirm_args(OWNER, REPO, id, &digest)),
        (SUBMIT, submit_args(id, &digest, &key, "t", "b")),
        (
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key}),
        ),
    ];
    // Never given a set, then given the empty set: the same.
    for round in 0..2 {
        assert_eq!(mcp.tools().await, Vec::<Value>::new(), "round {round}");
        for (tool, args) in &calls {
            let result = mcp.call(tool, args.clone()).await;
            let denial = result.denied("no_grants");
            assert_eq!(denial["tool"], *tool);
            let repository = if *tool == LIST {
                Value::Null
            } else {
                json!("acme/widgets")
            };
            assert_eq!(denial["repository"], repository, "{denial}");
        }
        put_grants(&app, BOT, json!([])).await;
    }
    // A name that is not one of the five tools.
    mcp.call("create_issue", json!({"title": "x"}))
        .await
        .denied("unknown_tool");
    // Nothing ran: same grant, no issue, no receipt.
    world.assert_unchanged(id, &before).await;
    assert!(world.all_issues().await.is_empty());
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    // Every tools/call was audited as denied (the other rows are the REST
    // calls of the fixture: via = api).
    let rows = audit_rows(&app).await;
    let denied: Vec<&Row> = rows
        .iter()
        .filter(|r| col(r, "via") == Some("mcp"))
        .collect();
    assert_eq!(denied.len(), 11, "{rows:#?}");
    for row in denied {
        assert_eq!(col(row, "decision"), Some("deny"), "{row:?}");
        assert_eq!(col(row, "native_status"), None, "{row:?}");
    }
}

both_backends!(repository_patterns_match_exactly_by_owner_and_case_insensitively);
async fn repository_patterns_match_exactly_by_owner_and_case_insensitively(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    let id = world.prepare("Matching rules").await;
    let mcp = Mcp::new(&app, &world.bot);
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // Exact repository.
    put_grants(
        &app,
        BOT,
        json!([{"id": "exact", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("exact"));
    for (owner, repo) in [
        (OWNER, GADGETS),
        (OWNER, "widget"),
        (OWNER, "widgets2"),
        ("acm", REPO),
        ("other", REPO),
    ] {
        mcp.call(GET, on(owner, repo))
            .await
            .denied("repository_not_in_grant");
    }
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await
        .denied("tool_not_in_any_grant");
    mcp.call(LIST, json!({}))
        .await
        .denied("tool_not_in_any_grant");

    // owner/*
    put_grants(
        &app,
        BOT,
        json!([{"id": "owner", "repos": ["acme/*"], "tools": [GET]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    // Allowed on any acme repository; the native route then decides.
    mcp.call(GET, on(OWNER, GADGETS))
        .await
        .error(404, "not_found");
    mcp.call(GET, on(OWNER, "no-such-repo"))
        .await
        .error(404, "not_found");
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("owner"));
    mcp.call(GET, on("acme-corp", REPO))
        .await
        .denied("repository_not_in_grant");
    mcp.call(GET, on("other", "acme"))
        .await
        .denied("repository_not_in_grant");

    // Case-insensitive repository, owner and tool names.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "caps", "repos": ["ACME/Widgets"], "tools": ["GET_Agent_Work_Grant"]},
            {"id": "caps-owner", "repos": ["Acme/*"], "tools": ["Confirm_Agent_Work_Grant"]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("caps"));
    for (owner, repo) in [("ACME", "WIDGETS"), ("aCmE", "wIdGeTs")] {
        let result = mcp.call(GET, on(owner, repo)).await;
        result.allowed();
        // The native route answers exactly as it does over REST.
        let rest = world
            .app
            .get(&grant_path(owner, repo, id), Auth::Token(&world.bot))
            .await;
        assert_eq!(result.native_status(), u64::from(rest.status.as_u16()));
    }
    mcp.call(
        "get_agent_work_grant".to_uppercase().as_str(),
        on(OWNER, REPO),
    )
    .await
    .ok(200);
    let row = last_call(&app).await;
    assert_eq!(col(&row, "decision"), Some("allow"));
    assert_eq!(col(&row, "matched_grant"), Some("caps"));
    let result = mcp
        .call(
            CONFIRM,
            confirm_args("ACME", GADGETS, 999_999, OTHER_DIGEST),
        )
        .await;
    result.error(404, "not_found");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("caps-owner")
    );

    // owner and repo arguments are trimmed before matching.
    put_grants(
        &app,
        BOT,
        json!([{"id": "exact", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    let result = mcp.call(GET, on(" acme ", "\twidgets\n")).await;
    result.allowed();
    // The native operation gets the arguments as given, like the REST path.
    let rest = world
        .app
        .get(
            &grant_path("%20acme%20", "%09widgets%0A", id),
            Auth::Token(&world.bot),
        )
        .await;
    assert_eq!(result.native_status(), u64::from(rest.status.as_u16()));
    let row = last_call(&app).await;
    assert_eq!(col(&row, "decision"), Some("allow"), "{row:?}");
    assert_eq!(col(&row, "repository"), Some("acme/widgets"), "{row:?}");
    // Blank or non-string owner/repo resolve no repository at all.
    for args in [
        on("   ", REPO),
        on(OWNER, ""),
        json!({"owner": 7, "repo": REPO, "grant_id": id}),
        json!({"owner": OWNER, "grant_id": id}),
        json!({"repository": "acme/widgets", "grant_id": id}),
        json!({"full_name": "acme/widgets", "owner": null, "repo": REPO, "grant_id": id}),
    ] {
        mcp.call(GET, args).await.denied("no_repository");
    }

    // Malformed patterns never match (they are stored as given).
    put_grants(
        &app,
        BOT,
        json!([{"id": "odd", "tools": [GET], "repos": [
            "acme/wid*", " acme/widgets", "acme/widgets ", "acme /widgets", "*/widgets", "*",
            "acme/", "/widgets", "acme/widgets/x", "acme//widgets", "acme/*x", "acme",
        ]}]),
    )
    .await;
    for (owner, repo) in [
        (OWNER, REPO),
        (OWNER, "wid*"),
        (OWNER, GADGETS),
        ("*", REPO),
    ] {
        mcp.call(GET, on(owner, repo))
            .await
            .denied("repository_not_in_grant");
    }
    // ... while a well-formed pattern beside them still does.
    put_grants(
        &app,
        BOT,
        json!([{"id": "mixed", "tools": [GET], "repos": ["acme/wid*", "acme/widgets"]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);

    // Tool and repository must be in the SAME grant.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "A", "repos": ["acme/widgets"], "tools": [GET]},
            {"id": "B", "repos": ["acme/gadgets"], "tools": [CONFIRM]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, GADGETS))
        .await
        .denied("repository_not_in_grant");
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await
        .denied("repository_not_in_grant");
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("A"));
    mcp.call(CONFIRM, confirm_args(OWNER, GADGETS, 999_999, OTHER_DIGEST))
        .await
        .error(404, "not_found");
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("B"));

    // The first matching grant, in set order, is the matched one.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "narrow-first", "repos": ["acme/gadgets"], "tools": [GET]},
            {"id": "wide", "repos": ["acme/*"], "tools": [GET, CONFIRM]},
            {"id": "exact-last", "repos": ["acme/widgets"], "tools": [GET]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("wide"));

    // No denial ran anything: the grant was never confirmed.
    assert_eq!(world.grant(id).await["state"], "awaiting_agent");
}

both_backends!(repo_less_list_needs_an_any_repository_grant);
async fn repo_less_list_needs_an_any_repository_grant(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    let id = world.prepare("Listing").await;
    let mcp = Mcp::new(&app, &world.bot);

    // A grant limited to repositories never allows the repo-less list.
    put_grants(
        &app,
        BOT,
        json!([{"id": "acme", "repos": ["acme/*", "acme/widgets"], "tools": [LIST, GET]}]),
    )
    .await;
    let denial = mcp.call(LIST, json!({})).await;
    assert_eq!(denial.denied("no_repository")["repository"], Value::Null);
    mcp.call(LIST, json!({"page": 2, "state": "all"}))
        .await
        .denied("no_repository");
    // owner/repo arguments on the list make the policy match, but the strict
    // input check then refuses the call before any listing.
    let result = mcp.call(LIST, json!({"owner": OWNER, "repo": REPO})).await;
    let refused = result.error(400, "invalid_input");
    assert!(refused.get("grants").is_none(), "{refused}");

    // repos = [] means any repository, and calls that name none.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "acme", "repos": ["acme/*"], "tools": [LIST]},
            {"id": "anywhere", "repos": [], "tools": [LIST, GET]},
        ]),
    )
    .await;
    let listed = mcp.call(LIST, json!({})).await;
    let page = listed.ok(200);
    assert_eq!(page["total_count"], 1, "{page}");
    assert_eq!(page["grants"][0]["id"], id, "{page}");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("anywhere")
    );
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    mcp.call(GET, target("globex", "anything", 1))
        .await
        .error(404, "not_found");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("anywhere")
    );
    // A repo-less call of a tool that needs a repository is allowed by the
    // policy and refused by the input check.
    mcp.call(GET, json!({"grant_id": id}))
        .await
        .error(400, "invalid_input");
}

both_backends!(tools_list_shows_exactly_the_granted_tools);
async fn tools_list_shows_exactly_the_granted_tools(app: TestApp) {
    let world = World::new(&app).await;
    let mcp = Mcp::new(&app, &world.bot);
    assert!(mcp.tools().await.is_empty());

    put_grants(
        &app,
        BOT,
        json!([
            {"id": "a", "repos": ["acme/widgets"], "tools": [GET]},
            // Malformed patterns only: still listed (listing is by tool).
            {"id": "b", "repos": ["acme/wid*"], "tools": ["GET_AGENT_WORK_SUBMISSION", "Get_Agent_Work_Grant"]},
        ]),
    )
    .await;
    let mut names = mcp.tool_names().await;
    names.sort();
    assert_eq!(names, [GET, READBACK]);
    // Per agent: rival-bot holds nothing.
    assert!(Mcp::new(&app, &world.rival).tools().await.is_empty());

    put_grants(
        &app,
        BOT,
        json!([
            {"id": "read", "repos": [], "tools": [LIST, GET, READBACK]},
            {"id": "write", "repos": ["acme/*"], "tools": [CONFIRM, SUBMIT, GET]},
        ]),
    )
    .await;
    let tools = mcp.tools().await;
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    let mut all = ALL_TOOLS.to_vec();
    all.sort_unstable();
    assert_eq!(names, all);
    let required = |tool: &str| -> Vec<&str> {
        match tool {
            LIST => vec![],
            GET => vec!["owner", "repo", "grant_id"],
            CONFIRM => vec![
                "owner",
                "repo",
                "grant_id",
                "proposal_schema",
                "proposal_version",
                "proposal_digest",
            ],
            SUBMIT => vec![
                "owner",
                "repo",
                "grant_id",
                "proposal_schema",
                "proposal_version",
                "proposal_digest",
                "request_key",
                "title",
                "body",
            ],
            _ => vec!["owner", "repo", "grant_id", "request_key"],
        }
    };
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{name}: {schema}");
        assert_eq!(schema["additionalProperties"], false, "{name}: {schema}");
        assert!(
            tool["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{tool}"
        );
        let mut expected = required(name);
        expected.sort_unstable();
        let mut got: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        got.sort_unstable();
        assert_eq!(got, expected, "{name}");
        // Every property is declared; nothing required is undeclared.
        let properties = keys_of(&schema["properties"]);
        for member in &expected {
            assert!(properties.iter().any(|p| p == member), "{name}: {member}");
        }
        if let Some(id) = schema["properties"].get("grant_id") {
            assert_eq!(id["type"], "integer", "{name}: {id}");
            assert_eq!(id["minimum"], 1, "{name}: {id}");
            assert_eq!(id["maximum"], i64::MAX, "{name}: {id}");
        }
        if let Some(version) = schema["properties"].get("proposal_version") {
            assert_eq!(version["type"], "integer", "{name}: {version}");
        }
    }
    let list = tools
        .iter()
        .find(|t| t["name"] == LIST)
        .expect("the list tool");
    assert_eq!(
        keys_of(&list["inputSchema"]["properties"]),
        ["page", "state"]
    );
}

both_backends!(the_policy_narrows_and_never_widens);
async fn the_policy_narrows_and_never_widens(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    let id = world.prepare("Narrowing").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let every = json!([{"id": "all", "repos": [], "tools": ALL_TOOLS}]);
    put_grants(&app, BOT, every.clone()).await;
    put_grants(&app, RIVAL, every).await;

    // A repository the bot cannot read: the native 404.
    app.remove_collaborator(OWNER, REPO, BOT).await;
    let mcp = Mcp::new(&app, &world.bot);
    mcp.call(GET, target(OWNER, REPO, id))
        .await
        .error(404, "not_found");
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(404, "not_found");
    let listed = mcp.call(LIST, json!({})).await;
    assert_eq!(listed.ok(200)["total_count"], 0);
    world.read(id).await.assert_error(404, "not_found");
    app.set_collaborator(OWNER, REPO, BOT, "write").await;

    // Another bot's grant is not there at all.
    let rival = Mcp::new(&app, &world.rival);
    rival
        .call(GET, target(OWNER, REPO, id))
        .await
        .error(404, "not_found");
    rival
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(404, "not_found");

    // A token without write:issue cannot confirm or submit; without
    // read:issue it cannot read receipts back.
    let reader = app.create_token(BOT, &["read:repository"]).await.token;
    let reader = Mcp::new(&app, &reader);
    reader.call(GET, target(OWNER, REPO, id)).await.ok(200);
    reader
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(403, "insufficient_scope");
    reader
        .call(SUBMIT, submit_args(id, &digest, &new_key(), "t", "b"))
        .await
        .error(403, "insufficient_scope");
    reader
        .call(
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": new_key()}),
        )
        .await
        .error(403, "insufficient_scope");
    // No read:repository: not even a read.
    let issues_only = app.create_token(BOT, &["write:issue"]).await.token;
    let issues_only = Mcp::new(&app, &issues_only);
    issues_only
        .call(GET, target(OWNER, REPO, id))
        .await
        .error(403, "insufficient_scope");
    issues_only
        .call(LIST, json!({}))
        .await
        .error(403, "insufficient_scope");
    // A token reduced to another repository.
    let reduced = app
        .create_token_with(
            BOT,
            json!({"name": "gadgets-only", "scopes": BOT_SCOPES, "repositories": ["acme/gadgets"]}),
        )
        .await
        .token;
    Mcp::new(&app, &reduced)
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(403, "insufficient_scope");
    world.assert_unchanged(id, &before).await;

    // Grant state still rules: no submission before approval.
    mcp.call(SUBMIT, submit_args(id, &digest, &new_key(), "t", "b"))
        .await
        .error(409, "state_conflict");
    // A stale digest is the native 409 with the grant.
    let stale = mcp
        .call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await;
    let body = stale.error(409, "proposal_mismatch");
    assert_eq!(body["grant"], before, "{body}");
    world.assert_unchanged(id, &before).await;
    assert!(world.all_issues().await.is_empty());
}

// ---------------------------------------------------------------------------
// Strict inputs.
// ---------------------------------------------------------------------------

both_backends!(strict_inputs_are_refused_before_native_work);
async fn strict_inputs_are_refused_before_native_work(app: TestApp) {
    let world = World::new(&app).await;
    let pending = world.prepare("Strict: pending").await;
    let id = world.active("Strict: active").await;
    let digest = world.digest(id).await;
    let pending_digest = world.digest(pending).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
    )
    .await;
    let before = world.grant(id).await;
    let before_pending = world.grant(pending).await;
    let mcp = Mcp::new(&app, &world.bot);
    let secret = format!("SECRET-VALUE-{}", uuid::Uuid::new_v4().simple());
    let key = new_key();

    let with = |base: Value, key: &str, value: Value| {
        let mut args = base;
        args[key] = value;
        args
    };
    let without = |base: Value, key: &str| {
        let mut args = base;
        args.as_object_mut().unwrap().remove(key);
        args
    };
    let get = target(OWNER, REPO, id);
    let confirm = confirm_args(OWNER, REPO, pending, &pending_digest);
    let submit = submit_args(id, &digest, &key, "Strict title", "Strict body");
    let readback = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key});
    let bad_ids = [
        json!(1.0),
        json!(id as f64),
        json!(id.to_string()),
        json!(0),
        json!(-1),
        json!(-id),
        json!(9_223_372_036_854_775_808_u64),
        json!(u64::MAX),
        json!(1e20),
        json!(true),
        json!(null),
        json!([id]),
        json!({"id": id}),
    ];
    let mut cases: Vec<(&str, Value)> = Vec::new();
    for (tool, base) in [
        (GET, &get),
        (CONFIRM, &confirm),
        (SUBMIT, &submit),
        (READBACK, &readback),
    ] {
        for bad in &bad_ids {
            cases.push((tool, with(base.clone(), "grant_id", bad.clone())));
        }
        for member in base.as_object().unwrap().keys() {
            cases.push((tool, without(base.clone(), member)));
        }
        cases.push((tool, with(base.clone(), "sneaky", json!(secret))));
        cases.push((tool, with(base.clone(), "state_revision", json!(1))));
        cases.push((tool, with(base.clone(), "owner", json!(7))));
        cases.push((tool, with(base.clone(), "owner", json!(""))));
        cases.push((tool, with(base.clone(), "repo", json!(["widgets"]))));
        cases.push((tool, with(base.clone(), "repo", json!("w".repeat(101)))));
    }
    for (tool, base) in [(CONFIRM, &confirm), (SUBMIT, &submit)] {
        for version in [json!("1"), json!(1.0), json!(true), json!(null)] {
            cases.push((tool, with(base.clone(), "proposal_version", version)));
        }
        cases.push((tool, with(base.clone(), "proposal_schema", json!(1))));
        cases.push((tool, with(base.clone(), "proposal_digest", json!(7))));
        cases.push((
            tool,
            with(
                base.clone(),
                "proposal_digest",
                json!(digest.to_uppercase()),
            ),
        ));
        cases.push((
            tool,
            with(base.clone(), "proposal_digest", json!(&digest[..63])),
        ));
    }
    for bad_key in [
        json!(key.to_uppercase()),
        json!(format!("{{{key}}}")),
        json!(key.replace('-', "")),
        json!("not-a-key"),
        json!(""),
        json!(7),
    ] {
        cases.push((SUBMIT, with(submit.clone(), "request_key", bad_key.clone())));
        cases.push((READBACK, with(readback.clone(), "request_key", bad_key)));
    }
    for (name, bad) in [
        ("title", json!("")),
        ("title", json!("   ")),
        ("title", json!("x".repeat(256))),
        ("title", json!(5)),
        ("title", json!(null)),
        ("body", json!(null)),
        ("body", json!(["b"])),
    ] {
        cases.push((SUBMIT, with(submit.clone(), name, bad)));
    }
    for bad in [
        json!({"page": 0}),
        json!({"page": -1}),
        json!({"page": 1.0}),
        json!({"page": "2"}),
        json!({"page": 9_223_372_036_854_775_808_u64}),
        json!({"state": "done"}),
        json!({"state": 1}),
        json!({"limit": 50}),
        json!({"page": 1, "sneaky": secret}),
    ] {
        cases.push((LIST, bad));
    }

    for (n, (tool, args)) in cases.iter().enumerate() {
        let result = mcp.call(tool, args.clone()).await;
        assert!(
            result.is_error,
            "case {n} {tool} {args}: accepted: {}",
            result.content
        );
        assert_eq!(
            result.content["native_status"], 400,
            "case {n} {tool} {args}: {}",
            result.content
        );
        assert_eq!(
            result.content["code"], "invalid_input",
            "case {n} {tool} {args}: {}",
            result.content
        );
        let message = result.content["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty() && message.len() <= 512, "{message}");
        assert!(!message.contains(&secret), "case {n}: {message}");
        assert!(!result.content.to_string().contains(&secret), "case {n}");
    }
    // Well-formed but unsupported proposals are the native 400.
    for (name, value) in [
        ("proposal_version", json!(2)),
        ("proposal_schema", json!("agent_work_grant.v2")),
    ] {
        for (tool, base) in [(CONFIRM, &confirm), (SUBMIT, &submit)] {
            mcp.call(tool, with(base.clone(), name, value.clone()))
                .await
                .error(400, "unsupported_proposal");
        }
    }
    // The largest id is well-formed: the native 404.
    mcp.call(GET, with(get.clone(), "grant_id", json!(i64::MAX)))
        .await
        .error(404, "not_found");
    // No `arguments` at all: missing members.
    let result = mcp
        .call_params(json!("no-args"), json!({"name": GET}))
        .await;
    result.error(400, "invalid_input");
    // `arguments` that is not an object never runs anything.
    for args in [json!([1]), json!("x"), json!(3)] {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                          "params": {"name": GET, "arguments": args}});
        let resp = post_mcp(&app, &world.bot, &[], &body).await;
        let json = resp.json();
        let refused = json.get("error").is_some() || json["result"]["isError"] == true;
        assert!(refused, "{}: {}", resp.status, resp.body);
    }

    // Nothing happened: both grants as they were, no issue, no receipt.
    world.assert_unchanged(id, &before).await;
    world.assert_unchanged(pending, &before_pending).await;
    assert!(world.all_issues().await.is_empty());
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    // Each refusal is audited as an allowed call that ended in 400.
    let rows = audit_rows(&app).await;
    let mcp_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| col(r, "via") == Some("mcp"))
        .collect();
    assert!(mcp_rows.len() > cases.len(), "{}", mcp_rows.len());
    for row in &mcp_rows[..cases.len()] {
        assert_eq!(col(row, "decision"), Some("allow"), "{row:?}");
        assert_eq!(col(row, "native_status"), Some("400"), "{row:?}");
        assert_eq!(col(row, "error_code"), Some("invalid_input"), "{row:?}");
    }
    for row in &rows {
        for value in row.values().flatten() {
            assert!(!value.contains(&secret), "{row:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// End to end.
// ---------------------------------------------------------------------------

both_backends!(confirm_approve_submit_replay_and_read_back);
async fn confirm_approve_submit_replay_and_read_back(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM, SUBMIT, READBACK]},
        ]),
    )
    .await;
    let id = world.prepare("End to end over MCP").await;
    let mcp = Mcp::new(&app, &world.bot);

    // Read: the native JSON plus native_status.
    let read = mcp.call(GET, target(OWNER, REPO, id)).await;
    let mut got = read.ok(200).clone();
    got.as_object_mut().unwrap().remove("native_status");
    let rest = world.read(id).await;
    rest.assert_status(200);
    assert_eq!(got, rest.json());
    assert_eq!(got["grant"]["state"], "awaiting_agent");
    let digest = got["grant"]["proposal_digest"].as_str().unwrap().to_owned();

    // Confirm: awaiting_agent -> awaiting_human, visible over REST.
    let confirmed = mcp
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await;
    let body = confirmed.ok(200);
    assert_eq!(body["grant"]["state"], "awaiting_human", "{body}");
    let now = world.grant(id).await;
    assert_eq!(now["state"], "awaiting_human");
    assert_eq!(body["grant"], now);

    // alice approves in the browser.
    world.approve(id).await.assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");

    // Submit with a fresh key: 201; the same key again: the 200 replay.
    let key = new_key();
    assert_eq!(key.len(), 36);
    assert_eq!(&key[14..15], "4", "a UUIDv4: {key}");
    let title = format!("MCP issue {}", uuid::Uuid::new_v4().simple());
    let text = "Body over MCP:\n  kept  byte for byte \u{1F980}\r\n\ttrailing space ";
    let args = submit_args(id, &digest, &key, &title, text);
    let created = mcp.call(SUBMIT, args.clone()).await;
    let created = created.ok(201).clone();
    let submission = created["submission"].clone();
    assert_eq!(submission["request_key"], key.as_str(), "{created}");
    assert_eq!(submission["grant_id"], id, "{created}");
    assert_eq!(created["grant"]["submission_count"], 1, "{created}");
    let replay = mcp.call(SUBMIT, args).await;
    let replay = replay.ok(200);
    assert_eq!(replay["submission"], submission);
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0]["title"], title.as_str());
    assert_eq!(issues[0]["body"], text);
    assert_eq!(
        issues[0]["agent_work_grant"],
        json!({"grant_id": id, "request_key": key})
    );

    // Concurrent retries of one new key: exactly one issue, one 201.
    let key2 = new_key();
    let args2 = submit_args(id, &digest, &key2, "Concurrent", "same body");
    let attempts = (0..6).map(|_| mcp.call(SUBMIT, args2.clone()));
    let results = futures_util::future::join_all(attempts).await;
    let mut statuses: Vec<u64> = results.iter().map(ToolResult::native_status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 201], "{results:?}");
    let receipts: Vec<&Value> = results.iter().map(|r| &r.content["submission"]).collect();
    assert!(receipts.windows(2).all(|w| w[0] == w[1]), "{receipts:?}");
    assert_eq!(world.all_issues().await.len(), 2);

    // The same key with other content is the native conflict.
    let other = submit_args(id, &digest, &key, "Another title", text);
    let conflict = mcp.call(SUBMIT, other).await;
    assert!(conflict.error(409, "request_key_conflict")["grant"].is_object());

    // Read back over REST and over MCP: the same receipt.
    let rest = world.readback(id, &key).await;
    rest.assert_status(200);
    let rest = rest.json();
    assert_eq!(rest["submission"], submission);
    let back = mcp
        .call(
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key}),
        )
        .await;
    let mut back = back.ok(200).clone();
    back.as_object_mut().unwrap().remove("native_status");
    assert_eq!(back, rest);
    let unknown = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": new_key()});
    mcp.call(READBACK, unknown).await.error(404, "not_found");
    assert_eq!(world.all_issues().await.len(), 2);
}

both_backends!(list_pages_over_mcp);
async fn list_pages_over_mcp(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..32 {
        ids.push(world.prepare(&format!("Listed grant {n}")).await);
    }
    // rival-bot's grant is never in builder-bot's list.
    world
        .alice
        .prepare_ok(OWNER, REPO, &crate::world::Prepare::new(RIVAL, "Rival"))
        .await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "list", "repos": [], "tools": [LIST]}]),
    )
    .await;
    let mcp = Mcp::new(&app, &world.bot);
    let page_ids = |page: &Value| -> Vec<i64> {
        page["grants"]
            .as_array()
            .expect("grants")
            .iter()
            .map(|g| g["id"].as_i64().unwrap())
            .collect()
    };

    let first = mcp.call(LIST, json!({})).await;
    let first = first.ok(200);
    assert_eq!(first["total_count"], 32);
    assert_eq!(first["page"], 1);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["next_page"], 2);
    assert_eq!(first["snapshot"], false);
    assert_eq!(page_ids(first), ids[..30]);
    // The same as the native route's first page (limit 30).
    let rest = app
        .get("/api/v1/agent-work-grants", Auth::Token(&world.bot))
        .await;
    rest.assert_status(200);
    assert_eq!(&first["grants"], &rest.json());
    assert_eq!(rest.header("x-total-count").as_deref(), Some("32"));

    let second = mcp.call(LIST, json!({"page": 2})).await;
    let second = second.ok(200);
    assert_eq!(page_ids(second), ids[30..]);
    assert_eq!(second["page"], 2);
    assert_eq!(second["has_more"], false);
    assert_eq!(second["next_page"], Value::Null);
    assert_eq!(second["total_count"], 32);
    for page in [json!(9), json!(1_000_000_000)] {
        let past = mcp.call(LIST, json!({"page": page})).await;
        let past = past.ok(200);
        assert_eq!(past["grants"], json!([]), "page {page}");
        assert_eq!(past["total_count"], 32, "page {page}");
        assert_eq!(past["has_more"], false, "page {page}");
        assert_eq!(past["next_page"], Value::Null, "page {page}");
    }

    // Exactly 30 left: no next page.
    world.confirm(ids[0]).await.assert_status(200);
    world.confirm(ids[1]).await.assert_status(200);
    let awaiting = mcp.call(LIST, json!({"state": "awaiting_agent"})).await;
    let awaiting = awaiting.ok(200);
    assert_eq!(awaiting["total_count"], 30);
    assert_eq!(awaiting["has_more"], false);
    assert_eq!(awaiting["next_page"], Value::Null);
    assert_eq!(page_ids(awaiting), ids[2..]);
    let human = mcp
        .call(LIST, json!({"state": "awaiting_human", "page": 1}))
        .await;
    assert_eq!(page_ids(human.ok(200)), ids[..2]);
    // Withdrawn grants are left out unless asked for.
    world.withdraw(ids[31]).await.assert_status(303);
    let all = mcp.call(LIST, json!({"page": 2})).await;
    let all = all.ok(200);
    assert_eq!(all["total_count"], 31);
    assert_eq!(page_ids(all), ids[30..31]);
    assert_eq!(all["has_more"], false);
}

// The list tool's page bound is the native list's (1..=1_000_000_000; the
// bad-input catalogue wants oversized pages refused with a 4xx): pages up to
// it past the end are empty, larger ones are 400 on both surfaces, and the
// schema says so.
both_backends!(list_tool_pages_are_bounded_like_the_native_list);
async fn list_tool_pages_are_bounded_like_the_native_list(app: TestApp) {
    let world = World::new(&app).await;
    world.prepare("Far pages").await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "list", "repos": [], "tools": [LIST]}]),
    )
    .await;
    let mcp = Mcp::new(&app, &world.bot);
    let list = mcp.tools().await;
    // The schema's bound is the native list's: a larger page is 400 on both.
    let maximum = &list[0]["inputSchema"]["properties"]["page"]["maximum"];
    assert_eq!(maximum, &json!(1_000_000_000));
    for page in [2_i64, 1_000_000_000] {
        let result = mcp.call(LIST, json!({"page": page})).await;
        assert!(
            !result.is_error && result.content["grants"] == json!([]),
            "page {page}: {}",
            result.content
        );
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_status(200);
        assert_eq!(rest.json(), json!([]));
    }
    for page in [1_000_000_001_i64, i64::MAX] {
        let result = mcp.call(LIST, json!({"page": page})).await;
        assert!(result.is_error, "page {page}: {}", result.content);
        assert_eq!(result.content["code"], "invalid_input");
        assert!(
            result.content["message"]
                .as_str()
                .is_some_and(|m| m.contains("1 to 1000000000")),
            "{}",
            result.content
        );
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_error(400, "invalid_input");
        assert!(rest.body.contains("1 to 1000000000"), "{}", rest.body);
    }
}

// ---------------------------------------------------------------------------
// The tool-call audit.
// ---------------------------------------------------------------------------

/// What one audit row must say.
struct Expected {
    via: &'static str,
    tool: &'static str,
    repository: Option<&'static str>,
    decision: &'static str,
    matched_grant: Option<&'static str>,
    reason: &'static str,
    rpc_id: Option<String>,
    arg_names: Vec<&'static str>,
    native_status: Option<u16>,
    error_code: Option<String>,
}

const TARGET_NAMES: [&str; 3] = ["grant_id", "owner", "repo"];
const CONFIRM_NAMES: [&str; 6] = [
    "grant_id",
    "owner",
    "proposal_digest",
    "proposal_schema",
    "proposal_version",
    "repo",
];
const SUBMIT_NAMES: [&str; 9] = [
    "body",
    "grant_id",
    "owner",
    "proposal_digest",
    "proposal_schema",
    "proposal_version",
    "repo",
    "request_key",
    "title",
];
const READBACK_NAMES: [&str; 4] = ["grant_id", "owner", "repo", "request_key"];

impl Expected {
    fn mcp(tool: &'static str, rpc_id: &Value, names: &[&'static str]) -> Expected {
        Expected {
            via: "mcp",
            tool,
            repository: Some("acme/widgets"),
            decision: "allow",
            matched_grant: Some("widgets"),
            reason: "granted",
            rpc_id: Some(rpc_id.to_string()),
            arg_names: names.to_vec(),
            native_status: Some(200),
            error_code: None,
        }
    }

    fn api(tool: &'static str, names: &[&'static str], status: u16) -> Expected {
        Expected {
            via: "api",
            tool,
            repository: Some("acme/widgets"),
            decision: "allow",
            matched_grant: None,
            reason: "native_api",
            rpc_id: None,
            arg_names: names.to_vec(),
            native_status: Some(status),
            error_code: None,
        }
    }

    fn status(mut self, status: u16, code: Option<&str>) -> Expected {
        self.native_status = Some(status);
        self.error_code = code.map(str::to_owned);
        self
    }

    fn denied(mut self, reason: &'static str) -> Expected {
        self.decision = "deny";
        self.matched_grant = None;
        self.reason = reason;
        self.native_status = None;
        self
    }

    #[track_caller]
    fn check(&self, n: usize, row: &Row) {
        let what = format!("row {n} ({} {}): {row:?}", self.via, self.tool);
        assert_eq!(col(row, "via"), Some(self.via), "{what}");
        assert_eq!(col(row, "tool"), Some(self.tool), "{what}");
        assert_eq!(col(row, "repository"), self.repository, "{what}");
        assert_eq!(col(row, "decision"), Some(self.decision), "{what}");
        assert_eq!(col(row, "matched_grant"), self.matched_grant, "{what}");
        assert_eq!(col(row, "reason"), Some(self.reason), "{what}");
        assert_eq!(col(row, "rpc_id"), self.rpc_id.as_deref(), "{what}");
        assert_eq!(arg_names(row), self.arg_names, "{what}");
        let status = self.native_status.map(|s| s.to_string());
        assert_eq!(col(row, "native_status"), status.as_deref(), "{what}");
        assert_eq!(col(row, "error_code"), self.error_code.as_deref(), "{what}");
        assert_eq!(col(row, "agent_login"), Some(BOT), "{what}");
        assert!(col(row, "agent_id").is_some(), "{what}");
        assert!(col(row, "token_id").is_some(), "{what}");
        assert!(col(row, "called_at").is_some(), "{what}");
        if self.decision == "allow" {
            let done = col(row, "completed_at").unwrap_or_else(|| panic!("not completed: {what}"));
            assert!(done >= col(row, "called_at").unwrap(), "{what}");
        }
    }
}

both_backends!(audit_records_every_call_and_never_a_value);
async fn audit_records_every_call_and_never_a_value(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM, SUBMIT, READBACK]},
            {"id": "list-anywhere", "repos": [], "tools": [LIST]},
        ]),
    )
    .await;
    let id = world.prepare("Audited grant").await;
    let digest = world.digest(id).await;
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let title = format!("AUDIT-TITLE-{mark}");
    let body = format!("AUDIT-BODY-{mark}");
    let sneaky = format!("AUDIT-SNEAKY-{mark}");
    let key = new_key();
    let mcp = Mcp::new(&app, &world.bot);
    // world.digest read the grant over REST.
    let mut expected: Vec<Expected> = vec![Expected::api(GET, &TARGET_NAMES, 200)];
    let mut audited = |e: Expected| expected.push(e);

    // Not tool calls: never audited.
    mcp.result(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "writ-tests", "version": "1"}})),
    )
    .await;
    mcp.tools().await;
    mcp.result("ping", None).await;

    // MCP calls: allowed (with outcomes) and denied.
    let rpc = json!(101);
    mcp.call_with_id(rpc.clone(), LIST, json!({})).await.ok(200);
    let mut list = Expected::mcp(LIST, &rpc, &[]);
    list.repository = None;
    list.matched_grant = Some("list-anywhere");
    audited(list);

    let rpc = json!("get-one");
    mcp.call_with_id(rpc.clone(), GET, target(OWNER, REPO, id))
        .await
        .ok(200);
    audited(Expected::mcp(GET, &rpc, &TARGET_NAMES));

    let rpc = json!(103);
    mcp.call_with_id(rpc.clone(), CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .ok(200);
    audited(Expected::mcp(CONFIRM, &rpc, &CONFIRM_NAMES));
    world.approve(id).await.assert_status(303);

    let rpc = json!(104);
    let args = submit_args(id, &digest, &key, &title, &body);
    mcp.call_with_id(rpc.clone(), SUBMIT, args.clone())
        .await
        .ok(201);
    audited(Expected::mcp(SUBMIT, &rpc, &SUBMIT_NAMES).status(201, None));
    let rpc = json!(105);
    mcp.call_with_id(rpc.clone(), SUBMIT, args).await.ok(200);
    audited(Expected::mcp(SUBMIT, &rpc, &SUBMIT_NAMES));

    let rpc = json!(106);
    let readback = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key});
    mcp.call_with_id(rpc.clone(), READBACK, readback)
        .await
        .ok(200);
    audited(Expected::mcp(READBACK, &rpc, &READBACK_NAMES));

    let rpc = json!(107);
    mcp.call_with_id(rpc.clone(), GET, target(OWNER, GADGETS, id))
        .await
        .denied("repository_not_in_grant");
    let mut denied = Expected::mcp(GET, &rpc, &TARGET_NAMES).denied("repository_not_in_grant");
    denied.repository = Some("acme/gadgets");
    audited(denied);

    let rpc = json!(108);
    let mut extra = submit_args(id, &digest, &new_key(), &title, &body);
    extra["sneaky"] = json!(sneaky);
    mcp.call_with_id(rpc.clone(), SUBMIT, extra)
        .await
        .error(400, "invalid_input");
    let mut names = SUBMIT_NAMES.to_vec();
    names.push("sneaky");
    names.sort_unstable();
    audited(Expected::mcp(SUBMIT, &rpc, &names).status(400, Some("invalid_input")));

    let rpc = json!(109);
    let stale = mcp
        .call_with_id(
            rpc.clone(),
            CONFIRM,
            confirm_args(OWNER, REPO, id, OTHER_DIGEST),
        )
        .await;
    let code = stale.content["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        stale.is_error && stale.native_status() == 409,
        "{:?}",
        stale
    );
    audited(Expected::mcp(CONFIRM, &rpc, &CONFIRM_NAMES).status(409, Some(&code)));

    let rpc = json!("unknown-tool");
    mcp.call_with_id(
        rpc.clone(),
        "create_issue",
        json!({"title": title, "body": body}),
    )
    .await
    .denied("unknown_tool");
    let mut unknown =
        Expected::mcp("create_issue", &rpc, &["body", "title"]).denied("unknown_tool");
    unknown.repository = None;
    audited(unknown);

    let rpc = json!(111);
    mcp.call_with_id(
        rpc.clone(),
        LIST,
        json!({"owner": OWNER, "repo": REPO, "page": 1}),
    )
    .await
    .error(400, "invalid_input");
    let mut list_extra =
        Expected::mcp(LIST, &rpc, &["owner", "page", "repo"]).status(400, Some("invalid_input"));
    list_extra.matched_grant = Some("list-anywhere");
    audited(list_extra);

    // The native agent routes, without MCP: via = api.
    let bot = Auth::Token(&world.bot);
    app.get("/api/v1/agent-work-grants?page=1&state=all", bot)
        .await
        .assert_status(200);
    let mut list = Expected::api(LIST, &["page", "state"], 200);
    list.repository = None;
    audited(list);
    world.read(id).await.assert_status(200);
    audited(Expected::api(GET, &TARGET_NAMES, 200));
    let resp = world
        .confirm_with(id, crate::helpers::confirm_body(OTHER_DIGEST))
        .await;
    resp.assert_status(409);
    audited(Expected::api(CONFIRM, &CONFIRM_NAMES, 409).status(409, Some(&resp.code())));
    let key2 = new_key();
    let title2 = format!("AUDIT-REST-TITLE-{mark}");
    let body2 = format!("AUDIT-REST-BODY-{mark}");
    world
        .submit_with(id, submit_body(&digest, &key2, &title2, &body2))
        .await
        .assert_status(201);
    audited(Expected::api(SUBMIT, &SUBMIT_NAMES, 201));
    world.readback(id, &key2).await.assert_status(200);
    audited(Expected::api(READBACK, &READBACK_NAMES, 200));
    world
        .readback(id, &new_key())
        .await
        .assert_error(404, "not_found");
    audited(Expected::api(READBACK, &READBACK_NAMES, 404).status(404, Some("not_found")));
    // A rejected body is recorded by its member names only.
    let path = submit_path(OWNER, REPO, id);
    let mut sneaky_body = submit_body(&digest, &new_key(), &title2, &body2);
    sneaky_body["sneaky"] = json!(sneaky);
    app.post_json(&path, bot, sneaky_body)
        .await
        .assert_error(400, "invalid_input");
    let mut names = SUBMIT_NAMES.to_vec();
    names.push("sneaky");
    names.sort_unstable();
    audited(Expected::api(SUBMIT, &names, 400).status(400, Some("invalid_input")));

    // One row per call, in order, saying what happened.
    let rows = audit_rows(&app).await;
    assert_eq!(rows.len(), expected.len(), "{rows:#?}");
    for (n, (row, want)) in rows.iter().zip(&expected).enumerate() {
        want.check(n, row);
    }
    let token_ids: std::collections::BTreeSet<_> =
        rows.iter().map(|r| col(r, "token_id")).collect();
    assert_eq!(token_ids.len(), 1, "one token made every call");
    let times: Vec<&str> = rows.iter().map(|r| col(r, "called_at").unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // No argument value, and no credential, in any column of any row.
    let values = [
        title.as_str(),
        body.as_str(),
        sneaky.as_str(),
        key.as_str(),
        key2.as_str(),
        title2.as_str(),
        body2.as_str(),
        digest.as_str(),
        OTHER_DIGEST,
        SCHEMA,
        mark.as_str(),
        world.bot.as_str(),
    ];
    for row in &rows {
        for (column, value) in row {
            let Some(value) = value else { continue };
            for secret in values {
                assert!(
                    !value.contains(secret),
                    "column {column} holds the value {secret:?}: {row:?}"
                );
            }
        }
    }

    // The admin report shows the same rows.
    let resp = app
        .get(
            "/api/v1/admin/reports/tool-calls?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    resp.assert_status(200);
    let report = resp.json();
    let report = report.as_array().expect("a JSON array");
    assert_eq!(report.len(), rows.len());
    let text = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    for (line, row) in report.iter().zip(&rows) {
        assert_eq!(text(&line["call_id"]).as_deref(), col(row, "id"), "{line}");
        for name in [
            "called_at",
            "via",
            "agent_login",
            "token_id",
            "tool",
            "repository",
            "decision",
            "matched_grant",
            "reason",
            "rpc_id",
            "request_id",
            "arg_names",
            "native_status",
            "error_code",
            "completed_at",
        ] {
            assert_eq!(
                text(&line[name]).as_deref(),
                col(row, name),
                "{name}: {line}"
            );
        }
        for secret in values {
            assert!(!line.to_string().contains(secret), "{line}");
        }
    }
    let csv = app
        .get(
            "/api/v1/admin/reports/tool-calls",
            Auth::Token(&app.admin_token),
        )
        .await;
    csv.assert_status(200);
    assert_eq!(csv.body.lines().count(), rows.len() + 1, "{}", csv.body);
    // Only an admin reads it.
    app.get("/api/v1/admin/reports/tool-calls?format=json", bot)
        .await
        .assert_status(403);
    let alice = app.create_token(ALICE, ALL_SCOPES).await.token;
    app.get(
        "/api/v1/admin/reports/tool-calls?format=json",
        Auth::Token(&alice),
    )
    .await
    .assert_error(403, "forbidden");
}

/// Two audit records as Writ before migration 0010 wrote them (their ids
/// left to the engine).
const OLD_RECORDS: &str = "INSERT INTO tool_calls (called_at, via, agent_id, agent_login, \
     token_id, tool, repository, decision, matched_grant, reason, rpc_id, request_id, \
     arg_names, native_status, error_code, completed_at) VALUES \
     ('2026-01-01T00:00:00.000000Z', 'api', 999, 'old-bot', 1, 'get_agent_work_grant', \
     'acme/widgets', 'allow', NULL, 'native_api', NULL, 'old-1', '[\"grant_id\"]', 200, NULL, \
     '2026-01-01T00:00:00.000001Z'), \
     ('2026-01-01T00:00:00.000000Z', 'api', 999, 'old-bot', 1, 'get_agent_work_grant', \
     'acme/widgets', 'allow', NULL, 'native_api', NULL, 'old-2', '[\"grant_id\"]', 200, NULL, \
     '2026-01-01T00:00:00.000001Z')";

both_backends!(
    audit_records_survive_migration_0010,
    spawn =
        |backend| { crate::helpers::TestApp::spawn_upgraded(backend, 9, &[super::OLD_RECORDS]) }
);
/// Records written before migration 0010 (which drops the per-agent index
/// and, on SQLite, AUTOINCREMENT by rebuilding the table) keep their ids
/// and columns; the next record's id comes after theirs; the table stays
/// append-only and the reporting view reads it.
async fn audit_records_survive_migration_0010(app: TestApp) {
    let old = audit_rows(&app).await;
    assert_eq!(old.len(), 2, "{old:?}");
    let ids: Vec<i64> = old
        .iter()
        .map(|r| col(r, "id").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(col(&old[0], "request_id"), Some("old-1"));
    assert_eq!(col(&old[1], "request_id"), Some("old-2"));
    assert_eq!(col(&old[1], "agent_login"), Some("old-bot"));
    assert_eq!(col(&old[1], "arg_names"), Some("[\"grant_id\"]"));
    assert_eq!(col(&old[1], "native_status"), Some("200"));
    assert_eq!(
        col(&old[1], "completed_at"),
        Some("2026-01-01T00:00:00.000001Z")
    );

    let mut conn = SqlConn::connect(&app.database_url()).await;
    let sqlite = app.backend == Backend::Sqlite;
    let indexes = if sqlite {
        "SELECT name FROM sqlite_master WHERE type = 'index' \
         AND tbl_name = 'tool_calls' ORDER BY name"
    } else {
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'tool_calls' \
         AND schemaname = current_schema() ORDER BY indexname"
    };
    let names: Vec<String> = conn
        .text_rows(indexes)
        .await
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    let expected: &[&str] = if sqlite {
        &["tool_calls_called_at"]
    } else {
        &["tool_calls_called_at", "tool_calls_pkey"]
    };
    assert_eq!(names, expected);
    if sqlite {
        let table = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'tool_calls'";
        let sql = conn.text_rows(table).await[0][0].clone().unwrap();
        assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
    }

    // A new record comes after the old ones.
    let world = World::new(&app).await;
    let id = world.prepare("After the upgrade").await;
    world.read(id).await.assert_status(200);
    let rows = audit_rows(&app).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(col(&rows[2], "id"), Some("3"));
    assert_eq!(col(&rows[2], "agent_login"), Some(BOT));
    assert_eq!(col(&rows[2], "native_status"), Some("200"));

    // Still append-only, and the view reads every record.
    let refused = conn.execute("DELETE FROM tool_calls WHERE id = 1").await;
    assert!(refused.unwrap_err().contains("never deleted"));
    let refused = conn
        .execute("UPDATE tool_calls SET agent_login = 'x' WHERE id = 2")
        .await;
    assert!(refused.unwrap_err().contains("only gain their outcome"));
    let view = conn
        .text_rows(
            "SELECT CAST(call_id AS TEXT), request_id FROM report_tool_calls_v1 \
             ORDER BY call_id",
        )
        .await;
    assert_eq!(view.len(), 3);
    assert_eq!(view[0], [Some("1".to_owned()), Some("old-1".to_owned())]);
    assert_eq!(view[1], [Some("2".to_owned()), Some("old-2".to_owned())]);
    assert_eq!(view[2][0].as_deref(), Some("3"));
    conn.close().await;
}

both_backends!(audit_rows_are_append_only);
async fn audit_rows_are_append_only(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "widgets", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    let id = world.prepare("Append only").await;
    let mcp = Mcp::new(&app, &world.bot);
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    mcp.call(LIST, json!({}))
        .await
        .denied("tool_not_in_any_grant");
    world.read(id).await.assert_status(200);
    let before = audit_rows(&app).await;
    assert_eq!(before.len(), 3);
    let allowed = col(&before[0], "id").unwrap().to_owned();
    let denied = col(&before[1], "id").unwrap().to_owned();
    let api = col(&before[2], "id").unwrap().to_owned();

    let mut conn = SqlConn::connect(&app.database_url()).await;
    let statements = [
        format!("UPDATE tool_calls SET native_status = 599 WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET error_code = 'x' WHERE id = {api}"),
        format!("UPDATE tool_calls SET completed_at = NULL WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET decision = 'allow' WHERE id = {denied}"),
        format!("UPDATE tool_calls SET arg_names = '[]' WHERE id = {allowed}"),
        format!("UPDATE tool_calls SET reason = reason WHERE id = {denied}"),
        "UPDATE tool_calls SET agent_login = 'someone-else'".to_owned(),
        format!("DELETE FROM tool_calls WHERE id = {allowed}"),
        format!("DELETE FROM tool_calls WHERE id = {denied}"),
        "DELETE FROM tool_calls".to_owned(),
    ];
    for sql in &statements {
        let result = conn.execute(sql).await;
        // Refused by the schema's triggers (not by a lock or a permission).
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("tool_calls rows")),
            "{sql}: {result:?}"
        );
    }
    // The same connection may write: statements that touch no row succeed.
    assert_eq!(
        conn.execute("DELETE FROM tool_calls WHERE id < 0").await,
        Ok(0)
    );
    assert_eq!(
        conn.execute("UPDATE tool_calls SET reason = 'x' WHERE id < 0")
            .await,
        Ok(0)
    );
    conn.close().await;
    assert_eq!(audit_rows(&app).await, before);

    // The service keeps appending afterwards.
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    assert_eq!(audit_rows(&app).await.len(), 4);
}

/// Adds a trigger that makes every INSERT (`"INSERT"`) or UPDATE
/// (`"UPDATE"`) of `tool_calls` fail, as an unwritable audit would.
async fn block_audit(app: &TestApp, operation: &str) {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let name = format!("test_block_audit_{}", operation.to_ascii_lowercase());
    let statements = match conn {
        SqlConn::Sqlite(_) => vec![format!(
            "CREATE TRIGGER {name} BEFORE {operation} ON tool_calls \
             BEGIN SELECT RAISE(ABORT, 'audit blocked by the test'); END"
        )],
        SqlConn::Postgres(_) => vec![
            "CREATE OR REPLACE FUNCTION test_block_audit() RETURNS trigger AS $$ \
             BEGIN RAISE EXCEPTION 'audit blocked by the test'; END; $$ LANGUAGE plpgsql"
                .to_owned(),
            format!(
                "CREATE TRIGGER {name} BEFORE {operation} ON tool_calls \
                 FOR EACH ROW EXECUTE FUNCTION test_block_audit()"
            ),
        ],
    };
    for sql in statements {
        conn.execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    conn.close().await;
}

/// Removes the trigger [`block_audit`] added.
async fn unblock_audit(app: &TestApp, operation: &str) {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let name = format!("test_block_audit_{}", operation.to_ascii_lowercase());
    let sql = match conn {
        SqlConn::Sqlite(_) => format!("DROP TRIGGER {name}"),
        SqlConn::Postgres(_) => format!("DROP TRIGGER {name} ON tool_calls"),
    };
    conn.execute(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn.close().await;
}

both_backends!(an_unwritable_audit_refuses_the_call);
async fn an_unwritable_audit_refuses_the_call(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
    )
    .await;
    let pending = world.prepare("Fail closed: pending").await;
    let active = world.active("Fail closed: active").await;
    let pending_digest = world.digest(pending).await;
    let active_digest = world.digest(active).await;
    let before_pending = world.grant(pending).await;
    let before_active = world.grant(active).await;
    let mcp = Mcp::new(&app, &world.bot);
    let rows_before = audit_rows(&app).await.len();

    // The record cannot be written: nothing runs, over MCP or REST.
    block_audit(&app, "INSERT").await;
    let refused = |result: ToolResult| {
        result.error(503, "audit_unavailable");
    };
    refused(mcp.call(GET, target(OWNER, REPO, pending)).await);
    refused(mcp.call(LIST, json!({})).await);
    refused(
        mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
            .await,
    );
    let key = new_key();
    refused(
        mcp.call(
            SUBMIT,
            submit_args(active, &active_digest, &key, "Blocked", "b"),
        )
        .await,
    );
    // A call the policy would deny is not answered either way without its
    // record.
    let unknown = mcp.call("create_issue", json!({})).await;
    assert!(unknown.is_error, "{:?}", unknown);
    // The native routes refuse too (their status and code are checked in
    // native_routes_answer_503_when_the_audit_is_unwritable).
    let resp = world
        .confirm_with(pending, crate::helpers::confirm_body(&pending_digest))
        .await;
    assert!(resp.status.is_server_error(), "{resp:?}");
    let resp = world
        .submit_with(active, submit_body(&active_digest, &key, "Blocked", "b"))
        .await;
    assert!(resp.status.is_server_error(), "{resp:?}");
    unblock_audit(&app, "INSERT").await;
    assert_eq!(audit_rows(&app).await.len(), rows_before);
    world.assert_unchanged(pending, &before_pending).await;
    world.assert_unchanged(active, &before_active).await;
    assert!(world.all_issues().await.is_empty());
    let rows_before = audit_rows(&app).await.len();

    // The record is written but its outcome cannot be: a write rolls back
    // with it, so nothing happened, and the call is refused.
    block_audit(&app, "UPDATE").await;
    refused(
        mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
            .await,
    );
    refused(
        mcp.call(
            SUBMIT,
            submit_args(active, &active_digest, &key, "Blocked", "b"),
        )
        .await,
    );
    refused(mcp.call(GET, target(OWNER, REPO, pending)).await);
    // A native call's record is never updated: it is written once, whole,
    // with its outcome, in the operation's transaction.
    world.read(pending).await.assert_status(200);
    unblock_audit(&app, "UPDATE").await;
    world.assert_unchanged(pending, &before_pending).await;
    world.assert_unchanged(active, &before_active).await;
    assert!(world.all_issues().await.is_empty());
    world
        .readback(active, &key)
        .await
        .assert_error(404, "not_found");
    // Each of those calls left its record. An MCP call's record was
    // committed with its policy decision, so it stays without an outcome.
    // The native read's record was written with its outcome.
    let rows = audit_rows(&app).await;
    let blocked = &rows[rows_before..rows_before + 4];
    for row in blocked {
        assert_eq!(col(row, "decision"), Some("allow"), "{row:?}");
        if col(row, "via") == Some("mcp") {
            assert_eq!(col(row, "completed_at"), None, "{row:?}");
            assert_eq!(col(row, "native_status"), None, "{row:?}");
        } else {
            assert_eq!(col(row, "native_status"), Some("200"), "{row:?}");
            assert_eq!(col(row, "error_code"), None, "{row:?}");
            assert!(col(row, "completed_at").is_some(), "{row:?}");
        }
    }
    assert_eq!(
        blocked
            .iter()
            .filter(|r| col(r, "via") == Some("api"))
            .count(),
        1
    );

    // Writable again: the same calls go through.
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, pending, &pending_digest))
        .await
        .ok(200);
    mcp.call(
        SUBMIT,
        submit_args(active, &active_digest, &key, "Now", "b"),
    )
    .await
    .ok(201);
    assert_eq!(world.all_issues().await.len(), 1);
}

// Product bug (see the message): the native agent routes answer an
// unwritable audit with a generic 500 `internal`, not the 503
// `audit_unavailable` that `service::Error::AuditUnavailable` defines and
// that `/mcp` answers for the same failure.
both_backends!(native_routes_answer_503_when_the_audit_is_unwritable);
async fn native_routes_answer_503_when_the_audit_is_unwritable(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
    )
    .await;
    let id = world.prepare("Audit unavailable").await;
    let digest = world.digest(id).await;
    let before = world.grant(id).await;
    block_audit(&app, "INSERT").await;
    // /mcp: 503 audit_unavailable.
    Mcp::new(&app, &world.bot)
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(503, "audit_unavailable");
    // The native routes, for the same failure.
    let get = world.read(id).await;
    let confirm = world
        .confirm_with(id, crate::helpers::confirm_body(&digest))
        .await;
    unblock_audit(&app, "INSERT").await;
    world.assert_unchanged(id, &before).await;
    for (route, resp) in [("GET grant", &get), ("POST confirm", &confirm)] {
        assert_eq!(
            (resp.status.as_u16(), resp.code().as_str()),
            (503, "audit_unavailable"),
            "{route}: the native route hides the audit failure behind a generic \
             internal error (src/http/error.rs marks AuditUnavailable as an InternalError, \
             and log_internal_errors in src/http/mod.rs rewrites the answer to 500): {}",
            resp.body
        );
    }
}

// ---------------------------------------------------------------------------
// The official MCP Python SDK (a client Writ did not write).
// ---------------------------------------------------------------------------

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/mcp_python/client_check.py"
);
const REQUIREMENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/mcp_python/requirements.txt"
);

/// The interpreter of the venv with the SDK, from `WRIT_TEST_MCP_PYTHON`.
/// Unset: the test is skipped, unless `WRIT_TEST_REQUIRE_MCP_PYTHON` is set
/// (as CI does), which fails it.
fn mcp_python() -> Option<String> {
    let python = std::env::var("WRIT_TEST_MCP_PYTHON")
        .ok()
        .filter(|p| !p.trim().is_empty());
    if python.is_none() {
        if std::env::var_os("WRIT_TEST_REQUIRE_MCP_PYTHON").is_some_and(|v| !v.is_empty()) {
            panic!("WRIT_TEST_REQUIRE_MCP_PYTHON is set but WRIT_TEST_MCP_PYTHON is unset");
        }
        eprintln!("skipped: WRIT_TEST_MCP_PYTHON unset");
    }
    python
}

/// The SDK version `requirements.txt` pins.
fn pinned_sdk_version() -> String {
    let text = std::fs::read_to_string(REQUIREMENTS).expect("read requirements.txt");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("mcp=="))
        .expect("requirements.txt pins mcp==")
        .trim()
        .to_owned()
}

/// Runs `client_check.py` with these arguments: its JSON line.
async fn run_client_check(python: &str, args: &[String]) -> Value {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(SCRIPT)
        .args(args)
        .env("WRIT_LOG", "warn")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .expect("client_check.py did not finish within 180 s")
        .unwrap_or_else(|e| panic!("run {python} {SCRIPT}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let seen: Value = line
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line; stdout: {stdout}\nstderr: {stderr}"));
    eprintln!("client_check.py: {seen}");
    assert!(
        output.status.success() && seen["ok"] == true,
        "client_check.py failed ({}): {seen}\nstderr: {stderr}",
        output.status
    );
    seen
}

fn check_args(token: &str, id: i64, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--token",
        token,
        "--owner",
        OWNER,
        "--repo",
        REPO,
        "--grant-id",
        &id.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

both_backends!(python_sdk_over_http);
async fn python_sdk_over_http(app: TestApp) {
    let Some(python) = mcp_python() else { return };
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM]}]),
    )
    .await;
    let tools = format!("{GET},{CONFIRM}");
    let pinned = pinned_sdk_version();
    // The SDK's default (probe server/discover, else initialize) and the
    // initialize handshake, each on a grant of its own.
    for (mode, expected_version) in [("auto", None), ("legacy", Some("2025-11-25"))] {
        let id = world
            .prepare(&format!("Python SDK over HTTP ({mode})"))
            .await;
        let args = check_args(
            &world.bot,
            id,
            &[
                "--url",
                &app.base,
                "--mode",
                mode,
                "--expect-tools",
                &tools,
                "--denied-repo",
                "acme/gadgets",
            ],
        );
        let seen = run_client_check(&python, &args).await;
        assert_eq!(seen["sdk_version"], pinned.as_str(), "{seen}");
        assert_eq!(seen["transport"], "streamable-http");
        let version = seen["protocol_version"].as_str().unwrap_or_default();
        match expected_version {
            Some(v) => assert_eq!(version, v, "{seen}"),
            None => assert!(
                HANDSHAKE_VERSIONS.contains(&version) || version == DISCOVER_VERSION,
                "{seen}"
            ),
        }
        assert_eq!(seen["server_info"]["name"], "writ", "{seen}");
        assert_eq!(seen["get"]["state"], "awaiting_agent", "{seen}");
        assert_eq!(seen["confirm"]["state"], "awaiting_human", "{seen}");
        assert_eq!(
            seen["denied"]["reason"], "repository_not_in_grant",
            "{seen}"
        );
        // The confirm really happened, through /mcp, audited as such.
        assert_eq!(world.grant(id).await["state"], "awaiting_human");
        let rows = audit_rows(&app).await;
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| col(r, "via") == Some("mcp"))
            .rev()
            .take(3)
            .collect();
        let called: Vec<_> = mine.iter().rev().map(|r| col(r, "tool")).collect();
        assert_eq!(called, [Some(GET), Some(CONFIRM), Some(GET)]);
        let decisions: Vec<_> = mine.iter().rev().map(|r| col(r, "decision")).collect();
        assert_eq!(decisions, [Some("allow"), Some("allow"), Some("deny")]);
    }
}

both_backends!(python_sdk_over_stdio);
async fn python_sdk_over_stdio(app: TestApp) {
    let Some(python) = mcp_python() else { return };
    let writ = env!("CARGO_BIN_EXE_writ");
    // The adapter subcommand must exist in this build.
    let help = tokio::process::Command::new(writ)
        .args(["mcp-stdio", "--help"])
        .output()
        .await
        .expect("run writ mcp-stdio --help");
    assert!(
        help.status.success(),
        "`writ mcp-stdio` is not available in this build: {}",
        String::from_utf8_lossy(&help.stderr)
    );
    let world = World::new(&app).await;
    let command = format!("{writ} mcp-stdio --url {}", app.base);
    for (mode, expected_version) in [("auto", None), ("legacy", Some("2025-11-25"))] {
        let id = world
            .prepare(&format!("Python SDK over stdio ({mode})"))
            .await;
        let args = check_args(
            &world.bot,
            id,
            &["--stdio-command", &command, "--mode", mode],
        );
        let seen = run_client_check(&python, &args).await;
        assert_eq!(seen["sdk_version"], pinned_sdk_version().as_str(), "{seen}");
        assert_eq!(seen["transport"], "stdio");
        let version = seen["protocol_version"].as_str().unwrap_or_default();
        match expected_version {
            Some(v) => assert_eq!(version, v, "{seen}"),
            None => assert!(
                HANDSHAKE_VERSIONS.contains(&version) || version == DISCOVER_VERSION,
                "{seen}"
            ),
        }
        let tools = seen["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 5, "the adapter serves the five tools: {seen}");
        assert_eq!(seen["confirm"]["state"], "awaiting_human", "{seen}");
        assert_eq!(world.grant(id).await["state"], "awaiting_human");
    }
    // The adapter called the native routes: audited as via = api.
    let rows = audit_rows(&app).await;
    let adapter: Vec<(Option<&str>, Option<&str>)> = rows
        .iter()
        .map(|r| (col(r, "via"), col(r, "tool")))
        .filter(|(via, _)| *via == Some("api"))
        .collect();
    assert!(
        adapter.contains(&(Some("api"), Some(GET)))
            && adapter.contains(&(Some("api"), Some(CONFIRM))),
        "{adapter:?}"
    );
    assert!(
        rows.iter().all(|r| col(r, "via") == Some("api")),
        "{rows:?}"
    );
}

// The same calls and records with the records of calls that changed
// nothing committed durably (fsync on SQLite, `synchronous_commit` as the
// server sets it on PostgreSQL) instead of relaxed, the default.
both_backends!(every_call_is_recorded_with_durable_read_records, |config| {
    config.sqlite_durable_read_records = true;
    config.postgres_durable_read_records = true;
});
async fn every_call_is_recorded_with_durable_read_records(app: TestApp) {
    audit_records_every_call_and_never_a_value(app).await;
}

both_backends!(a_use_case_that_commits_without_its_outcome_still_leaves_its_record);
async fn a_use_case_that_commits_without_its_outcome_still_leaves_its_record(app: TestApp) {
    use writ::service::audit::{self, Access, CallInfo};
    use writ::service::auth::{Credential, authenticate};

    // The safety net of `audit::commit`: a use case that commits its
    // transaction without writing the call's outcome. Its writes must not
    // commit without the record, so the record is written (no outcome)
    // before `COMMIT`, and `audit::finish` adds the outcome afterwards.
    let world = World::new(&app).await;
    let ctx = app.writ().ctx();
    let mut caller = authenticate(ctx, Credential::Token(&world.bot))
        .await
        .expect("the bot's token authenticates");
    let mut args = serde_json::Map::new();
    args.insert("owner".into(), json!(OWNER));
    args.insert("repo".into(), json!(REPO));
    let request_id = format!("fallback-{}", new_key());
    let call = CallInfo {
        tool: "",
        args: &args,
        rpc_id: None,
        request_id: Some(request_id.clone()),
    };
    audit::prepare_api(ctx, &mut caller, writ::domain::tools::Tool::List, &call).expect("prepared");
    let tx = audit::open(ctx, &caller, Access::Write)
        .await
        .expect("a transaction with the record in it");
    audit::commit(ctx, tx, &caller)
        .await
        .expect("commits with the record written first");

    // This test's records: the ones carrying its request id.
    let records = || async {
        audit_rows(&app)
            .await
            .into_iter()
            .filter(|r| col(r, "request_id") == Some(request_id.as_str()))
            .collect::<Vec<Row>>()
    };
    let written = records().await;
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(col(&written[0], "tool"), Some("list_agent_work_grants"));
    assert_eq!(col(&written[0], "via"), Some("api"));
    assert_eq!(col(&written[0], "decision"), Some("allow"));
    assert_eq!(
        col(&written[0], "native_status"),
        None,
        "no outcome yet: {written:?}"
    );
    assert_eq!(
        col(&written[0], "completed_at"),
        None,
        "no outcome yet: {written:?}"
    );

    // The call's end adds the outcome to that same record.
    audit::finish(ctx, &caller, Ok::<(), writ::service::Error>(()), 200)
        .await
        .expect("the outcome is written");
    let finished = records().await;
    assert_eq!(finished.len(), 1, "still one record: {finished:?}");
    assert_eq!(col(&finished[0], "native_status"), Some("200"));
    assert!(col(&finished[0], "completed_at").is_some(), "{finished:?}");
}

both_backends!(grant_reads_beside_submissions_see_what_was_acknowledged);
async fn grant_reads_beside_submissions_see_what_was_acknowledged(app: TestApp) {
    // Native grant reads run beside submissions to the same grant (on
    // SQLite on the group-commit writer, in the commits that hold the
    // submissions): a read sent after a submission was acknowledged sees
    // it, no reader sees the count go back or past what was submitted, and
    // every read, found or not, leaves exactly one record with its outcome.
    const SUBMITS: i64 = 8;
    const READERS: usize = 6;
    const READS_EACH: usize = 12;
    let world = World::new(&app).await;
    let active = world.active("Reads beside submissions").await;
    let digest = world.digest(active).await;
    let rows_before = audit_rows(&app).await.len();
    let acked = AtomicI64::new(0);
    let submitter = async {
        for n in 1..=SUBMITS {
            let body = submit_body(&digest, &new_key(), &format!("Beside reads {n}"), "b");
            world.submit_with(active, body).await.assert_status(201);
            acked.store(n, Ordering::SeqCst);
        }
    };
    let reader = |_| async {
        let (mut found, mut missing, mut last) = (0, 0, 0);
        for i in 0..READS_EACH {
            if i % 4 == 3 {
                world
                    .read(active + 1000)
                    .await
                    .assert_error(404, "not_found");
                missing += 1;
                continue;
            }
            let floor = acked.load(Ordering::SeqCst);
            let count = world.grant(active).await["submission_count"]
                .as_i64()
                .expect("submission_count");
            assert!(
                (floor..=SUBMITS).contains(&count) && count >= last,
                "read {count} after {floor} acknowledged and {last} read before"
            );
            last = count;
            found += 1;
        }
        (found, missing)
    };
    let ((), tallies) = futures_util::join!(
        submitter,
        futures_util::future::join_all((0..READERS).map(reader))
    );
    assert_eq!(world.grant(active).await["submission_count"], SUBMITS);

    let rows = audit_rows(&app).await;
    let reads: Vec<&Row> = rows[rows_before..]
        .iter()
        .filter(|r| col(r, "via") == Some("api") && col(r, "tool") == Some(GET))
        .collect();
    let found: usize = tallies.iter().map(|(f, _)| f).sum();
    let missing: usize = tallies.iter().map(|(_, m)| m).sum();
    // The last read above is one more found read.
    assert_eq!(reads.len(), found + missing + 1, "{reads:?}");
    for row in &reads {
        assert!(col(row, "completed_at").is_some(), "{row:?}");
        match col(row, "native_status") {
            Some("200") => assert_eq!(col(row, "error_code"), None, "{row:?}"),
            Some("404") => assert_eq!(col(row, "error_code"), Some("not_found"), "{row:?}"),
            other => panic!("status {other:?} in {row:?}"),
        }
    }
    let statuses = |status| {
        reads
            .iter()
            .filter(|r| col(r, "native_status") == Some(status))
            .count()
    };
    assert_eq!(statuses("200"), found + 1);
    assert_eq!(statuses("404"), missing);
}
