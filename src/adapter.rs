//! `writ mcp-stdio --url BASE`: the thin MCP adapter. It serves the five
//! agent tools over stdio (rmcp) and turns each call into ONE request to a
//! Core's native agent routes over HTTP. Its rules (spec `mcp-and-policy.md`):
//!
//! - each request is sent once: no retry, no fallback, no redirect followed;
//! - a write (confirm, submit) whose answer is lost, has an unexpected
//!   status, or has a malformed or inconsistent success body is reported as
//!   **delivery uncertain**, with the readback to make (same owner, repo,
//!   grant and request key) — never a new key, never a receipt;
//! - lists continue by `X-Total-Count` and the page number: every page is a
//!   fresh request to the fixed origin; `Link` URLs are never followed;
//! - ids and statuses that come back are checked against what was asked.
//!
//! Arguments are checked with the same strict schemas as `/mcp` before any
//! request is sent.

use std::borrow::Cow;
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::domain::text::printable;
use crate::domain::tools::{self, Input, Target, Tool, TripleArgs};
use crate::http::mcp::{PROTOCOL_VERSIONS, definition};

/// Largest upstream answer read, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// How the adapter reaches its Core.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    /// The Core's base URL (`http://host:port`, optionally with a path prefix).
    pub base: String,
    /// The `Authorization` header value (Bearer, or Basic with the token as
    /// password).
    pub authorization: String,
    /// Timeout of one request.
    pub timeout: Duration,
    /// Texts never shown in a result: the token, the header value and its
    /// encoded part.
    pub secrets: Vec<String>,
}

