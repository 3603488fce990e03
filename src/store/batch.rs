//! Group commit for SQLite: concurrent write transactions share one durable
//! commit.
//!
//! SQLite has one writer at a time, so write transactions are serialized
//! anyway (`BEGIN IMMEDIATE`); what limits throughput is the fsync of every
//! commit. Here one task owns a connection and an open `BEGIN IMMEDIATE`
//! transaction. Each caller of [`Writer::begin`] gets that connection in
//! turn, inside its own `SAVEPOINT`: its statements are atomic and its
//! failure (a dropped or rolled-back [`BatchTx`]) undoes only its own work
//! (`ROLLBACK TO`, which leaves the jobs before it, in the savepoints it is
//! nested in, untouched). A caller's `commit` keeps its savepoint open, hands
//! the connection back and waits; when no caller is queued (or the batch is
//! full), the task commits once and only then tells every caller of the
//! batch the outcome. So each answer is still sent only after its own work
//! is durable, and one fsync covers many requests.
//!
//! If the batch commit fails, every caller in it gets the error (none of
//! their work was committed). If SQLite aborted the whole transaction (the
//! savepoint is gone), the batch is failed the same way.
//!
//! Records that need no transaction of their own (the audit records of
//! calls that changed nothing, see [`Writer::append`]) do not take the
//! connection in turn: the writer inserts every record queued with one
//! statement, in the open batch (in a savepoint of their own, so their
//! failure undoes none of the jobs) or, when no job is queued, in a
//! transaction of their own (`BEGIN IMMEDIATE`, the insert and `COMMIT` in
//! one hand-off to SQLite's thread). Each caller is told once the commit
//! holding its record returned.
//!
//! A transaction of records alone can be committed without `fsync`
//! ([`RecordCommit::Relaxed`], the default): `synchronous = NORMAL` for
//! that commit only. It is then in the WAL file when its callers are told
//! (a killed process loses nothing), and on disk at the next write's
//! durable commit or checkpoint; only a power loss or kernel crash before
//! that can lose it (docs/decisions.md, session 7).

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::StoreResult;
use super::audit::{FinishedCall, finished_calls_insert};

/// Most transactions committed together.
pub const MAX_BATCH: usize = 64;
/// Longest a batch stays open while callers keep arriving.
pub const MAX_BATCH_TIME: Duration = Duration::from_millis(10);
/// Most records appended with one insert (16 values each, far below
/// SQLite's limit on bound values).
pub const MAX_APPEND: usize = 256;

/// How a transaction holding only records of calls that changed nothing is
/// committed (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordCommit {
    /// As every write (the connection's `synchronous`).
    Durable,
    /// With `synchronous = NORMAL`, then back to `restore` (the
    /// connection's setting, `FULL` or `EXTRA`).
    Relaxed {
        /// The statement that restores the connection's setting.
        restore: &'static str,
    },
}

impl RecordCommit {
    /// Relaxed unless the connections already commit at `NORMAL` or less
    /// (`synchronous` as configured, lowercase), or `durable` is asked.
    pub fn for_synchronous(synchronous: &str, durable: bool) -> RecordCommit {
        match synchronous {
            _ if durable => RecordCommit::Durable,
            "full" => RecordCommit::Relaxed {
                restore: "PRAGMA synchronous = FULL",
            },
            "extra" => RecordCommit::Relaxed {
                restore: "PRAGMA synchronous = EXTRA",
            },
            _ => RecordCommit::Durable,
        }
    }
}

type Lease = oneshot::Sender<StoreResult<BatchTx>>;
type Done = oneshot::Sender<StoreResult<()>>;

enum Msg {
    Begin(Lease),
    Append(Box<FinishedCall>, Done),
    Shutdown(oneshot::Sender<()>),
}

/// What a lease holder hands back with the connection.
enum Returned {
    /// Keep the work; tell me when it is durable.
    Release(oneshot::Sender<StoreResult<()>>),
    /// Undo the work (to the job's savepoint, if it opened one).
    Abandon { opened: bool },
}

/// Opens a job's savepoint.
pub const SAVEPOINT: &str = "SAVEPOINT writ_job";

/// The handle to the writer task of one SQLite pool.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::UnboundedSender<Msg>,
}

