//! The only place with SQL. One implementation serves SQLite and PostgreSQL:
//! queries are built once with sea-query and rendered for the backend chosen
//! from the database URL; rows decode through `sqlx::FromRow` on both.

pub mod admission;
pub mod archive;
pub mod audit;
pub mod backup;
pub mod batch;
pub mod check;
pub mod error;
pub mod events;
pub mod grant_pages;
pub mod grants;
pub mod handoff;
pub mod health;
pub mod inline;
pub mod issues;
pub mod pg_conns;
pub mod policy;
pub mod principals;
pub mod reports;
pub mod repos;
pub mod schema;
pub mod seal;
pub mod sessions;
pub mod shape;
pub mod sqlite;
mod sqlite_row;
pub mod webhooks;

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sea_query::ExprTrait;
use sea_query_sqlx::SqlxValues;
pub use shape::Statement;
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, FromRow, PgPool, SqlitePool};

use crate::config::Config;

pub use error::{Error as StoreError, Result as StoreResult};

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
    /// SQLite (WAL, foreign keys, busy timeout): sqlx's pool for the
    /// migrations and the report streams, the writer every write goes
    /// through ([`batch`]), and the connections that read inline
    /// ([`inline`]); statements run through rusqlite ([`sqlite`]).
    Sqlite(SqlitePool, batch::Writer, Arc<inline::Readers>),
    /// PostgreSQL (row locks and constraints guard every invariant): the
    /// connections every use case runs on ([`pg_conns`]), sqlx's pool for
    /// the migrations and the report streams, and how the records of calls
    /// that changed nothing are committed ([`audit::append_call`]).
    Postgres(PgPool, Arc<pg_conns::Conns>, RecordDurability),
}

/// How PostgreSQL commits the record of a call that changed nothing (a
/// read, or a refusal whose transaction rolled back), appended on its own
/// after the call ([`audit::append_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordDurability {
    /// Waits for the WAL flush like every write (`synchronous_commit` as
    /// the server sets it).
    Durable,
    /// `synchronous_commit = off` for that one statement: committed and
    /// visible before the answer leaves, flushed by the WAL writer within
    /// ~3 × `wal_writer_delay` or by the next durable commit, whichever
    /// comes first. A Writ process killed loses none; a crash of the
    /// PostgreSQL server (or its host) in that window can lose the last
    /// ones — never a write or its record (ADR 0017 in docs/adr/).
    Relaxed,
}

/// Most connections of sqlx's PostgreSQL pool, which serves only the
/// migrations, the report streams and the events' `LISTEN` (one, held) and
/// `NOTIFY` (the use cases have `max_connections` of their own,
/// [`pg_conns`]).
const POSTGRES_AUX_CONNECTIONS: u32 = 5;

/// How long a PostgreSQL use case waits for a connection (either pool)
/// before it fails.
const POSTGRES_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

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
/// committed, and the request is answered 503 (ADR 0012 in docs/adr/).
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

/// The use cases' connections plan each prepared statement once
/// (`plan_cache_mode = force_generic_plan`), unless the database URL sets
/// `plan_cache_mode` itself. Every statement of a use case is a lookup by
/// key or a page read through an index; with PostgreSQL's default (`auto`)
/// the planner may judge a statement's generic plan dearer than the custom
/// ones of its first five runs and then plan it anew at every execution:
/// the submit's route lookup took 4–24 ms in `Bind` that way, PostgreSQL's
/// CPU per submit tripled, and the bench's N = 32 row ran at a third of
/// its rate (ADR 0022 in docs/adr/). A generic plan is made
/// again whenever the statistics of a table it reads change (`ANALYZE`).
fn generic_plans(options: PgConnectOptions, url: &str) -> PgConnectOptions {
    if url.contains("plan_cache_mode") {
        options
    } else {
        options.options([("plan_cache_mode", "force_generic_plan")])
    }
}

