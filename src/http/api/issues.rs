//! Issue routes: read, open, and (setup privilege) delete and transfer.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use super::segments;
use crate::domain::ids::parse_positive_i64;
use crate::domain::scope::Scope;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::strict_json;
use crate::http::pagination::{link_headers, parse_list_query};
use crate::service::admin::Setup;
use crate::service::issues;
use crate::service::view::IssueView;
use crate::service::{Ctx, Error};

/// `POST .../issues`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewIssueBody {
    /// 1–255 Unicode scalar values, not only whitespace.
    #[schema(value_type = crate::service::schema::TitleText, inline)]
    pub title: String,
    /// May be empty.
    #[serde(default)]
    #[schema(value_type = crate::service::schema::FreeText, inline)]
    pub body: String,
}

/// `POST .../issues/{index}/transfer`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferBody {
    /// Target repository `owner/name`.
    #[schema(value_type = crate::service::schema::FullNameText, inline)]
    pub to: String,
}

fn index_of(raw: &str) -> Result<i64, Error> {
    parse_positive_i64(raw)
        .ok_or_else(|| Error::Invalid("issue index must be a positive integer".into()))
}

/// Reads one issue.
#[utoipa::path(get, path = "/api/v1/repos/{owner}/{repo}/issues/{index}", tag = "issues",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("index" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = IssueView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn get_issue(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<IssueView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require(&[Scope::ReadIssue])?;
    let (owner, repo, index) = segments(path)?;
    let index = index_of(&index)?;
    Ok(Json(
        issues::get(&ctx, &caller, &owner, &repo, index).await?,
    ))
}

/// Lists a repository's issues by index.
#[utoipa::path(get, path = "/api/v1/repos/{owner}/{repo}/issues", tag = "issues",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("page" = Option<crate::service::schema::PageNumber>, Query), ("limit" = Option<crate::service::schema::PageLimit>, Query)),
    responses((status = 200, body = [IssueView]), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn list_issues(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require(&[Scope::ReadIssue])?;
    let (owner, repo) = segments(path)?;
    let query = parse_list_query(
        query.as_deref(),
        u64::from(ctx.config.max_page_limit.max(1)),
    )?;
    if query.state.is_some() {
        return Err(Error::Invalid("issues have no state filter".into()).into());
    }
    let (items, total) = issues::list(
        &ctx,
        &caller,
        &owner,
        &repo,
        query.params.page,
        query.params.limit,
    )
    .await?;
    let mut response = Json(items).into_response();
    let base = format!(
        "{}/api/v1/repos/{owner}/{repo}/issues",
        ctx.config.public_base()
    );
    link_headers(response.headers_mut(), &base, &query, total);
    Ok(response)
}

/// Opens an ordinary issue (never attributed to a grant).
#[utoipa::path(post, path = "/api/v1/repos/{owner}/{repo}/issues", tag = "issues", request_body = NewIssueBody,
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path)),
    responses((status = 201, body = IssueView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create_issue(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Result<(StatusCode, Json<IssueView>), ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require(&[Scope::WriteIssue])?;
    let (owner, repo) = segments(path)?;
    let input: NewIssueBody = strict_json(&headers, body).await?;
    let issue = issues::create(&ctx, &caller, &owner, &repo, &input.title, &input.body).await?;
    Ok((StatusCode::CREATED, Json(issue)))
}

/// Deletes an issue (setup privilege).
#[utoipa::path(delete, path = "/api/v1/repos/{owner}/{repo}/issues/{index}", tag = "admin",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("index" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn delete_issue(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (owner, repo, index) = segments(path)?;
    issues::delete(&ctx, setup, &owner, &repo, index_of(&index)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Transfers an issue to another repository (setup privilege); 409 when
/// the target does not exist or already holds the issue.
#[utoipa::path(post, path = "/api/v1/repos/{owner}/{repo}/issues/{index}/transfer", tag = "admin", request_body = TransferBody,
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("index" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = IssueView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("token" = [])))]
pub async fn transfer_issue(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    body: Body,
) -> Result<Json<IssueView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (owner, repo, index) = segments(path)?;
    let index = index_of(&index)?;
    let input: TransferBody = strict_json(&headers, body).await?;
    Ok(Json(
        issues::transfer(&ctx, setup, &owner, &repo, index, &input.to).await?,
    ))
}