/// One caller's transaction inside a batch: a savepoint on the writer's
/// connection. Dropping it without `commit` undoes its work.
pub struct BatchTx {
    conn: Option<PoolConnection<Sqlite>>,
    back: Option<oneshot::Sender<(PoolConnection<Sqlite>, Returned)>>,
    /// Whether this job's savepoint is open. It is opened by the job's first
    /// statement (in the same hand-off to SQLite's thread when that is a
    /// script), not by the writer before lending the connection.
    opened: bool,
}

impl std::fmt::Debug for BatchTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchTx")
    }
}

impl BatchTx {
    /// The connection, for the statements of this transaction (its
    /// savepoint opened first, if it is not yet).
    pub async fn conn(&mut self) -> StoreResult<&mut sqlx::SqliteConnection> {
        let conn = self
            .conn
            .as_mut()
            .expect("a BatchTx holds its connection until commit or drop");
        if !self.opened {
            sqlx::raw_sql(SAVEPOINT).execute(&mut **conn).await?;
            self.opened = true;
        }
        Ok(conn)
    }

    /// The connection for a script, and whether the script must open the
    /// savepoint itself ([`SAVEPOINT`] as its first statement; then call
    /// [`BatchTx::script_ran`]).
    pub fn script_conn(&mut self) -> (&mut sqlx::SqliteConnection, bool) {
        let conn = self
            .conn
            .as_mut()
            .expect("a BatchTx holds its connection until commit or drop");
        (conn, !self.opened)
    }

    /// A script that opened the savepoint ran `steps` statements before it
    /// ended or failed: the savepoint is open once its own statement ran.
    pub fn script_ran(&mut self, steps: usize) {
        if steps > 0 {
            self.opened = true;
        }
    }

    fn hand_back(&mut self, returned: Returned) {
        if let (Some(conn), Some(back)) = (self.conn.take(), self.back.take()) {
            // The writer waits for this; if it is gone, the connection is
            // dropped (closed by the pool) and its transaction with it.
            let _ = back.send((conn, returned));
        }
    }

    /// Keeps this work and waits until the batch holding it is committed.
    pub async fn commit(mut self) -> StoreResult<()> {
        let (done, wait) = oneshot::channel();
        self.hand_back(Returned::Release(done));
        wait.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Undoes this work.
    pub fn rollback(mut self) {
        let opened = self.opened;
        self.hand_back(Returned::Abandon { opened });
    }
}

impl Drop for BatchTx {
    fn drop(&mut self) {
        let opened = self.opened;
        self.hand_back(Returned::Abandon { opened });
    }
}

fn writer_gone() -> sqlx::Error {
    sqlx::Error::PoolClosed
}

impl Writer {
    /// Starts the writer task of `pool`.
    pub fn start(pool: SqlitePool, records: RecordCommit) -> Writer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, records, rx));
        Writer { tx }
    }

    /// Waits for the connection, inside a fresh savepoint of the open batch.
    pub async fn begin(&self) -> StoreResult<BatchTx> {
        let (lease, wait) = oneshot::channel();
        self.tx.send(Msg::Begin(lease)).map_err(|_| writer_gone())?;
        wait.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Writes `call`'s record and waits until the commit holding it
    /// returned (see the module's doc).
    pub async fn append(&self, call: FinishedCall) -> StoreResult<()> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Msg::Append(Box::new(call), done))
            .map_err(|_| writer_gone())?;
        wait.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Stops the task after the current batch and returns its connection to
    /// the pool.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Shutdown(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

async fn exec(conn: &mut PoolConnection<Sqlite>, sql: &'static str) -> StoreResult<()> {
    sqlx::raw_sql(sql).execute(&mut **conn).await.map(|_| ())
}

/// The writer's connection: the one it kept, or a fresh one from the pool.
async fn connection(
    pool: &SqlitePool,
    kept: &mut Option<PoolConnection<Sqlite>>,
) -> StoreResult<PoolConnection<Sqlite>> {
    match kept.take() {
        Some(c) => Ok(c),
        None => pool.acquire().await,
    }
}

