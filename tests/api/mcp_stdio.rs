//! `writ mcp-stdio`: the thin adapter run as a child process, speaking
//! newline-delimited JSON-RPC over its stdin/stdout. First against a real
//! Writ on loopback (both backends), then against a misbehaving fake upstream
//! (no database): lost responses, redirects, malformed and unexpected
//! answers, Link headers, reflected credentials and path segments.

use std::path::{Path, PathBuf};
use std::process::Stdio as Piped;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body as AxumBody;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use percent_encoding::percent_decode_str;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::helpers::{Auth, OTHER_DIGEST, TestApp, within_time_limit};
use crate::world::{BOT, OWNER, REPO, RIVAL, World, new_key, submit_body};

/// Longest wait for one JSON-RPC answer before the test fails.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The adapter's own per-request timeout (`--timeout-seconds`).
const ADAPTER_TIMEOUT_SECONDS: &str = "20";

const TOOLS: [&str; 5] = [
    "list_agent_work_grants",
    "get_agent_work_grant",
    "confirm_agent_work_grant",
    "submit_agent_work_proposal",
    "get_agent_work_submission",
];

// ---------------------------------------------------------------------------
// The adapter as a child process.
// ---------------------------------------------------------------------------

/// How the child gets its token.
enum Cred<'a> {
    /// `WRIT_TOKEN`.
    Env(&'a str),
    /// `--token-file PATH` (no `WRIT_TOKEN`).
    File(&'a Path),
    /// `--basic-user LOGIN` with the token in `WRIT_TOKEN`.
    Basic(&'a str, &'a str),
    /// Neither.
    Nothing,
}

/// A running `writ mcp-stdio`.
struct Stdio {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Option<JoinHandle<String>>,
    next_id: i64,
    /// Strings no answer (and no log line) may ever contain.
    secrets: Vec<String>,
}

fn adapter_command(base: &str, cred: &Cred<'_>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_writ"));
    command
        .arg("mcp-stdio")
        .arg("--url")
        .arg(base)
        .arg("--timeout-seconds")
        .arg(ADAPTER_TIMEOUT_SECONDS)
        .env_remove("WRIT_TOKEN")
        .env_remove("WRIT_LOG")
        .stdin(Piped::piped())
        .stdout(Piped::piped())
        .stderr(Piped::piped())
        .kill_on_drop(true);
    match cred {
        Cred::Env(token) => {
            command.env("WRIT_TOKEN", token);
        }
        Cred::File(path) => {
            command.arg("--token-file").arg(path);
        }
        Cred::Basic(login, token) => {
            command
                .arg("--basic-user")
                .arg(login)
                .env("WRIT_TOKEN", token);
        }
        Cred::Nothing => {}
    }
    command
}

impl Stdio {
    /// Starts the adapter with `WRIT_TOKEN=token` and initializes it.
    async fn start(base: &str, token: &str) -> Stdio {
        Stdio::start_with(base, Cred::Env(token), token).await
    }

    /// Starts the adapter, sends `initialize` (2025-06-18) and
    /// `notifications/initialized`. `token` is the secret to watch for.
    async fn start_with(base: &str, cred: Cred<'_>, token: &str) -> Stdio {
        let mut secrets = vec![token.to_owned()];
        if let Cred::Basic(login, _) = &cred {
            secrets
                .push(base64::engine::general_purpose::STANDARD.encode(format!("{login}:{token}")));
        }
        let mut child = adapter_command(base, &cred)
            .spawn()
            .expect("spawn writ mcp-stdio");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text).await;
            text
        });
        let mut adapter = Stdio {
            child,
            stdin: Some(stdin),
            stdout,
            stderr: Some(stderr),
            next_id: 1,
            secrets,
        };
        let answer = adapter
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "writ-tests", "version": "0"},
                }),
            )
            .await;
        let result = &answer["result"];
        assert_eq!(result["protocolVersion"], "2025-06-18", "{answer}");
        assert_eq!(result["serverInfo"]["name"], "writ-mcp-stdio", "{answer}");
        assert!(result["capabilities"]["tools"].is_object(), "{answer}");
        adapter
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        adapter
    }

    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the adapter");
        stdin.flush().await.expect("flush the adapter's stdin");
    }

    /// What the child wrote on stderr (it ends the child first).
    async fn stderr_text(&mut self) -> String {
        let _ = self.child.start_kill();
        match self.stderr.take() {
            Some(task) => tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => String::new(),
        }
    }

    /// Sends one request and returns the whole JSON-RPC answer with its id,
    /// skipping any other message; fails the test on a hang, a closed
    /// stdout, or a line that is not JSON.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let answer = self.request_unchecked(method, params).await;
        let line = answer.to_string();
        for secret in &self.secrets {
            assert!(
                !line.contains(secret.as_str()),
                "the adapter wrote a credential on stdout: {line}"
            );
        }
        answer
    }

    /// Like [`Stdio::request`], without checking the answer for the secret.
    async fn request_unchecked(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.stdout.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    let stderr = self.stderr_text().await;
                    panic!(
                        "the adapter closed stdout before answering {method}; stderr:\n{stderr}"
                    );
                }
                Err(_) => {
                    let stderr = self.stderr_text().await;
                    panic!("no answer to {method} within {ANSWER_TIMEOUT:?}; stderr:\n{stderr}");
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if message.get("id") == Some(&json!(id)) {
                assert_eq!(message["jsonrpc"], "2.0", "{message}");
                return message;
            }
        }
    }

    /// `tools/call`: the result (asserting it is a result, not a JSON-RPC
    /// error), whose text content is its structured content.
    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        assert!(
            answer.get("error").is_none(),
            "{tool}: a JSON-RPC error instead of a tool result: {answer}"
        );
        let result = answer["result"].clone();
        assert!(result["structuredContent"].is_object(), "{tool}: {result}");
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: no text content: {result}"));
        let from_text: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{tool}: text content is not JSON ({e}): {text}"));
        assert_eq!(
            from_text, result["structuredContent"],
            "{tool}: the text differs from the structured content"
        );
        result
    }

    /// `tools/list`: the tool names in order.
    async fn tool_names(&mut self) -> Vec<String> {
        let answer = self.request("tools/list", json!({})).await;
        answer["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {answer}"))
            .iter()
            .map(|t| t["name"].as_str().expect("tool name").to_owned())
            .collect()
    }

    /// Closes stdin, lets the child end (killing it after a short grace),
    /// and checks that its log never showed the credential.
    async fn finish(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let stderr = self.stderr_text().await;
        for secret in &self.secrets {
            assert!(
                !stderr.contains(secret.as_str()),
                "the adapter logged a credential:\n{stderr}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Reading tool results.
// ---------------------------------------------------------------------------

fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}

/// The structured content of a successful result.
#[track_caller]
fn ok(result: &Value) -> Value {
    assert!(!is_error(result), "expected success: {result}");
    result["structuredContent"].clone()
}

/// The structured content of an error result with this code.
#[track_caller]
fn tool_error(result: &Value, code: &str) -> Value {
    assert!(is_error(result), "expected the error {code}: {result}");
    let content = result["structuredContent"].clone();
    assert_eq!(content["code"], code, "{result}");
    assert!(content["message"].is_string(), "{result}");
    content
}

/// A native refusal: isError with the native status and code, and nothing
/// of a delivery-uncertain answer.
#[track_caller]
fn native_refusal(result: &Value, status: u16, code: &str) -> Value {
    let content = tool_error(result, code);
    assert_eq!(content["native_status"], status, "{result}");
    assert!(content.get("readback").is_none(), "{result}");
    assert!(content.get("submission").is_none(), "{result}");
    content
}

/// The result without `native_status`, to compare with a REST body.
fn without_status(mut content: Value) -> Value {
    if let Value::Object(map) = &mut content {
        map.remove("native_status");
    }
    content
}

// ---------------------------------------------------------------------------
// Against a real Writ.
// ---------------------------------------------------------------------------

fn target(id: i64) -> Value {
    json!({"owner": OWNER, "repo": REPO, "grant_id": id})
}

fn confirm_args(id: i64, digest: &str) -> Value {
    let mut args = target(id);
    args["proposal_schema"] = json!("agent_work_grant.v1");
    args["proposal_version"] = json!(1);
    args["proposal_digest"] = json!(digest);
    args
}

fn submit_args(id: i64, digest: &str, key: &str, title: &str, body: &str) -> Value {
    let mut args = confirm_args(id, digest);
    args["request_key"] = json!(key);
    args["title"] = json!(title);
    args["body"] = json!(body);
    args
}

fn readback_args(id: i64, key: &str) -> Value {
    let mut args = target(id);
    args["request_key"] = json!(key);
    args
}

both_backends!(stdio_serves_the_five_tools_against_writ);
async fn stdio_serves_the_five_tools_against_writ(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Fix the widget frobnicator").await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    assert_eq!(adapter.tool_names().await, TOOLS);

    // get: the native grant plus native_status.
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["native_status"], 200, "{got}");
    assert_eq!(got["grant"]["id"], id, "{got}");
    assert_eq!(got["grant"]["state"], "awaiting_agent", "{got}");
    let rest = world.read(id).await;
    rest.assert_status(200);
    assert_eq!(without_status(got.clone()), rest.json());
    let digest = got["grant"]["proposal_digest"]
        .as_str()
        .expect("proposal_digest")
        .to_owned();

    // confirm with the digest read: awaiting_human, here and over REST.
    let confirmed = ok(&adapter
        .call("confirm_agent_work_grant", confirm_args(id, &digest))
        .await);
    assert_eq!(confirmed["native_status"], 200, "{confirmed}");
    assert_eq!(confirmed["grant"]["state"], "awaiting_human", "{confirmed}");
    assert_eq!(world.grant(id).await["state"], "awaiting_human");

    // alice approves; submit with a fresh key: 201, then the replay: 200.
    world.approve(id).await.assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");
    let key = new_key();
    let args = submit_args(id, &digest, &key, "Frobnicator fix", "Body\nline two");
    let first = ok(&adapter
        .call("submit_agent_work_proposal", args.clone())
        .await);
    assert_eq!(first["native_status"], 201, "{first}");
    assert_eq!(first["submission"]["request_key"], key, "{first}");
    assert_eq!(first["submission"]["grant_id"], id, "{first}");
    let replay = ok(&adapter.call("submit_agent_work_proposal", args).await);
    assert_eq!(replay["native_status"], 200, "{replay}");
    assert_eq!(
        replay["submission"]["issue"], first["submission"]["issue"],
        "the replay names another issue"
    );
    assert_eq!(world.all_issues().await.len(), 1, "one issue per key");

    // readback through the adapter and over REST agree.
    let read = ok(&adapter
        .call("get_agent_work_submission", readback_args(id, &key))
        .await);
    assert_eq!(read["native_status"], 200, "{read}");
    let rest = world.readback(id, &key).await;
    rest.assert_status(200);
    assert_eq!(without_status(read.clone()), rest.json());
    assert_eq!(read["submission"], first["submission"]);

    adapter.finish().await;
}

both_backends!(stdio_refusals_keep_their_native_code);
async fn stdio_refusals_keep_their_native_code(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Refusals").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    // A wrong digest: a definite 409 proposal_mismatch, not uncertain.
    let result = adapter
        .call("confirm_agent_work_grant", confirm_args(id, OTHER_DIGEST))
        .await;
    let content = native_refusal(&result, 409, "proposal_mismatch");
    assert_ne!(content["code"], "delivery_uncertain");
    world.assert_unchanged(id, &before).await;

    // Submitting before approval: the native route's own refusal.
    let key = new_key();
    let args = submit_args(id, &digest, &key, "Too early", "");
    let result = adapter.call("submit_agent_work_proposal", args).await;
    let rest = world
        .submit_with(id, submit_body(&digest, &new_key(), "Too early", ""))
        .await;
    rest.assert_status(409);
    native_refusal(&result, 409, &rest.code());

    // An unknown grant: 404 not_found.
    let result = adapter
        .call("get_agent_work_grant", target(id + 1000))
        .await;
    native_refusal(&result, 404, "not_found");

    // Strict inputs: refused by the adapter itself.
    for (member, value) in [
        ("grant_id", json!(1.0)),
        ("grant_id", json!(format!("{id}"))),
        ("grant_id", json!(0)),
        ("extra", json!(true)),
    ] {
        let mut args = target(id);
        args[member] = value.clone();
        let result = adapter.call("get_agent_work_grant", args).await;
        let content = tool_error(&result, "invalid_input");
        assert!(content.get("native_status").is_none(), "{member}={value}");
    }

    // A used key with other content: 409 request_key_conflict.
    let id = world.active("Conflicts").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let first = adapter
        .call(
            "submit_agent_work_proposal",
            submit_args(id, &digest, &key, "Title A", "same"),
        )
        .await;
    assert_eq!(ok(&first)["native_status"], 201);
    let second = adapter
        .call(
            "submit_agent_work_proposal",
            submit_args(id, &digest, &key, "Title B", "same"),
        )
        .await;
    native_refusal(&second, 409, "request_key_conflict");
    assert_eq!(world.all_issues().await.len(), 1);

    adapter.finish().await;
}

both_backends!(stdio_lists_every_page_by_total_count);
async fn stdio_lists_every_page_by_total_count(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..31 {
        ids.push(world.prepare(&format!("Listed grant {n}")).await);
    }
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    let first = ok(&adapter.call("list_agent_work_grants", json!({})).await);
    assert_eq!(first["native_status"], 200, "{first}");
    assert_eq!(first["total_count"], 31);
    assert_eq!(first["page"], 1);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["next_page"], 2);
    assert_eq!(first["snapshot"], false);
    let page_one: Vec<i64> = first["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| g["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(page_one, ids[..30]);

    let second = ok(&adapter
        .call("list_agent_work_grants", json!({"page": 2}))
        .await);
    assert_eq!(second["total_count"], 31);
    assert_eq!(second["page"], 2);
    assert_eq!(second["has_more"], false);
    assert_eq!(second["next_page"], Value::Null);
    let page_two: Vec<i64> = second["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| g["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(page_two, ids[30..]);

    // The grants are the native list's, page by page.
    for (page, content) in [(1, &first), (2, &second)] {
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}&limit=30"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_status(200);
        assert_eq!(content["grants"], rest.json(), "page {page}");
    }

    // A state filter goes through; nothing is active yet.
    let active = ok(&adapter
        .call("list_agent_work_grants", json!({"state": "active"}))
        .await);
    assert_eq!(active["total_count"], 0);
    assert_eq!(active["grants"], json!([]));
    assert_eq!(active["has_more"], false);

    adapter.finish().await;
}

/// A fresh path for a token file.
fn temp_file(contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("writ-token-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, contents).expect("write the token file");
    path
}

both_backends!(stdio_token_file_and_basic_user);
async fn stdio_token_file_and_basic_user(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Credentials").await;

    // --token-file (with a trailing newline), no WRIT_TOKEN.
    let path = temp_file(&format!("{}\n", world.bot));
    let mut adapter = Stdio::start_with(&app.base, Cred::File(&path), &world.bot).await;
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["grant"]["id"], id);
    adapter.finish().await;
    let _ = std::fs::remove_file(&path);

    // --basic-user: the token is the Basic password of that login.
    let mut adapter = Stdio::start_with(&app.base, Cred::Basic(BOT, &world.bot), &world.bot).await;
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["grant"]["id"], id);
    adapter.finish().await;

    // Basic with a login the token does not belong to: Writ refuses it, so
    // the token really went as a Basic password.
    let mut adapter =
        Stdio::start_with(&app.base, Cred::Basic(RIVAL, &world.bot), &world.bot).await;
    let result = adapter.call("get_agent_work_grant", target(id)).await;
    native_refusal(&result, 401, "unauthenticated");
    adapter.finish().await;

    // No token at all: the adapter does not start.
    let mut child = adapter_command(&app.base, &Cred::Nothing)
        .spawn()
        .expect("spawn writ mcp-stdio");
    drop(child.stdin.take());
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("stderr");
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        let _ = pipe.read_to_string(&mut stderr).await;
        child.wait().await.expect("wait")
    })
    .await
    .expect("the adapter without a token exits");
    assert!(!status.success(), "started without a token");
    assert!(stderr.contains("WRIT_TOKEN"), "{stderr}");
}

