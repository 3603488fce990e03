//! SQLite reads run inline, on the calling thread (see [`super::sqlite`]).
//!
//! A read outside the writer, a single statement
//! ([`crate::store::Store::single`]) or a read transaction
//! ([`crate::store::Store::read`]), takes a read-only connection of this
//! pool. In WAL mode a read never waits for the writer and sees what was
//! committed when its statement (or transaction) began.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;
use sea_query::Value;
use serde::de::DeserializeOwned;

use super::sqlite::{self, Role};
use super::{StoreError, StoreResult};

/// Most idle connections kept (more are opened when needed and closed
/// after use).
const MAX_IDLE: usize = 8;
/// How long a read waits for a lock before failing; the wait blocks the
/// calling thread, so it is short.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// The pool of read connections of one SQLite file.
#[derive(Debug)]
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// A pool on `path`; opens one connection to check it.
    pub fn open(path: &Path) -> StoreResult<Arc<Readers>> {
        let readers = Arc::new(Readers {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
        });
        let first = readers.connect()?;
        readers.lock().push(first);
        Ok(readers)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn connect(&self) -> StoreResult<Connection> {
        sqlite::open(&self.path, Role::Read { busy: BUSY_TIMEOUT })
    }

    /// A connection outside any transaction (each statement reads what was
    /// committed when it began); back in the pool when dropped.
    pub fn get(self: &Arc<Self>) -> StoreResult<ReadConn> {
        let popped = self.lock().pop();
        let conn = match popped {
            Some(conn) => conn,
            None => self.connect()?,
        };
        Ok(ReadConn {
            conn: Some(conn),
            home: Arc::clone(self),
            in_tx: false,
        })
    }

    /// A connection inside a read transaction: every statement reads the
    /// same snapshot, until [`ReadConn::commit`] or drop.
    pub fn begin(self: &Arc<Self>) -> StoreResult<ReadConn> {
        let mut conn = self.get()?;
        sqlite::batch(conn.conn(), "BEGIN")?;
        conn.in_tx = true;
        Ok(conn)
    }

    /// Closes every idle connection.
    pub fn close(&self) {
        self.lock().clear();
    }
}

/// One read connection, lent by [`Readers`].
pub struct ReadConn {
    conn: Option<Connection>,
    home: Arc<Readers>,
    in_tx: bool,
}

impl std::fmt::Debug for ReadConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadConn")
    }
}

impl ReadConn {
    pub(super) fn conn(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a ReadConn holds its connection until dropped")
    }

    /// Runs `sql` with `values` and decodes every row (at most `limit`).
    pub fn rows<T: DeserializeOwned>(
        &self,
        sql: &str,
        values: &[Value],
        limit: Option<usize>,
    ) -> StoreResult<Vec<T>> {
        sqlite::rows(self.conn(), sql, values, limit)
    }

    /// Ends the read transaction.
    pub fn commit(mut self) -> StoreResult<()> {
        if self.in_tx {
            self.in_tx = false;
            sqlite::batch(self.conn(), "COMMIT")?;
        }
        Ok(())
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.in_tx && conn.execute_batch("ROLLBACK").is_err() {
            // Not known to be outside a transaction: not reused.
            return;
        }
        let mut idle = self.home.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
}

/// A write asked of a read connection.
pub fn read_only() -> StoreError {
    StoreError::other("a write on a read connection")
}