impl AdapterConfig {
    /// Builds the configuration from the command line's pieces: the token
    /// comes from `WRIT_TOKEN` or a token file; with a Basic user it is sent
    /// as that user's password.
    pub fn new(
        url: &str,
        token: &str,
        basic_user: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<AdapterConfig> {
        let base = url.trim_end_matches('/');
        let parsed = reqwest::Url::parse(base).map_err(|e| anyhow::anyhow!("--url: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            anyhow::bail!("--url must be an http or https URL with a host");
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            anyhow::bail!("--url must not have a query or fragment");
        }
        let token = token.trim();
        if token.is_empty() || token.chars().any(|c| c.is_control() || c == ' ') {
            anyhow::bail!("the token is empty or not a single word");
        }
        let authorization = match basic_user {
            Some(user) => {
                use base64::Engine;
                let raw = format!("{user}:{token}");
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                )
            }
            None => format!("Bearer {token}"),
        };
        let mut secrets = vec![token.to_owned(), authorization.clone()];
        if let Some((_, encoded)) = authorization.split_once(' ') {
            secrets.push(encoded.to_owned());
        }
        secrets.retain(|s| s.len() >= 8);
        Ok(AdapterConfig {
            base: base.to_owned(),
            authorization,
            timeout,
            secrets,
        })
    }
}

/// Serves the adapter on stdin/stdout until the client closes it.
pub async fn run_stdio(config: AdapterConfig) -> anyhow::Result<()> {
    let adapter = Adapter::new(config)?;
    let service = adapter
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP initialization over stdio failed: {e}"))?;
    service.waiting().await?;
    Ok(())
}

/// The stdio MCP server backed by a Core's native routes.
#[derive(Clone)]
pub struct Adapter {
    client: reqwest::Client,
    base: String,
    authorization: HeaderValue,
    secrets: Vec<String>,
}

/// What one upstream exchange produced.
enum Exchange {
    /// An answer arrived: its status, its `X-Total-Count`, its body.
    Answered {
        status: StatusCode,
        total: Option<String>,
        body: Vec<u8>,
    },
    /// No (complete) answer: connection refused/reset, timeout, or a body cut
    /// short or too large. `sent` is false only when the request provably
    /// never left (connection refused / not connected).
    Lost { sent: bool },
}

impl Adapter {
    /// An adapter for one Core.
    pub fn new(config: AdapterConfig) -> anyhow::Result<Adapter> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.timeout)
            .build()?;
        let mut authorization = HeaderValue::from_str(&config.authorization)
            .map_err(|_| anyhow::anyhow!("the token cannot be sent in a header"))?;
        authorization.set_sensitive(true);
        Ok(Adapter {
            client,
            base: config.base,
            authorization,
            secrets: config.secrets,
        })
    }

    fn grant_url(&self, t: &Target, rest: &str) -> String {
        format!(
            "{}/api/v1/repos/{}/{}/agent-work-grants/{}{rest}",
            self.base,
            utf8_percent_encode(&t.owner, NON_ALPHANUMERIC),
            utf8_percent_encode(&t.repo, NON_ALPHANUMERIC),
            t.grant_id
        )
    }

    async fn exchange(&self, method: Method, url: String, body: Option<Value>) -> Exchange {
        let mut request = self
            .client
            .request(method, url)
            .header(AUTHORIZATION, self.authorization.clone());
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let mut response = match request.send().await {
            Ok(response) => response,
            // A connect-phase failure (refused, DNS, connect timeout) sent
            // nothing; any later failure may have delivered the request.
            Err(e) => {
                return Exchange::Lost {
                    sent: !e.is_connect(),
                };
            }
        };
        let status = response.status();
        let total = response
            .headers()
            .get("x-total-count")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                        return Exchange::Lost { sent: true };
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(_) => return Exchange::Lost { sent: true },
            }
        }
        Exchange::Answered {
            status,
            total,
            body,
        }
    }

    async fn call(&self, tool: Tool, input: Input) -> CallToolResult {
        match input {
            Input::List { page, state } => {
                let mut url = format!(
                    "{}/api/v1/agent-work-grants?page={page}&limit={}",
                    self.base,
                    tools::LIST_LIMIT
                );
                if let Some(state) = &state {
                    url.push_str("&state=");
                    url.push_str(&utf8_percent_encode(state, NON_ALPHANUMERIC).to_string());
                }
                let exchange = self.exchange(Method::GET, url, None).await;
                read_answer(exchange, |total, body| check_list(total, body, page))
            }
            Input::Get(t, wait) => {
                let query = wait.map_or_else(String::new, |w| {
                    format!(
                        "?wait_for_change={}&state_revision={}",
                        w.seconds, w.revision
                    )
                });
                let exchange = self
                    .exchange(Method::GET, self.grant_url(&t, &query), None)
                    .await;
                read_answer(exchange, |_, body| check_grant_answer(body, &t, None))
            }
            Input::Readback {
                target,
                request_key,
            } => {
                let rest = format!(
                    "/submissions/{}",
                    utf8_percent_encode(&request_key, NON_ALPHANUMERIC)
                );
                let exchange = self
                    .exchange(Method::GET, self.grant_url(&target, &rest), None)
                    .await;
                read_answer(exchange, |_, body| {
                    check_receipt(body, &target, &request_key)
                })
            }
            Input::Confirm(t, triple) => {
                let body = triple_json(&triple);
                let exchange = self
                    .exchange(Method::POST, self.grant_url(&t, "/confirm"), Some(body))
                    .await;
                let digest = triple.digest.as_str().unwrap_or_default().to_owned();
                write_answer(tool, &t, None, exchange, |body| {
                    check_grant_answer(body, &t, Some(&digest))
                })
            }
            Input::Submit {
                target,
                triple,
                request_key,
                title,
                body,
            } => {
                let mut payload = triple_json(&triple);
                if let Value::Object(map) = &mut payload {
                    map.insert("request_key".into(), request_key.clone().into());
                    map.insert("title".into(), title.into());
                    map.insert("body".into(), body.into());
                }
                let exchange = self
                    .exchange(
                        Method::POST,
                        self.grant_url(&target, "/issues"),
                        Some(payload),
                    )
                    .await;
                write_answer(tool, &target, Some(&request_key), exchange, |body| {
                    check_receipt(body, &target, &request_key)
                })
            }
        }
    }
}

