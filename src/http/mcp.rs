//! `POST /mcp`: the agent tools over MCP (Streamable HTTP, JSON responses,
//! stateless), served by the official Rust SDK (`rmcp`).
//!
//! A middleware in front of the SDK authenticates the bot's own native token
//! (humans are refused), refuses bodies over 1 MiB and JSON-RPC batches, and
//! hands the caller to the handler. Each `tools/call` is decided against the
//! agent's tool grants and recorded in the audit before anything runs; an
//! allowed call runs the same service functions as the native routes and
//! answers their JSON plus `native_status` in `structuredContent`.

use std::borrow::Cow;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool as McpTool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use crate::domain::ids::{GrantId, RequestKey};
use crate::domain::policy::Decision;
use crate::domain::text::printable;
use crate::domain::tools::{self, Input, Tool};
use crate::http::api::agent::GrantEnvelope;
use crate::http::api::submissions::ReceiptEnvelope;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, error_body};
use crate::http::json::BODY_LIMIT;
use crate::http::pagination::parse_list_query;
use crate::service::agent::{self, Triple};
use crate::service::audit::{self, CallInfo};
use crate::service::auth::Caller;
use crate::service::submit::{self, Outcome, SubmitInput};
use crate::service::{Ctx, Error, Result};

/// The protocol revisions served: the three with an `initialize` handshake,
/// and the stateless 2026-07-28 revision (`server/discover`).
pub const PROTOCOL_VERSIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// The `/mcp` route.
pub fn routes(ctx: &Ctx) -> Router<Ctx> {
    let handler = WritMcp { ctx: ctx.clone() };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(BODY_LIMIT)
        .with_allowed_hosts(allowed_hosts(ctx));
    let service: StreamableHttpService<WritMcp, NeverSessionManager> =
        StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config);
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(ctx.clone(), gate))
}

/// DNS-rebinding guard of the SDK: loopback names and the public URL's host.
fn allowed_hosts(ctx: &Ctx) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Ok(url) = reqwest::Url::parse(&ctx.config.public_base())
        && let Some(host) = url.host_str()
    {
        hosts.push(host.to_owned());
        if let Some(port) = url.port() {
            hosts.push(format!("{host}:{port}"));
        }
    }
    if let Some(bind) = ctx.config.bind.split(':').next()
        && !bind.is_empty()
        && bind != "0.0.0.0"
    {
        hosts.push(bind.to_owned());
    }
    hosts
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    rpc_error_to(Value::Null, status, code, message)
}

/// A JSON-RPC error answering the request with `id` (null: unknown).
fn rpc_error_to(id: Value, status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Authenticates the bot, bounds the body, refuses what is not one JSON
/// value (-32700) and batches before the SDK sees the request; every
/// transport error the SDK answers is then a JSON-RPC error too.
async fn gate(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return as_rpc_error(next.run(request).await);
    }
    let caller = match api_caller(&ctx, request.headers()).await {
        Ok(caller) => caller,
        Err(e) => return ApiError(e).into_response(),
    };
    if !caller.is_bot {
        return ApiError(Error::AgentOnly).into_response();
    }
    let (mut parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => return too_large(),
    };
    let discover = match check_body(&bytes) {
        Ok(body) => body.discover,
        Err(refusal) => {
            // A discovery probe is answered, never failed (docs/mcp.md).
            let status = if refusal.discover {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            };
            return rpc_error_to(refusal.id, status, refusal.code, refusal.message);
        }
    };
    parts.extensions.insert(caller);
    let response = as_rpc_error(
        next.run(Request::from_parts(parts, Body::from(bytes)))
            .await,
    );
    if discover && response.status() == StatusCode::BAD_REQUEST {
        // A discovery probe is answered, never failed: the client reads the
        // JSON-RPC error and falls back to `initialize` (docs/mcp.md).
        let (mut parts, body) = response.into_parts();
        parts.status = StatusCode::OK;
        return Response::from_parts(parts, body);
    }
    response
}

/// A request body the gate lets through to the SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The message is a `server/discover` request (answered, never failed).
    pub discover: bool,
}

/// Why the gate refused a request body: HTTP 400 with this JSON-RPC error
/// (HTTP 200 for a `server/discover` probe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `-32700` (not one JSON value) or `-32600` (a batch, or JSON that is
    /// no JSON-RPC message).
    pub code: i64,
    /// The error's message, written by Writ.
    pub message: &'static str,
    /// The request's `id` when it has a valid one, else null.
    pub id: Value,
    /// The body is a `server/discover` request.
    pub discover: bool,
}

