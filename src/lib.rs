//! Writ: the durable ledger of native agent work grants.
//!
//! Layers point one way: [`http`] calls [`service`]; [`service`] calls
//! [`domain`] (pure rules) and [`store`] (all SQL).

pub mod adapter;
pub mod config;
pub mod domain;
pub mod http;
pub mod service;
pub mod store;

pub use config::Config;

use service::Ctx;

/// A Writ instance: configuration plus an open, migrated database.
#[derive(Clone)]
pub struct Writ {
    ctx: Ctx,
}

impl Writ {
    /// Connects to the configured database and applies pending migrations.
    pub async fn open(config: Config) -> anyhow::Result<Writ> {
        let catalog = match &config.catalog_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read catalog {path}: {e}"))?;
                domain::admission::Catalog::load(&text)
                    .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?
            }
            None => domain::admission::Catalog::default_catalog(),
        };
        let store = store::Store::connect(&config).await?;
        store.migrate().await?;
        let mut tx = store.write().await?;
        store::admission::record_catalog(
            &mut tx,
            &catalog.version,
            &catalog.text,
            &config.clock.now().to_text(),
        )
        .await?;
        tx.commit().await?;
        Ok(Writ {
            ctx: Ctx::new(config, store, catalog)?,
        })
    }

    /// The HTTP application: JSON API, browser pages, service endpoints.
    pub fn router(&self) -> axum::Router {
        http::router(self.ctx.clone())
    }

    /// Serves the application on `listener` with the configured connection
    /// limits and timeouts (`http::serve`) until `shutdown` completes, and
    /// meanwhile delivers webhooks (`service::webhooks::run`) and seals the
    /// audit records (`service::seal::run`).
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> anyhow::Result<()> {
        let limits =
            http::serve::Limits::from_config(&self.ctx.config).map_err(|e| anyhow::anyhow!(e))?;
        tracing::info!(
            max_connections_total = limits.total,
            max_connections_per_address = limits.per_address,
            "connection limits"
        );
        let signer = service::seal::signer(&self.ctx.config)
            .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?
            .map(std::sync::Arc::new);
        let audit = &self.ctx.config.audit;
        match (audit.retain_days, &audit.archive_dir) {
            (Some(_), None) => {
                anyhow::bail!("refusing to start: audit.retain_days needs audit.archive_dir")
            }
            (Some(_), Some(dir)) => std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("refusing to start: audit.archive_dir {dir}: {e}"))?,
            _ => {}
        }
        let deliveries = tokio::spawn(service::webhooks::run(self.ctx.clone()));
        let sealer = tokio::spawn(service::seal::run(self.ctx.clone(), signer));
        let waiters = std::sync::Arc::clone(&self.ctx.waiters);
        let shutdown = async move {
            shutdown.await;
            // Waiting requests answer and event streams end, so the
            // connections can finish.
            waiters.close();
        };
        let served = http::serve::serve(listener, self.router(), limits, shutdown).await;
        deliveries.abort();
        sealer.abort();
        served?;
        Ok(())
    }

    /// Creates the first admin (a human) and returns its new `write:admin` token.
    pub async fn bootstrap_admin(
        &self,
        login: &str,
        password: Option<&str>,
    ) -> anyhow::Result<String> {
        Ok(service::admin::bootstrap(&self.ctx, login, password).await?)
    }

    /// The service context, for the CLI.
    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// Closes the database pool.
    pub async fn close(&self) {
        self.ctx.store.close().await;
    }
}