/// The file of an `sqlite:` database URL; `None` for any other URL.
pub fn sqlite_file(url: &str) -> anyhow::Result<Option<std::path::PathBuf>> {
    if !url.starts_with("sqlite:") {
        return Ok(None);
    }
    let options = SqliteConnectOptions::from_str(url)?;
    Ok(Some(options.get_filename().to_owned()))
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
            let path = pool.connect_options().get_filename().to_owned();
            let readers = inline::Readers::open(&path)?;
            let level = config.sqlite_synchronous.to_ascii_lowercase();
            let writer = batch::Writer::start(batch::WriterConfig {
                path,
                synchronous: match synchronous {
                    SqliteSynchronous::Normal => "NORMAL",
                    SqliteSynchronous::Extra => "EXTRA",
                    _ => "FULL",
                },
                records: batch::RecordCommit::for_synchronous(
                    &level,
                    config.sqlite_durable_read_records,
                ),
                max_batch: if config.sqlite_group_commit {
                    batch::MAX_BATCH
                } else {
                    1
                },
                health: Default::default(),
                max_page_count: config.sqlite_max_page_count,
                events: events::Signal::local(),
            })?;
            Ok(Store::Sqlite(pool, writer, readers))
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let options = PgConnectOptions::from_str(url)?;
            let pool = pinged_when_idle(PgPoolOptions::new())
                .max_connections(POSTGRES_AUX_CONNECTIONS)
                .acquire_timeout(POSTGRES_ACQUIRE_TIMEOUT)
                .connect_with(options.clone())
                .await?;
            let conns = pg_conns::Conns::new(
                generic_plans(options, url),
                Ord::max(config.max_connections, 2),
                POSTGRES_ACQUIRE_TIMEOUT,
                events::Signal::postgres(pool.clone()),
            );
            let records = if config.postgres_durable_read_records {
                RecordDurability::Durable
            } else {
                RecordDurability::Relaxed
            };
            Ok(Store::Postgres(pool, conns, records))
        } else {
            anyhow::bail!("database_url must start with sqlite:// or postgres://")
        }
    }

    /// The engine behind this store.
    pub fn backend(&self) -> Backend {
        match self {
            Store::Sqlite(..) => Backend::Sqlite,
            Store::Postgres(..) => Backend::Postgres,
        }
    }

    /// The database file on SQLite; `None` on PostgreSQL.
    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        match self {
            Store::Sqlite(pool, ..) => Some(pool.connect_options().get_filename().to_owned()),
            Store::Postgres(..) => None,
        }
    }

    /// What wakes the feed's waiters when events commit.
    pub fn events(&self) -> &Arc<events::Signal> {
        match self {
            Store::Sqlite(_, writer, _) => writer.events(),
            Store::Postgres(_, conns, _) => conns.events(),
        }
    }

    /// SQLite's writer, which also runs reads on its own connection
    /// ([`batch::Writer::read`]); `None` on PostgreSQL.
    pub fn writer(&self) -> Option<&batch::Writer> {
        match self {
            Store::Sqlite(_, writer, _) => Some(writer),
            Store::Postgres(..) => None,
        }
    }

    /// Applies the embedded migrations of this backend.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        match self {
            Store::Sqlite(pool, ..) => SQLITE_MIGRATIONS.run(pool).await?,
            Store::Postgres(pool, ..) => POSTGRES_MIGRATIONS.run(pool).await?,
        }
        Ok(())
    }

    /// True when the database answers, every embedded migration is
    /// applied, and no write failed for want of storage in the last
    /// seconds ([`health::WriteHealth`]).
    pub async fn ready(&self) -> bool {
        let writes = match self {
            Store::Sqlite(_, writer, _) => writer.health(),
            Store::Postgres(_, conns, _) => conns.health(),
        };
        if writes.failing() {
            return false;
        }
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
            Store::Postgres(..) => &POSTGRES_MIGRATIONS,
        }
    }

    /// Begins a write transaction: on SQLite a savepoint in the writer's
    /// open `BEGIN IMMEDIATE` batch (see [`batch`]), so the write lock is
    /// held and the read-decide-write inside is serialized.
    pub async fn write(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(_, writer, _) => Tx::Batch(writer.begin().await?),
            Store::Postgres(_, conns, _) => Tx::postgres(conns, "BEGIN").await?,
        })
    }

    /// Begins a write transaction that also reads one consistent snapshot
    /// (`REPEATABLE READ` on PostgreSQL): for a read whose audit record is
    /// written with it. On SQLite it is [`Store::write`].
    pub async fn write_snapshot(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Postgres(_, conns, _) => {
                Tx::postgres(conns, "BEGIN ISOLATION LEVEL REPEATABLE READ").await?
            }
            Store::Sqlite(..) => self.write().await?,
        })
    }

    /// A connection outside any transaction, for a use case that reads with
    /// a single statement (one round trip, no `BEGIN`/`COMMIT`; on SQLite a
    /// read run inline). Only reads.
    pub async fn single(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(.., readers) => Tx::Inline(readers.get()?),
            Store::Postgres(_, conns, _) => Tx::PostgresSingle(conns.acquire().await?),
        })
    }

    /// Begins a read transaction: one consistent snapshot for a whole answer
    /// (on SQLite, read inline). Only reads.
    pub async fn read(&self) -> StoreResult<Tx> {
        Ok(match self {
            Store::Sqlite(.., readers) => Tx::Inline(readers.begin()?),
            Store::Postgres(_, conns, _) => {
                Tx::postgres(conns, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?
            }
        })
    }

    /// Closes every pooled connection.
    pub async fn close(&self) {
        match self {
            Store::Sqlite(pool, writer, readers) => {
                writer.shutdown().await;
                readers.close();
                pool.close().await
            }
            Store::Postgres(pool, conns, _) => {
                conns.events().stop();
                conns.close().await;
                pool.close().await
            }
        }
    }
}

