//! Group commit for SQLite: concurrent write transactions share one durable
//! commit.
//!
//! SQLite has one writer at a time, so write transactions are serialized
//! anyway (`BEGIN IMMEDIATE`); what limits throughput is the fsync of every
//! commit. Here one thread owns the write connection and an open
//! `BEGIN IMMEDIATE` transaction. Each caller of [`Writer::begin`] gets that
//! connection in turn, inside its own `SAVEPOINT`, and runs its statements
//! on its own thread (see [`super::sqlite`]): they are atomic, and its
//! failure (a dropped or rolled-back [`BatchTx`]) undoes only its own work
//! (`ROLLBACK TO`, which leaves the jobs before it, in the savepoints it is
//! nested in, untouched). A caller's `commit` keeps its savepoint open,
//! hands the connection back and waits; when no caller is queued (or the
//! batch is full), the thread commits once and only then tells every
//! caller of the batch the outcome. So each answer is still sent only after
//! its own work is durable, and one fsync covers many requests. The commit
//! (and its fsync) runs on the writer's thread, never on the runtime's.
//!
//! If the batch commit fails, every caller in it gets the error (none of
//! their work was committed). If SQLite ended the whole transaction (the
//! savepoints are gone), the batch is failed the same way.
//!
//! Records that need no transaction of their own (the audit records of
//! calls that changed nothing, see [`Writer::append`]) do not take the
//! connection in turn: the writer inserts every record queued, in the open
//! batch (in a savepoint of their own, so their failure undoes none of the
//! jobs) or, when no job is queued, in a transaction of their own. Each
//! caller is told once the commit holding its record returned.
//!
//! A transaction of records alone can be committed without `fsync`
//! ([`RecordCommit::Relaxed`], the default): `synchronous = NORMAL` for
//! that commit only. It is then in the WAL file when its callers are told
//! (a killed process loses nothing), and on disk at the next write's
//! durable commit or checkpoint; only a power loss or kernel crash before
//! that can lose it (ADR 0017 in docs/adr/).
//!
//! An audited read that needs no write of its own can run on the writer
//! itself ([`Writer::read`]): a closure, run on the writer's thread against
//! its connection (a read-only [`Tx::Local`]), inside the transaction that
//! then commits its record with the others queued beside it (after the
//! jobs of a batch, whose writes it sees and commits with). Its answer is
//! delivered only once that commit returned. Only this connection writes,
//! so its page cache stays warm across commits, where a read connection's
//! is dropped at its first read after any commit and its pages read again;
//! and the read takes no lock of its own. The reads that arrive while
//! others run share their commit.
//!
//! Without group commit ([`Writer::start`] with a batch of one), each job
//! is committed alone, the same way.
//!
//! The writer does not checkpoint the WAL itself: SQLite's automatic
//! checkpoint runs inside the `COMMIT` that crosses its threshold (1000
//! frames, every ~125 small commits here), and for its ~4 ms every caller
//! queued behind that commit waited. Instead the writer's connection
//! notes the WAL's size after each commit ([`Connection::wal_hook`], which
//! replaces the automatic checkpoint) and, from [`CHECKPOINT_FRAMES`] on,
//! wakes a thread of its own ([`Checkpointer`]) that runs the same passive
//! checkpoint on another connection while the writer goes on (SQLite lets
//! a checkpoint and a write transaction run at once). When that is done,
//! the writer checkpoints the few frames committed meanwhile itself,
//! between two transactions, so that its next transaction finds every
//! frame copied and starts the WAL over, as after an automatic checkpoint
//! (a restart needs that, and the writer begins again right after each
//! commit, so the thread alone never gets there).

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::audit::{FinishedCall, record_insert};
use super::sqlite::{self, Role};
use super::{StoreError, StoreResult, Tx};

/// Most transactions committed together.
pub const MAX_BATCH: usize = 64;
/// Longest a batch stays open while callers keep arriving.
pub const MAX_BATCH_TIME: Duration = Duration::from_millis(10);
/// Most records gathered into one commit.
pub const MAX_APPEND: usize = 256;

/// The WAL's size, in frames, from which the writer has it checkpointed
/// (SQLite's own automatic checkpoint threshold).
pub const CHECKPOINT_FRAMES: i32 = 1000;

thread_local! {
    /// The WAL's size in frames after the last commit on this thread's
    /// writer connection (set by [`note_wal_frames`], taken by
    /// [`Checkpointer::after_commit`]; -1: no commit since).
    static WAL_FRAMES: Cell<i32> = const { Cell::new(-1) };
}

/// The writer connection's WAL hook: notes the WAL's size (SQLite calls it
/// after each commit, on the committing thread, which is the writer's).
fn note_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// Checkpoints the WAL of one database file in two steps (see the module's
/// doc): the bulk on a thread and a connection of its own, then the rest
/// on the writer's connection.
struct Checkpointer {
    wake: mpsc::SyncSender<()>,
    /// A checkpoint asked of the thread and not finished.
    running: Arc<AtomicBool>,
    /// A checkpoint was asked of the thread since the WAL last started over
    /// (the writer's own state).
    asked: Cell<bool>,
}