both_backends!(stdio_path_segments_stay_in_their_route);
async fn stdio_path_segments_stay_in_their_route(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Segments").await;
    let digest = world.digest(id).await;
    let key = new_key();
    world.submitted(id, &key, "Segments", "").await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    // Owner or repo with `..` or `/` never reach another route: the adapter
    // refuses `.` and `..` itself (`invalid_input`), the rest is Writ's 404/400.
    for (owner, repo) in [
        ("..", REPO),
        (OWNER, ".."),
        ("..", ".."),
        (".", REPO),
        ("acme/widgets", "x"),
        ("acme", "widgets/agent-work-grants"),
        ("%2E%2E", REPO),
    ] {
        let args = json!({"owner": owner, "repo": repo, "grant_id": id});
        let result = adapter.call("get_agent_work_grant", args).await;
        assert!(is_error(&result), "{owner}/{repo} succeeded: {result}");
        let status = &result["structuredContent"]["native_status"];
        assert!(
            *status == 404
                || *status == 400
                || result["structuredContent"]["code"] == "invalid_input",
            "{owner}/{repo}: not a native 404/400: {result}"
        );
        let mut args = readback_args(id, &key);
        args["owner"] = json!(owner);
        args["repo"] = json!(repo);
        let result = adapter.call("get_agent_work_submission", args).await;
        assert!(is_error(&result), "{owner}/{repo} succeeded: {result}");
        let status = &result["structuredContent"]["native_status"];
        assert!(
            *status == 404
                || *status == 400
                || result["structuredContent"]["code"] == "invalid_input",
            "{owner}/{repo}: not a native 404/400: {result}"
        );
    }

    // A request key of `..` or `.` is the readback route's to judge (or the
    // adapter's own input refusal), never another route's answer.
    for bad_key in ["..", ".", "%2E%2E", "a/b"] {
        let result = adapter
            .call("get_agent_work_submission", readback_args(id, bad_key))
            .await;
        assert!(is_error(&result), "key {bad_key:?} succeeded: {result}");
        let content = &result["structuredContent"];
        let native = content["native_status"] == 404 || content["native_status"] == 400;
        assert!(
            native || content["code"] == "invalid_input",
            "key {bad_key:?}: not the readback route's refusal: {result}"
        );
    }

    // The real receipt is still there, and a submit with `..` changes nothing.
    let args = json!({
        "owner": "..", "repo": REPO, "grant_id": id,
        "proposal_schema": "agent_work_grant.v1", "proposal_version": 1,
        "proposal_digest": digest, "request_key": new_key(), "title": "x", "body": "",
    });
    let result = adapter.call("submit_agent_work_proposal", args).await;
    assert!(is_error(&result), "{result}");
    assert_eq!(world.all_issues().await.len(), 1);
    let read = ok(&adapter
        .call("get_agent_work_submission", readback_args(id, &key))
        .await);
    assert_eq!(read["submission"]["request_key"], key);

    adapter.finish().await;
}