async fn run(pool: SqlitePool, records: RecordCommit, mut rx: mpsc::UnboundedReceiver<Msg>) {
    let mut conn: Option<PoolConnection<Sqlite>> = None;
    // A message taken off the queue while gathering records, handled next.
    let mut carried: Option<Msg> = None;
    loop {
        let msg = match carried.take() {
            Some(msg) => msg,
            None => match rx.recv().await {
                Some(msg) => msg,
                None => return,
            },
        };
        let first = match msg {
            Msg::Begin(lease) => lease,
            Msg::Append(call, done) => {
                let mut appends = Appends::default();
                appends.push(call, done);
                carried = appends.gather(&mut rx);
                match connection(&pool, &mut conn).await {
                    Ok(mut c) => {
                        if appends.commit_alone(&mut c, records).await {
                            conn = Some(c);
                        } else {
                            // Not known to commit durably any more: closed,
                            // not returned to the pool.
                            let _ = c.close().await;
                        }
                    }
                    Err(e) => appends.fail(&e.to_string()),
                }
                continue;
            }
            Msg::Shutdown(done) => {
                drop(conn.take());
                let _ = done.send(());
                return;
            }
        };
        let mut c = match connection(&pool, &mut conn).await {
            Ok(c) => c,
            Err(e) => {
                let _ = first.send(Err(e));
                continue;
            }
        };
        if let Err(e) = exec(&mut c, "BEGIN IMMEDIATE").await {
            let _ = first.send(Err(e));
            conn = Some(c);
            continue;
        }
        let mut batch = run_batch(c, first, &mut rx).await;
        let appends = std::mem::take(&mut batch.appends);
        let Some(mut c) = batch.conn else {
            // The connection was lost with its transaction (nothing of the
            // batch was committed); the next batch opens a fresh one.
            let why = "the group commit lost its connection";
            fail_all(batch.waiters, why);
            appends.fail(why);
            continue;
        };
        match &batch.failed {
            Some(why) => appends.fail(why),
            None => match appends.insert_in_batch(&mut c).await {
                Ok(waiters) => batch.waiters.extend(waiters),
                Err(why) => batch.failed = Some(why),
            },
        }
        let result = match &batch.failed {
            None => exec(&mut c, "COMMIT").await,
            Some(why) => Err(sqlx::Error::Protocol(format!(
                "the group-commit batch failed: {why}"
            ))),
        };
        match result {
            Ok(()) => tell_committed(batch.waiters),
            Err(e) => {
                // Leave no transaction open on the connection.
                let _ = exec(&mut c, "ROLLBACK").await;
                fail_all(batch.waiters, &e.to_string());
            }
        }
        conn = Some(c);
        if let Some(done) = batch.shutdown {
            drop(conn.take());
            let _ = done.send(());
            return;
        }
    }
}

fn tell_committed(waiters: Vec<Done>) {
    metrics::counter!("writ_sqlite_group_commits_total").increment(1);
    metrics::counter!("writ_sqlite_group_commit_transactions_total")
        .increment(waiters.len() as u64);
    for w in waiters {
        let _ = w.send(Ok(()));
    }
}

fn fail_all(waiters: Vec<Done>, why: &str) {
    for w in waiters {
        let _ = w.send(Err(sqlx::Error::Protocol(format!(
            "group commit failed: {why}"
        ))));
    }
}

/// Records queued to be appended, and who waits for each.
#[derive(Default)]
struct Appends {
    calls: Vec<FinishedCall>,
    waiters: Vec<Done>,
}

impl Appends {
    fn push(&mut self, call: Box<FinishedCall>, done: Done) {
        self.calls.push(*call);
        self.waiters.push(done);
    }

    fn is_full(&self) -> bool {
        self.calls.len() >= MAX_APPEND
    }

    /// Takes every record queued now, up to [`MAX_APPEND`]; returns the
    /// first other message it took off the queue.
    fn gather(&mut self, rx: &mut mpsc::UnboundedReceiver<Msg>) -> Option<Msg> {
        while !self.is_full() {
            match rx.try_recv() {
                Ok(Msg::Append(call, done)) => self.push(call, done),
                Ok(other) => return Some(other),
                Err(_) => return None,
            }
        }
        None
    }