/// An open transaction on either backend.
pub enum Tx {
    /// SQLite write transaction inside a group-commit batch.
    Batch(batch::BatchTx),
    /// A SQLite read connection, run inline, in a read transaction or not
    /// ([`Store::read`], [`Store::single`]).
    Inline(inline::ReadConn),
    /// PostgreSQL transaction.
    Postgres(pg_conns::Conn),
    /// A PostgreSQL connection outside a transaction.
    PostgresSingle(pg_conns::Conn),
    /// SQLite's writer connection lent to a read run on the writer's own
    /// thread ([`batch::Writer::read`]), inside the writer's open
    /// transaction. Only reads; every statement completes at once.
    Local(batch::Local),
}

impl Tx {
    /// A PostgreSQL transaction opened with `begin`.
    async fn postgres(conns: &Arc<pg_conns::Conns>, begin: &'static str) -> StoreResult<Tx> {
        let mut conn = conns.acquire().await?;
        conn.begin(begin).await?;
        Ok(Tx::Postgres(conn))
    }

    /// The engine of this transaction.
    pub fn backend(&self) -> Backend {
        match self {
            Tx::Batch(_) | Tx::Inline(_) | Tx::Local(_) => Backend::Sqlite,
            Tx::Postgres(_) | Tx::PostgresSingle(_) => Backend::Postgres,
        }
    }

    /// The SQLite connection, or the PostgreSQL one.
    fn conn(&mut self) -> StoreResult<Result<&rusqlite::Connection, &mut pg_conns::Conn>> {
        Ok(match self {
            Tx::Batch(tx) => Ok(tx.conn()?),
            Tx::Inline(c) => Ok(c.conn()),
            Tx::Local(c) => Ok(c.conn()),
            Tx::Postgres(c) | Tx::PostgresSingle(c) => Err(c),
        })
    }

