//! `--webhook`: one subscription matching every event, delivered to a
//! receiver in this process on loopback (answering 204 at once), so the
//! rows run with the outbox's writes and deliveries; and what the receiver
//! saw: deliveries per second and the time from each event to its arrival.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::server::Server;

/// One delivery as it arrived.
#[derive(Clone)]
struct Arrival {
    at: OffsetDateTime,
    occurred_at: Option<OffsetDateTime>,
    id: String,
}

/// The receiver and what it got.
pub struct Receiver {
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    server: tokio::task::JoinHandle<()>,
}

/// What the receiver saw, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookStats {
    /// Deliveries received (each `webhook-id` counted once).
    pub delivered: usize,
    /// Deliveries received more than once.
    pub duplicates: usize,
    /// Deliveries per second from the first arrival to the last.
    pub per_s: f64,
    /// Event time to arrival, milliseconds.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

async fn hook(
    State(arrivals): State<Arc<Mutex<Vec<Arrival>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let at = OffsetDateTime::now_utc();
    let occurred_at = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["occurred_at"].as_str().map(str::to_owned))
        .and_then(|t| OffsetDateTime::parse(&t, &Rfc3339).ok());
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    arrivals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arrival {
            at,
            occurred_at,
            id,
        });
    StatusCode::NO_CONTENT
}

impl Receiver {
    /// Listens on 127.0.0.1 and subscribes it to every event of `server`.
    pub async fn start(server: &Server) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(Arc::clone(&arrivals));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let http = reqwest::Client::builder().no_proxy().build()?;
        let created = http
            .post(format!("{}/api/v1/admin/webhooks", server.base()))
            .bearer_auth(&server.admin_token)
            .json(&serde_json::json!({"url": url, "description": "writ-bench"}))
            .send()
            .await?;
        anyhow::ensure!(
            created.status().as_u16() == 201,
            "creating the bench's webhook subscription: {}",
            created.text().await.unwrap_or_default()
        );
        eprintln!("writ-bench: webhook receiver on {url}, subscribed to every event");
        Ok(Receiver {
            arrivals,
            server: task,
        })
    }

    fn count(&self) -> usize {
        self.arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Waits until no delivery arrived for 3 s (at most 5 minutes: the
    /// outbox drains its backlog), then sums up.
    pub async fn finish(self) -> WebhookStats {
        let mut last = self.count();
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let now = self.count();
            if now == last {
                break;
            }
            last = now;
        }
        self.server.abort();
        let arrivals = self
            .arrivals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut ids: Vec<&str> = arrivals.iter().map(|a| a.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut latencies: Vec<f64> = arrivals
            .iter()
            .filter_map(|a| Some((a.at - a.occurred_at?).as_seconds_f64() * 1000.0))
            .collect();
        latencies.sort_by(f64::total_cmp);
        let quantile = |q: f64| {
            latencies
                .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        let span = match (
            arrivals.iter().map(|a| a.at).min(),
            arrivals.iter().map(|a| a.at).max(),
        ) {
            (Some(first), Some(last)) => (last - first).as_seconds_f64(),
            _ => 0.0,
        };
        WebhookStats {
            delivered: ids.len(),
            duplicates: arrivals.len() - ids.len(),
            per_s: if span > 0.0 {
                arrivals.len() as f64 / span
            } else {
                0.0
            },
            latency_p50_ms: quantile(0.5),
            latency_p99_ms: quantile(0.99),
        }
    }
}