    /// Inserts and commits the records in a transaction of their own, in
    /// one hand-off to SQLite's thread, and tells their callers. False when
    /// the connection's `synchronous` could not be restored (it must not be
    /// used again).
    async fn commit_alone(self, c: &mut PoolConnection<Sqlite>, records: RecordCommit) -> bool {
        let insert = finished_calls_insert(&self.calls);
        let (before, after, restore) = match records {
            RecordCommit::Durable => ("BEGIN IMMEDIATE", "COMMIT".to_owned(), None),
            RecordCommit::Relaxed { restore } => (
                "PRAGMA synchronous = NORMAL;\nBEGIN IMMEDIATE",
                format!("COMMIT;\n{restore}"),
                Some(restore),
            ),
        };
        let statements = if restore.is_some() { 5 } else { 3 };
        let (ran, result) = script(c, before, &insert, &after).await;
        // Committed once every statement up to COMMIT ran.
        let committed = ran >= statements - usize::from(restore.is_some());
        match result {
            Ok(()) => {
                tell_committed(self.waiters);
                return true;
            }
            Err(_) if committed => tell_committed(self.waiters),
            Err(e) => {
                // The script may have stopped inside its transaction.
                let _ = exec(c, "ROLLBACK").await;
                self.fail(&e.to_string());
            }
        }
        match restore {
            Some(restore) => exec(c, restore).await.is_ok(),
            None => true,
        }
    }