    /// Runs a query expected to return at most one row.
    pub async fn fetch_optional<T: BothRows>(
        &mut self,
        q: &impl Statement,
    ) -> StoreResult<Option<T>> {
        let pg = match self.conn()? {
            Ok(c) => {
                let (sql, values) = q.render(Backend::Sqlite);
                let rows = sqlite::rows(c, &sql, &values, Some(1));
                return self.noted(rows).map(|mut rows| rows.pop());
            }
            Err(pg) => pg,
        };
        let (sql, values) = postgres_sql(q);
        let found = sqlx::query_as_with(sql, values)
            .fetch_optional(pg.statement())
            .await;
        pg.done(found)
    }

    /// Runs a query expected to return exactly one row.
    pub async fn fetch_one<T: BothRows>(&mut self, q: &impl Statement) -> StoreResult<T> {
        self.fetch_optional(q).await?.ok_or(StoreError::NotFound)
    }

    /// Runs a query and collects every row.
    pub async fn fetch_all<T: BothRows>(&mut self, q: &impl Statement) -> StoreResult<Vec<T>> {
        let pg = match self.conn()? {
            Ok(c) => {
                let (sql, values) = q.render(Backend::Sqlite);
                let rows = sqlite::rows(c, &sql, &values, None);
                return self.noted(rows);
            }
            Err(pg) => pg,
        };
        let (sql, values) = postgres_sql(q);
        let rows = sqlx::query_as_with(sql, values)
            .fetch_all(pg.statement())
            .await;
        pg.done(rows)
    }

    /// Runs a statement and returns the number of rows it touched.
    pub async fn execute(&mut self, q: &impl Statement) -> StoreResult<u64> {
        if let Tx::Inline(_) | Tx::Local(_) = self {
            return Err(inline::read_only());
        }
        let pg = match self.conn()? {
            Ok(c) => {
                let (sql, values) = q.render(Backend::Sqlite);
                let done = sqlite::execute(c, &sql, &values);
                return self.noted(done);
            }
            Err(pg) => pg,
        };
        let (sql, values) = postgres_sql(q);
        let done = sqlx::query_with(sql, values).execute(pg.statement()).await;
        pg.done(done).map(|r| r.rows_affected())
    }

    /// A SQLite write's statement outcome, its failure for want of
    /// storage noted for `/readyz` (a full file fails the statement that
    /// needs a new page, not the batch's commit). PostgreSQL's connections
    /// note their own.
    fn noted<T>(&self, outcome: StoreResult<T>) -> StoreResult<T> {
        if let Tx::Batch(tx) = self {
            tx.health().note(&outcome);
        }
        outcome
    }

    /// Notes that this transaction wrote an event: the feed's waiters are
    /// woken once it committed.
    pub fn note_event(&mut self) {
        match self {
            Tx::Batch(tx) => tx.note_event(),
            Tx::Postgres(c) => c.note_event(),
            Tx::Inline(_) | Tx::PostgresSingle(_) | Tx::Local(_) => {}
        }
    }

    /// Commits; only after this returns may a 2xx be sent.
    pub async fn commit(self) -> StoreResult<()> {
        match self {
            Tx::Batch(tx) => tx.commit().await,
            Tx::Inline(c) => c.commit(),
            Tx::Postgres(mut c) => c.commit().await,
            Tx::PostgresSingle(_) | Tx::Local(_) => Ok(()),
        }
    }

    /// Rolls back explicitly (dropping a `Tx` also rolls back).
    pub async fn rollback(self) -> StoreResult<()> {
        match self {
            Tx::Batch(tx) => {
                tx.rollback();
                Ok(())
            }
            Tx::Postgres(mut c) => c.rollback().await,
            Tx::Inline(_) | Tx::PostgresSingle(_) | Tx::Local(_) => Ok(()),
        }
    }
}

/// A statement rendered for PostgreSQL, as sqlx binds it.
fn postgres_sql(q: &impl Statement) -> (AssertSqlSafe<Cow<'static, str>>, SqlxValues) {
    let (sql, values) = q.render(Backend::Postgres);
    (AssertSqlSafe(sql), SqlxValues(sea_query::Values(values)))
}

/// True when `err` is a unique-constraint violation.
pub fn is_unique_violation(err: &StoreError) -> bool {
    err.is_unique()
}