/// The argument that is a `.` or `..` path segment: URLs normalise those
/// away even percent-encoded, so such a request would reach another route.
fn dot_segment(input: &Input) -> Option<&'static str> {
    let dots = |s: &str| s == "." || s == "..";
    let key = match input {
        Input::Submit { request_key, .. } | Input::Readback { request_key, .. } => {
            Some(request_key.as_str())
        }
        _ => None,
    };
    let target = input.target()?;
    if dots(&target.owner) {
        Some("owner")
    } else if dots(&target.repo) {
        Some("repo")
    } else if key.is_some_and(dots) {
        Some("request_key")
    } else {
        None
    }
}

/// Removes every secret from a result (an upstream may reflect the
/// credential it was sent in a message or a body).
fn redact(result: CallToolResult, secrets: &[String]) -> CallToolResult {
    fn scrub(value: &mut Value, secrets: &[String]) {
        match value {
            Value::String(text) => {
                for secret in secrets {
                    if text.contains(secret.as_str()) {
                        *text = text.replace(secret.as_str(), "[redacted]");
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| scrub(v, secrets)),
            Value::Object(map) => map.values_mut().for_each(|v| scrub(v, secrets)),
            _ => {}
        }
    }
    let is_error = result.is_error == Some(true);
    let Some(mut value) = result.structured_content else {
        return result;
    };
    scrub(&mut value, secrets);
    if is_error {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    }
}

fn triple_json(triple: &TripleArgs) -> Value {
    json!({
        "proposal_schema": triple.schema,
        "proposal_version": triple.version,
        "proposal_digest": triple.digest,
    })
}

/// A success body judged consistent: the structured content to return.
type Checked = Result<Value, &'static str>;

fn success(status: StatusCode, mut value: Value) -> CallToolResult {
    if let Value::Object(map) = &mut value {
        map.insert("native_status".into(), status.as_u16().into());
    }
    CallToolResult::structured(value)
}

fn error_result(code: &str, message: String, extra: Map<String, Value>) -> CallToolResult {
    let mut value = Map::new();
    value.insert("code".into(), code.into());
    value.insert("message".into(), message.into());
    value.extend(extra);
    CallToolResult::structured_error(Value::Object(value))
}

/// The upstream's own error answer (4xx with `{code, message}`), if it is a
/// well-formed one; only its validated code and a bounded message are kept.
fn native_error(status: StatusCode, body: &[u8]) -> Option<CallToolResult> {
    if !status.is_client_error() {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let code = value.get("code")?.as_str()?;
    let well_formed = !code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if !well_formed {
        return None;
    }
    let message = value
        .get("message")
        .and_then(Value::as_str)
        .map(|m| printable(m, 512))
        .unwrap_or_default();
    let mut extra = Map::new();
    extra.insert("native_status".into(), status.as_u16().into());
    if let Some(grant) = value.get("grant").filter(|g| g.is_object()) {
        extra.insert("grant".into(), grant.clone());
    }
    Some(error_result(code, message, extra))
}

/// Answers a read: success when consistent, the native error when the Core
/// refused, otherwise an error saying what went wrong (reads are safe to
/// repeat; the adapter itself never does).
fn read_answer(
    exchange: Exchange,
    check: impl FnOnce(Option<&str>, &[u8]) -> Checked,
) -> CallToolResult {
    match exchange {
        Exchange::Lost { .. } => error_result(
            "upstream_unavailable",
            "no complete answer from Writ; nothing was changed by this read, so it can be made again"
                .into(),
            Map::new(),
        ),
        Exchange::Answered {
            status,
            total,
            body,
        } => {
            if status == StatusCode::OK {
                match check(total.as_deref(), &body) {
                    Ok(value) => success(status, value),
                    Err(why) => error_result(
                        "malformed_response",
                        format!("Writ's answer could not be used: {why}"),
                        Map::new(),
                    ),
                }
            } else if let Some(result) = native_error(status, &body) {
                result
            } else {
                let mut extra = Map::new();
                extra.insert("native_status".into(), status.as_u16().into());
                error_result(
                    "unexpected_status",
                    format!("Writ answered an unexpected status {}", status.as_u16()),
                    extra,
                )
            }
        }
    }
}

/// Answers a write: success only with an expected status and a consistent
/// body; a definite refusal when the Core answered a well-formed 4xx error;
/// everything else is delivery uncertain, with the readback to make.
fn write_answer(
    tool: Tool,
    target: &Target,
    request_key: Option<&str>,
    exchange: Exchange,
    check: impl FnOnce(&[u8]) -> Checked,
) -> CallToolResult {
    let why = match exchange {
        Exchange::Lost { sent: false } => {
            return error_result(
                "upstream_unavailable",
                "could not connect to Writ; the request was not sent".into(),
                Map::new(),
            );
        }
        Exchange::Lost { sent: true } => "the answer was lost".to_owned(),
        Exchange::Answered { status, body, .. } => {
            let expected = match tool {
                Tool::Submit => matches!(status.as_u16(), 200 | 201),
                _ => status == StatusCode::OK,
            };
            if expected {
                match check(&body) {
                    Ok(value) => return success(status, value),
                    Err(why) => format!("the success answer was malformed: {why}"),
                }
            } else if let Some(refusal) = native_error(status, &body) {
                return refusal;
            } else {
                format!("Writ answered the unexpected status {}", status.as_u16())
            }
        }
    };
    delivery_uncertain(tool, target, request_key, &why)
}

fn delivery_uncertain(
    tool: Tool,
    target: &Target,
    request_key: Option<&str>,
    why: &str,
) -> CallToolResult {
    let mut arguments = json!({
        "owner": target.owner,
        "repo": target.repo,
        "grant_id": target.grant_id,
    });
    let (readback_tool, instruction) = match (tool, request_key) {
        (Tool::Submit, Some(key)) => {
            arguments["request_key"] = key.into();
            (
                Tool::Readback,
                format!(
                    "Delivery uncertain ({why}): the submission may or may not have been made. \
                     Read it back with get_agent_work_submission for {}/{} grant {} and request_key {key}; \
                     if it is not found, submit again with the SAME request_key. Never make a new key for this work.",
                    target.owner, target.repo, target.grant_id
                ),
            )
        }
        _ => (
            Tool::Get,
            format!(
                "Delivery uncertain ({why}): the confirmation may or may not have been applied. \
                 Read the grant back with get_agent_work_grant for {}/{} grant {} before confirming again.",
                target.owner, target.repo, target.grant_id
            ),
        ),
    };
    let mut extra = Map::new();
    extra.insert(
        "readback".into(),
        json!({"tool": readback_tool.name(), "arguments": arguments}),
    );
    error_result("delivery_uncertain", printable(&instruction, 1024), extra)
}

const STATES: [&str; 4] = ["awaiting_agent", "awaiting_human", "active", "revoked"];

fn parse_body(body: &[u8]) -> Result<Value, &'static str> {
    serde_json::from_slice(body).map_err(|_| "the body is not JSON")
}

fn check_grant(grant: &Value, t: &Target) -> Result<(), &'static str> {
    if grant.get("id").and_then(Value::as_i64) != Some(t.grant_id) {
        return Err("the grant id differs from the one asked for");
    }
    let full_name = grant
        .pointer("/repository/full_name")
        .and_then(Value::as_str)
        .ok_or("the grant has no repository")?;
    let asked = format!("{}/{}", t.owner.trim(), t.repo.trim());
    if !full_name.eq_ignore_ascii_case(&asked) {
        return Err("the grant's repository differs from the one asked for");
    }
    let state = grant.get("state").and_then(Value::as_str);
    if !state.is_some_and(|s| STATES.contains(&s)) {
        return Err("the grant has no valid state");
    }
    let digest = grant.get("proposal_digest").and_then(Value::as_str);
    if !digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err("the grant has no valid proposal_digest");
    }
    Ok(())
}