impl Checkpointer {
    /// Opens its connection (as the writer's) and starts its thread; it
    /// ends when this is dropped.
    fn start(config: &WriterConfig) -> StoreResult<Checkpointer> {
        let conn = connect(config)?;
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let running = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&running);
        std::thread::Builder::new()
            .name("writ-sqlite-checkpoint".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    checkpoint(&conn, "background");
                    flag.store(false, Ordering::Release);
                }
            })
            .map_err(StoreError::from)?;
        Ok(Checkpointer {
            wake,
            running,
            asked: Cell::new(false),
        })
    }

    /// Called on the writer's thread between transactions. After a commit
    /// that left the WAL at [`CHECKPOINT_FRAMES`] or more: the first time,
    /// asks the thread for a checkpoint; once that one is done, runs a
    /// checkpoint on `conn`, which copies only the frames committed since,
    /// so that the writer's next transaction starts the WAL over. A WAL
    /// back under the threshold (started over) starts again.
    fn after_commit(&self, conn: Option<&Connection>) {
        let frames = WAL_FRAMES.replace(-1);
        if frames < 0 {
            return;
        }
        if frames < CHECKPOINT_FRAMES {
            self.asked.set(false);
        } else if !self.asked.get() {
            self.running.store(true, Ordering::Release);
            if self.wake.try_send(()).is_err() {
                // The thread is gone: the writer's own step, at the next
                // commit, copies the whole WAL (as SQLite's checkpoint did).
                self.running.store(false, Ordering::Release);
            }
            self.asked.set(true);
        } else if !self.running.load(Ordering::Acquire)
            && let Some(conn) = conn
        {
            checkpoint(conn, "writer");
            self.asked.set(false);
        }
    }
}

/// One passive checkpoint on `conn`: copies what it can of the WAL into
/// the database file (a reader's snapshot may hold frames back), without
/// waiting for the writer.
fn checkpoint(conn: &Connection, on: &'static str) {
    let ran = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    metrics::counter!("writ_sqlite_checkpoints_total", "on" => on).increment(1);
    if let Err(e) = ran {
        tracing::warn!(error = %e, on, "WAL checkpoint failed");
    }
}

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

/// How the writer opens and uses its connection.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// The database file.
    pub path: PathBuf,
    /// `PRAGMA synchronous` of every write (`FULL`, `NORMAL`, `EXTRA`).
    pub synchronous: &'static str,
    /// How records alone are committed.
    pub records: RecordCommit,
    /// Most jobs per commit: [`MAX_BATCH`] with group commit, 1 without.
    pub max_batch: usize,
    /// Where the outcome of each commit is noted (for `/readyz`).
    pub health: Arc<super::health::WriteHealth>,
    /// `PRAGMA max_page_count` of the writer's connection, if set.
    pub max_page_count: Option<u64>,
    /// Woken once a transaction that wrote events committed.
    pub events: Arc<super::events::Signal>,
}

type Lease = oneshot::Sender<StoreResult<BatchTx>>;

/// A read run on the writer's thread and connection ([`Writer::read`]).
/// Given the connection (inside the writer's open transaction, as a
/// read-only [`Tx::Local`]), it returns the record to commit before its
/// answer may leave and the callback that delivers that answer with the
/// commit's outcome; or `None` when it answered already (with nothing to
/// record).
pub type WriterRead = Box<dyn FnOnce(&mut Tx) -> Option<(FinishedCall, Deliver)> + Send>;

/// Delivers a [`WriterRead`]'s answer once the commit of its record
/// returned (or failed).
pub type Deliver = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// Who waits for a commit.
enum Done {
    /// A caller awaiting the commit's outcome.
    Caller(oneshot::Sender<StoreResult<()>>),
    /// A read run on the writer, whose answer goes with the outcome.
    Read(Deliver),
}

impl Done {
    fn tell(self, outcome: StoreResult<()>) {
        match self {
            Done::Caller(waiter) => drop(waiter.send(outcome)),
            Done::Read(deliver) => deliver(outcome),
        }
    }
}

enum Msg {
    Begin(Lease),
    Append(Box<FinishedCall>, Done),
    Read(WriterRead),
    Shutdown(oneshot::Sender<()>),
}

/// Runs `fut`, statements on a [`Tx::Local`], to its end on this thread:
/// each of them completes at once, so the future never waits. `None` if it
/// did wait (it awaited something else: a bug, refused rather than
/// blocking the writer).
pub fn run_local<T>(fut: impl std::future::Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}

/// The writer's connection lent to a [`WriterRead`] on the writer's own
/// thread (see [`Tx::Local`]); it only reads.
pub struct Local(Connection);

impl Local {
    pub(super) fn conn(&self) -> &Connection {
        &self.0
    }
}

/// What a lease holder hands back with the connection.
enum Returned {
    /// Keep the work; tell me when it is durable.
    Release(Done),
    /// Undo the work (to the job's savepoint, if it opened one).
    Abandon { opened: bool },
}

/// Opens a job's savepoint.
const SAVEPOINT: &str = "SAVEPOINT writ_job";

/// The handle to the writer thread of one SQLite file.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<Msg>,
    /// The outcome of the latest commit.
    health: Arc<super::health::WriteHealth>,
    events: Arc<super::events::Signal>,
}

