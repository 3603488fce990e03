//! The agent routes: list, get and confirm grants.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{admit, body_names, call_args, segments};
use crate::domain::ids::GrantId;
use crate::domain::scope::Scope;
use crate::domain::tools::Tool;
use crate::http::auth::{api_caller, api_caller_deferred};
use crate::http::error::{ApiError, ErrorBody};
use crate::http::json::{parse_json, read_body};
use crate::http::pagination::{link_headers, parse_list_query};
use crate::service::Ctx;
use crate::service::agent::{self, Triple};
use crate::service::audit;
use crate::service::view::GrantView;

/// `{"grant": {...}}`
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantEnvelope {
    /// The grant.
    pub grant: GrantView,
}

/// The confirm body: exactly the proposal triple.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmBody {
    /// Must be `agent_work_grant.v1`.
    #[schema(value_type = crate::service::schema::ProposalSchemaText, inline)]
    pub proposal_schema: Value,
    /// Must be the JSON integer 1.
    #[schema(value_type = crate::service::schema::ProposalVersionNumber, inline)]
    pub proposal_version: Value,
    /// The digest the bot read: 64 lowercase hex.
    #[schema(value_type = crate::service::schema::DigestText, inline)]
    pub proposal_digest: Value,
}

type Triplet = (String, String, String);

/// Lists the calling bot's grants.
#[utoipa::path(get, path = "/api/v1/agent-work-grants", tag = "agent",
    params(("page" = Option<crate::service::schema::PageNumber>, Query),
           ("limit" = Option<crate::service::schema::PageLimit>, Query),
           ("state" = Option<crate::service::schema::StateFilter>, Query)),
    responses((status = 200, body = [GrantView], headers(("X-Total-Count" = i64), ("Link" = String))),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("token" = [])))]
pub async fn list_grants(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut caller = api_caller(&ctx, &headers).await?;
    let names = form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
        .map(|(k, _)| k.into_owned());
    let args = call_args(&[], names);
    let result = async {
        admit(&ctx, &mut caller, Tool::List, &headers, &args)?;
        let query = parse_list_query(
            query.as_deref(),
            u64::from(ctx.config.max_page_limit.max(1)),
        )?;
        let page = agent::list(&ctx, &caller, &query.params).await?;
        Ok((query, page))
    }
    .await;
    let (query, page) = audit::finish(&ctx, &caller, result, 200).await?;
    let mut response = Json(page.items).into_response();
    let base = format!("{}/api/v1/agent-work-grants", ctx.config.public_base());
    link_headers(response.headers_mut(), &base, &query, page.total);
    Ok(response)
}

/// Reads one of the calling bot's grants; with `wait_for_change` (0–60 s)
/// and `state_revision`, both or neither, once its revision differs from
/// that one (or the wait ended). The two parameters are described in
/// docs/events.md, not in this document: a generated request would wait.
#[utoipa::path(get, path = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}", tag = "agent",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("grant_id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = GrantEnvelope), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)),
    security(("token" = [])))]
pub async fn get_grant(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<Triplet>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<GrantEnvelope>, ApiError> {
    let mut caller = api_caller_deferred(&ctx, &headers).await?;
    let mut args = path_args(&path, None);
    for (name, _) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        args.insert(name.into_owned(), Value::Null);
    }
    let result = async {
        admit(&ctx, &mut caller, Tool::Get, &headers, &args)?;
        let (owner, repo, id) = segments(path)?;
        let id = GrantId::parse(&id)?;
        if let Some((wait, held)) = parse_wait_for_change(query.as_deref())? {
            agent::wait_for_change(&ctx, &caller, &owner, &repo, id, held, wait).await?;
        }
        agent::get(&ctx, &caller, &owner, &repo, id).await
    }
    .await;
    let grant = audit::finish(&ctx, &caller, result, 200).await?;
    Ok(Json(GrantEnvelope { grant }))
}

/// The longest `wait_for_change` of the native grant read, in seconds.
const MAX_WAIT_FOR_CHANGE: u64 = 60;

