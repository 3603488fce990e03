//! `writ mcp-stdio`: the thin adapter run as a child process, speaking
//! newline-delimited JSON-RPC over its stdin/stdout. This module starts the
//! adapter and reads its tool results; the tests run it against a real Writ
//! on loopback (both backends, `against_writ`), then against a misbehaving fake
//! upstream (no database, `fake`): lost responses, redirects, malformed and
//! unexpected answers, Link headers, reflected credentials and path segments.

mod against_writ;
mod fake;

use std::path::Path;
use std::process::Stdio as Piped;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

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
