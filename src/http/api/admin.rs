//! Setup-privilege routes: users, tokens, repositories, collaborators.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};

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
    Setup::Api(&caller).check()?;
    let input: NewUserInput = strict_json(&headers, body).await?;
    let user = admin::create_user(&ctx, Setup::Api(&caller), input).await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// Creates a token for a user; the token text is shown this once.
#[utoipa::path(post, path = "/api/v1/admin/users/{login}/tokens", tag = "admin", request_body = NewTokenInput,
    params(("login" = String, Path)),
    responses((status = 201, body = NewTokenView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create_token(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<(StatusCode, Json<NewTokenView>), ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    Setup::Api(&caller).check()?;
    let login = segments(path)?;
    let input: NewTokenInput = strict_json(&headers, body).await?;
    let token = admin::create_token(&ctx, Setup::Api(&caller), &login, input).await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// Revokes a token.
#[utoipa::path(delete, path = "/api/v1/admin/users/{login}/tokens/{token_id}", tag = "admin",
    params(("login" = String, Path), ("token_id" = i64, Path)),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn revoke_token(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    Setup::Api(&caller).check()?;
    let (login, id) = segments(path)?;
    let id = parse_positive_i64(&id)
        .ok_or_else(|| Error::Invalid("token id must be a positive integer".into()))?;
    admin::revoke_token(&ctx, Setup::Api(&caller), &login, id).await?;
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
    Setup::Api(&caller).check()?;
    let input: NewRepoInput = strict_json(&headers, body).await?;
    let repo = admin::create_repo(&ctx, Setup::Api(&caller), input).await?;
    Ok((StatusCode::CREATED, Json(repo)))
}

/// Adds or changes a collaborator.
#[utoipa::path(put, path = "/api/v1/repos/{owner}/{repo}/collaborators/{login}", tag = "admin", request_body = CollaboratorInput,
    params(("owner" = String, Path), ("repo" = String, Path), ("login" = String, Path)),
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
    Setup::Api(&caller).check()?;
    let (owner, repo, login) = segments(path)?;
    let input: CollaboratorInput = strict_json(&headers, body).await?;
    admin::set_collaborator(&ctx, Setup::Api(&caller), &owner, &repo, &login, input).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a collaborator.
#[utoipa::path(delete, path = "/api/v1/repos/{owner}/{repo}/collaborators/{login}", tag = "admin",
    params(("owner" = String, Path), ("repo" = String, Path), ("login" = String, Path)),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn delete_collaborator(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    Setup::Api(&caller).check()?;
    let (owner, repo, login) = segments(path)?;
    admin::remove_collaborator(&ctx, Setup::Api(&caller), &owner, &repo, &login).await?;
    Ok(StatusCode::NO_CONTENT)
}
