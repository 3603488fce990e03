//! SQLite WAL checkpoints on a thread of their own.
//!
//! By default SQLite checkpoints from the connection that commits, once the
//! WAL passes 1000 pages: the writer's thread then copies ~4 MB into the
//! database file and fsyncs it, and every batch waiting behind it waits
//! milliseconds more (the submit p99). Here the writer's connection has
//! `wal_autocheckpoint = 0` ([`super::sqlite::Role::Write`]) and this
//! thread runs a `PASSIVE` checkpoint every [`EVERY`]: it copies what no
//! reader still needs, without taking the write lock, so commits go on
//! meanwhile.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use super::sqlite::{self, Role};
use super::{StoreError, StoreResult};

/// How often the WAL is checkpointed.
pub const EVERY: Duration = Duration::from_millis(100);

/// The handle that stops the checkpoint thread.
#[derive(Debug, Clone)]
pub struct Checkpointer {
    stop: mpsc::Sender<()>,
}

impl Checkpointer {
    /// Opens a connection to `path` and starts the thread.
    pub fn start(path: PathBuf, synchronous: &'static str) -> StoreResult<Checkpointer> {
        let conn = sqlite::open(&path, Role::Checkpoint { synchronous })?;
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("writ-sqlite-checkpoint".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
                        tracing::warn!(error = %e, "SQLite WAL checkpoint failed");
                    }
                }
            })
            .map_err(StoreError::Io)?;
        Ok(Checkpointer { stop })
    }

    /// Stops the thread (after its current checkpoint).
    pub fn stop(&self) {
        let _ = self.stop.send(());
    }
}