/// One caller's transaction inside a batch: a savepoint on the writer's
/// connection. Dropping it without `commit` undoes its work.
pub struct BatchTx {
    conn: Option<Connection>,
    back: Option<oneshot::Sender<(Connection, Returned)>>,
    /// Whether this job's savepoint is open (its first statement opens it).
    opened: bool,
    /// Where a statement that failed for want of storage is noted.
    health: Arc<super::health::WriteHealth>,
    /// Woken after the commit if this job wrote an event.
    events: Option<Arc<super::events::Signal>>,
    wrote_event: bool,
}

impl std::fmt::Debug for BatchTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchTx")
    }
}

impl BatchTx {
    /// The connection, for the statements of this transaction (its
    /// savepoint opened first, if it is not yet).
    pub fn conn(&mut self) -> StoreResult<&Connection> {
        let conn = self
            .conn
            .as_ref()
            .expect("a BatchTx holds its connection until commit or drop");
        if !self.opened {
            sqlite::batch(conn, SAVEPOINT)?;
            self.opened = true;
        } else if conn.is_autocommit() {
            // SQLite ended the batch's transaction after a storage fault: a
            // statement now would run, and commit, on its own.
            return Err(rolled_back_by_sqlite());
        }
        Ok(conn)
    }

    /// Whether the writes fail for want of storage.
    pub fn health(&self) -> &super::health::WriteHealth {
        &self.health
    }

    fn hand_back(&mut self, returned: Returned) {
        if let (Some(conn), Some(back)) = (self.conn.take(), self.back.take()) {
            // The writer waits for this; if it is gone, the connection is
            // dropped (closed) and its transaction with it.
            let _ = back.send((conn, returned));
        }
    }

    /// Notes that this job wrote an event.
    pub fn note_event(&mut self) {
        self.wrote_event = true;
    }