// ---------------------------------------------------------------------------
// A misbehaving fake upstream.
// ---------------------------------------------------------------------------

const FAKE_TOKEN: &str = "fake-bot-token-7c1e9a0b5d3f4e2a";
const FAKE_OWNER: &str = "acme";
const FAKE_REPO: &str = "widgets";
const FAKE_GRANT: i64 = 7;
const FAKE_DIGEST: &str = "ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01ab01";
const FAKE_KEY: &str = "0b6f5c2e-8d5e-4d8e-9b7a-2f4a1c3e5d6f";
/// Upstream bytes that must never show in a result.
const MARKER: &str = "UPSTREAM-RAW-BYTES-MARKER";

/// One request the fake received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    /// Path and query exactly as received.
    target: String,
    authorization: Option<String>,
    body: String,
}

impl Seen {
    fn line(&self) -> String {
        format!("{} {}", self.method, self.target)
    }
}

type Replier = Arc<dyn Fn(&Seen) -> Response + Send + Sync>;

/// A fake upstream on loopback that records every request it receives.
struct Fake {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the raw fake does once it has read a whole request.
enum Raw {
    /// Closes the connection without answering.
    Close,
    /// Writes these bytes and closes.
    Bytes(Vec<u8>),
}

impl Fake {
    /// An axum server answering every request with `reply`.
    async fn axum(reply: impl Fn(&Seen) -> Response + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reply: Replier = Arc::new(reply);
        let log = seen.clone();
        let router = axum::Router::new().fallback(move |request: Request| {
            let log = log.clone();
            let reply = reply.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                let seen = Seen {
                    method: parts.method.to_string(),
                    target: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.as_str().to_owned())
                        .unwrap_or_default(),
                    authorization: parts
                        .headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                };
                log.lock().expect("log").push(seen.clone());
                reply(&seen)
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.expect("serve the fake");
        });
        Fake { base, seen, task }
    }

