//! The PostgreSQL connections the use cases run on.
//!
//! sqlx's pool tests every connection it takes back: when a `PoolConnection`
//! is dropped, a task sends `Sync` and waits for `ReadyForQuery` before the
//! connection is idle again (`sqlx-core` `Floating::return_to_pool`). That is
//! one more round trip per use, and one more wake-up of the backend: on this
//! class of machine it was a quarter of PostgreSQL's CPU per submission
//! (ADR 0021 in docs/adr/). The test is there because a
//! connection may come back in any state (a future dropped in the middle of
//! a statement, a transaction left open, a rollback not yet sent).
//!
//! Here a connection knows its state, because every statement and every
//! transaction boundary goes through [`Conn`]:
//!
//! - **settled**: every statement sent was answered `Ok` and no transaction
//!   is open. It goes straight back to the idle list when dropped, with no
//!   round trip;
//! - **in a transaction** (from `BEGIN` until `COMMIT` or `ROLLBACK`
//!   returned `Ok`): dropped, a task sends `ROLLBACK` and only then makes it
//!   idle (as sqlx rolls back a dropped `Transaction`);
//! - **unsettled** (a statement outside a transaction failed or was
//!   dropped before its answer): dropped, a task pings it, as sqlx would,
//!   and only then makes it idle.
//!
//! A connection whose clean-up fails, or that is dropped outside a runtime,
//! is closed. A connection idle for [`super::PING_AFTER_IDLE`] or more is
//! pinged before it is handed out (the engine may have dropped it); one idle
//! for [`IDLE_TIMEOUT`] is closed instead. At most `max` connections are out
//! or idle at a time; an acquire waits up to its timeout for one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection as _, Executor as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{PING_AFTER_IDLE, StoreError, StoreResult};

/// An idle connection older than this is closed rather than handed out.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest a dropped connection's clean-up (`ROLLBACK` or ping) may take
/// before the connection is closed instead.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The connections of one database.
#[derive(Debug)]
pub struct Conns {
    options: PgConnectOptions,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    acquire_timeout: Duration,
    closed: AtomicBool,
    /// The outcome of the latest commit.
    health: super::health::WriteHealth,
    /// Woken once a transaction that wrote events committed.
    events: Arc<super::events::Signal>,
}

#[derive(Debug)]
struct Idle {
    conn: PgConnection,
    since: Instant,
}

/// Where a lent connection stands (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Settled,
    InTx,
    Unsettled,
}

impl Conns {
    /// At most `max` connections to the database of `options`.
    pub fn new(
        options: PgConnectOptions,
        max: u32,
        acquire_timeout: Duration,
        events: Arc<super::events::Signal>,
    ) -> Arc<Conns> {
        Arc::new(Conns {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max.max(1) as usize)),
            acquire_timeout,
            closed: AtomicBool::new(false),
            health: Default::default(),
            events,
        })
    }

    /// Whether the latest commits failed for want of storage.
    pub fn health(&self) -> &super::health::WriteHealth {
        &self.health
    }

    /// What wakes the feed's waiters.
    pub fn events(&self) -> &Arc<super::events::Signal> {
        &self.events
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A settled connection outside any transaction: an idle one (the most
    /// recently used first), or a new one.
    pub async fn acquire(self: &Arc<Self>) -> StoreResult<Conn> {
        let permit = tokio::time::timeout(
            self.acquire_timeout,
            Arc::clone(&self.permits).acquire_owned(),
        )
        .await
        .map_err(|_| StoreError::Unavailable("no PostgreSQL connection free in time".into()))?
        .map_err(|_| StoreError::Unavailable("the connections are closed".into()))?;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(StoreError::Unavailable("the connections are closed".into()));
            }
            let popped = self.idle().pop();
            let conn = match popped {
                Some(idle) if idle.since.elapsed() >= IDLE_TIMEOUT => {
                    drop(idle);
                    continue;
                }
                Some(mut idle) if idle.since.elapsed() >= PING_AFTER_IDLE => {
                    if idle.conn.ping().await.is_err() {
                        continue;
                    }
                    idle.conn
                }
                Some(idle) => idle.conn,
                None => tokio::time::timeout(
                    self.acquire_timeout,
                    PgConnection::connect_with(&self.options),
                )
                .await
                .map_err(|_| {
                    StoreError::Unavailable("no PostgreSQL connection free in time".into())
                })??,
            };
            return Ok(Conn {
                conn: Some(conn),
                permit: Some(permit),
                home: Arc::clone(self),
                state: State::Settled,
                wrote_event: false,
            });
        }
    }

    fn put_back(&self, conn: PgConnection) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.idle().push(Idle {
            conn,
            since: Instant::now(),
        });
    }

    /// Closes the idle connections; connections still lent are closed when
    /// they come back, and no more are handed out.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle());
        for idle in idle {
            let _ = idle.conn.close().await;
        }
    }
}