    /// Inserts the records into the open batch, in a savepoint of their
    /// own; returns their callers, to be told with the batch. If the insert
    /// fails, only the records are undone and their callers told; if even
    /// that fails, the batch must fail (`Err`).
    async fn insert_in_batch(self, c: &mut PoolConnection<Sqlite>) -> Result<Vec<Done>, String> {
        if self.calls.is_empty() {
            return Ok(Vec::new());
        }
        let insert = finished_calls_insert(&self.calls);
        let (_, result) = script(c, "SAVEPOINT writ_append", &insert, "RELEASE writ_append").await;
        let Err(e) = result else {
            return Ok(self.waiters);
        };
        let undone = exec(c, "ROLLBACK TO writ_append; RELEASE writ_append").await;
        self.fail(&e.to_string());
        match undone {
            Ok(()) => Ok(Vec::new()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn fail(self, why: &str) {
        fail_all(self.waiters, why);
    }
}

/// Runs `before`, `statement` and `after` as one script (one hand-off);
/// returns how many of its statements ran to completion, and how it ended.
async fn script(
    c: &mut PoolConnection<Sqlite>,
    before: &str,
    statement: &sea_query::InsertStatement,
    after: &str,
) -> (usize, StoreResult<()>) {
    use futures_util::TryStreamExt;
    use sea_query_sqlx::SqlxBinder;
    let (sql, values) = statement.build_sqlx(sea_query::SqliteQueryBuilder);
    let sql = format!("{before};\n{sql};\n{after}");
    #[allow(deprecated)] // the multi-statement query is SQLite's, kept by sqlx
    let mut steps = sqlx::query_with(sqlx::AssertSqlSafe(sql), values).fetch_many(&mut **c);
    let mut ran = 0;
    loop {
        match steps.try_next().await {
            Ok(Some(sqlx::Either::Left(_))) => ran += 1,
            Ok(Some(sqlx::Either::Right(_))) => {}
            Ok(None) => return (ran, Ok(())),
            Err(e) => return (ran, Err(e)),
        }
    }
}

/// The state of one batch when it stops taking callers.
struct Batch {
    conn: Option<PoolConnection<Sqlite>>,
    waiters: Vec<Done>,
    appends: Appends,
    failed: Option<String>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// Lends the connection to queued callers, one savepoint each, until the
/// queue is empty, the batch is full or old, or something failed; gathers
/// the records queued meanwhile.
async fn run_batch(
    mut c: PoolConnection<Sqlite>,
    first: Lease,
    rx: &mut mpsc::UnboundedReceiver<Msg>,
) -> Batch {
    let started = Instant::now();
    let mut batch = Batch {
        conn: None,
        waiters: Vec::new(),
        appends: Appends::default(),
        failed: None,
        shutdown: None,
    };
    let mut next = Some(first);
    let mut count = 0;
    while let Some(lease) = next.take() {
        let (back, returned) = oneshot::channel();
        let job = BatchTx {
            conn: Some(c),
            back: Some(back),
            opened: false,
        };
        // If the caller is gone, the lease comes back in the error and its
        // drop hands the connection back as abandoned.
        drop(lease.send(Ok(job)));
        let Ok((back_conn, outcome)) = returned.await else {
            batch.failed = Some("connection lost".into());
            return batch;
        };
        c = back_conn;
        // A kept job's savepoint is not released: the next job's nests
        // inside it (one statement per job, not two), and the batch's COMMIT
        // keeps them all. An abandoned job is undone to its own savepoint,
        // the innermost of that name, which is then dropped.
        match outcome {
            Returned::Release(done) => batch.waiters.push(done),
            Returned::Abandon { opened: false } => {}
            Returned::Abandon { opened: true } => {
                if let Err(e) = exec(&mut c, "ROLLBACK TO writ_job; RELEASE writ_job").await {
                    batch.failed = Some(e.to_string());
                    break;
                }
            }
        }
        count += 1;
        if count >= MAX_BATCH || started.elapsed() >= MAX_BATCH_TIME {
            break;
        }
        match batch.appends.gather(rx) {
            Some(Msg::Begin(lease)) => next = Some(lease),
            Some(Msg::Shutdown(done)) => batch.shutdown = Some(done),
            Some(Msg::Append(..)) | None => {}
        }
    }
    batch.conn = Some(c);
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqliteConnectOptions;

    async fn pool() -> (SqlitePool, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("writ-batch-{}.db", rand::random::<u64>()));
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::raw_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        (pool, path)
    }

    /// Every job that reported a commit (and no other) left its rows `k`
    /// and `1000 + k`; `expected` jobs did.
    async fn assert_kept_exactly_the_committed(
        pool: &SqlitePool,
        jobs: Vec<tokio::task::JoinHandle<StoreResult<bool>>>,
        expected: usize,
    ) {
        let mut committed = Vec::new();
        for (k, job) in jobs.into_iter().enumerate() {
            if job.await.unwrap().unwrap() {
                committed.push(k as i64);
            }
        }
        let rows: Vec<(i64,)> = sqlx::query_as("SELECT k FROM t WHERE k < 1000 ORDER BY k")
            .fetch_all(pool)
            .await
            .unwrap();
        let rows: Vec<i64> = rows.into_iter().map(|r| r.0).collect();
        assert_eq!(rows, committed);
        let pairs: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM t WHERE k >= 1000")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(pairs.0 as usize, committed.len());
        assert_eq!(committed.len(), expected);
    }

    async fn insert(tx: &mut BatchTx, k: i64) -> StoreResult<()> {
        sqlx::query("INSERT INTO t (k) VALUES (?)")
            .bind(k)
            .execute(tx.conn().await?)
            .await
            .map(|_| ())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn each_job_is_atomic_and_isolated_from_the_others_failures() {
        let (pool, path) = pool().await;
        let writer = Writer::start(pool.clone(), RecordCommit::Durable);
        let mut jobs = Vec::new();
        for k in 0..200i64 {
            let writer = writer.clone();
            jobs.push(tokio::spawn(async move {
                let mut tx = writer.begin().await?;
                insert(&mut tx, k).await?;
                insert(&mut tx, 1000 + k).await?;
                match k % 4 {
                    // Abandoned after writing: both rows must vanish.
                    0 => {
                        drop(tx);
                        Ok(false)
                    }
                    // A failing statement (duplicate key) after a good one.
                    1 => {
                        let failed = insert(&mut tx, k).await;
                        assert!(failed.is_err());
                        tx.rollback();
                        Ok(false)
                    }
                    _ => tx.commit().await.map(|()| true),
                }
            }));
        }
        assert_kept_exactly_the_committed(&pool, jobs, 100).await;
        writer.shutdown().await;
        pool.close().await;
        let _ = std::fs::remove_file(&path);
    }

    /// Jobs whose first statement is a script open their savepoint in it; a
    /// job that ran nothing opened none. Neither kind of abandoned job may
    /// undo another job's work (a `ROLLBACK TO` without its own savepoint
    /// would reach the previous job's).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn scripts_open_the_savepoint_and_empty_jobs_undo_nothing() {
        use crate::store::Tx;
        use sea_query::{Expr, ExprTrait, Query};
        let (pool, path) = pool().await;
        let writer = Writer::start(pool.clone(), RecordCommit::Durable);
        let row = |k: i64| {
            Query::insert()
                .into_table("t")
                .columns(["k"])
                .values_panic([k.into()])
                .to_owned()
        };
        let mut jobs = Vec::new();
        for k in 0..200i64 {
            let writer = writer.clone();
            jobs.push(tokio::spawn(async move {
                let mut tx = Tx::Batch(writer.begin().await?);
                match k % 4 {
                    // Nothing run, then abandoned.
                    0 => {
                        drop(tx);
                        return Ok(false);
                    }
                    // The script fails on its second statement (duplicate).
                    1 => {
                        let failed = tx.sqlite_script(&[&row(k), &row(k)]).await;
                        assert!(failed.is_err());
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    _ => {}
                }
                let steps = tx.sqlite_script(&[&row(k), &row(1000 + k)]).await?;
                assert_eq!(steps.len(), 2, "the savepoint's own step is not returned");
                assert!(steps.iter().all(|s| s.changed == 1));
                if k % 4 == 2 {
                    // Wrote, then abandoned: both rows must vanish.
                    drop(tx);
                    return Ok(false);
                }
                let after = Query::select()
                    .expr(Expr::col("k").count())
                    .from("t")
                    .and_where(Expr::col("k").eq(k))
                    .to_owned();
                let (seen,): (i64,) = tx.fetch_one(&after).await?;
                assert_eq!(seen, 1);
                tx.commit().await.map(|()| true)
            }));
        }
        assert_kept_exactly_the_committed(&pool, jobs, 50).await;
        writer.shutdown().await;
        pool.close().await;
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_returns_only_once_durable_and_visible() {
        let (pool, path) = pool().await;
        let writer = Writer::start(pool.clone(), RecordCommit::Durable);
        for k in 0..20i64 {
            let mut tx = writer.begin().await.unwrap();
            insert(&mut tx, k).await.unwrap();
            tx.commit().await.unwrap();
            // Another connection sees it at once: it was committed, not
            // merely released into an open batch.
            let seen: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM t WHERE k = ?")
                .bind(k)
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(seen.0, 1);
        }
        writer.shutdown().await;
        assert!(
            writer.begin().await.is_err(),
            "a stopped writer refuses work"
        );
        pool.close().await;
        let _ = std::fs::remove_file(&path);
    }

    /// Records committed alone at `synchronous = NORMAL` are all kept, and
    /// the connection is back at `FULL` for the next write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relaxed_record_commits_restore_full_for_writes() {
        use super::super::audit::NewCall;
        let path = std::env::temp_dir().join(format!("writ-records-{}.db", rand::random::<u64>()));
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .foreign_keys(false)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .unwrap();
        super::super::SQLITE_MIGRATIONS.run(&pool).await.unwrap();
        let records = RecordCommit::for_synchronous("full", false);
        assert_ne!(records, RecordCommit::Durable);
        let writer = Writer::start(pool.clone(), records);
        let call = |k: i64| FinishedCall {
            call: NewCall {
                called_at: format!("2026-12-01T00:00:{:02}.000000Z", k % 60),
                via: "api",
                agent_id: 1,
                agent_login: "bot".into(),
                token_id: 1,
                tool: "get_agent_work_grant".into(),
                repository: Some("o/r".into()),
                decision: "allow",
                matched_grant: None,
                reason: "native_api".into(),
                rpc_id: None,
                request_id: Some(format!("r{k}")),
                arg_names: "[]".into(),
            },
            native_status: 200,
            error_code: None,
            completed_at: "2026-12-01T00:00:00.000000Z".into(),
        };
        for round in 0..5i64 {
            let appends: Vec<_> = (0..20i64)
                .map(|k| {
                    let writer = writer.clone();
                    let call = call(round * 20 + k);
                    tokio::spawn(async move { writer.append(call).await })
                })
                .collect();
            for a in appends {
                a.await.unwrap().unwrap();
            }
            let mut job = writer.begin().await.unwrap();
            let (level,): (i64,) = sqlx::query_as("PRAGMA synchronous")
                .fetch_one(job.conn().await.unwrap())
                .await
                .unwrap();
            assert_eq!(level, 2, "writes commit at FULL again");
            job.commit().await.unwrap();
        }
        let (kept,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM tool_calls")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(kept, 100);
        assert_eq!(
            RecordCommit::for_synchronous("normal", false),
            RecordCommit::Durable
        );
        assert_eq!(
            RecordCommit::for_synchronous("full", true),
            RecordCommit::Durable
        );
        writer.shutdown().await;
        pool.close().await;
        let _ = std::fs::remove_file(&path);
    }
}