    /// A raw TCP server: reads each whole request, records it, then closes
    /// (or writes `Bytes` first).
    async fn raw(mode: Raw) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let mode = Arc::new(mode);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                let mode = mode.clone();
                tokio::spawn(async move {
                    if let Some(seen) = read_request(&mut stream).await {
                        log.lock().expect("log").push(seen);
                    }
                    if let Raw::Bytes(bytes) = &*mode {
                        let _ = stream.write_all(bytes).await;
                        let _ = stream.flush().await;
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        Fake { base, seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }

    /// `METHOD target` of every request received.
    fn requests(&self) -> Vec<String> {
        self.seen().iter().map(Seen::line).collect()
    }
}

/// Reads one HTTP/1.1 request (head and `Content-Length` body).
async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?.to_owned();
    let mut length = 0usize;
    let mut authorization = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().ok()?,
                "authorization" => authorization = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let end = buf.len().min(head_end + length);
    Some(Seen {
        method,
        target,
        authorization,
        body: String::from_utf8_lossy(&buf[head_end..end]).into_owned(),
    })
}

/// A response with this status, headers and body.
fn http(status: u16, headers: &[(&str, &str)], body: impl Into<AxumBody>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = StatusCode::from_u16(status).expect("status");
    for (name, value) in headers {
        response.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_str(value).expect("header value"),
        );
    }
    response
}

fn json_response(status: u16, body: &Value) -> Response {
    http(
        status,
        &[("content-type", "application/json")],
        body.to_string(),
    )
}

/// Raw bytes of an HTTP/1.1 answer whose body is cut short: it announces
/// more bytes than it sends, then the connection closes.
fn truncated(status: u16, body: &str) -> Vec<u8> {
    let cut = &body[..body.len() / 2];
    format!(
        "HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{cut}",
        body.len()
    )
    .into_bytes()
}

fn grant_path(owner: &str, repo: &str, id: i64) -> String {
    format!("/api/v1/repos/{owner}/{repo}/agent-work-grants/{id}")
}

fn fake_grant(id: i64, state: &str, digest: &str) -> Value {
    json!({
        "id": id,
        "repository": {"full_name": format!("{FAKE_OWNER}/{FAKE_REPO}")},
        "state": state,
        "proposal_schema": "agent_work_grant.v1",
        "proposal_version": 1,
        "proposal_digest": digest,
    })
}

fn fake_receipt(grant_id: i64, key: &str) -> Value {
    json!({
        "grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST),
        "submission": {
            "grant_id": grant_id,
            "request_key": key,
            "status": "submitted",
            "review_state": "awaiting_review",
            "issue": {"id": 11, "index": 1, "url": "http://127.0.0.1/acme/widgets/issues/1"},
        },
    })
}

/// The two writes.
#[derive(Clone, Copy, Debug)]
enum Write {
    Confirm,
    Submit,
}

const WRITES: [Write; 2] = [Write::Confirm, Write::Submit];

impl Write {
    fn tool(self) -> &'static str {
        match self {
            Write::Confirm => "confirm_agent_work_grant",
            Write::Submit => "submit_agent_work_proposal",
        }
    }