fn check_grant_answer(body: &[u8], t: &Target, confirmed_digest: Option<&str>) -> Checked {
    let value = parse_body(body)?;
    let grant = value.get("grant").ok_or("no grant in the answer")?;
    check_grant(grant, t)?;
    if let Some(digest) = confirmed_digest {
        if grant.get("proposal_digest").and_then(Value::as_str) != Some(digest) {
            return Err("the confirmed digest differs from the one sent");
        }
        if grant.get("state").and_then(Value::as_str) == Some("awaiting_agent") {
            return Err("the grant is still awaiting the agent after confirm");
        }
    }
    Ok(value)
}

fn check_receipt(body: &[u8], t: &Target, key: &str) -> Checked {
    let value = parse_body(body)?;
    let grant = value.get("grant").ok_or("no grant in the answer")?;
    check_grant(grant, t)?;
    let submission = value
        .get("submission")
        .filter(|s| s.is_object())
        .ok_or("no submission in the answer")?;
    if submission.get("request_key").and_then(Value::as_str) != Some(key) {
        return Err("the receipt's request_key differs from the one sent");
    }
    if submission.get("grant_id").and_then(Value::as_i64) != Some(t.grant_id) {
        return Err("the receipt's grant differs from the one asked for");
    }
    let issue_ok = submission
        .pointer("/issue/index")
        .and_then(Value::as_i64)
        .is_some_and(|i| i > 0)
        && submission
            .pointer("/issue/url")
            .and_then(Value::as_str)
            .is_some_and(|u| !u.is_empty());
    if !issue_ok {
        return Err("the receipt names no issue");
    }
    Ok(value)
}

