//! The only place with SQL. One implementation serves SQLite and PostgreSQL:
//! queries are built once with sea-query and rendered for the backend chosen
//! from the database URL; rows decode through `sqlx::FromRow` on both.

pub mod admission;
pub mod audit;
pub mod batch;
pub mod grant_pages;
pub mod grants;
pub mod inline;
pub mod issues;
pub mod policy;
pub mod principals;
pub mod reports;
pub mod repos;
pub mod schema;
pub mod sessions;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sea_query::{ExprTrait, PostgresQueryBuilder, SqliteQueryBuilder};
use sea_query_sqlx::SqlxBinder;
use sqlx::pool::PoolConnection;
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, FromRow, PgPool, Postgres, Sqlite, SqlitePool, Transaction};

use crate::config::Config;

/// Database errors, as sqlx reports them.
pub type StoreError = sqlx::Error;
/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Which engine a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default.
    Sqlite,
    /// The production engine.
    Postgres,
}

/// A connection pool to one of the two engines.
#[derive(Clone, Debug)]
pub enum Store {
    /// SQLite (WAL, foreign keys, busy timeout, `BEGIN IMMEDIATE` writes),
    /// with the group-commit writer when it is on, and the connections that
    /// read inline ([`inline`]).
    Sqlite(SqlitePool, Option<batch::Writer>, Arc<inline::Readers>),
    /// PostgreSQL (row locks and constraints guard every invariant).
    Postgres(PgPool),
}

/// A row type that decodes on both backends (and, by column name through
/// serde, from the SQLite reads run inline, see [`inline`]).
pub trait BothRows:
    for<'r> FromRow<'r, SqliteRow>
    + for<'r> FromRow<'r, PgRow>
    + serde::de::DeserializeOwned
    + Send
    + Unpin
{
}
impl<T> BothRows for T where
    T: for<'r> FromRow<'r, SqliteRow>
        + for<'r> FromRow<'r, PgRow>
        + serde::de::DeserializeOwned
        + Send
        + Unpin
{
}

