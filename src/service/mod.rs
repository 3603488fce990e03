//! Use cases. Each public function that changes state is one transaction: it
//! reads, decides with `domain`, records the decision, and commits before
//! anyone is answered.

pub mod access;
pub mod admin;
pub mod admission;
pub mod agent;
pub mod archive;
pub mod audit;
pub mod auth;
pub mod backup;
pub mod check;
pub mod demo;
pub mod error;
pub mod events;
pub mod forms;
pub mod fs_context;
pub mod health;
pub mod issues;
pub mod pages;
pub mod policy;
pub mod report;
pub mod schema;
pub mod seal;
pub mod sessions;
pub mod submit;
pub mod view;
pub mod webhooks;

use std::sync::Arc;

pub use error::{Error, Result};

use crate::config::Config;
use crate::domain::admission::Catalog;
use crate::domain::time::Timestamp;
use crate::store::Store;

/// What every use case needs: configuration and the store.
#[derive(Clone)]
pub struct Ctx {
    /// Settings of this process.
    pub config: Arc<Config>,
    /// The database.
    pub store: Store,
    /// The MCP capability catalog in use.
    pub catalog: Arc<Catalog>,
    /// Tokens this process has seen live (see [`auth::TokenCache`]).
    pub tokens: Arc<auth::TokenCache>,
    /// The bounds on password hashing (see [`sessions::LoginGate`]).
    pub login_gate: Arc<sessions::LoginGate>,
    /// Reverse proxies whose `X-Forwarded-For` names the client.
    pub proxies: Arc<crate::domain::net::TrustedProxies>,
    /// The requests waiting for events.
    pub waiters: Arc<events::Waiters>,
}

/// The most requests that may wait for events at a time in one process.
const MAX_WAITERS: usize = 1024;

impl Ctx {
    /// The current time, normalized, from the configured clock.
    pub fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    /// Bundles configuration, store and catalog; refuses a bad
    /// `trusted_proxies` entry.
    pub fn new(config: Config, store: Store, catalog: Catalog) -> anyhow::Result<Ctx> {
        let proxies = crate::domain::net::TrustedProxies::parse(&config.trusted_proxies)
            .map_err(|e| anyhow::anyhow!("refusing to start: {e}"))?;
        Ok(Ctx {
            login_gate: Arc::new(sessions::LoginGate::new(config.login_hash_concurrency)),
            proxies: Arc::new(proxies),
            waiters: Arc::new(events::Waiters::new(MAX_WAITERS)),
            config: Arc::new(config),
            store,
            catalog: Arc::new(catalog),
            tokens: Arc::default(),
        })
    }
}

/// 32 random bytes as lowercase hex (tokens, cookies, nonces).
pub fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}
