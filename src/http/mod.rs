//! Thin axum layers: JSON API, browser pages and forms, service endpoints,
//! and the middleware every request passes (request id, tracing, metrics).

pub mod api;
pub mod auth;
pub mod edge;
pub mod error;
pub mod json;
pub mod mcp;
pub mod pagination;
pub mod request_id;
pub mod serve;
pub mod web;

use std::sync::OnceLock;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use crate::service::Ctx;
use error::InternalError;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole application.
pub fn router(ctx: Ctx) -> Router {
    let metrics = prometheus();
    Router::new()
        .merge(api::routes())
        .merge(web::routes())
        .merge(mcp::routes(&ctx))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(move |State(ctx): State<Ctx>| async move {
                crate::service::events::export_feed_lag(&ctx).await;
                crate::service::webhooks::export_backlog(&ctx).await;
                metrics.render()
            }),
        )
        .route("/docs/errors", get(error_docs))
        .fallback(not_found)
        .layer(middleware::from_fn(run_to_completion))
        .layer(middleware::from_fn(edge::refuse_binary_urls))
        .layer(middleware::from_fn(edge::json_api_errors))
        .layer(middleware::from_fn(log_internal_errors))
        .layer(middleware::from_fn(record_metrics))
        .layer(middleware::from_fn(web::security::headers))
        .layer(CatchPanicLayer::custom(|_| {
            error::ApiError(crate::service::Error::Internal(anyhow::anyhow!(
                "handler panicked"
            )))
            .into_response()
        }))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            let id = req
                .headers()
                .get(&REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            // A `&str` field: the text log quotes and escapes it, the JSON
            // log writes it as a JSON string; never `%` (raw) here.
            tracing::info_span!("request", method = %req.method(), route, request_id = id)
        }))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), RandomRequestId))
        .layer(middleware::map_request(|req: Request| {
            request_id::drop_unacceptable(REQUEST_ID.clone(), req)
        }))
        .with_state(ctx)
}

/// A random UUIDv4 for a request without an id, from the thread's RNG
/// (tower-http's `MakeRequestUuid` asks the kernel for each one).
#[derive(Clone, Copy)]
struct RandomRequestId;

impl MakeRequestId for RandomRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let id = crate::domain::ids::RequestKey::from_random(rand::random());
        HeaderValue::from_str(id.as_str()).ok().map(RequestId::new)
    }
}

/// The process-wide Prometheus recorder (installed once).
fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(
                        "http_request_duration_seconds".into(),
                    ),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0,
                    ],
                )
                .expect("static bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding
            // program); the handle still renders what this one records.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

async fn readyz(State(ctx): State<Ctx>) -> Response {
    if ctx.store.ready().await {
        "ready".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "database unreachable or not migrated",
        )
            .into_response()
    }
}

async fn not_found(req: Request) -> Response {
    if edge::is_api_path(req.uri().path()) {
        error::ApiError(crate::service::Error::NotFound).into_response()
    } else {
        web::not_found_page()
    }
}

async fn error_docs() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        include_str!("../../templates/static/errors.html"),
    )
}

/// Counts requests and their latency by method, matched route and status.
/// The labels are static strings (routes and statuses interned once), so a
/// request allocates none of them.
async fn record_metrics(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let route = match req.extensions().get::<MatchedPath>() {
        Some(path) => intern(path.as_str()),
        None => "unmatched",
    };
    let response = next.run(req).await;
    let status = intern(response.status().as_str());
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels)
        .record(start.elapsed().as_secs_f64());
    response
}

fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The one `'static` copy of a label (matched routes and statuses: a
/// finite set, each leaked once).
fn intern(label: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::RwLock;
    static LABELS: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let labels = LABELS.get_or_init(Default::default);
    if let Some(known) = labels.read().unwrap_or_else(|e| e.into_inner()).get(label) {
        return known;
    }
    let mut labels = labels.write().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = labels.get(label) {
        return known;
    }
    let leaked: &'static str = Box::leak(label.to_owned().into_boxed_str());
    labels.insert(leaked);
    leaked
}

/// Runs every handler to completion in its own task, even when the client
/// goes away: a transaction is never abandoned half-way by a dropped
/// future (which could hand a pooled connection back still inside its
/// `BEGIN`, as sqlx does when `begin_with` is cancelled at the wrong
/// moment), and a write that started is committed or rolled back by its own
/// code. A panic in the task becomes the same 500 as the panic catcher's.
async fn run_to_completion(req: Request, next: Next) -> Response {
    let span = tracing::Span::current();
    let task = tokio::spawn(tracing::Instrument::instrument(next.run(req), span));
    match task.await {
        Ok(response) => response,
        Err(e) => error::ApiError(crate::service::Error::Internal(anyhow::anyhow!(
            "handler task failed: {}",
            if e.is_panic() {
                "panicked"
            } else {
                "cancelled"
            }
        )))
        .into_response(),
    }
}

/// Logs an internal error once, with the request id, and answers only
/// `internal error` plus that id.
async fn log_internal_errors(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let response = next.run(req).await;
    let Some(InternalError(cause)) = response.extensions().get::<InternalError>().cloned() else {
        return response;
    };
    tracing::error!(request_id = id.as_str(), error = %cause, "internal error");
    let body = serde_json::json!({
        "message": format!("internal error (request id {id})"),
        "code": "internal",
        "url": format!("{}#internal", error::DOCS_URL),
        "request_id": id,
    });
    (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
}