/// How long a pooled connection may sit idle and still be handed out
/// without a ping first.
pub const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// sqlx pings every pooled connection before handing it out (one round trip
/// to the engine per acquire; two per agent call, one for the token and one
/// for the transaction). Here only a connection idle for [`PING_AFTER_IDLE`]
/// or more is pinged: one in steady use has just answered. A connection that
/// broke in between fails its first statement instead, before anything was
/// committed, and the request is answered 5xx (docs/decisions.md).
fn pinged_when_idle<DB: sqlx::Database>(options: PoolOptions<DB>) -> PoolOptions<DB> {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

impl Store {
    /// Opens a pool for `config.database_url`, chosen by its scheme.
    pub async fn connect(config: &Config) -> anyhow::Result<Store> {
        let url = config.database_url.as_str();
        if url.starts_with("sqlite:") {
            let synchronous = match config.sqlite_synchronous.to_ascii_lowercase().as_str() {
                "full" => SqliteSynchronous::Full,
                "normal" => SqliteSynchronous::Normal,
                "extra" => SqliteSynchronous::Extra,
                other => {
                    anyhow::bail!("sqlite_synchronous must be full, normal or extra, not {other:?}")
                }
            };
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(synchronous)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let pool = pinged_when_idle(SqlitePoolOptions::new())
                .max_connections(Ord::max(config.max_connections, 3))
                .connect_with(options)
                .await?;
            let readers = inline::Readers::open(&options_path(&pool))?;
            let records = batch::RecordCommit::for_synchronous(
                &config.sqlite_synchronous.to_ascii_lowercase(),
                config.sqlite_durable_read_records,
            );
            let writer = config
                .sqlite_group_commit
                .then(|| batch::Writer::start(pool.clone(), records));
            Ok(Store::Sqlite(pool, writer, readers))
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let options = PgConnectOptions::from_str(url)?;
            let pool = pinged_when_idle(PgPoolOptions::new())
                .max_connections(Ord::max(config.max_connections, 2))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await?;
            Ok(Store::Postgres(pool))
        } else {
            anyhow::bail!("database_url must start with sqlite:// or postgres://")
        }
    }

    /// The engine behind this store.
    pub fn backend(&self) -> Backend {
        match self {
            Store::Sqlite(..) => Backend::Sqlite,
            Store::Postgres(_) => Backend::Postgres,
        }
    }

    /// Applies the embedded migrations of this backend.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        match self {
            Store::Sqlite(pool, ..) => SQLITE_MIGRATIONS.run(pool).await?,
            Store::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await?,
        }
        Ok(())
    }

    /// True when the database answers and every embedded migration is applied.
    pub async fn ready(&self) -> bool {
        let (migrator, mut tx) = match self.read().await {
            Ok(tx) => (self.migrator(), tx),
            Err(_) => return false,
        };
        let want = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        let q = sea_query::Query::select()
            .expr(sea_query::Func::max(sea_query::Expr::col("version")))
            .from("_sqlx_migrations")
            .and_where(sea_query::Expr::col("success").eq(true))
            .to_owned();
        matches!(tx.fetch_one::<(Option<i64>,)>(&q).await, Ok((Some(v),)) if v >= want)
    }

    fn migrator(&self) -> &'static sqlx::migrate::Migrator {
        match self {
            Store::Sqlite(..) => &SQLITE_MIGRATIONS,
            Store::Postgres(_) => &POSTGRES_MIGRATIONS,
        }
    }

    /// Begins a write transaction: `BEGIN IMMEDIATE` on SQLite, so the write
    /// lock is taken up front and the read-decide-write inside is serialized;
    /// with group commit, a savepoint in the writer's open batch (see
    /// [`batch`]).
    pub async fn write(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(_, Some(writer), _) => Tx::Batch(writer.begin().await?),
            Store::Sqlite(pool, None, _) => Tx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?),
            Store::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// Begins a write transaction that also reads one consistent snapshot
    /// (`REPEATABLE READ` on PostgreSQL): for a read whose audit record is
    /// written with it. On SQLite it is [`Store::write`].
    pub async fn write_snapshot(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Postgres(pool) => Tx::Postgres(
                pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    .await?,
            ),
            Store::Sqlite(..) => self.write().await?,
        })
    }

    /// A connection outside any transaction, for a use case that reads with
    /// a single statement (one round trip, no `BEGIN`/`COMMIT`; on SQLite a
    /// read run inline). Only reads.
    pub async fn single(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(.., readers) => Tx::Inline(readers.get()?),
            Store::Postgres(pool) => Tx::PostgresSingle(pool.acquire().await?),
        })
    }

    /// Begins a read transaction: one consistent snapshot for a whole answer
    /// (on SQLite, read inline). Only reads.
    pub async fn read(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(.., readers) => Tx::Inline(readers.begin()?),
            Store::Postgres(pool) => Tx::Postgres(
                pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?,
            ),
        })
    }

    /// Closes every pooled connection.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(pool, writer, readers) => {
                if let Some(writer) = writer {
                    writer.shutdown().await;
                }
                readers.close();
                pool.close().await
            }
            Store::Postgres(pool) => pool.close().await,
        }
    }
}

