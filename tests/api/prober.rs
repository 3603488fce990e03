//! The built-in MCP prober records health from real HTTP probes on loopback.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::Value;

use crate::helpers::{Auth, TestApp};

/// A loopback server whose `/ok` answers 200 and `/down` answers 503.
async fn probe_target() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/ok", get(|| async { "ok" })).route(
        "/down",
        get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "down") }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn health_of(report: &Value, id: &str) -> Option<Value> {
    report["health"]
        .as_array()?
        .iter()
        .find(|h| h["mcp_id"] == id)
        .cloned()
}

both_backends!(the_prober_records_health_from_probes);
async fn the_prober_records_health_from_probes(app: TestApp) {
    let target = probe_target().await;
    let ctx = app.writ().ctx().clone();
    let mut config = (*ctx.config).clone();
    config.mcp_probes = BTreeMap::from([
        ("filesystem".to_owned(), format!("{target}/ok")),
        ("github".to_owned(), format!("{target}/down")),
        // Nothing listens on port 9 of loopback: a failed connection.
        ("mcp-x".to_owned(), "http://127.0.0.1:9/health".to_owned()),
    ]);
    config.mcp_probe_seconds = 1;
    let probe_ctx = writ::service::Ctx {
        config: Arc::new(config),
        ..ctx
    };
    let prober = tokio::spawn(writ::service::health::run_prober(probe_ctx));
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let resp = app
            .get("/api/v1/admin/mcp", Auth::Token(&app.admin_token))
            .await;
        resp.assert_status(200);
        let report = resp.json();
        if ["filesystem", "github", "mcp-x"]
            .iter()
            .all(|id| health_of(&report, id).is_some())
        {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "the prober recorded nothing: {report}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    prober.abort();
    let fs = health_of(&report, "filesystem").unwrap();
    assert_eq!(
        (fs["installed"].as_bool(), fs["healthy"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(fs["updated_by"], "prober");
    let gh = health_of(&report, "github").unwrap();
    assert_eq!(
        (gh["installed"].as_bool(), gh["healthy"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(gh["detail"].as_str().unwrap().contains("503"), "{gh}");
    let x = health_of(&report, "mcp-x").unwrap();
    assert_eq!(x["healthy"].as_bool(), Some(false));
}
