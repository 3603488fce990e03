//! MCP health: set by operators (admin API, CLI) or by the built-in prober.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admin::Setup;
use super::events;
use super::{Ctx, Error, Result};
use crate::domain::admission::classify::normalize;
use crate::store::admission::{self as store, HealthRow};

/// `PUT /api/v1/admin/mcp/{mcp_id}/health`
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthInput {
    /// Installed on this deployment.
    pub installed: bool,
    /// Answering its probe.
    pub healthy: bool,
    /// Text for operators (at most 1000 bytes).
    #[serde(default)]
    #[schema(max_length = 1000, pattern = "^[^\\u0000]*$")]
    pub detail: String,
}

/// One MCP's health as shown to admins.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthView {
    /// MCP id.
    pub mcp_id: String,
    /// Installed.
    pub installed: bool,
    /// Healthy.
    pub healthy: bool,
    /// Operator or prober text.
    pub detail: String,
    /// Since when this state holds.
    pub checked_at: String,
    /// Who set it (`login`, `cli` or `prober`).
    pub updated_by: String,
}

/// The health page's data: every MCP's health and the catalog in use.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthReport {
    /// SHA-256 of the catalog in use.
    pub catalog_version: String,
    /// MCP ids of the catalog.
    pub catalog_mcps: Vec<String>,
    /// Current health, by id.
    pub health: Vec<HealthView>,
}

fn view(h: HealthRow) -> HealthView {
    HealthView {
        mcp_id: h.mcp_id,
        installed: h.installed,
        healthy: h.healthy,
        detail: h.detail,
        checked_at: h.checked_at,
        updated_by: h.updated_by,
    }
}

/// Sets an MCP's health; `checked_at` moves only when the state changes, so
/// it reads "since when".
pub async fn set(
    ctx: &Ctx,
    setup: Setup,
    mcp_id: &str,
    input: HealthInput,
    by: &str,
) -> Result<HealthView> {
    let id = normalize(mcp_id);
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(Error::Invalid(
            "mcp_id must be 1-64 characters of [a-z0-9_.-]".into(),
        ));
    }
    if input.detail.len() > 1000 || input.detail.contains('\0') {
        return Err(Error::Invalid(
            "detail must be at most 1000 bytes without NUL".into(),
        ));
    }
    record(ctx, setup, &id, input, by).await
}

async fn record(
    ctx: &Ctx,
    setup: Setup,
    id: &str,
    input: HealthInput,
    by: &str,
) -> Result<HealthView> {
    let mut tx = ctx.store.write().await?;
    let current = store::all_health(&mut tx)
        .await?
        .into_iter()
        .find(|h| h.mcp_id == id);
    let unchanged = current.as_ref().is_some_and(|c| {
        c.installed == input.installed && c.healthy == input.healthy && c.detail == input.detail
    });
    let row = HealthRow {
        mcp_id: id.to_owned(),
        installed: input.installed,
        healthy: input.healthy,
        detail: input.detail,
        checked_at: match (&current, unchanged) {
            (Some(c), true) => c.checked_at.clone(),
            _ => ctx.now().to_text(),
        },
        updated_by: by.to_owned(),
    };
    if !unchanged {
        store::set_health(&mut tx, &row).await?;
        let data = serde_json::json!({
            "mcp_id": row.mcp_id,
            "installed": row.installed,
            "healthy": row.healthy,
        });
        let at = ctx.now().to_text();
        events::emit(
            &mut tx,
            "mcp_health.changed",
            &at,
            setup.actor(),
            None,
            None,
            data,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(view(row))
}

/// Every MCP's health and the catalog in use.
pub async fn report(ctx: &Ctx) -> Result<HealthReport> {
    let mut tx = ctx.store.read().await?;
    let rows = store::all_health(&mut tx).await?;
    tx.commit().await?;
    Ok(HealthReport {
        catalog_version: ctx.catalog.version.clone(),
        catalog_mcps: ctx.catalog.mcps.keys().cloned().collect(),
        health: rows.into_iter().map(view).collect(),
    })
}

/// The built-in prober: polls each configured MCP URL (2xx = healthy) and
/// records changes. Runs until the process ends.
pub async fn run_prober(ctx: Ctx) {
    if ctx.config.mcp_probes.is_empty() {
        return;
    }
    let client = match reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "MCP prober disabled: no HTTP client");
            return;
        }
    };
    let period = std::time::Duration::from_secs(ctx.config.mcp_probe_seconds.max(1));
    loop {
        for (id, url) in ctx.config.mcp_probes.iter() {
            let (healthy, detail) = match client.get(url).send().await {
                Ok(r) if r.status().is_success() => {
                    (true, format!("probe answered {}", r.status().as_u16()))
                }
                Ok(r) => (false, format!("probe answered {}", r.status().as_u16())),
                Err(e) if e.is_timeout() => (false, "probe timed out".to_owned()),
                Err(_) => (false, "probe could not connect".to_owned()),
            };
            let input = HealthInput {
                installed: true,
                healthy,
                detail,
            };
            if let Err(e) = record(&ctx, Setup::CLI, &normalize(id), input, "prober").await {
                tracing::warn!(mcp_id = %id, error = %e, "could not record MCP health");
            }
        }
        tokio::time::sleep(period).await;
    }
}