/// An open transaction on either backend.
pub enum Tx {
    /// SQLite transaction.
    Sqlite(Transaction<'static, Sqlite>),
    /// SQLite write transaction inside a group-commit batch.
    Batch(batch::BatchTx),
    /// PostgreSQL transaction.
    Postgres(Transaction<'static, Postgres>),
    /// A SQLite connection of the pool outside a transaction (each statement
    /// commits on its own).
    SqliteSingle(PoolConnection<Sqlite>),
    /// A SQLite read connection, run inline, in a read transaction or not
    /// ([`Store::read`], [`Store::single`]).
    Inline(inline::ReadConn),
    /// A PostgreSQL connection outside a transaction.
    PostgresSingle(PoolConnection<Postgres>),
}

macro_rules! dispatch {
    ($self:ident, $q:ident, |$conn:ident, $sql:ident, $values:ident| $body:expr) => {
        match $self {
            Tx::Sqlite(tx) => {
                let ($sql, $values) = $q.build_sqlx(SqliteQueryBuilder);
                let $conn = &mut **tx;
                $body
            }
            Tx::Batch(tx) => {
                let ($sql, $values) = $q.build_sqlx(SqliteQueryBuilder);
                let $conn = tx.conn().await?;
                $body
            }
            Tx::Postgres(tx) => {
                let ($sql, $values) = $q.build_sqlx(PostgresQueryBuilder);
                let $conn = &mut **tx;
                $body
            }
            Tx::SqliteSingle(c) => {
                let ($sql, $values) = $q.build_sqlx(SqliteQueryBuilder);
                let $conn = &mut **c;
                $body
            }
            Tx::Inline(_) => unreachable!("inline reads are answered before dispatch"),
            Tx::PostgresSingle(c) => {
                let ($sql, $values) = $q.build_sqlx(PostgresQueryBuilder);
                let $conn = &mut **c;
                $body
            }
        }
    };
}

impl Tx {
    /// The engine of this transaction.
    pub fn backend(&self) -> Backend {
        match self {
            Tx::Sqlite(_) | Tx::Batch(_) | Tx::SqliteSingle(_) | Tx::Inline(_) => Backend::Sqlite,
            Tx::Postgres(_) | Tx::PostgresSingle(_) => Backend::Postgres,
        }
    }

    /// Runs a query expected to return at most one row.
    pub async fn fetch_optional<T: BothRows>(
        &mut self,
        q: &impl SqlxBinder,
    ) -> StoreResult<Option<T>> {
        if let Tx::Inline(c) = self {
            let (sql, values) = inline_sql(q);
            return c.fetch_optional(&sql, &values);
        }
        dispatch!(self, q, |conn, sql, values| {
            sqlx::query_as_with(AssertSqlSafe(sql), values)
                .fetch_optional(conn)
                .await
        })
    }

    /// Runs a query expected to return exactly one row.
    pub async fn fetch_one<T: BothRows>(&mut self, q: &impl SqlxBinder) -> StoreResult<T> {
        if let Tx::Inline(c) = self {
            let (sql, values) = inline_sql(q);
            return c.fetch_one(&sql, &values);
        }
        dispatch!(self, q, |conn, sql, values| {
            sqlx::query_as_with(AssertSqlSafe(sql), values)
                .fetch_one(conn)
                .await
        })
    }

    /// Runs a query and collects every row.
    pub async fn fetch_all<T: BothRows>(&mut self, q: &impl SqlxBinder) -> StoreResult<Vec<T>> {
        if let Tx::Inline(c) = self {
            let (sql, values) = inline_sql(q);
            return c.fetch_all(&sql, &values);
        }
        dispatch!(self, q, |conn, sql, values| {
            sqlx::query_as_with(AssertSqlSafe(sql), values)
                .fetch_all(conn)
                .await
        })
    }

    /// Runs a statement and returns the number of rows it touched.
    pub async fn execute(&mut self, q: &impl SqlxBinder) -> StoreResult<u64> {
        if let Tx::Inline(_) = self {
            return Err(read_only());
        }
        dispatch!(self, q, |conn, sql, values| {
            Ok(sqlx::query_with(AssertSqlSafe(sql), values)
                .execute(conn)
                .await?
                .rows_affected())
        })
    }

    /// SQLite only: runs `statements` as one script, in one call to the
    /// connection's worker thread (sqlx runs each SQLite call there, and a
    /// hand-off costs more than a small statement). Returns each
    /// statement's rows and changed-row count, in order. Parameters are the
    /// anonymous `?` of each statement, bound in order across the script.
    /// Stops at the first failing statement, whose error is returned.
    pub async fn sqlite_script(
        &mut self,
        statements: &[&(dyn SqliteStatement + Sync)],
    ) -> StoreResult<Vec<ScriptStep>> {
        use futures_util::TryStreamExt;
        let (conn, open_savepoint): (&mut sqlx::SqliteConnection, bool) = match self {
            Tx::Sqlite(tx) => (tx, false),
            Tx::Batch(tx) => tx.script_conn(),
            Tx::SqliteSingle(c) => (c, false),
            Tx::Inline(_) => return Err(read_only()),
            Tx::Postgres(_) | Tx::PostgresSingle(_) => {
                return Err(sqlx::Error::Protocol(
                    "a SQLite script on PostgreSQL".into(),
                ));
            }
        };
        let mut sql = String::new();
        let mut values = Vec::new();
        if open_savepoint {
            sql.push_str(batch::SAVEPOINT);
            sql.push_str(";\n");
        }
        for statement in statements {
            let (text, sea_query::Values(mut v)) = statement.build_sqlite();
            sql.push_str(&text);
            sql.push_str(";\n");
            values.append(&mut v);
        }
        #[allow(deprecated)] // the multi-statement query is SQLite's, kept by sqlx
        let mut stream = sqlx::query_with(
            AssertSqlSafe(sql),
            sea_query_sqlx::SqlxValues(sea_query::Values(values)),
        )
        .fetch_many(conn);
        let mut steps = Vec::with_capacity(statements.len() + 1);
        let mut rows = Vec::new();
        let ended = loop {
            match stream.try_next().await {
                Ok(Some(sqlx::Either::Right(row))) => rows.push(row),
                Ok(Some(sqlx::Either::Left(done))) => steps.push(ScriptStep {
                    rows: std::mem::take(&mut rows),
                    changed: done.rows_affected(),
                }),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        drop(stream);
        if open_savepoint {
            if let Tx::Batch(tx) = self {
                tx.script_ran(steps.len());
            }
            if !steps.is_empty() {
                steps.remove(0);
            }
        }
        ended.map(|()| steps)
    }

    /// Commits; only after this returns may a 2xx be sent.
    pub async fn commit(self) -> StoreResult<()> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Batch(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
            Tx::Inline(c) => c.commit(),
            Tx::SqliteSingle(_) | Tx::PostgresSingle(_) => Ok(()),
        }
    }

    /// Rolls back explicitly (dropping a `Tx` also rolls back).
    pub async fn rollback(self) -> StoreResult<()> {
        match self {
            Tx::Sqlite(tx) => tx.rollback().await,
            Tx::Batch(tx) => {
                tx.rollback();
                Ok(())
            }
            Tx::Postgres(tx) => tx.rollback().await,
            Tx::Inline(_) | Tx::SqliteSingle(_) | Tx::PostgresSingle(_) => Ok(()),
        }
    }
}

/// A statement that can be part of a [`Tx::sqlite_script`].
pub trait SqliteStatement {
    /// The statement rendered for SQLite, with its values.
    fn build_sqlite(&self) -> (String, sea_query::Values);
}

impl<T: sea_query::QueryStatementWriter> SqliteStatement for T {
    fn build_sqlite(&self) -> (String, sea_query::Values) {
        self.build(SqliteQueryBuilder)
    }
}

/// One statement's result in a [`Tx::sqlite_script`].
#[derive(Debug)]
pub struct ScriptStep {
    /// The rows it returned (`RETURNING`).
    pub rows: Vec<SqliteRow>,
    /// The rows it changed.
    pub changed: u64,
}

/// A statement rendered for SQLite with its values, for an inline read.
fn inline_sql(q: &impl SqlxBinder) -> (String, Vec<sea_query::Value>) {
    let (sql, sea_query_sqlx::SqlxValues(sea_query::Values(values))) =
        q.build_sqlx(SqliteQueryBuilder);
    (sql, values)
}

fn read_only() -> StoreError {
    sqlx::Error::Protocol("a write on a read connection".into())
}

/// The file of a SQLite pool's database.
fn options_path(pool: &SqlitePool) -> std::path::PathBuf {
    pool.connect_options().get_filename().to_owned()
}

/// True when `err` is a unique-constraint violation.
pub fn is_unique_violation(err: &StoreError) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}