/// The gate's check of a body within the size limit: one JSON value in
/// UTF-8, not a batch, and a JSON-RPC message (the SDK would answer JSON
/// that is none with 415, as if the Content-Type were wrong). serde_json
/// refuses text that is not UTF-8 and nesting deeper than 128 levels, as the
/// SDK's own parser would later.
pub fn check_body(bytes: &[u8]) -> std::result::Result<Admitted, Refused> {
    let message = serde_json::from_slice::<Value>(bytes).map_err(|_| Refused {
        code: -32700,
        message: "Parse error: the body must be one JSON-RPC message in UTF-8 JSON",
        id: Value::Null,
        discover: false,
    })?;
    if message.is_array() {
        return Err(Refused {
            code: -32600,
            message: "JSON-RPC batches are not supported",
            id: Value::Null,
            discover: false,
        });
    }
    let discover = message.get("method").and_then(Value::as_str) == Some("server/discover");
    if <rmcp::model::ClientJsonRpcMessage as serde::Deserialize>::deserialize(&message).is_err() {
        let id = message
            .get("id")
            .filter(|id| id.is_string() || id.is_i64())
            .cloned()
            .unwrap_or(Value::Null);
        return Err(Refused {
            code: -32600,
            message: "Invalid Request: not a JSON-RPC message",
            id,
            discover,
        });
    }
    Ok(Admitted { discover })
}

/// Gives a 4xx the SDK wrote as plain text (406 for `Accept`, 415 for
/// `Content-Type`, 405 for a method it does not serve) a JSON-RPC error
/// body, keeping its status and headers.
fn as_rpc_error(response: Response) -> Response {
    let status = response.status();
    if !status.is_client_error() || crate::http::edge::is_json(&response) {
        return response;
    }
    let message = match status {
        StatusCode::NOT_ACCEPTABLE => {
            "Accept must list both application/json and text/event-stream"
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "Content-Type must be application/json",
        StatusCode::METHOD_NOT_ALLOWED => "only POST is served at /mcp",
        _ => "invalid request",
    };
    let mut answer = rpc_error(status, -32600, message);
    for (name, value) in response.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

fn too_large() -> Response {
    let mut response = rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        -32600,
        "request body is larger than 1 MiB",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The MCP server: the five tools over the service layer.
#[derive(Clone)]
pub struct WritMcp {
    ctx: Ctx,
}

fn caller_of(context: &RequestContext<RoleServer>) -> std::result::Result<Caller, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            ErrorData::internal_error("unauthenticated request reached the handler", None)
        })
}

fn request_id(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("x-request-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The tool definitions `tools/list` shows (filtered by the caller's grants).
pub fn definition(tool: Tool) -> McpTool {
    McpTool::new(tool.name(), tool.description(), tool.input_schema())
}

impl ServerHandler for WritMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("writ", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Writ: agent work grants. List and read your grants, confirm a proposal by \
                 repeating its schema, version and digest, submit work with a request_key you \
                 choose and reuse on retries, and read receipts back by that key.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        let caller = caller_of(&context)?;
        let granted = crate::service::policy::granted_tools(&self.ctx, caller.user_id)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "tools/list could not read the tool grants");
                ErrorData::internal_error("internal error", None)
            })?;
        Ok(
            ListToolsResult::with_all_items(granted.into_iter().map(definition).collect())
                .with_cache_scope(CacheScope::Private),
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let mut caller = caller_of(&context)?;
        let args = request.arguments.unwrap_or_default();
        let call = CallInfo {
            tool: &request.name,
            args: &args,
            rpc_id: serde_json::to_string(&context.id.clone().into_json_value()).ok(),
            request_id: request_id(&context),
        };
        let result = match audit::begin_mcp(&self.ctx, &mut caller, &call).await {
            Err(e) => failure(&e),
            Ok(check) => match (check.decision, Tool::parse(&request.name)) {
                (Decision::Allow { .. }, Some(tool)) => {
                    let outcome = run(&self.ctx, &caller, tool, &args).await;
                    match audit::finish(&self.ctx, &caller, outcome, 200).await {
                        Ok((status, value)) => success(tool, status, value),
                        Err(e) => failure(&e),
                    }
                }
                (decision, _) => denied(&request.name, check.repository.as_ref(), &decision),
            },
        };
        Ok(result.into())
    }
}