    fn arguments(self) -> Value {
        let mut args = json!({
            "owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT,
            "proposal_schema": "agent_work_grant.v1", "proposal_version": 1,
            "proposal_digest": FAKE_DIGEST,
        });
        if let Write::Submit = self {
            args["request_key"] = json!(FAKE_KEY);
            args["title"] = json!("Fix it");
            args["body"] = json!("All of it.");
        }
        args
    }

    /// `POST path` of the native route.
    fn request_line(self) -> String {
        let path = grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT);
        match self {
            Write::Confirm => format!("POST {path}/confirm"),
            Write::Submit => format!("POST {path}/issues"),
        }
    }

    /// The native success status.
    fn created(self) -> u16 {
        match self {
            Write::Confirm => 200,
            Write::Submit => 201,
        }
    }

    /// A well-formed success body.
    fn good_body(self) -> Value {
        match self {
            Write::Confirm => {
                json!({"grant": fake_grant(FAKE_GRANT, "awaiting_human", FAKE_DIGEST)})
            }
            Write::Submit => fake_receipt(FAKE_GRANT, FAKE_KEY),
        }
    }

    /// The readback a delivery-uncertain answer must name.
    fn readback(self) -> Value {
        match self {
            Write::Confirm => json!({
                "tool": "get_agent_work_grant",
                "arguments": {"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT},
            }),
            Write::Submit => json!({
                "tool": "get_agent_work_submission",
                "arguments": {
                    "owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT,
                    "request_key": FAKE_KEY,
                },
            }),
        }
    }
}

/// Makes `write` once through a fresh adapter against `fake` and returns the
/// result, asserting the fake received exactly that one request.
async fn write_once(write: Write, fake: &Fake, case: &str) -> Value {
    let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
    let result = adapter.call(write.tool(), write.arguments()).await;
    adapter.finish().await;
    assert_eq!(
        fake.requests(),
        [write.request_line()],
        "{write:?} {case}: the fake must see exactly the one request"
    );
    result
}

/// Delivery uncertain, naming the readback to make, and never a receipt.
#[track_caller]
fn assert_uncertain(write: Write, result: &Value, case: &str) {
    assert!(
        is_error(result),
        "{write:?} {case}: expected delivery_uncertain: {result}"
    );
    let content = &result["structuredContent"];
    assert_eq!(
        content["code"], "delivery_uncertain",
        "{write:?} {case}: {result}"
    );
    assert_eq!(
        content["readback"],
        write.readback(),
        "{write:?} {case}: {result}"
    );
    assert!(
        content.get("submission").is_none(),
        "{write:?} {case}: a receipt in an uncertain result: {result}"
    );
    let message = content["message"].as_str().expect("message");
    if let Write::Submit = write {
        assert!(
            message.contains(FAKE_KEY),
            "{case}: the message does not name the key: {message}"
        );
    }
    let text = result.to_string();
    assert!(
        !text.contains(MARKER),
        "{write:?} {case}: raw upstream bytes shown: {result}"
    );
}

