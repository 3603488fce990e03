//! Per-agent MCP tool grants under the setup privilege.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;

use super::segments;
use crate::domain::scope::Scope;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::strict_json;
use crate::service::Ctx;
use crate::service::admin::Setup;
use crate::service::policy::{self, ToolGrantsInput, ToolGrantsView};

/// A bot's tool grants (`read:admin`); `[]` and nulls when never set.
#[utoipa::path(get, path = "/api/v1/admin/agents/{login}/tool-grants", tag = "admin",
    params(("login" = inline(crate::service::schema::LoginText), Path, description = "the bot's login")),
    responses((status = 200, body = ToolGrantsView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn get_tool_grants(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<ToolGrantsView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_admin(Scope::ReadAdmin)?;
    let login = segments(path)?;
    Ok(Json(policy::get(&ctx, &login).await?))
}

/// Replaces a bot's whole set of tool grants (`write:admin`).
#[utoipa::path(put, path = "/api/v1/admin/agents/{login}/tool-grants", tag = "admin", request_body = ToolGrantsInput,
    params(("login" = inline(crate::service::schema::LoginText), Path, description = "the bot's login")),
    responses((status = 200, body = ToolGrantsView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)),
    security(("token" = [])))]
pub async fn put_tool_grants(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<ToolGrantsView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let login = segments(path)?;
    let input: ToolGrantsInput = strict_json(&headers, body).await?;
    Ok(Json(
        policy::put(&ctx, setup, &login, input, &caller.login).await?,
    ))
}