/// A connection lent by [`Conns`]; back to them when dropped.
#[derive(Debug)]
pub struct Conn {
    conn: Option<PgConnection>,
    permit: Option<OwnedSemaphorePermit>,
    home: Arc<Conns>,
    state: State,
    /// Whether the open transaction wrote an event.
    wrote_event: bool,
}

impl Conn {
    fn raw(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a Conn holds its connection until dropped")
    }

    /// The connection for one statement: from here until [`Conn::done`]
    /// with `Ok`, a connection outside a transaction counts as unsettled.
    pub fn statement(&mut self) -> &mut PgConnection {
        if self.state == State::Settled {
            self.state = State::Unsettled;
        }
        self.raw()
    }

    /// Ends the statement started by [`Conn::statement`].
    pub fn done<T, E: Into<StoreError>>(&mut self, result: Result<T, E>) -> StoreResult<T> {
        if result.is_ok() && self.state == State::Unsettled {
            self.state = State::Settled;
        }
        let result = result.map_err(Into::into);
        self.home.health.note(&result);
        result
    }

    /// Opens a transaction with `begin` (`BEGIN`, with an isolation level
    /// or access mode as wanted).
    pub async fn begin(&mut self, begin: &'static str) -> StoreResult<()> {
        debug_assert_eq!(self.state, State::Settled);
        self.state = State::InTx;
        self.wrote_event = false;
        Ok(self.raw().execute(begin).await.map(drop)?)
    }

    /// Notes that the open transaction wrote an event.
    pub fn note_event(&mut self) {
        self.wrote_event = true;
    }

    /// Commits the open transaction.
    pub async fn commit(&mut self) -> StoreResult<()> {
        let committed = self.end("COMMIT").await;
        self.home.health.note(&committed);
        if committed.is_ok() && std::mem::take(&mut self.wrote_event) {
            self.home.events.committed();
        }
        committed
    }

    /// Rolls the open transaction back.
    pub async fn rollback(&mut self) -> StoreResult<()> {
        self.end("ROLLBACK").await
    }

