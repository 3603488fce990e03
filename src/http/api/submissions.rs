//! The handoff route and the receipt readback.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::agent::path_args;
use super::{admit, call_args, segments};
use crate::domain::ids::{GrantId, RequestKey};
use crate::domain::tools::Tool;
use crate::http::auth::api_caller_deferred;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::{parse_json, read_body};
use crate::service::agent::Triple;
use crate::service::audit;
use crate::service::submit::{self, Outcome, SubmitInput};
use crate::service::view::{GrantView, SubmissionView};
use crate::service::{Ctx, Error};

/// `{"grant": {...}, "submission": {...}}`
#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiptEnvelope {
    /// The grant after the transaction.
    pub grant: GrantView,
    /// The receipt.
    pub submission: SubmissionView,
}

/// The submit body: the triple, the request key, title and body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// Must be `agent_work_grant.v1`.
    #[schema(value_type = crate::service::schema::ProposalSchemaText, inline)]
    pub proposal_schema: Value,
    /// Must be the JSON integer 1.
    #[schema(value_type = crate::service::schema::ProposalVersionNumber, inline)]
    pub proposal_version: Value,
    /// The confirmed digest: 64 lowercase hex.
    #[schema(value_type = crate::service::schema::DigestText, inline)]
    pub proposal_digest: Value,
    /// Canonical lowercase UUIDv4, chosen by the bot and kept forever.
    #[schema(value_type = crate::service::schema::RequestKeyText, inline)]
    pub request_key: Value,
    /// 1–255 Unicode scalar values, not only whitespace.
    #[schema(value_type = crate::service::schema::TitleText, inline)]
    pub title: Value,
    /// May be empty.
    #[schema(value_type = crate::service::schema::FreeText, inline)]
    pub body: Value,
}

fn text(value: Value, field: &str) -> Result<String, Error> {
    match value {
        Value::String(s) => Ok(s),
        _ => Err(Error::Invalid(format!("{field} must be a string"))),
    }
}

impl SubmitBody {
    /// The checked submit input: the triple, the request key, title and body.
    pub fn into_input(self) -> Result<SubmitInput, Error> {
        let triple = Triple::parse(
            &self.proposal_schema,
            &self.proposal_version,
            &self.proposal_digest,
        )?;
        let key = RequestKey::parse(&text(self.request_key, "request_key")?)?;
        SubmitInput::new(
            triple,
            key,
            text(self.title, "title")?,
            text(self.body, "body")?,
        )
    }
}

type Triplet = (String, String, String);

fn answer(receipt: submit::Receipt) -> Response {
    let status = match receipt.outcome {
        Outcome::Created => StatusCode::CREATED,
        Outcome::Replayed => StatusCode::OK,
    };
    let mut response = (
        status,
        Json(ReceiptEnvelope {
            grant: receipt.grant,
            submission: receipt.submission,
        }),
    )
        .into_response();
    if receipt.outcome == Outcome::Replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// Submits work: 201 new, 200 replay (`Idempotent-Replayed: true`).
#[utoipa::path(post, path = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/issues", tag = "agent",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("grant_id" = inline(crate::service::schema::PositiveId), Path)),
    request_body = SubmitBody,
    responses((status = 201, body = ReceiptEnvelope), (status = 200, body = ReceiptEnvelope, description = "replay of a committed submission"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)),
    security(("token" = [])))]
pub async fn submit_work(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<Triplet>, PathRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let mut caller = api_caller_deferred(&ctx, &headers).await?;
    let bytes = read_body(&headers, body).await;
    let args = path_args(&path, bytes.as_deref().ok());
    let result = async {
        admit(&ctx, &mut caller, Tool::Submit, &headers, &args)?;
        let (owner, repo, id) = segments(path)?;
        let id = GrantId::parse(&id)?;
        let input = parse_json::<SubmitBody>(&bytes?)?.into_input()?;
        submit::submit(&ctx, &caller, &owner, &repo, id, &input).await
    }
    .await;
    let receipt = audit::finish(&ctx, &caller, result, 200).await?;
    Ok(answer(receipt))
}

/// Reads back a receipt by its request key, in every grant state.
#[utoipa::path(get, path = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/submissions/{request_key}", tag = "agent",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("grant_id" = inline(crate::service::schema::PositiveId), Path), ("request_key" = inline(crate::service::schema::RequestKeyText), Path)),
    responses((status = 200, body = ReceiptEnvelope), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn read_submission(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String, String)>, PathRejection>,
) -> Result<Json<ReceiptEnvelope>, ApiError> {
    let mut caller = api_caller_deferred(&ctx, &headers).await?;
    let args = match &path {
        Ok(Path((owner, repo, id, key))) => call_args(
            &[
                ("owner", owner),
                ("repo", repo),
                ("grant_id", id),
                ("request_key", key),
            ],
            [],
        ),
        Err(_) => call_args(&[], []),
    };
    let result = async {
        admit(&ctx, &mut caller, Tool::Readback, &headers, &args)?;
        let (owner, repo, id, key) = segments(path)?;
        let id = GrantId::parse(&id)?;
        let key = RequestKey::parse(&key)?;
        submit::readback(&ctx, &caller, &owner, &repo, id, &key).await
    }
    .await;
    let receipt = audit::finish(&ctx, &caller, result, 200).await?;
    Ok(Json(ReceiptEnvelope {
        grant: receipt.grant,
        submission: receipt.submission,
    }))
}