fn check_list(total: Option<&str>, body: &[u8], page: u64) -> Checked {
    let total: i64 = total
        .and_then(|t| t.trim().parse().ok())
        .filter(|t| *t >= 0)
        .ok_or("X-Total-Count is missing or not a count")?;
    let value = parse_body(body)?;
    let items = value.as_array().ok_or("the list is not an array")?;
    if items.len() as u64 > tools::LIST_LIMIT {
        return Err("the page is longer than asked for");
    }
    let mut last = 0;
    for item in items {
        let id = item
            .get("id")
            .and_then(Value::as_i64)
            .filter(|id| *id > last)
            .ok_or("the list's ids are missing or not ascending")?;
        last = id;
        let state = item.get("state").and_then(Value::as_str);
        if !state.is_some_and(|s| STATES.contains(&s)) {
            return Err("a listed grant has no valid state");
        }
    }
    let (has_more, next_page) = tools::next_page(page, tools::LIST_LIMIT, total);
    Ok(json!({
        "grants": items,
        "total_count": total,
        "page": page,
        "has_more": has_more,
        "next_page": next_page,
        "snapshot": false,
    }))
}

impl ServerHandler for Adapter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "writ-mcp-stdio",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Writ agent work grants over a Core's native API. A write whose delivery is \
                 uncertain must be read back with the same owner, repo, grant and request_key.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            Tool::ALL.into_iter().map(definition).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = Tool::parse(&request.name) else {
            return Ok(error_result(
                "unknown_tool",
                format!("no tool named {}", printable(&request.name, 64)),
                Map::new(),
            )
            .into());
        };
        let result = match tools::parse_input(tool, request.arguments.as_ref()) {
            Ok(input) => match dot_segment(&input) {
                Some(name) => error_result(
                    "invalid_input",
                    format!("{name} must not be . or .. (it would change the route)"),
                    Map::new(),
                ),
                None => self.call(tool, input).await,
            },
            Err(e) => error_result("invalid_input", e.0, Map::new()),
        };
        Ok(redact(result, &self.secrets).into())
    }
}
