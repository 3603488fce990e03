//! `GET /api/v1/events`: the feed, as JSON or as Server-Sent Events.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};

use crate::domain::events::{Cursor, parse_type_filter};
use crate::domain::ids::parse_full_name;
use crate::http::auth::api_caller;
use crate::http::error::{ApiError, ErrorBody};
use crate::service::auth::Caller;
use crate::service::events::{self, FeedPage, FeedParams};
use crate::service::{Ctx, Error, Result};

/// Events per answer when `limit` is absent.
const DEFAULT_LIMIT: u64 = 50;
/// The most events per answer.
const MAX_LIMIT: u64 = 100;
/// The longest `wait`, in seconds.
const MAX_WAIT: u64 = 60;
/// How long one turn of an event stream waits before it looks again (the
/// stream sends a comment every 15 s meanwhile, so proxies keep it open).
const STREAM_TURN: Duration = Duration::from_secs(30);

/// The events visible to the caller, in commit order.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", operation_id = "events_feed",
    params(("after" = Option<crate::service::schema::EventCursorText>, Query, description = "The `next_after` of the previous answer; absent: from the beginning"),
           ("limit" = Option<crate::service::schema::FeedLimit>, Query),
           ("wait" = Option<crate::service::schema::FeedWait>, Query),
           ("type" = Option<crate::service::schema::EventTypeFilterText>, Query),
           ("repo" = Option<crate::service::schema::FullNameText>, Query, description = "`owner/name`: only this repository's events")),
    responses((status = 200, body = FeedPage, description = "JSON, or Server-Sent Events with `Accept: text/event-stream`"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)),
    security(("token" = [])))]
pub async fn feed(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> std::result::Result<Response, ApiError> {
    let caller = api_caller(&ctx, &headers).await?;
    let mut params = parse(query.as_deref())?;
    if wants_stream(&headers) {
        if let Some(last) = headers.get("last-event-id") {
            params.after = last.to_str().ok().and_then(Cursor::decode).ok_or_else(|| {
                Error::Invalid("Last-Event-ID is not a cursor of this feed".into())
            })?;
        }
        return Ok(Sse::new(stream(ctx, caller, params))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response());
    }
    let page = events::feed(&ctx, &caller, &params).await?;
    Ok(Json(page).into_response())
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().unwrap_or("").trim() == "text/event-stream")
}

/// Every event from `params.after` on, as it commits; the stream ends on
/// an error (the client resumes with `Last-Event-ID`).
fn stream(
    ctx: Ctx,
    caller: Caller,
    params: FeedParams,
) -> impl Stream<Item = std::result::Result<Event, Infallible>> {
    let turn = FeedParams {
        wait: STREAM_TURN,
        ..params
    };
    futures_util::stream::unfold(Some(turn), move |state| {
        let (ctx, caller) = (ctx.clone(), caller.clone());
        async move {
            let mut turn = state?;
            if ctx.waiters.is_closing() {
                // The server is shutting down: the client resumes with
                // Last-Event-ID.
                return None;
            }
            let page = match events::feed(&ctx, &caller, &turn).await {
                Ok(page) => page,
                Err(e) => {
                    let event = Event::default().event("error").data(e.code());
                    return Some((vec![event], None));
                }
            };
            let events = page
                .events
                .iter()
                .map(|e| {
                    Event::default()
                        .id(e.cursor.encode())
                        .event(e.kind.as_str())
                        .json_data(e)
                        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
                })
                .collect::<Vec<_>>();
            turn.after = Cursor::decode(&page.next_after).unwrap_or(turn.after);
            Some((events, Some(turn)))
        }
    })
    .flat_map(|batch| futures_util::stream::iter(batch.into_iter().map(Ok)))
}

/// Parses `after`, `limit`, `wait`, `type` and `repo`; unknown, repeated or
/// out-of-range parameters are 400.
fn parse(raw: Option<&str>) -> Result<FeedParams> {
    let mut params = FeedParams {
        after: Cursor::default(),
        limit: DEFAULT_LIMIT,
        wait: Duration::ZERO,
        types: Vec::new(),
        repo: None,
    };
    let mut seen = Vec::new();
    for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if seen.contains(&key) {
            return Err(Error::Invalid("a query parameter is repeated".into()));
        }
        match key.as_ref() {
            "after" => {
                params.after = Cursor::decode(&value).ok_or_else(|| {
                    Error::Invalid("after must be the next_after of an earlier answer".into())
                })?;
            }
            "limit" => {
                params.limit = number(&value, 1, MAX_LIMIT).ok_or_else(|| {
                    Error::Invalid("limit must be an integer from 1 to 100".into())
                })?;
            }
            "wait" => {
                let seconds = number(&value, 0, MAX_WAIT)
                    .ok_or_else(|| Error::Invalid("wait must be an integer from 0 to 60".into()))?;
                params.wait = Duration::from_secs(seconds);
            }
            "type" => {
                params.types = parse_type_filter(&value).ok_or_else(|| {
                    Error::Invalid(
                        "type must list event types or prefix.* patterns, comma-separated".into(),
                    )
                })?;
            }
            "repo" => {
                let (owner, name) = parse_full_name(&value)
                    .map_err(|_| Error::Invalid("repo must be owner/name".into()))?;
                params.repo = Some((owner.as_str().to_owned(), name.as_str().to_owned()));
            }
            _ => return Err(Error::Invalid("unknown query parameter".into())),
        }
        seen.push(key);
    }
    Ok(params)
}

/// A decimal integer in `min..=max`.
fn number(raw: &str, min: u64, max: u64) -> Option<u64> {
    if raw.is_empty() || raw.len() > 6 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok().filter(|n| (min..=max).contains(n))
}
