//! The JSON API under `/api/v1`, and its OpenAPI document.

pub mod admin;
pub mod agent;
pub mod audit;
pub mod events;
pub mod issues;
pub mod policy;
pub mod submissions;
pub mod webhooks;

use axum::Router;
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::routing::{delete, get, post, put};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::http::error::ErrorBody;
use crate::service::{Ctx, Error};

/// The OpenAPI 3.1 document, generated from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "Writ", description = "The durable ledger of native agent work grants."),
    paths(
        agent::list_grants, agent::get_grant, agent::confirm_grant, agent::admission_preview,
        admin::put_mcp_health, admin::get_mcp_health,
        submissions::submit_work, submissions::read_submission,
        issues::get_issue, issues::list_issues, issues::create_issue, issues::delete_issue, issues::transfer_issue,
        admin::create_user, admin::create_token, admin::revoke_token,
        admin::create_repo, admin::put_collaborator, admin::delete_collaborator, admin::report,
        policy::get_tool_grants, policy::put_tool_grants,
        events::feed,
        webhooks::create, webhooks::list, webhooks::get, webhooks::update, webhooks::delete,
        webhooks::rotate_secret, webhooks::deliveries, webhooks::retry,
        audit::keys, audit::proof, audit::verify,
    ),
    components(schemas(ErrorBody, crate::service::policy::ToolGrantInput, crate::service::schema::PageNumber,
        crate::service::schema::PageLimit, crate::service::schema::StateFilter, crate::service::schema::ReportFormatText,
        crate::service::schema::DateTimeText, crate::service::schema::FreeText,
        crate::service::schema::EventCursorText, crate::service::schema::FeedLimit,
        crate::service::schema::FeedWait, crate::service::schema::EventTypeFilterText,
        crate::service::schema::FullNameText, crate::service::schema::PositiveId)),
    modifiers(&Security),
    tags((name = "agent", description = "Routes for bot accounts (the MCP adapter's upstream)"),
         (name = "issues", description = "Issues of a repository"),
         (name = "events", description = "The feed of every change (docs/events.md)"),
         (name = "audit", description = "Sealed audit records: keys, proofs, verification (docs/audit.md)"),
         (name = "admin", description = "Setup privilege"))
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every `/api/v1` route.
pub fn routes() -> Router<Ctx> {
    Router::new()
        .route("/api/v1/agent-work-grants", get(agent::list_grants))
        .route("/api/v1/events", get(events::feed))
        .route(
            "/api/v1/admin/webhooks",
            get(webhooks::list).post(webhooks::create),
        )
        .route(
            "/api/v1/admin/webhooks/{id}",
            get(webhooks::get)
                .patch(webhooks::update)
                .delete(webhooks::delete),
        )
        .route(
            "/api/v1/admin/webhooks/{id}/rotate-secret",
            post(webhooks::rotate_secret),
        )
        .route(
            "/api/v1/admin/webhooks/{id}/deliveries",
            get(webhooks::deliveries),
        )
        .route(
            "/api/v1/admin/webhooks/{id}/deliveries/{delivery_id}/retry",
            post(webhooks::retry),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}",
            get(agent::get_grant),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/confirm",
            post(agent::confirm_grant),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/issues",
            post(submissions::submit_work),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/submissions/{request_key}",
            get(submissions::read_submission),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/issues",
            get(issues::list_issues).post(issues::create_issue),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/issues/{index}",
            get(issues::get_issue).delete(issues::delete_issue),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/issues/{index}/transfer",
            post(issues::transfer_issue),
        )
        .route("/api/v1/admin/users", post(admin::create_user))
        .route(
            "/api/v1/admin/users/{login}/tokens",
            post(admin::create_token),
        )
        .route(
            "/api/v1/admin/users/{login}/tokens/{token_id}",
            delete(admin::revoke_token),
        )
        .route("/api/v1/admin/repos", post(admin::create_repo))
        .route(
            "/api/v1/repos/{owner}/{repo}/collaborators/{login}",
            put(admin::put_collaborator).delete(admin::delete_collaborator),
        )
        .route("/api/v1/admin/reports/{name}", get(admin::report))
        .route(
            "/api/v1/admin/agents/{login}/tool-grants",
            get(policy::get_tool_grants).put(policy::put_tool_grants),
        )
        .route("/api/v1/admin/mcp", get(admin::get_mcp_health))
        .route(
            "/api/v1/admin/mcp/{mcp_id}/health",
            put(admin::put_mcp_health),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/admission",
            get(agent::admission_preview),
        )
        .route("/api/v1/audit/keys", get(audit::keys))
        .route("/api/v1/admin/audit/verify", get(audit::verify))
        .route(
            "/api/v1/admin/audit/calls/{call_id}/proof",
            get(audit::proof),
        )
        .route("/api/v1/openapi.json", get(openapi_json))
}

async fn openapi_json(
    axum::extract::State(ctx): axum::extract::State<Ctx>,
) -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(document(&ctx.config))
}

/// The OpenAPI document as this deployment serves it: the generated one
/// with the settings that bound input (the password minimum).
pub fn document(config: &crate::config::Config) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    crate::service::schema::configure(&mut doc, config.min_password_length);
    doc
}

/// Path segments, decoded once by axum; undecodable ones are 400.
pub fn segments<T>(path: Result<Path<T>, PathRejection>) -> Result<T, Error> {
    path.map(|Path(p)| p)
        .map_err(|_| Error::Invalid("a path segment is not valid".into()))
}

/// The audit arguments of a native agent-route call: its path parameters
/// (owner and repo resolve the repository; only names are stored) and the
/// member names of its JSON body or query.
pub fn call_args(
    path: &[(&str, &str)],
    names: impl IntoIterator<Item = String>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut args: serde_json::Map<String, serde_json::Value> = path
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    for name in names {
        args.entry(name).or_insert(serde_json::Value::Null);
    }
    args
}

/// The member names of a JSON object body (none when it is not one).
pub fn body_names(bytes: Option<&[u8]>) -> Vec<String> {
    bytes
        .and_then(|b| {
            serde_json::from_slice::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(b)
                .ok()
        })
        .map(|m| m.into_keys().collect())
        .unwrap_or_default()
}

/// The one guard of an agent route, before its path and body are judged:
/// prepares the call's audit record (the use case writes it with the
/// operation's writes, `audit::finish` with a refusal), then refuses a
/// human's token (`agent_only`) or a token without the tool's scopes.
/// The use cases do not check again.
pub fn admit(
    ctx: &crate::service::Ctx,
    caller: &mut crate::service::auth::Caller,
    tool: crate::domain::tools::Tool,
    headers: &axum::http::HeaderMap,
    args: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), Error> {
    let call = crate::service::audit::CallInfo {
        tool: tool.name(),
        args,
        rpc_id: None,
        request_id: headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    crate::service::audit::prepare_api(ctx, caller, tool, &call)?;
    caller.require_agent(tool.scopes())
}