#[tokio::test]
async fn fake_write_well_formed_success_is_a_result() {
    within_time_limit(async {
        for write in WRITES {
            let fake =
                Fake::axum(move |_| json_response(write.created(), &write.good_body())).await;
            let result = write_once(write, &fake, "well-formed").await;
            let content = ok(&result);
            assert_eq!(content["native_status"], write.created(), "{result}");
            assert_eq!(without_status(content), write.good_body());
            // What went upstream: the bearer, and only the documented members.
            let seen = &fake.seen()[0];
            assert_eq!(
                seen.authorization.as_deref(),
                Some(format!("Bearer {FAKE_TOKEN}").as_str())
            );
            let sent: Value = serde_json::from_str(&seen.body).expect("JSON body");
            let mut expected = write.arguments();
            for member in ["owner", "repo", "grant_id"] {
                expected.as_object_mut().expect("object").remove(member);
            }
            assert_eq!(sent, expected, "{write:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_lost_response_is_delivery_uncertain_and_never_retried() {
    within_time_limit(async {
        for write in WRITES {
            let fake = Fake::raw(Raw::Close).await;
            let result = write_once(write, &fake, "lost response").await;
            assert_uncertain(write, &result, "lost response");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_redirect_is_not_followed() {
    within_time_limit(async {
        for write in WRITES {
            let cases = [
                (307, "/api/v1/elsewhere/confirm".to_owned()),
                (302, "http://attacker.example.invalid/collect".to_owned()),
                (308, "/api/v1/elsewhere/issues".to_owned()),
                (303, "/api/v1/elsewhere".to_owned()),
                (301, "http://attacker.example.invalid/".to_owned()),
            ];
            for (status, location) in cases {
                let path = write.request_line();
                let target_location = location.clone();
                let fake = Fake::axum(move |seen| {
                    if seen.line() == path {
                        http(status, &[("location", target_location.as_str())], MARKER)
                    } else {
                        // A followed redirect would land on a success.
                        json_response(write.created(), &write.good_body())
                    }
                })
                .await;
                let case = format!("{status} to {location}");
                let result = write_once(write, &fake, &case).await;
                assert_uncertain(write, &result, &case);
                assert!(
                    !result.to_string().contains(&location),
                    "{case}: the Location is shown: {result}"
                );
            }
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_malformed_success_is_never_a_receipt() {
    within_time_limit(async {
        let marker_html = format!("<html>{MARKER}</html>");
        for write in WRITES {
            let status = write.created();
            let mut cases: Vec<(&str, u16, String)> = vec![
                ("non-JSON", status, marker_html.clone()),
                ("empty body", status, String::new()),
                ("a JSON array", status, json!([MARKER]).to_string()),
                ("an empty object", status, "{}".to_owned()),
            ];
            match write {
                Write::Submit => {
                    let mut no_issue = fake_receipt(FAKE_GRANT, FAKE_KEY);
                    no_issue["submission"]
                        .as_object_mut()
                        .expect("submission")
                        .remove("issue");
                    let mut other_grant = fake_receipt(FAKE_GRANT, FAKE_KEY);
                    other_grant["grant"] = fake_grant(FAKE_GRANT + 1, "active", FAKE_DIGEST);
                    cases.extend([
                        (
                            "no submission",
                            201,
                            json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "another request_key",
                            201,
                            fake_receipt(FAKE_GRANT, "1b6f5c2e-8d5e-4d8e-9b7a-2f4a1c3e5d6f")
                                .to_string(),
                        ),
                        (
                            "another receipt grant id",
                            201,
                            fake_receipt(FAKE_GRANT + 1, FAKE_KEY).to_string(),
                        ),
                        ("another grant", 201, other_grant.to_string()),
                        ("no issue", 201, no_issue.to_string()),
                        (
                            "a replay that is not a receipt",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST), "submission": MARKER}).to_string(),
                        ),
                    ]);
                }
                Write::Confirm => {
                    let mut other_repo =
                        json!({"grant": fake_grant(FAKE_GRANT, "awaiting_human", FAKE_DIGEST)});
                    other_repo["grant"]["repository"]["full_name"] = json!("other/repo");
                    cases.extend([
                        (
                            "another grant id",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT + 1, "awaiting_human", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "another digest",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "awaiting_human", OTHER_DIGEST)})
                                .to_string(),
                        ),
                        ("another repository", 200, other_repo.to_string()),
                        (
                            "still awaiting the agent",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "awaiting_agent", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "an unknown state",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, MARKER, FAKE_DIGEST)})
                                .to_string(),
                        ),
                    ]);
                }
            }
            for (case, status, body) in cases {
                let fake = Fake::axum(move |_| {
                    http(status, &[("content-type", "application/json")], body.clone())
                })
                .await;
                let result = write_once(write, &fake, case).await;
                assert_uncertain(write, &result, case);
            }
            // A success body cut short by a closed connection.
            let body = write.good_body().to_string();
            let fake = Fake::raw(Raw::Bytes(truncated(status, &body))).await;
            let result = write_once(write, &fake, "truncated body").await;
            assert_uncertain(write, &result, "truncated body");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_unexpected_status_is_delivery_uncertain() {
    within_time_limit(async {
        for write in WRITES {
            let native_looking = json!({"code": "internal", "message": MARKER}).to_string();
            let mut cases: Vec<(u16, String)> = vec![
                (500, native_looking.clone()),
                (502, format!("<html>{MARKER}</html>")),
                (503, native_looking),
                (418, format!("I'm a teapot {MARKER}")),
                (204, String::new()),
                (202, write.good_body().to_string()),
            ];
            if let Write::Confirm = write {
                // Confirm answers 200; a 201 is not its answer.
                cases.push((201, write.good_body().to_string()));
            }
            for (status, body) in cases {
                let fake = Fake::axum(move |_| {
                    http(
                        status,
                        &[("content-type", "application/json")],
                        body.clone(),
                    )
                })
                .await;
                let case = format!("status {status}");
                let result = write_once(write, &fake, &case).await;
                assert_uncertain(write, &result, &case);
            }
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_native_refusal_is_definite() {
    within_time_limit(async {
        for write in WRITES {
            for (status, code) in [
                (409, "grant_not_active"),
                (409, "proposal_mismatch"),
                (404, "not_found"),
                (403, "insufficient_scope"),
                (401, "unauthenticated"),
                (400, "invalid_request_key"),
            ] {
                let body = json!({
                    "message": "the grant is not active",
                    "code": code,
                    "url": "http://127.0.0.1/api/errors#grant_not_active",
                });
                let fake = Fake::axum(move |_| json_response(status, &body)).await;
                let case = format!("{status} {code}");
                let result = write_once(write, &fake, &case).await;
                let content = native_refusal(&result, status, code);
                assert_ne!(content["code"], "delivery_uncertain", "{case}");
            }
        }
    })
    .await;
}

#[tokio::test]
async fn fake_read_lost_response_is_upstream_unavailable() {
    within_time_limit(async {
        let reads = [
            (
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
                format!("GET {}", grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)),
            ),
            (
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
                format!(
                    "GET {}/submissions/",
                    grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)
                ),
            ),
            (
                "list_agent_work_grants",
                json!({}),
                "GET /api/v1/agent-work-grants?page=1&limit=30".to_owned(),
            ),
        ];
        for (tool, args, line) in reads {
            let fake = Fake::raw(Raw::Close).await;
            let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
            let result = adapter.call(tool, args).await;
            adapter.finish().await;
            let content = tool_error(&result, "upstream_unavailable");
            assert!(content.get("readback").is_none(), "{tool}: {result}");
            let requests = fake.requests();
            assert_eq!(requests.len(), 1, "{tool}: {requests:?}");
            assert!(requests[0].starts_with(&line), "{tool}: {requests:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_read_redirect_is_not_followed() {
    within_time_limit(async {
        let fake = Fake::axum(|seen| {
            if seen.target.starts_with("/api/v1/repos/") {
                http(302, &[("location", "/api/v1/elsewhere")], MARKER)
            } else {
                json_response(
                    200,
                    &json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST)}),
                )
            }
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let result = adapter
            .call(
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
            )
            .await;
        adapter.finish().await;
        assert!(is_error(&result), "{result}");
        assert_eq!(
            result["structuredContent"]["native_status"], 302,
            "{result}"
        );
        assert!(!result.to_string().contains("elsewhere"), "{result}");
        assert!(!result.to_string().contains(MARKER), "{result}");
        assert_eq!(
            fake.requests(),
            [format!(
                "GET {}",
                grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)
            )]
        );
    })
    .await;
}

/// A list page of the fake: grants `first..=last`.
fn fake_page(first: i64, last: i64) -> Value {
    Value::Array(
        (first..=last)
            .map(|id| fake_grant(id, "awaiting_agent", FAKE_DIGEST))
            .collect(),
    )
}

#[tokio::test]
async fn fake_list_continues_by_total_count_never_by_link() {
    within_time_limit(async {
        let fake = Fake::axum(|seen| {
            let (first, last) = match seen.target.as_str() {
                "/api/v1/agent-work-grants?page=1&limit=30" => (1, 30),
                "/api/v1/agent-work-grants?page=2&limit=30" => (31, 60),
                "/api/v1/agent-work-grants?page=3&limit=30" => (61, 61),
                // A followed Link lands here and looks like a page.
                _ => (100, 129),
            };
            http(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-total-count", "61"),
                    (
                        "link",
                        "<http://other-host.example.invalid/api/v1/agent-work-grants?page=2&limit=30>; rel=\"next\", \
                         </api/v1/elsewhere?page=9>; rel=\"last\"",
                    ),
                ],
                fake_page(first, last).to_string(),
            )
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;

        let first = ok(&adapter.call("list_agent_work_grants", json!({})).await);
        assert_eq!(
            fake.requests(),
            ["GET /api/v1/agent-work-grants?page=1&limit=30"],
            "the Link was followed"
        );
        assert_eq!(first["native_status"], 200);
        assert_eq!(first["total_count"], 61);
        assert_eq!(first["page"], 1);
        assert_eq!(first["has_more"], true);
        assert_eq!(first["next_page"], 2);
        assert_eq!(first["snapshot"], false);
        assert_eq!(first["grants"], fake_page(1, 30));
        assert!(!first.to_string().contains("other-host"), "{first}");

        let second = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 2}))
            .await);
        assert_eq!(second["grants"], fake_page(31, 60));
        assert_eq!(second["has_more"], true);
        assert_eq!(second["next_page"], 3);
        let third = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 3}))
            .await);
        assert_eq!(third["grants"], fake_page(61, 61));
        assert_eq!(third["has_more"], false);
        assert_eq!(third["next_page"], Value::Null);

        let with_state = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 1, "state": "all"}))
            .await);
        assert_eq!(with_state["total_count"], 61);
        adapter.finish().await;

        assert_eq!(
            fake.requests(),
            [
                "GET /api/v1/agent-work-grants?page=1&limit=30",
                "GET /api/v1/agent-work-grants?page=2&limit=30",
                "GET /api/v1/agent-work-grants?page=3&limit=30",
                "GET /api/v1/agent-work-grants?page=1&limit=30&state=all",
            ],
            "each page is one fresh request to the fixed origin"
        );
    })
    .await;
}