/// Runs one allowed call through the native code path: the same parsers and
/// service functions as the native routes, the same JSON bodies.
pub async fn run(
    ctx: &Ctx,
    caller: &Caller,
    tool: Tool,
    args: &Map<String, Value>,
) -> Result<(u16, Value)> {
    let input = tools::parse_input(tool, Some(args)).map_err(|e| Error::Invalid(e.0))?;
    caller.require_agent(tool.scopes())?;
    match input {
        Input::List { page, state } => {
            let mut raw = format!("page={page}&limit={}", tools::LIST_LIMIT);
            if let Some(state) = &state {
                raw.push_str("&state=");
                raw.push_str(state);
            }
            let query = parse_list_query(Some(&raw), tools::LIST_LIMIT)?;
            let listed = agent::list(ctx, caller, &query.params).await?;
            let (has_more, next_page) = tools::next_page(page, tools::LIST_LIMIT, listed.total);
            let grants = serde_json::to_value(&listed.items).map_err(anyhow::Error::from)?;
            Ok((
                200,
                json!({
                    "grants": grants,
                    "total_count": listed.total,
                    "page": page,
                    "has_more": has_more,
                    "next_page": next_page,
                    "snapshot": false,
                }),
            ))
        }
        Input::Get(t, wait) => {
            let id = GrantId(t.grant_id);
            if let Some(w) = wait {
                let seconds = std::time::Duration::from_secs(w.seconds);
                agent::wait_for_change(ctx, caller, &t.owner, &t.repo, id, w.revision, seconds)
                    .await?;
            }
            let grant = agent::get(ctx, caller, &t.owner, &t.repo, id).await?;
            Ok((200, json_of(&GrantEnvelope { grant })?))
        }
        Input::Confirm(t, triple) => {
            let triple = Triple::parse(&triple.schema, &triple.version, &triple.digest)?;
            let grant =
                agent::confirm(ctx, caller, &t.owner, &t.repo, GrantId(t.grant_id), &triple)
                    .await?;
            Ok((200, json_of(&GrantEnvelope { grant })?))
        }
        Input::Submit {
            target,
            triple,
            request_key,
            title,
            body,
        } => {
            let triple = Triple::parse(&triple.schema, &triple.version, &triple.digest)?;
            let input = SubmitInput::new(triple, RequestKey::parse(&request_key)?, title, body)?;
            let receipt = submit::submit(
                ctx,
                caller,
                &target.owner,
                &target.repo,
                GrantId(target.grant_id),
                &input,
            )
            .await?;
            let status = match receipt.outcome {
                Outcome::Created => 201,
                Outcome::Replayed => 200,
            };
            let envelope = ReceiptEnvelope {
                grant: receipt.grant,
                submission: receipt.submission,
            };
            Ok((status, json_of(&envelope)?))
        }
        Input::Readback {
            target,
            request_key,
        } => {
            let key = RequestKey::parse(&request_key)?;
            let receipt = submit::readback(
                ctx,
                caller,
                &target.owner,
                &target.repo,
                GrantId(target.grant_id),
                &key,
            )
            .await?;
            let envelope = ReceiptEnvelope {
                grant: receipt.grant,
                submission: receipt.submission,
            };
            Ok((200, json_of(&envelope)?))
        }
    }
}

fn json_of<T: serde::Serialize>(value: &T) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.into()))
}

fn success(tool: Tool, status: u16, mut value: Value) -> CallToolResult {
    let next_step = (tool == Tool::Confirm).then(|| where_a_person_approves(&value));
    if let Value::Object(map) = &mut value {
        map.insert("native_status".into(), status.into());
    }
    let mut result = CallToolResult::structured(value);
    if let Some(text) = next_step.flatten() {
        result.content.push(rmcp::model::ContentBlock::text(text));
    }
    result
}

/// A confirm's answer in words for the agent to relay: the grant now waits
/// for a person, and the page where that person approves it.
fn where_a_person_approves(answer: &Value) -> Option<String> {
    let grant = &answer["grant"];
    let url = grant["html_url"].as_str()?;
    Some(match grant["state"].as_str() {
        Some("awaiting_human") => format!(
            "Confirmed. The grant now waits for a repository admin to approve it at {url}; \
             submissions are refused until then."
        ),
        _ => format!("The grant's page, where people review it: {url}"),
    })
}

/// A refused or failed call: the native error body plus `native_status`.
pub fn failure(err: &Error) -> CallToolResult {
    match err {
        Error::Internal(cause) | Error::AuditUnavailable(cause) => {
            tracing::error!(error = %format!("{cause:#}"), code = err.code(), "MCP tool call failed");
        }
        Error::StorageUnavailable(cause) => crate::http::error::storage_unavailable(cause),
        _ => {}
    }
    let mut value = serde_json::to_value(error_body(err))
        .unwrap_or_else(|_| json!({"code": err.code(), "message": err.message()}));
    if let Value::Object(map) = &mut value {
        map.insert("native_status".into(), err.status().into());
    }
    CallToolResult::structured_error(value)
}

fn denied(
    tool: &str,
    repository: Option<&crate::domain::policy::RepoTarget>,
    decision: &Decision,
) -> CallToolResult {
    let reason = match decision {
        Decision::Deny(denial) => *denial,
        Decision::Allow { .. } => crate::domain::policy::Denial::UnknownTool,
    };
    let tool = printable(tool, 64);
    let repository = repository.map(|r| printable(&r.full_name(), 200));
    let on = repository
        .as_deref()
        .map(|r| format!("on {r}"))
        .unwrap_or_else(|| "without a repository".into());
    CallToolResult::structured_error(json!({
        "code": "tool_not_granted",
        "message": format!("tool {tool} is not granted {on}: {}", reason.message()),
        "tool": tool,
        "repository": repository,
        "reason": reason.code(),
    }))
}
