//! The adapter against a misbehaving fake upstream on loopback (no
//! database). This module is the fake: an axum or raw TCP server that
//! records every request and answers as each test says.

use std::sync::{Arc, Mutex};

use axum::body::Body as AxumBody;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{Stdio, is_error};

mod inputs;
mod reads;
mod writes;

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
