//! `/api/v1/admin/webhooks`: subscriptions, their secrets and their
//! deliveries (setup privilege to change, `read:admin` to read).

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::segments;
use crate::domain::ids::parse_positive_i64;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::strict_json;
use crate::service::admin::Setup;
use crate::service::webhooks::{
    self, CreatedSubscription, DeliveryView, RotatedSecret, SubscriptionInput, SubscriptionPatch,
    SubscriptionView,
};
use crate::service::{Ctx, Error};

fn id_of(raw: &str, what: &str) -> Result<i64, Error> {
    parse_positive_i64(raw)
        .ok_or_else(|| Error::Invalid(format!("{what} must be a positive integer")))
}

/// Creates a subscription; its signing secret is in this answer only.
#[utoipa::path(post, path = "/api/v1/admin/webhooks", tag = "admin", operation_id = "create_webhook", request_body = SubscriptionInput,
    responses((status = 201, body = CreatedSubscription), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)),
    security(("token" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let input: SubscriptionInput = strict_json(&headers, body).await?;
    let created = webhooks::create(&ctx, setup, input).await?;
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(created),
    )
        .into_response())
}

/// Every subscription.
#[utoipa::path(get, path = "/api/v1/admin/webhooks", tag = "admin", operation_id = "list_webhooks",
    responses((status = 200, body = [SubscriptionView]), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("token" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
) -> Result<Json<Vec<SubscriptionView>>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    Ok(Json(webhooks::list(&ctx, &caller).await?))
}

/// One subscription.
#[utoipa::path(get, path = "/api/v1/admin/webhooks/{id}", tag = "admin", operation_id = "get_webhook",
    params(("id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = SubscriptionView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn get(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<SubscriptionView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let id = id_of(&segments(path)?, "id")?;
    Ok(Json(webhooks::get(&ctx, &caller, id).await?))
}

/// Changes the members given.
#[utoipa::path(patch, path = "/api/v1/admin/webhooks/{id}", tag = "admin", operation_id = "update_webhook", request_body = SubscriptionPatch,
    params(("id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = SubscriptionView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn update(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<SubscriptionView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let id = id_of(&segments(path)?, "id")?;
    let patch: SubscriptionPatch = strict_json(&headers, body).await?;
    Ok(Json(webhooks::update(&ctx, setup, id, patch).await?))
}

/// Deletes a subscription; its deliveries stay on record.
#[utoipa::path(delete, path = "/api/v1/admin/webhooks/{id}", tag = "admin", operation_id = "delete_webhook",
    params(("id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn delete(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let id = id_of(&segments(path)?, "id")?;
    webhooks::delete(&ctx, setup, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret; the previous one signs too for 24 hours.
#[utoipa::path(post, path = "/api/v1/admin/webhooks/{id}/rotate-secret", tag = "admin", operation_id = "rotate_webhook_secret",
    params(("id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = RotatedSecret), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn rotate_secret(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let id = id_of(&segments(path)?, "id")?;
    let rotated = webhooks::rotate_secret(&ctx, setup, id).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(rotated)).into_response())
}

/// The newest deliveries of a subscription (`limit` 1–100, default 50).
#[utoipa::path(get, path = "/api/v1/admin/webhooks/{id}/deliveries", tag = "admin", operation_id = "list_webhook_deliveries",
    params(("id" = inline(crate::service::schema::PositiveId), Path), ("limit" = Option<crate::service::schema::FeedLimit>, Query)),
    responses((status = 200, body = [DeliveryView]), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn deliveries(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let id = id_of(&segments(path)?, "id")?;
    let mut limit = 50;
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "limit" => {
                limit = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| {
                        Error::Invalid("limit must be an integer from 1 to 100".into())
                    })?;
            }
            _ => return Err(Error::Invalid("unknown query parameter".into()).into()),
        }
    }
    Ok(Json(webhooks::deliveries(&ctx, &caller, id, limit).await?))
}

/// Makes a delivery due now (its attempts kept).
#[utoipa::path(post, path = "/api/v1/admin/webhooks/{id}/deliveries/{delivery_id}/retry", tag = "admin", operation_id = "retry_webhook_delivery",
    params(("id" = inline(crate::service::schema::PositiveId), Path), ("delivery_id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = DeliveryView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn retry(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<DeliveryView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let setup = Setup::api(&caller)?;
    let (id, delivery) = segments(path)?;
    let (id, delivery) = (id_of(&id, "id")?, id_of(&delivery, "delivery_id")?);
    Ok(Json(webhooks::retry(&ctx, setup, id, delivery).await?))
}