/// `wait_for_change` (0–60 s) and `state_revision` (≥ 0) of a grant read,
/// both or neither; any other parameter is refused.
fn parse_wait_for_change(
    query: Option<&str>,
) -> Result<Option<(std::time::Duration, i64)>, crate::service::Error> {
    use crate::service::Error;
    let (mut wait, mut held) = (None, None);
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let digits =
            !value.is_empty() && value.len() <= 19 && value.bytes().all(|b| b.is_ascii_digit());
        match name.as_ref() {
            "wait_for_change" => {
                let seconds = value
                    .parse::<u64>()
                    .ok()
                    .filter(|s| digits && *s <= MAX_WAIT_FOR_CHANGE);
                let seconds = seconds.ok_or_else(|| {
                    Error::Invalid("wait_for_change must be an integer from 0 to 60".into())
                })?;
                if wait.replace(seconds).is_some() {
                    return Err(Error::Invalid("a query parameter is repeated".into()));
                }
            }
            "state_revision" => {
                let revision = value.parse::<i64>().ok().filter(|_| digits);
                let revision = revision.ok_or_else(|| {
                    Error::Invalid("state_revision must be an integer of at least 0".into())
                })?;
                if held.replace(revision).is_some() {
                    return Err(Error::Invalid("a query parameter is repeated".into()));
                }
            }
            _ => return Err(Error::Invalid("unknown query parameter".into())),
        }
    }
    match (wait, held) {
        (Some(seconds), Some(revision)) => {
            Ok(Some((std::time::Duration::from_secs(seconds), revision)))
        }
        (None, None) => Ok(None),
        _ => Err(Error::Invalid(
            "wait_for_change and state_revision go together".into(),
        )),
    }
}

/// The audit arguments of a grant route: owner, repo, grant_id and the
/// body's member names.
pub fn path_args(
    path: &Result<Path<Triplet>, PathRejection>,
    body: Option<&[u8]>,
) -> serde_json::Map<String, Value> {
    let names = body_names(body);
    match path {
        Ok(Path((owner, repo, id))) => {
            call_args(&[("owner", owner), ("repo", repo), ("grant_id", id)], names)
        }
        Err(_) => call_args(&[], names),
    }
}

/// Confirms the current proposal with its exact triple.
#[utoipa::path(post, path = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/confirm", tag = "agent",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("grant_id" = inline(crate::service::schema::PositiveId), Path)),
    request_body = ConfirmBody,
    responses((status = 200, body = GrantEnvelope), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 413, body = ErrorBody)),
    security(("token" = [])))]
pub async fn confirm_grant(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<Triplet>, PathRejection>,
    body: Body,
) -> Result<Json<GrantEnvelope>, ApiError> {
    let mut caller = api_caller_deferred(&ctx, &headers).await?;
    let bytes = read_body(&headers, body).await;
    let args = path_args(&path, bytes.as_deref().ok());
    let result = async {
        admit(&ctx, &mut caller, Tool::Confirm, &headers, &args)?;
        let (owner, repo, id) = segments(path)?;
        let id = GrantId::parse(&id)?;
        let body: ConfirmBody = parse_json(&bytes?)?;
        let triple = Triple::parse(
            &body.proposal_schema,
            &body.proposal_version,
            &body.proposal_digest,
        )?;
        agent::confirm(&ctx, &caller, &owner, &repo, id, &triple).await
    }
    .await;
    let grant = audit::finish(&ctx, &caller, result, 200).await?;
    Ok(Json(GrantEnvelope { grant }))
}

/// The admission preview of one of the calling bot's grants, against the
/// current health; computed, never stored.
#[utoipa::path(get, path = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}/admission", tag = "agent",
    params(("owner" = inline(crate::service::schema::OwnerText), Path), ("repo" = inline(crate::service::schema::RepoNameText), Path), ("grant_id" = inline(crate::service::schema::PositiveId), Path)),
    responses((status = 200, body = crate::service::admission::PackageView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("token" = [])))]
pub async fn admission_preview(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    path: Result<Path<Triplet>, PathRejection>,
) -> Result<Json<crate::service::admission::PackageView>, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    caller.require_agent(&[Scope::ReadRepository])?;
    let (owner, repo, id) = segments(path)?;
    let id = GrantId::parse(&id)?;
    Ok(Json(
        crate::service::admission::preview(&ctx, &caller, &owner, &repo, id).await?,
    ))
}