    /// Until the engine answers, the connection still counts as in its
    /// transaction: if the statement fails, or is dropped before it was
    /// even sent, the clean-up's `ROLLBACK` ends whatever is left (after a
    /// transaction that did end, it only draws a warning).
    async fn end(&mut self, sql: &'static str) -> StoreResult<()> {
        let ended = self.raw().execute(sql).await.map(drop);
        if ended.is_ok() {
            self.state = State::Settled;
        }
        Ok(ended?)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let permit = self.permit.take();
        let state = self.state;
        if state == State::Settled {
            self.home.put_back(conn);
            drop(permit);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to settle it on: closed (the engine rolls back).
            return;
        };
        let home = Arc::clone(&self.home);
        runtime.spawn(async move {
            let settle = async {
                match state {
                    State::InTx => conn.execute("ROLLBACK").await.map(drop),
                    _ => conn.ping().await,
                }
            };
            if let Ok(Ok(())) = tokio::time::timeout(SETTLE_TIMEOUT, settle).await {
                home.put_back(conn);
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Against the PostgreSQL of `WRIT_TEST_POSTGRES_URL` (skipped without
    //! it, failed with `WRIT_TEST_REQUIRE_POSTGRES` set), in a scratch table
    //! of its own.

    use std::str::FromStr;

    use super::*;

    impl Conns {
        fn idle_count(&self) -> usize {
            self.idle().len()
        }
    }

    /// The pool of the test server, or `None` when the test is skipped.
    pub(crate) fn conns(max: u32) -> Option<Arc<Conns>> {
        let Some(url) = std::env::var("WRIT_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
        else {
            assert!(
                std::env::var_os("WRIT_TEST_REQUIRE_POSTGRES").is_none_or(|v| v.is_empty()),
                "WRIT_TEST_REQUIRE_POSTGRES is set but WRIT_TEST_POSTGRES_URL is unset"
            );
            eprintln!("skipped: WRIT_TEST_POSTGRES_URL unset");
            return None;
        };
        let options = PgConnectOptions::from_str(&url).expect("WRIT_TEST_POSTGRES_URL");
        Some(Conns::new(
            options,
            max,
            Duration::from_secs(10),
            crate::store::events::Signal::local(),
        ))
    }

    pub(crate) async fn run(conn: &mut Conn, sql: &str) -> StoreResult<()> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        let done = sqlx::raw_sql(sql).execute(conn.statement()).await.map(drop);
        conn.done(done)
    }

    /// The one value `sql` selects.
    pub(crate) async fn one<T>(conn: &mut Conn, sql: &str) -> T
    where
        (T,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        let row: Result<(T,), sqlx::Error> = sqlx::query_as(sql).fetch_one(conn.statement()).await;
        conn.done(row).expect("query").0
    }

    /// Waits (a little) until `conns` holds `n` idle connections.
    async fn idle_reaches(conns: &Conns, n: usize) {
        for _ in 0..200 {
            if conns.idle_count() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} idle connections, not {n}", conns.idle_count());
    }

    #[tokio::test]
    async fn a_settled_connection_is_idle_again_at_once_and_reused() {
        let Some(conns) = conns(1) else { return };
        let mut conn = conns.acquire().await.expect("acquire");
        let pid = one::<i64>(&mut conn, "SELECT CAST(pg_backend_pid() AS BIGINT)").await;
        conn.begin("BEGIN").await.expect("begin");
        conn.commit().await.expect("commit");
        drop(conn);
        // Back without a round trip: no task, no await in between.
        assert_eq!(conns.idle_count(), 1);
        let mut again = conns.acquire().await.expect("acquire again");
        assert_eq!(
            one::<i64>(&mut again, "SELECT CAST(pg_backend_pid() AS BIGINT)").await,
            pid
        );
        drop(again);
        conns.close().await;
    }

    #[tokio::test]
    async fn a_transaction_dropped_open_is_rolled_back_before_reuse() {
        let Some(conns) = conns(1) else { return };
        let table = format!("pg_conns_{}", uuid::Uuid::new_v4().simple());
        let mut conn = conns.acquire().await.expect("acquire");
        run(
            &mut conn,
            &format!("CREATE TABLE {table} (k BIGINT PRIMARY KEY)"),
        )
        .await
        .expect("create");
        conn.begin("BEGIN").await.expect("begin");
        run(&mut conn, &format!("INSERT INTO {table} VALUES (1)"))
            .await
            .expect("insert");
        drop(conn);
        // Not idle until the rollback is answered; then idle, outside any
        // transaction, without the insert.
        assert_eq!(conns.idle_count(), 0);
        let mut next = conns.acquire().await.expect("the one connection, settled");
        assert_eq!(
            one::<i64>(
                &mut next,
                "SELECT CAST(count(*) AS BIGINT) FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid() AND state LIKE 'idle in transaction%'"
            )
            .await,
            0
        );
        assert_eq!(
            one::<i64>(
                &mut next,
                &format!("SELECT CAST(count(*) AS BIGINT) FROM {table}")
            )
            .await,
            0
        );
        // A failed statement inside a transaction: rolled back the same way.
        next.begin("BEGIN").await.expect("begin");
        run(&mut next, &format!("INSERT INTO {table} VALUES (2)"))
            .await
            .expect("insert");
        assert!(
            run(&mut next, &format!("INSERT INTO {table} VALUES (2)"))
                .await
                .is_err()
        );
        drop(next);
        let mut last = conns.acquire().await.expect("acquire after the failure");
        assert_eq!(
            one::<i64>(
                &mut last,
                &format!("SELECT CAST(count(*) AS BIGINT) FROM {table}")
            )
            .await,
            0
        );
        run(&mut last, &format!("DROP TABLE {table}"))
            .await
            .expect("drop");
        drop(last);
        idle_reaches(&conns, 1).await;
        conns.close().await;
    }

    #[tokio::test]
    async fn a_statement_dropped_before_its_answer_is_settled_before_reuse() {
        let Some(conns) = conns(1) else { return };
        let mut conn = conns.acquire().await.expect("acquire");
        let slow = async {
            let row: StoreResult<(i64,)> =
                sqlx::query_as("SELECT CAST(7 AS BIGINT) FROM pg_sleep(0.3)")
                    .fetch_one(conn.statement())
                    .await
                    .map_err(StoreError::from);
            row
        };
        assert!(
            tokio::time::timeout(Duration::from_millis(30), slow)
                .await
                .is_err()
        );
        drop(conn);
        assert_eq!(
            conns.idle_count(),
            0,
            "an unsettled connection waits for its ping"
        );
        // The next user sees the answer to its own statement, not the stale one.
        let mut next = conns.acquire().await.expect("acquire");
        assert_eq!(one::<i64>(&mut next, "SELECT CAST(42 AS BIGINT)").await, 42);
        drop(next);
        assert_eq!(conns.idle_count(), 1);
        conns.close().await;
    }

    #[tokio::test]
    async fn acquire_waits_for_a_free_connection_and_close_refuses_more() {
        let Some(conns) = conns(1) else { return };
        let held = conns.acquire().await.expect("acquire");
        let waiting = {
            let conns = Arc::clone(&conns);
            tokio::spawn(async move { conns.acquire().await.map(drop) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the second acquire waits for the first"
        );
        drop(held);
        waiting.await.expect("join").expect("second acquire");
        conns.close().await;
        assert!(matches!(
            conns.acquire().await,
            Err(StoreError::Unavailable(_))
        ));
    }
}