    /// Keeps this work and waits until the batch holding it is committed.
    pub async fn commit(mut self) -> StoreResult<()> {
        let (done, wait) = oneshot::channel();
        let events = self.events.take().filter(|_| self.wrote_event);
        self.hand_back(Returned::Release(Done::Caller(done)));
        let committed = wait.await.unwrap_or_else(|_| Err(writer_gone()));
        if let (Ok(()), Some(events)) = (&committed, events) {
            events.committed();
        }
        committed
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

fn writer_gone() -> StoreError {
    StoreError::Unavailable("the SQLite writer has stopped".into())
}

/// How a caller learns that the batch it joined failed: the batch's own
/// failure, so a full disk or a lost file stays a database that is
/// unavailable, and anything else a failure of the group commit.
fn failed(why: &StoreError) -> StoreError {
    match why {
        StoreError::Unavailable(_) => why.clone(),
        other => StoreError::other(format!("group commit failed: {other}")),
    }
}

impl Writer {
    /// Opens the write connection and starts the writer's thread.
    pub fn start(config: WriterConfig) -> StoreResult<Writer> {
        let conn = open(&config)?;
        let checkpointer = Checkpointer::start(&config)?;
        let (tx, rx) = mpsc::channel();
        let health = Arc::clone(&config.health);
        let events = Arc::clone(&config.events);
        std::thread::Builder::new()
            .name("writ-sqlite-writer".into())
            .spawn(move || run(config, conn, rx, &checkpointer))
            .map_err(StoreError::from)?;
        Ok(Writer { tx, health, events })
    }

    /// Whether the latest commits failed for want of storage.
    pub fn health(&self) -> &super::health::WriteHealth {
        &self.health
    }

    /// What wakes the feed's waiters.
    pub fn events(&self) -> &Arc<super::events::Signal> {
        &self.events
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
            .send(Msg::Append(Box::new(call), Done::Caller(done)))
            .map_err(|_| writer_gone())?;
        wait.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Runs `read` on the writer's thread and connection, in the writer's
    /// next transaction; the record it returns is committed there with the
    /// records queued beside it (relaxed, as any record of a call that
    /// changed nothing) before its answer is delivered (see the module's
    /// doc). Fails when the writer is gone (the read never ran).
    pub fn read(&self, read: WriterRead) -> StoreResult<()> {
        self.tx.send(Msg::Read(read)).map_err(|_| writer_gone())
    }

    /// Stops the thread after the current batch and closes its connection.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Shutdown(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

/// A write connection to the file, as configured.
fn connect(config: &WriterConfig) -> StoreResult<Connection> {
    let conn = sqlite::open(
        &config.path,
        Role::Write {
            synchronous: config.synchronous,
        },
    )?;
    if let Some(pages) = config.max_page_count {
        conn.pragma_update(
            None,
            "max_page_count",
            i64::try_from(pages).unwrap_or(i64::MAX),
        )?;
    }
    Ok(conn)
}

/// The writer's connection, its WAL hook in place of the automatic
/// checkpoint.
fn open(config: &WriterConfig) -> StoreResult<Connection> {
    let conn = connect(config)?;
    conn.wal_hook(Some(note_wal_frames));
    Ok(conn)
}

/// The writer's loop, on its own thread.
fn run(
    config: WriterConfig,
    conn: Connection,
    rx: mpsc::Receiver<Msg>,
    checkpointer: &Checkpointer,
) {
    let mut conn = Some(conn);
    // A message taken off the queue while gathering records, handled next.
    let mut carried: Option<Msg> = None;
    loop {
        checkpointer.after_commit(conn.as_ref());
        let msg = match carried.take() {
            Some(msg) => msg,
            None => match rx.recv() {
                Ok(msg) => msg,
                Err(_) => return,
            },
        };
        let c = match conn.take().map_or_else(|| open(&config), Ok) {
            Ok(c) => c,
            Err(e) => {
                refuse(msg, &e);
                continue;
            }
        };
        match msg {
            msg @ (Msg::Append(..) | Msg::Read(_)) => {
                let mut appends = Appends::default();
                appends.take(msg);
                carried = appends.gather(&rx);
                match carried.take() {
                    // A job came: the records join its batch.
                    Some(Msg::Begin(first)) => {
                        let (c, shutdown) = run_batch(c, first, appends, &rx, &config);
                        conn = c;
                        if let Some(done) = shutdown {
                            drop(conn.take());
                            let _ = done.send(());
                            return;
                        }
                    }
                    other => {
                        carried = other;
                        conn = appends.commit_alone(c, &config, &rx, &mut carried);
                    }
                }
            }
            Msg::Begin(first) => {
                let (c, shutdown) = run_batch(c, first, Appends::default(), &rx, &config);
                conn = c;
                if let Some(done) = shutdown {
                    drop(conn.take());
                    let _ = done.send(());
                    return;
                }
            }
            Msg::Shutdown(done) => {
                drop(c);
                let _ = done.send(());
                return;
            }
        }
    }
}

/// Answers a message the writer cannot serve (no connection).
fn refuse(msg: Msg, why: &StoreError) {
    match msg {
        Msg::Begin(lease) => drop(lease.send(Err(failed(why)))),
        Msg::Append(_, done) => done.tell(Err(failed(why))),
        // Dropped unrun: its caller is told the writer is gone.
        Msg::Read(_) => {}
        Msg::Shutdown(done) => drop(done.send(())),
    }
}

fn tell_committed(waiters: Vec<Done>) {
    metrics::counter!("writ_sqlite_group_commits_total").increment(1);
    metrics::counter!("writ_sqlite_group_commit_transactions_total")
        .increment(waiters.len() as u64);
    for w in waiters {
        w.tell(Ok(()));
    }
}

fn fail_all(waiters: Vec<Done>, why: &StoreError) {
    for w in waiters {
        w.tell(Err(failed(why)));
    }
}

/// Records queued to be appended, reads queued to run on the writer
/// (each may add a record), and who waits for each record.
#[derive(Default)]
struct Appends {
    calls: Vec<FinishedCall>,
    waiters: Vec<Done>,
    reads: Vec<WriterRead>,
}

impl Appends {
    /// Queues an `Append` or a `Read`; returns any other message.
    fn take(&mut self, msg: Msg) -> Option<Msg> {
        match msg {
            Msg::Append(call, done) => {
                self.calls.push(*call);
                self.waiters.push(done);
                None
            }
            Msg::Read(read) => {
                self.reads.push(read);
                None
            }
            other => Some(other),
        }
    }

    fn is_full(&self) -> bool {
        self.calls.len() + self.reads.len() >= MAX_APPEND
    }

    /// Takes every record and read queued now, up to [`MAX_APPEND`];
    /// returns the first other message it took off the queue.
    fn gather(&mut self, rx: &mpsc::Receiver<Msg>) -> Option<Msg> {
        while !self.is_full() {
            match rx.try_recv() {
                Ok(msg) => {
                    if let Some(other) = self.take(msg) {
                        return Some(other);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }

    /// Runs the queued reads on `c`, inside the open transaction; the
    /// records they return join the queue. A read that panics is dropped
    /// (its caller sees its answer gone) and the others still run.
    fn run_reads(&mut self, c: Connection) -> Connection {
        if self.reads.is_empty() {
            return c;
        }
        let mut tx = Tx::Local(Local(c));
        for read in self.reads.drain(..) {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&mut tx)));
            if let Ok(Some((call, deliver))) = ran {
                self.calls.push(call);
                self.waiters.push(Done::Read(deliver));
            }
        }
        match tx {
            Tx::Local(Local(c)) => c,
            _ => unreachable!("a read cannot replace the writer's connection"),
        }
    }

    fn insert(&self, c: &Connection) -> StoreResult<()> {
        for call in &self.calls {
            let insert = record_insert(super::Backend::Sqlite, call);
            sqlite::execute(c, insert.sql(), insert.values())?;
        }
        Ok(())
    }

    /// Runs the queued reads, then those queued meanwhile, until no more
    /// came (or another message did, kept in `carried`, or the queue is
    /// full): the reads that arrive while others run share their commit.
    fn run_reads_gathering(
        &mut self,
        mut c: Connection,
        rx: &mpsc::Receiver<Msg>,
        carried: &mut Option<Msg>,
    ) -> Connection {
        loop {
            c = self.run_reads(c);
            if carried.is_some() || self.is_full() {
                return c;
            }
            *carried = self.gather(rx);
            if self.reads.is_empty() {
                return c;
            }
        }
    }

    /// Runs the queued reads and inserts and commits the records in a
    /// transaction of their own, then tells their callers; the connection
    /// back, unless its `synchronous` could not be restored (then it is
    /// closed: the next use opens one). A message other than a record or a
    /// read taken off the queue meanwhile is left in `carried`.
    fn commit_alone(
        mut self,
        c: Connection,
        config: &WriterConfig,
        rx: &mpsc::Receiver<Msg>,
        carried: &mut Option<Msg>,
    ) -> Option<Connection> {
        let relaxed = match config.records {
            RecordCommit::Relaxed { restore } => Some(restore),
            RecordCommit::Durable => None,
        };
        let begun = match relaxed {
            Some(_) => sqlite::batch(&c, "PRAGMA synchronous = NORMAL"),
            None => Ok(()),
        }
        .and_then(|()| sqlite::batch(&c, "BEGIN IMMEDIATE"));
        let c = match begun {
            Ok(()) => self.run_reads_gathering(c, rx, carried),
            Err(_) => c,
        };
        let written = begun
            .and_then(|()| self.insert(&c))
            .and_then(|()| sqlite::batch(&c, "COMMIT"));
        config.health.note(&written);
        match written {
            Ok(()) => tell_committed(self.waiters),
            Err(e) => {
                if !c.is_autocommit() {
                    let _ = c.execute_batch("ROLLBACK");
                }
                self.fail(&e);
            }
        }
        match relaxed {
            Some(restore) => sqlite::batch(&c, restore).ok().map(|()| c),
            None => Some(c),
        }
    }

    /// Runs the queued reads in the open batch (after its jobs: they see
    /// what the jobs kept, which commits with their records), then inserts
    /// the records, in a savepoint of their own; returns the connection and
    /// the records' callers, to be told with the batch. If the insert
    /// fails, only the records are undone and their callers told; if even
    /// that fails, the batch must fail (`Err`).
    fn insert_in_batch(mut self, c: Connection) -> (Connection, Result<Vec<Done>, StoreError>) {
        let c = self.run_reads(c);
        if self.calls.is_empty() {
            return (c, Ok(Vec::new()));
        }
        let written = sqlite::batch(&c, "SAVEPOINT writ_append")
            .and_then(|()| self.insert(&c))
            .and_then(|()| sqlite::batch(&c, "RELEASE writ_append"));
        let Err(e) = written else {
            return (c, Ok(self.waiters));
        };
        let undone = c.execute_batch("ROLLBACK TO writ_append; RELEASE writ_append");
        self.fail(&e);
        match undone {
            Ok(()) => (c, Ok(Vec::new())),
            Err(e) => {
                let why = undone_failed(&c, e);
                (c, Err(why))
            }
        }
    }

    fn fail(self, why: &StoreError) {
        fail_all(self.waiters, why);
    }
}

/// Runs one batch from its first job to its commit: lends the connection
/// to queued callers, one savepoint each, until the queue is empty, the
/// batch is full or old, or something failed; gathers the records queued
/// meanwhile; commits and tells everyone. Returns the connection (none if
/// it was lost) and a shutdown asked for meanwhile.
fn run_batch(
    c: Connection,
    first: Lease,
    appends: Appends,
    rx: &mpsc::Receiver<Msg>,
    config: &WriterConfig,
) -> (Option<Connection>, Option<oneshot::Sender<()>>) {
    if let Err(e) = sqlite::batch(&c, "BEGIN IMMEDIATE") {
        config.health.note::<()>(&Err(e.clone()));
        appends.fail(&e);
        let _ = first.send(Err(e));
        return (Some(c), None);
    }
    let mut batch = Batch {
        waiters: Vec::new(),
        appends,
        failed: None,
        shutdown: None,
    };
    let Some(c) = batch.lend(c, first, rx, config) else {
        // The connection was lost with its transaction (nothing of the
        // batch was committed); the next batch opens a fresh one.
        let why = StoreError::Unavailable("the group commit lost its connection".into());
        fail_all(batch.waiters, &why);
        batch.appends.fail(&why);
        return (None, batch.shutdown);
    };
    let appends = std::mem::take(&mut batch.appends);
    let c = match &batch.failed {
        Some(why) => {
            appends.fail(why);
            c
        }
        None => {
            let (c, inserted) = appends.insert_in_batch(c);
            match inserted {
                Ok(waiters) => batch.waiters.extend(waiters),
                Err(why) => batch.failed = Some(why),
            }
            c
        }
    };
    let result = match &batch.failed {
        None => sqlite::batch(&c, "COMMIT"),
        Some(why) => Err(failed(why)),
    };
    config.health.note(&result);
    match result {
        Ok(()) => tell_committed(batch.waiters),
        Err(e) => {
            // Leave no transaction open on the connection.
            if !c.is_autocommit() {
                let _ = c.execute_batch("ROLLBACK");
            }
            fail_all(batch.waiters, &e);
        }
    }
    (Some(c), batch.shutdown)
}

/// Why the batch's transaction is gone when SQLite ended it itself (and
/// every savepoint in it). It does so only after a full disk, an I/O
/// error, a lock it could not take or no memory ("Response To Errors
/// Within A Transaction", sqlite.org/lang_transaction.html): the database
/// cannot write now, so every caller of the batch is answered 503.
fn rolled_back_by_sqlite() -> StoreError {
    StoreError::Unavailable("SQLite rolled the batch's transaction back".into())
}

/// The error of a `ROLLBACK TO` that failed: when SQLite had already
/// ended the transaction (the savepoint is gone with it), the storage
/// fault that made it do so, not the missing savepoint.
fn undone_failed(c: &Connection, e: rusqlite::Error) -> StoreError {
    if c.is_autocommit() {
        rolled_back_by_sqlite()
    } else {
        StoreError::from(e)
    }
}

/// The state of one batch while it takes callers.
struct Batch {
    waiters: Vec<Done>,
    appends: Appends,
    failed: Option<StoreError>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Batch {
    /// Lends the connection to `first` and then to every caller queued,
    /// one at a time; the connection back, or none if it was lost.
    fn lend(
        &mut self,
        mut c: Connection,
        first: Lease,
        rx: &mpsc::Receiver<Msg>,
        config: &WriterConfig,
    ) -> Option<Connection> {
        let max_batch = config.max_batch;
        let started = Instant::now();
        let mut next = Some(first);
        let mut count = 0;
        while let Some(lease) = next.take() {
            let (back, returned) = oneshot::channel();
            let job = BatchTx {
                health: Arc::clone(&config.health),
                events: Some(Arc::clone(&config.events)),
                wrote_event: false,
                conn: Some(c),
                back: Some(back),
                opened: false,
            };
            // If the caller is gone, the lease comes back in the error and
            // its drop hands the connection back as abandoned.
            drop(lease.send(Ok(job)));
            let Ok((back_conn, outcome)) = returned.blocking_recv() else {
                self.failed = Some(StoreError::Unavailable("connection lost".into()));
                return None;
            };
            c = back_conn;
            // A kept job's savepoint is not released: the next job's nests
            // inside it (one statement per job, not two), and the batch's
            // COMMIT keeps them all. An abandoned job is undone to its own
            // savepoint, the innermost of that name, which is then dropped.
            match outcome {
                Returned::Release(done) => self.waiters.push(done),
                Returned::Abandon { opened: false } => {}
                Returned::Abandon { opened: true } => {
                    if let Err(e) = c.execute_batch("ROLLBACK TO writ_job; RELEASE writ_job") {
                        self.failed = Some(undone_failed(&c, e));
                        break;
                    }
                }
            }
            if c.is_autocommit() {
                self.failed = Some(rolled_back_by_sqlite());
                break;
            }
            count += 1;
            if count >= max_batch || started.elapsed() >= MAX_BATCH_TIME {
                break;
            }
            match self.appends.gather(rx) {
                Some(Msg::Begin(lease)) => next = Some(lease),
                Some(Msg::Shutdown(done)) => self.shutdown = Some(done),
                Some(Msg::Append(..) | Msg::Read(_)) | None => {}
            }
        }
        Some(c)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Tx;
    use sea_query::{Expr, ExprTrait, Query};

    /// A database file with the table `t (k)`.
    fn database() -> PathBuf {
        let path = std::env::temp_dir().join(format!("writ-batch-{}.db", rand::random::<u64>()));
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (k INTEGER PRIMARY KEY)")
            .unwrap();
        path
    }

    fn writer(path: &std::path::Path, records: RecordCommit) -> Writer {
        Writer::start(WriterConfig {
            health: Default::default(),
            max_page_count: None,
            events: crate::store::events::Signal::local(),
            path: path.to_owned(),
            synchronous: "FULL",
            records,
            max_batch: MAX_BATCH,
        })
        .unwrap()
    }

    fn count(path: &std::path::Path, sql: &str) -> i64 {
        let c = Connection::open(path).unwrap();
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn remove(path: &std::path::Path) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    /// Every job that reported a commit (and no other) left its rows `k`
    /// and `1000 + k`; `expected` jobs did.
    async fn assert_kept_exactly_the_committed(
        path: &std::path::Path,
        jobs: Vec<tokio::task::JoinHandle<StoreResult<bool>>>,
        expected: usize,
    ) {
        let mut committed = Vec::new();
        for (k, job) in jobs.into_iter().enumerate() {
            if job.await.unwrap().unwrap() {
                committed.push(k as i64);
            }
        }
        let c = Connection::open(path).unwrap();
        let mut stmt = c
            .prepare("SELECT k FROM t WHERE k < 1000 ORDER BY k")
            .unwrap();
        let rows: Vec<i64> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows, committed);
        let pairs = count(path, "SELECT COUNT(*) FROM t WHERE k >= 1000");
        assert_eq!(pairs as usize, committed.len());
        assert_eq!(committed.len(), expected);
    }

    fn row(k: i64) -> sea_query::InsertStatement {
        Query::insert()
            .into_table("t")
            .columns(["k"])
            .values_panic([k.into()])
            .to_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn each_job_is_atomic_and_isolated_from_the_others_failures() {
        let path = database();
        let writer = writer(&path, RecordCommit::Durable);
        let mut jobs = Vec::new();
        for k in 0..200i64 {
            let writer = writer.clone();
            jobs.push(tokio::spawn(async move {
                let mut tx = Tx::Batch(writer.begin().await?);
                tx.execute(&row(k)).await?;
                tx.execute(&row(1000 + k)).await?;
                match k % 4 {
                    // Abandoned after writing: both rows must vanish.
                    0 => {
                        drop(tx);
                        Ok(false)
                    }
                    // A failing statement (duplicate key) after a good one.
                    1 => {
                        let failed = tx.execute(&row(k)).await;
                        assert!(
                            failed
                                .as_ref()
                                .is_err_and(crate::store::is_unique_violation)
                        );
                        tx.rollback().await?;
                        Ok(false)
                    }
                    _ => tx.commit().await.map(|()| true),
                }
            }));
        }
        assert_kept_exactly_the_committed(&path, jobs, 100).await;
        writer.shutdown().await;
        remove(&path);
    }

    /// A job opens its savepoint with its first statement; a job that ran
    /// nothing opened none, and abandoning it undoes nothing (a
    /// `ROLLBACK TO` without its own savepoint would reach the previous
    /// job's). A job sees its own writes before it commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn empty_jobs_undo_nothing_and_jobs_see_their_writes() {
        let path = database();
        let writer = writer(&path, RecordCommit::Durable);
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
                    // The first statement fails (the row exists).
                    1 => {
                        let failed = tx
                            .execute(&row(-1 - k))
                            .await
                            .and(tx.execute(&row(-1 - k)).await);
                        assert!(failed.is_err());
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    _ => {}
                }
                tx.execute(&row(k)).await?;
                tx.execute(&row(1000 + k)).await?;
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
        assert_kept_exactly_the_committed(&path, jobs, 50).await;
        assert_eq!(count(&path, "SELECT COUNT(*) FROM t WHERE k < 0"), 0);
        writer.shutdown().await;
        remove(&path);
    }

    /// When SQLite ends the batch's transaction itself (as it may on a full
    /// disk or an I/O error; here a job ends it), every caller of the batch
    /// learns the database is unavailable (503), never an internal error,
    /// and nothing of the batch is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_transaction_sqlite_ended_fails_its_batch_as_unavailable() {
        let path = database();
        let writer = writer(&path, RecordCommit::Durable);
        let mut jobs = Vec::new();
        for k in 0..200i64 {
            let writer = writer.clone();
            jobs.push(tokio::spawn(async move {
                let mut tx = Tx::Batch(writer.begin().await?);
                tx.execute(&row(k)).await?;
                if k % 20 == 7 {
                    let Tx::Batch(job) = &mut tx else {
                        unreachable!()
                    };
                    job.conn()?.execute_batch("ROLLBACK").unwrap();
                    // A statement after SQLite ended the transaction must
                    // not run on its own (it would commit at once).
                    let after = tx.execute(&row(-1 - k)).await;
                    assert!(after.as_ref().is_err_and(StoreError::is_unavailable));
                }
                tx.commit().await.map(|()| k)
            }));
        }
        let (mut kept, mut unavailable) = (Vec::new(), 0);
        for job in jobs {
            match job.await.unwrap() {
                Ok(k) => kept.push(k),
                Err(e) => {
                    assert!(e.is_unavailable(), "{e:?}");
                    unavailable += 1;
                }
            }
        }
        assert!(unavailable >= 10, "the ten jobs that ended it fail");
        kept.sort_unstable();
        let c = Connection::open(&path).unwrap();
        let mut stmt = c.prepare("SELECT k FROM t ORDER BY k").unwrap();
        let rows: Vec<i64> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows, kept);
        writer.shutdown().await;
        remove(&path);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_returns_only_once_durable_and_visible() {
        let path = database();
        let writer = writer(&path, RecordCommit::Durable);
        for k in 0..20i64 {
            let mut tx = Tx::Batch(writer.begin().await.unwrap());
            tx.execute(&row(k)).await.unwrap();
            tx.commit().await.unwrap();
            // Another connection sees it at once: it was committed, not
            // merely released into an open batch.
            let seen = count(&path, &format!("SELECT COUNT(*) FROM t WHERE k = {k}"));
            assert_eq!(seen, 1);
        }
        writer.shutdown().await;
        assert!(
            writer.begin().await.is_err(),
            "a stopped writer refuses work"
        );
        remove(&path);
    }

    /// A database file migrated with Writ's schema, with the table `t (k)`
    /// and agent 1 (with token 1), whose calls [`call`] records.
    async fn migrated_database() -> PathBuf {
        let path = database();
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .foreign_keys(false);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        super::super::SQLITE_MIGRATIONS.run(&pool).await.unwrap();
        pool.close().await;
        Connection::open(&path)
            .unwrap()
            .execute_batch(
                "INSERT INTO users (id, login, lower_login, kind, is_admin, created_at) \
                 VALUES (1, 'bot', 'bot', 'bot', 0, '2026-12-01T00:00:00.000000Z'); \
                 INSERT INTO access_tokens (id, user_id, name, token_hash, scopes, created_at) \
                 VALUES (1, 1, 't', 'h', '', '2026-12-01T00:00:00.000000Z');",
            )
            .unwrap();
        path
    }

    /// The record of agent 1's call `k` (request id `r{k}`).
    fn call(k: i64) -> FinishedCall {
        FinishedCall {
            call: super::super::audit::NewCall {
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
        }
    }

    /// A read of [`Writer::read`]'s: that runs on the writer's connection,
    /// counts the rows of `t` and, for an even `k`, returns its record
    /// (call `k`) and is answered once that commit returned; an odd `k`
    /// answers at once, with nothing recorded. The answer: the count seen
    /// and whether the record was committed when the answer came.
    fn counting_read(
        path: &std::path::Path,
        k: i64,
    ) -> (WriterRead, oneshot::Receiver<StoreResult<(i64, bool)>>) {
        let (answer, wait) = oneshot::channel();
        let path = path.to_owned();
        let read: WriterRead = Box::new(move |tx| {
            let q = Query::select()
                .expr(Expr::col("k").count())
                .from("t")
                .to_owned();
            let seen = run_local(tx.fetch_one::<(i64,)>(&q)).expect("a local read never waits");
            let seen = match seen {
                Ok((n,)) => n,
                Err(e) => {
                    let _ = answer.send(Err(e));
                    return None;
                }
            };
            // The connection only reads.
            assert!(run_local(tx.execute(&row(-1))).unwrap().is_err());
            if k % 2 == 1 {
                let _ = answer.send(Ok((seen, false)));
                return None;
            }
            let deliver: Deliver = Box::new(move |committed| {
                let sql = format!("SELECT COUNT(*) FROM tool_calls WHERE request_id = 'r{k}'");
                let answered = committed.map(|()| (seen, count(&path, &sql) == 1));
                let _ = answer.send(answered);
            });
            Some((call(k), deliver))
        });
        (read, wait)
    }

    /// Reads run on the writer's thread answer only once their record is
    /// committed (another connection sees it), answer at once when they
    /// record nothing, cannot write, see the jobs committed with them, and
    /// a read that panics leaves the writer serving the others.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_on_the_writer_answer_after_their_record_commits() {
        let path = migrated_database().await;
        let writer = writer(&path, RecordCommit::for_synchronous("full", false));
        let mut answers = Vec::new();
        for k in 0..40i64 {
            let (read, wait) = counting_read(&path, k);
            writer.read(read).unwrap();
            answers.push((k, wait));
        }
        for (k, wait) in answers {
            let (seen, committed) = wait.await.unwrap().unwrap();
            assert_eq!(seen, 0);
            assert_eq!(committed, k % 2 == 0, "read {k}");
        }
        assert_eq!(count(&path, "SELECT COUNT(*) FROM tool_calls"), 20);

        // A panicking read is dropped; the writer goes on.
        let (answer, gone) = oneshot::channel::<()>();
        writer
            .read(Box::new(move |_| {
                let _keep = answer;
                panic!("a read that fails");
            }))
            .unwrap();
        assert!(gone.await.is_err());

        // A read queued while a job holds the connection runs in the job's
        // batch, after it: it sees the job's row, committed with its
        // record.
        let mut job = Tx::Batch(writer.begin().await.unwrap());
        job.execute(&row(7)).await.unwrap();
        let (read, wait) = counting_read(&path, 100);
        writer.read(read).unwrap();
        job.commit().await.unwrap();
        assert_eq!(wait.await.unwrap().unwrap(), (1, true));
        assert_eq!(count(&path, "SELECT COUNT(*) FROM tool_calls"), 21);

        writer.shutdown().await;
        let (read, wait) = counting_read(&path, 102);
        assert!(writer.read(read).is_err() || wait.await.is_err());
        remove(&path);
    }

    /// The writer's WAL is checkpointed although SQLite's automatic
    /// checkpoint is off on its connection: commits that would grow it to
    /// ~4000 frames leave it started over, never past a little more than
    /// [`CHECKPOINT_FRAMES`], with every row in the database.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_is_checkpointed_and_started_over_beside_the_writer() {
        let path = database();
        let writer = writer(&path, RecordCommit::Durable);
        let mut job = writer.begin().await.unwrap();
        job.conn()
            .unwrap()
            .execute_batch("CREATE TABLE blobs (b BLOB NOT NULL)")
            .unwrap();
        job.commit().await.unwrap();
        // 16 pages a commit: 250 commits write ~4000 frames.
        for _ in 0..250 {
            let mut job = writer.begin().await.unwrap();
            job.conn()
                .unwrap()
                .execute("INSERT INTO blobs (b) VALUES (zeroblob(65536))", [])
                .unwrap();
            job.commit().await.unwrap();
        }
        let wal = std::fs::metadata(format!("{}-wal", path.display()))
            .unwrap()
            .len();
        let frame = 4096 + 24;
        assert!(
            wal < 2 * CHECKPOINT_FRAMES as u64 * frame,
            "the WAL grew to {} frames",
            wal / frame
        );
        assert_eq!(count(&path, "SELECT COUNT(*) FROM blobs"), 250);
        writer.shutdown().await;
        remove(&path);
    }

    /// Records committed alone at `synchronous = NORMAL` are all kept, and
    /// the connection is back at `FULL` for the next write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relaxed_record_commits_restore_full_for_writes() {
        let path = migrated_database().await;
        let records = RecordCommit::for_synchronous("full", false);
        assert_ne!(records, RecordCommit::Durable);
        let writer = writer(&path, records);
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
            // A lone record.
            writer.append(call(1000 + round)).await.unwrap();
            let mut job = writer.begin().await.unwrap();
            let level: i64 = job
                .conn()
                .unwrap()
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(level, 2, "writes commit at FULL again");
            job.commit().await.unwrap();
        }
        assert_eq!(count(&path, "SELECT COUNT(*) FROM tool_calls"), 105);
        assert_eq!(
            RecordCommit::for_synchronous("normal", false),
            RecordCommit::Durable
        );
        assert_eq!(
            RecordCommit::for_synchronous("full", true),
            RecordCommit::Durable
        );
        writer.shutdown().await;
        remove(&path);
    }
}
