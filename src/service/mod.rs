//! Use cases. Each public function that changes state is one transaction: it
//! reads, decides with `domain`, records the decision, and commits before
//! anyone is answered.

pub mod access;
pub mod admin;
pub mod agent;
pub mod auth;
pub mod demo;
pub mod error;
pub mod forms;
pub mod issues;
pub mod pages;
pub mod report;
pub mod sessions;
pub mod submit;
pub mod view;

use std::sync::Arc;

pub use error::{Error, Result};

use crate::config::Config;
use crate::domain::time::Timestamp;
use crate::store::Store;

/// What every use case needs: configuration and the store.
#[derive(Clone)]
pub struct Ctx {
    /// Settings of this process.
    pub config: Arc<Config>,
    /// The database.
    pub store: Store,
}

impl Ctx {
    /// Bundles configuration and store.
    pub fn new(config: Config, store: Store) -> Ctx {
        Ctx {
            config: Arc::new(config),
            store,
        }
    }
}

/// The current time, normalized.
pub fn now() -> Timestamp {
    Timestamp::from_datetime(time::OffsetDateTime::now_utc())
}

/// 32 random bytes as lowercase hex (tokens, cookies, nonces).
pub fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}
