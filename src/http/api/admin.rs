//! Setup-privilege routes: users, tokens, repositories, collaborators.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::segments;
use crate::domain::ids::parse_positive_i64;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::strict_json;
use crate::service::admin::{
    self, CollaboratorInput, NewRepoInput, NewTokenInput, NewUserInput, Setup,
};
use crate::service::view::{NewTokenView, RepoAdminView, UserView};
use crate::service::{Ctx, Error};

/// Creates a user.
#[utoipa::path(post, path = "/api/v1/admin/users", tag = "admin", request_body = NewUserInput,
    responses((status = 201, body = UserView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create_user(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let input: NewUserInput = strict_json(&headers, body).await?;
    let user = admin::create_user(&ctx, setup, input).await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// Creates a token for a user; the token text is shown this once.
#[utoipa::path(post, path = "/api/v1/admin/users/{login}/tokens", tag = "admin", request_body = NewTokenInput,
    params(("login" = inline(crate::service::schema::LoginText), Path)),
    responses((status = 201, body = NewTokenView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create_token(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let login = segments(path)?;
    let input: NewTokenInput = strict_json(&headers, body).await?;
    let token = admin::create_token(&ctx, setup, &login, input).await?;
    // The answer is the only copy of the secret: no cache may keep it.
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(token),
    )
        .into_response())
}

/// Revokes a token.
#[utoipa::path(delete, path = "/api/v1/admin/users/{login}/tokens/{token_id}", tag = "admin",
    params(("login" = inline(crate::service::schema::LoginText), Path), ("token_id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn revoke_token(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (login, id) = segments(path)?;
    let id = parse_positive_i64(&id)
        .ok_or_else(|| Error::Invalid("token id must be a positive integer".into()))?;
    admin::revoke_token(&ctx, setup, &login, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Creates a repository.
#[utoipa::path(post, path = "/api/v1/admin/repos", tag = "admin", request_body = NewRepoInput,
    responses((status = 201, body = RepoAdminView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create_repo(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<RepoAdminView>), ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let input: NewRepoInput = strict_json(&headers, body).await?;
    let repo = admin::create_repo(&ctx, setup, input).await?;
    Ok((StatusCode::CREATED, Json(repo)))
}

/// Adds or changes a collaborator.
#[utoipa::path(put, path = "/api/v1/repos/{owner}/{repo}/collaborators/{login}", tag = "admin", request_body = CollaboratorInput,
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("login" = inline(crate::service::schema::LoginText), Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn put_collaborator(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (owner, repo, login) = segments(path)?;
    let input: CollaboratorInput = strict_json(&headers, body).await?;
    admin::set_collaborator(&ctx, setup, &owner, &repo, &login, input).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a collaborator.
#[utoipa::path(delete, path = "/api/v1/repos/{owner}/{repo}/collaborators/{login}", tag = "admin",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("login" = inline(crate::service::schema::LoginText), Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn delete_collaborator(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (owner, repo, login) = segments(path)?;
    admin::remove_collaborator(&ctx, setup, &owner, &repo, &login).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Streams a reporting view as CSV or JSON (`read:admin`).
#[utoipa::path(get, path = "/api/v1/admin/reports/{name}", tag = "admin",
    params(("name" = inline(crate::service::schema::ReportNameText), Path),
           ("format" = Option<crate::service::schema::ReportFormatText>, Query),
           ("repo" = Option<crate::service::schema::FreeText>, Query),
           ("agent" = Option<crate::service::schema::FreeText>, Query),
           ("since" = Option<crate::service::schema::DateTimeText>, Query),
           ("until" = Option<crate::service::schema::DateTimeText>, Query)),
    responses((status = 200, description = "the rows"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn report(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Result<axum::response::Response, ApiError> {
    use crate::service::report::{self, Format};
    use futures_util::StreamExt;
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_admin(crate::domain::scope::Scope::ReadAdmin)?;
    let name = segments(path)?;
    let report = crate::store::reports::Report::parse(&name).ok_or(Error::NotFound)?;
    let (mut format, mut repo, mut agent, mut since, mut until) = (None, None, None, None, None);
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        let slot = match key.as_ref() {
            "format" => &mut format,
            "repo" => &mut repo,
            "agent" => &mut agent,
            "since" => &mut since,
            "until" => &mut until,
            _ => return Err(Error::Invalid("unknown query parameter".into()).into()),
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(Error::Invalid("a query parameter is repeated".into()).into());
        }
    }
    let format = match format.as_deref() {
        None | Some("csv") => Format::Csv,
        Some("json") => Format::Json,
        Some(_) => return Err(Error::Invalid("format must be csv or json".into()).into()),
    };
    let filter = report::filter(repo, agent, since.as_deref(), until.as_deref())?;
    let body = report::formatted(&ctx.store, report, &filter, format).map(|chunk| {
        chunk
            .map(axum::body::Bytes::from)
            .map_err(std::io::Error::other)
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, format.content_type())],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// Sets an MCP's health (`write:admin`).
#[utoipa::path(put, path = "/api/v1/admin/mcp/{mcp_id}/health", tag = "admin", request_body = crate::service::health::HealthInput,
    params(("mcp_id" = inline(crate::service::schema::McpIdText), Path)),
    responses((status = 200, body = crate::service::health::HealthView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("token" = [])))]
pub async fn put_mcp_health(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<crate::service::health::HealthView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let id = segments(path)?;
    let input = strict_json(&headers, body).await?;
    Ok(Json(
        crate::service::health::set(&ctx, setup, &id, input, &caller.login).await?,
    ))
}

/// Every MCP's health and the catalog in use (`read:admin`).
#[utoipa::path(get, path = "/api/v1/admin/mcp", tag = "admin",
    responses((status = 200, body = crate::service::health::HealthReport), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("token" = [])))]
pub async fn get_mcp_health(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
) -> Result<Json<crate::service::health::HealthReport>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_admin(crate::domain::scope::Scope::ReadAdmin)?;
    Ok(Json(crate::service::health::report(&ctx).await?))
}
