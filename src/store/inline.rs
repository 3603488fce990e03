//! SQLite reads run inline, on the calling thread, through rusqlite.
//!
//! sqlx runs every SQLite call on a worker thread of its connection and
//! hands each statement and each row across threads; on this class of
//! machine that costs ~65 µs of CPU per statement, against ~6 µs for the
//! same statement run where it is asked for (docs/performance.md, "Reads
//! inline"). Writes keep going through sqlx (the group-commit writer, or
//! `BEGIN IMMEDIATE` transactions); a read outside them, a single statement
//! ([`crate::store::Store::single`]) or a read transaction
//! ([`crate::store::Store::read`]), takes a connection of this pool instead.
//!
//! The connections are opened read-only (`query_only`) on the same file and
//! the same SQLite library as sqlx's (one `libsqlite3-sys` in the build, so
//! POSIX locks see each other), in WAL mode: a read never waits for the
//! writer and sees what was committed when its statement (or transaction)
//! began. Statements are built by sea-query as everywhere else, cached
//! prepared per connection, and rows decode by column name through serde
//! (`serde_rusqlite`), the same names `sqlx::FromRow` reads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value as Sql};
use rusqlite::{Connection, OpenFlags, ToSql};
use sea_query::Value;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::{StoreError, StoreResult};

/// Most idle connections kept (more are opened when needed and closed
/// after use).
const MAX_IDLE: usize = 8;
/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;
/// How long a read waits for a lock before failing. In WAL mode a reader
/// waits only in rare moments (the WAL index being rebuilt after a crash);
/// the wait blocks the calling thread, so it is short.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// The pool of read connections of one SQLite file.
#[derive(Debug)]
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// A pool on `path` (the file exists and is in WAL mode); opens one
    /// connection to check it.
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
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(error)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(error)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.execute_batch("PRAGMA query_only = ON")
            .map_err(error)?;
        Ok(conn)
    }

    /// A connection outside any transaction (each statement reads what was
    /// committed when it began); back in the pool when dropped.
    pub fn get(self: &Arc<Self>) -> StoreResult<ReadConn> {
        let conn = match self.lock().pop() {
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
        conn.conn().execute_batch("BEGIN").map_err(error)?;
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
    fn conn(&mut self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a ReadConn holds its connection until dropped")
    }

    /// Runs `sql` with `values` and decodes every row (at most `limit`).
    fn rows<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        values: &[Value],
        limit: Option<usize>,
    ) -> StoreResult<Vec<T>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(sql).map_err(error)?;
        let columns = serde_rusqlite::columns_from_statement(&stmt);
        let mut rows = stmt
            .query(rusqlite::params_from_iter(values.iter().map(Bind)))
            .map_err(error)?;
        let mut out = Vec::new();
        while limit.is_none_or(|l| out.len() < l) {
            let Some(row) = rows.next().map_err(error)? else {
                break;
            };
            let decoded = serde_rusqlite::from_row_with_columns::<T>(row, &columns)
                .map_err(|e| StoreError::Decode(Box::new(e)))?;
            out.push(decoded);
        }
        Ok(out)
    }

    /// At most one row.
    pub fn fetch_optional<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        values: &[Value],
    ) -> StoreResult<Option<T>> {
        Ok(self.rows(sql, values, Some(1))?.pop())
    }

    /// Exactly one row (`RowNotFound` when there is none, as sqlx).
    pub fn fetch_one<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        values: &[Value],
    ) -> StoreResult<T> {
        self.fetch_optional(sql, values)?
            .ok_or(StoreError::RowNotFound)
    }

    /// Every row.
    pub fn fetch_all<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        values: &[Value],
    ) -> StoreResult<Vec<T>> {
        self.rows(sql, values, None)
    }

    /// Ends the read transaction.
    pub fn commit(mut self) -> StoreResult<()> {
        if self.in_tx {
            self.in_tx = false;
            self.conn().execute_batch("COMMIT").map_err(error)?;
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

/// A rusqlite error as the store's error type.
fn error(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => StoreError::Protocol(format!(
            "SQLite read failed ({code}): {}",
            message.unwrap_or_default()
        )),
        other => StoreError::Protocol(format!("SQLite read failed: {other}")),
    }
}

/// A sea-query value bound as rusqlite binds it (the conversions sqlx's
/// SQLite binding makes through `sea-query-sqlx`). `sea-query-rusqlite`
/// would do this, but it is built for rusqlite 0.38, whose
/// `libsqlite3-sys` cannot be linked next to sqlx 0.9's.
struct Bind<'a>(&'a Value);

impl ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let value = match self.0 {
            Value::Bool(v) => v.map(|b| Sql::Integer(b.into())),
            Value::TinyInt(v) => v.map(|i| Sql::Integer(i.into())),
            Value::SmallInt(v) => v.map(|i| Sql::Integer(i.into())),
            Value::Int(v) => v.map(|i| Sql::Integer(i.into())),
            Value::BigInt(v) => v.map(Sql::Integer),
            Value::TinyUnsigned(v) => v.map(|i| Sql::Integer(i.into())),
            Value::SmallUnsigned(v) => v.map(|i| Sql::Integer(i.into())),
            Value::Unsigned(v) => v.map(|i| Sql::Integer(i.into())),
            Value::BigUnsigned(v) => match v {
                Some(u) => {
                    Some(Sql::Integer(i64::try_from(*u).map_err(|e| {
                        rusqlite::Error::ToSqlConversionFailure(Box::new(e))
                    })?))
                }
                None => None,
            },
            Value::Float(v) => v.map(|f| Sql::Real(f.into())),
            Value::Double(v) => v.map(Sql::Real),
            Value::String(Some(s)) => return Ok(ToSqlOutput::from(s.as_str())),
            Value::String(None) => None,
            Value::Char(v) => v.map(|c| Sql::Text(c.to_string())),
            Value::Bytes(Some(b)) => return Ok(ToSqlOutput::from(b.as_slice())),
            Value::Bytes(None) => None,
            other => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    format!("no SQLite binding for {other:?}").into(),
                ));
            }
        };
        Ok(ToSqlOutput::Owned(value.unwrap_or(Sql::Null)))
    }
}

/// Reads an SQLite boolean (an integer, 0 or not) where serde meets it as
/// an integer: a field of a `#[serde(flatten)]`ed row, which serde buffers
/// before it knows the field's type.
pub fn boolean<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Bool(bool),
        Int(i64),
    }
    Ok(match Stored::deserialize(d)? {
        Stored::Bool(b) => b,
        Stored::Int(i) => i != 0,
    })
}
