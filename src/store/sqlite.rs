//! SQLite statements run where they are asked for, through rusqlite.
//!
//! sqlx runs every SQLite call on a worker thread of its connection and
//! hands each statement, each row and each result across threads; on this
//! class of machine that cost ~65 µs of CPU per statement (and ~110 µs per
//! small commit), against ~6 µs for the same statement run on the calling
//! thread (ADR 0015 in docs/adr/). So on SQLite the
//! store runs its statements through rusqlite: reads on the read-only
//! connections of [`super::inline`], writes on the group-commit writer's
//! connection ([`super::batch`]), which lends it to one transaction at a
//! time and commits on a thread of its own. sqlx keeps SQLite's migrations
//! and the report streams.
//!
//! Both crates link the one `libsqlite3-sys` of the build (rusqlite 0.39
//! and sqlx 0.9 both use 0.37), so the process has one SQLite library and
//! its POSIX locks see each other. Statements are built by sea-query as
//! everywhere else, cached prepared per connection, and rows decode by
//! column name through serde ([`super::sqlite_row`]), the names `sqlx::FromRow`
//! reads on the other paths.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value as Sql};
use rusqlite::{Connection, OpenFlags, ToSql};
use sea_query::Value;
use serde::de::DeserializeOwned;

use super::{StoreError, StoreResult};

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;

/// How a connection is opened.
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// Read-only, `query_only`; waits at most `busy` for a lock.
    Read {
        /// The busy timeout (a reader in WAL mode waits only in rare
        /// moments, e.g. the WAL index rebuilt after a crash).
        busy: Duration,
    },
    /// The writer: foreign keys on, `synchronous` as configured, and a
    /// long busy timeout (another process, `writ admin`, may hold the lock).
    Write {
        /// `PRAGMA synchronous` value (`FULL`, `NORMAL`, `EXTRA`).
        synchronous: &'static str,
    },
}

/// Opens a connection to the database file `path` (it exists and is in
/// WAL mode: sqlx created and migrated it).
pub fn open(path: &Path, role: Role) -> StoreResult<Connection> {
    let flags = match role {
        Role::Read { .. } => OpenFlags::SQLITE_OPEN_READ_ONLY,
        Role::Write { .. } => OpenFlags::SQLITE_OPEN_READ_WRITE,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(error)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    match role {
        Role::Read { busy } => {
            conn.busy_timeout(busy).map_err(error)?;
            conn.execute_batch("PRAGMA query_only = ON")
                .map_err(error)?;
        }
        Role::Write { synchronous } => {
            conn.busy_timeout(Duration::from_secs(10)).map_err(error)?;
            conn.execute_batch(&format!(
                "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; \
                 PRAGMA synchronous = {synchronous}"
            ))
            .map_err(error)?;
        }
    }
    Ok(conn)
}

/// Runs `sql` with `values` on `conn` and decodes every row (at most
/// `limit`).
pub fn rows<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    values: &[Value],
    limit: Option<usize>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(error)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(values.iter().map(Bind)))
        .map_err(error)?;
    let mut out = Vec::new();
    while limit.is_none_or(|l| out.len() < l) {
        let Some(row) = rows.next().map_err(error)? else {
            break;
        };
        let decoded = super::sqlite_row::decode::<T>(row)
            .map_err(|e| StoreError::other(format!("decode: {e}")))?;
        out.push(decoded);
    }
    Ok(out)
}

/// Runs a statement that returns no rows; the rows it changed.
pub fn execute(conn: &Connection, sql: &str, values: &[Value]) -> StoreResult<u64> {
    let mut stmt = conn.prepare_cached(sql).map_err(error)?;
    let changed = stmt
        .execute(rusqlite::params_from_iter(values.iter().map(Bind)))
        .map_err(error)?;
    Ok(changed as u64)
}

/// Runs one statement of fixed SQL text that returns no rows (transaction
/// control, pragmas), prepared once per connection: the writer runs four
/// of them per commit, and parsing each anew cost more than running it.
pub fn batch(conn: &Connection, sql: &str) -> StoreResult<()> {
    execute(conn, sql, &[]).map(drop)
}

/// A rusqlite error as the store's error type.
pub fn error(e: rusqlite::Error) -> StoreError {
    StoreError::from(e)
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
    struct Stored;
    impl serde::de::Visitor<'_> for Stored {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a boolean or an integer")
        }
        fn visit_bool<E>(self, b: bool) -> Result<bool, E> {
            Ok(b)
        }
        fn visit_i64<E>(self, i: i64) -> Result<bool, E> {
            Ok(i != 0)
        }
        fn visit_u64<E>(self, u: u64) -> Result<bool, E> {
            Ok(u != 0)
        }
    }
    d.deserialize_any(Stored)
}