#[tokio::test]
async fn fake_list_without_total_count_is_malformed() {
    within_time_limit(async {
        let fake = Fake::axum(|_| {
            http(
                200,
                &[
                    ("content-type", "application/json"),
                    (
                        "link",
                        "</api/v1/agent-work-grants?page=2&limit=30>; rel=\"next\"",
                    ),
                ],
                fake_page(1, 30).to_string(),
            )
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let result = adapter.call("list_agent_work_grants", json!({})).await;
        tool_error(&result, "malformed_response");
        let result = adapter
            .call("list_agent_work_grants", json!({"page": 2}))
            .await;
        tool_error(&result, "malformed_response");
        adapter.finish().await;
        assert_eq!(
            fake.requests(),
            [
                "GET /api/v1/agent-work-grants?page=1&limit=30",
                "GET /api/v1/agent-work-grants?page=2&limit=30",
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn fake_strict_inputs_are_refused_before_any_request() {
    within_time_limit(async {
        let fake = Fake::axum(|_| http(500, &[], MARKER)).await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let base = || {
            Write::Submit
                .arguments()
                .as_object()
                .expect("object")
                .clone()
        };
        let mut cases: Vec<(&str, Map<String, Value>)> = Vec::new();
        for (member, value) in [
            ("grant_id", json!(1.0)),
            ("grant_id", json!("7")),
            ("grant_id", json!(0)),
            ("grant_id", json!(-7)),
            ("grant_id", json!(u64::MAX)),
            ("grant_id", json!(true)),
            ("proposal_version", json!(1.0)),
            ("proposal_version", json!("1")),
            ("owner", json!("")),
            ("owner", json!(7)),
            ("repo", json!("r".repeat(101))),
            ("title", json!(null)),
            ("body", json!(["x"])),
            ("request_key", json!(1)),
            ("approved_by", json!("alice")),
        ] {
            let mut args = base();
            args.insert(member.to_owned(), value);
            cases.push((member, args));
        }
        let mut missing = base();
        missing.remove("request_key");
        cases.push(("missing request_key", missing));
        for (case, args) in cases {
            let result = adapter
                .call("submit_agent_work_proposal", Value::Object(args.clone()))
                .await;
            tool_error(&result, "invalid_input");
            // The same bad member, when confirm has it too.
            if ["request_key", "title", "body", "missing request_key"].contains(&case) {
                continue;
            }
            let mut confirm = args;
            for member in ["request_key", "title", "body"] {
                confirm.remove(member);
            }
            let result = adapter
                .call("confirm_agent_work_grant", Value::Object(confirm))
                .await;
            tool_error(&result, "invalid_input");
        }
        for args in [
            json!({"page": 0}),
            json!({"page": 1.0}),
            json!({"state": "open"}),
            json!({"limit": 100}),
        ] {
            let result = adapter.call("list_agent_work_grants", args).await;
            tool_error(&result, "invalid_input");
        }
        for args in [
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": 1.0}),
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO}),
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": 7, "request_key": FAKE_KEY}),
        ] {
            let result = adapter.call("get_agent_work_grant", args).await;
            tool_error(&result, "invalid_input");
        }
        let result = adapter.call("create_issue", json!({})).await;
        assert!(is_error(&result), "{result}");
        adapter.finish().await;
        assert_eq!(
            fake.requests(),
            Vec::<String>::new(),
            "a refused input reached upstream"
        );
    })
    .await;
}

/// The percent-decoded segments of a request target's path.
fn segments(target: &str) -> Vec<String> {
    let path = target.split('?').next().unwrap_or_default();
    path.split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect()
}

/// `.` and `..` percent-encode to `%2E`/`%2E%2E`, which URL parsing treats
/// as dot segments and removes: the adapter must refuse such names itself or
/// otherwise keep every request on its own route.
#[tokio::test]
async fn fake_owner_and_repo_stay_one_path_segment_each() {
    within_time_limit(async {
        let fake = Fake::axum(|_| {
            json_response(404, &json!({"code": "not_found", "message": "not found"}))
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let grant = |owner: &str, repo: &str| -> Vec<String> {
            ["", "api", "v1", "repos", owner, repo, "agent-work-grants", "7"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        };
        // (tool, arguments, the path segments the request must have)
        let mut calls: Vec<(&str, Value, Vec<String>)> = Vec::new();
        for (owner, repo) in [
            ("..", FAKE_REPO),
            (FAKE_OWNER, ".."),
            ("..", ".."),
            (".", FAKE_REPO),
            ("%2E%2E", FAKE_REPO),
            ("%2e%2e", FAKE_REPO),
            ("acme/widgets", "x"),
            ("a?b", "c#d"),
            ("a\\b", "w"),
        ] {
            calls.push((
                "get_agent_work_grant",
                json!({"owner": owner, "repo": repo, "grant_id": FAKE_GRANT}),
                grant(owner, repo),
            ));
            let mut readback = grant(owner, repo);
            readback.extend(["submissions".to_owned(), FAKE_KEY.to_owned()]);
            calls.push((
                "get_agent_work_submission",
                json!({"owner": owner, "repo": repo, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
                readback,
            ));
            let mut submit = Write::Submit.arguments();
            submit["owner"] = json!(owner);
            submit["repo"] = json!(repo);
            let mut issues = grant(owner, repo);
            issues.push("issues".to_owned());
            calls.push(("submit_agent_work_proposal", submit, issues));
        }
        // The request key is one segment too.
        for key in ["..", ".", "a/b", "%2E%2E"] {
            let mut readback = grant(FAKE_OWNER, FAKE_REPO);
            readback.extend(["submissions".to_owned(), key.to_owned()]);
            calls.push((
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": key}),
                readback,
            ));
        }
        let mut misrouted = Vec::new();
        for (tool, args, expected) in calls {
            let before = fake.seen().len();
            let result = adapter.call(tool, args.clone()).await;
            assert!(is_error(&result), "{tool} {args}: {result}");
            let seen = fake.seen();
            let new = &seen[before..];
            if new.is_empty() {
                // Refused locally: fine, as long as it says so.
                tool_error(&result, "invalid_input");
                continue;
            }
            assert_eq!(new.len(), 1, "{tool} {args}: {new:?}");
            if segments(&new[0].target) != expected {
                misrouted.push(format!(
                    "{tool} owner={} repo={} request_key={} -> {} {}",
                    args["owner"], args["repo"], args["request_key"], new[0].method, new[0].target
                ));
                continue;
            }
            native_refusal(&result, 404, "not_found");
        }
        adapter.finish().await;
        assert!(
            misrouted.is_empty(),
            "requests left their route:\n{}",
            misrouted.join("\n")
        );
    })
    .await;
}

/// Spec: errors never carry a credential; the seed: reflected credentials
/// are not exposed. This includes the message of a well-formed native error.
#[tokio::test]
async fn fake_reflected_credential_is_never_shown() {
    within_time_limit(async {
        // The upstream echoes the Authorization header it got into its
        // answer: a native error message, a malformed body, a Location.
        // None of it may reach a result, with Bearer or Basic.
        let fake = Fake::axum(|seen| {
            let auth = seen.authorization.clone().unwrap_or_default();
            if seen.target.ends_with("/confirm") {
                json_response(
                    409,
                    &json!({"code": "grant_not_active", "message": format!("refused for {auth}")}),
                )
            } else if seen.target.ends_with("/issues") {
                http(201, &[("content-type", "application/json")], format!("{{\"oops\": \"{auth}\""))
            } else if seen.target.contains("/submissions/") {
                let location = format!("/steal?auth={}", auth.replace(' ', "+"));
                http(302, &[("location", location.as_str())], auth)
            } else {
                json_response(
                    401,
                    &json!({"code": "unauthenticated", "message": format!("bad credential {auth}")}),
                )
            }
        })
        .await;
        let calls = [
            ("confirm_agent_work_grant", Write::Confirm.arguments()),
            ("submit_agent_work_proposal", Write::Submit.arguments()),
            (
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
            ),
            (
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
            ),
        ];
        let mut leaks = Vec::new();
        for cred in [Cred::Env(FAKE_TOKEN), Cred::Basic(BOT, FAKE_TOKEN)] {
            let scheme = match cred {
                Cred::Basic(..) => "Basic",
                _ => "Bearer",
            };
            let mut adapter = Stdio::start_with(&fake.base, cred, FAKE_TOKEN).await;
            let secrets = adapter.secrets.clone();
            for (tool, args) in &calls {
                let answer = adapter
                    .request_unchecked("tools/call", json!({"name": tool, "arguments": args}))
                    .await;
                let result = &answer["result"];
                assert!(is_error(result), "{scheme} {tool}: {answer}");
                if secrets.iter().any(|s| answer.to_string().contains(s.as_str())) {
                    leaks.push(format!("{scheme} {tool}: {answer}"));
                    continue;
                }
                match *tool {
                    "confirm_agent_work_grant" => {
                        native_refusal(result, 409, "grant_not_active");
                    }
                    "submit_agent_work_proposal" => {
                        assert_uncertain(Write::Submit, result, "reflected body")
                    }
                    "get_agent_work_grant" => {
                        native_refusal(result, 401, "unauthenticated");
                    }
                    _ => {}
                }
            }
            adapter.finish().await;
        }
        assert_eq!(fake.seen().len(), 2 * calls.len());
        assert!(
            leaks.is_empty(),
            "the credential reached a result:\n{}",
            leaks.join("\n")
        );
    })
    .await;
}
