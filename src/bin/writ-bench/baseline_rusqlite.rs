//! The SQLite baseline through rusqlite, the driver of Writ's own SQLite
//! path: T_submit and the grant read of [`crate::baseline`], with its
//! fixture, its SQL text and its checks, each statement prepared once per
//! connection (`prepare_cached`) and run on the calling thread.
//!
//! Connections are opened as Writ opens its writer
//! (`writ::store::sqlite::open`): WAL, foreign keys, `synchronous` as
//! configured, a 10 s busy timeout, the same settings as the sqlx
//! baseline's pool. The concurrency mirrors the sqlx baseline: N clients are
//! N threads sharing min(N, `max_connections`) connections, each client
//! holding one for a whole T_submit or read; writers serialize on
//! `BEGIN IMMEDIATE`, waiting in SQLite's busy handler.
//!
//! PostgreSQL has no second driver here: its only baseline is sqlx.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rusqlite::{Connection, params};
use writ::store::sqlite::{Role, open};

use crate::baseline::{
    BUMP, Grant, GrantWithRepo, INSERT_ISSUE, INSERT_RECEIPT, Kind, LOCK_SQLITE, Locked,
    NEXT_INDEX, READ, admit, content_digest, issue_url, tally, timestamp,
};
use crate::load::{ISSUE_BODY, Window, issue_title, request_key};
use crate::stats::{CpuWindow, Samples, Slice};

/// Connections shared by a row's client threads.
pub struct Pool {
    idle: Mutex<Vec<Connection>>,
    freed: Condvar,
}

impl Pool {
    /// Opens `size` connections to the SQLite file at `path` with
    /// `PRAGMA synchronous = {synchronous}`.
    pub async fn open(
        path: PathBuf,
        synchronous: &'static str,
        size: u32,
    ) -> anyhow::Result<Arc<Pool>> {
        tokio::task::spawn_blocking(move || {
            let conns = (0..size)
                .map(|_| open(&path, Role::Write { synchronous }))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(Pool {
                idle: Mutex::new(conns),
                freed: Condvar::new(),
            }))
        })
        .await?
    }

    /// Runs `f` on a connection, waiting for one to be free.
    fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = loop {
            match idle.pop() {
                Some(conn) => break conn,
                None => {
                    idle = self
                        .freed
                        .wait(idle)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        };
        drop(idle);
        let out = f(&conn);
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
        self.freed.notify_one();
        out
    }
}

/// Runs one statement of fixed text that returns no rows (transaction
/// control), prepared once per connection as Writ's writer does.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// T_submit in one `BEGIN IMMEDIATE` transaction, rolled back on any error.
fn t_submit(conn: &Connection, g: &Grant, key: &str, title: &str) -> anyhow::Result<()> {
    control(conn, "BEGIN IMMEDIATE")?;
    let done = submit_body(conn, g, key, title)
        .and_then(|()| control(conn, "COMMIT").map_err(anyhow::Error::from));
    if done.is_err() && !conn.is_autocommit() {
        let _ = control(conn, "ROLLBACK");
    }
    done
}

/// T_submit's statements, as the sqlx baseline runs them.
fn submit_body(conn: &Connection, g: &Grant, key: &str, title: &str) -> anyhow::Result<()> {
    let now = timestamp();
    let locked: Locked = conn.prepare_cached(LOCK_SQLITE)?.query_row([g.id], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    admit(g, &locked, &now)?;
    let (count, repo) = (locked.2, locked.5);
    let next: i64 = conn
        .prepare_cached(NEXT_INDEX)?
        .query_row([repo], |r| r.get(0))?;
    let index = next - 1;
    let issue_id: i64 = conn.prepare_cached(INSERT_ISSUE)?.query_row(
        params![repo, index, title, ISSUE_BODY, g.agent_id, now],
        |r| r.get(0),
    )?;
    let content = content_digest(&g.digest, title);
    conn.prepare_cached(INSERT_RECEIPT)?.execute(params![
        g.id,
        key,
        content,
        g.digest,
        g.agent_id,
        issue_id,
        index,
        repo,
        g.repo_full_name,
        issue_url(g, index),
        now
    ])?;
    let bumped = conn
        .prepare_cached(BUMP)?
        .execute(params![count + 1, now, g.id])?;
    anyhow::ensure!(bumped == 1, "grant {} vanished", g.id);
    Ok(())
}

/// The grant read: one `SELECT`, every column decoded.
fn read(conn: &Connection, g: &Grant) -> anyhow::Result<()> {
    conn.prepare_cached(READ)?
        .query_row([g.id], GrantWithRepo::from_rusqlite)?
        .check(g)
}

/// One slice of a row: one thread per grant of `clients`, all on `pool`.
pub async fn run(
    pool: Arc<Pool>,
    clients: Vec<Grant>,
    kind: Kind,
    window: Window,
) -> anyhow::Result<Slice> {
    let start = Instant::now();
    let warm_end = start + window.warmup;
    let deadline = warm_end + window.measure;
    let threads = clients
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let pool = pool.clone();
            std::thread::Builder::new()
                .name(format!("baseline-{i}"))
                .spawn(move || drive(&pool, &g, kind, warm_end, deadline))
        })
        .collect::<Result<Vec<_>, _>>()?;
    tokio::time::sleep_until(warm_end.into()).await;
    let cpu = CpuWindow::start(None);
    tokio::time::sleep_until(deadline.into()).await;
    let (_, host_ticks) = cpu.finish();
    let merged = tokio::task::spawn_blocking(move || {
        let mut merged = Samples::default();
        for thread in threads {
            let samples = thread
                .join()
                .map_err(|_| anyhow::anyhow!("a rusqlite baseline client panicked"))?;
            merged.merge(samples);
        }
        anyhow::Ok(merged)
    })
    .await??;
    Ok(Slice {
        ops: vec![(kind.label(crate::baseline::Driver::Rusqlite), merged)],
        seconds: window.measure.as_secs_f64(),
        host_ticks,
        ..Slice::default()
    })
}

fn drive(pool: &Pool, g: &Grant, kind: Kind, warm_end: Instant, deadline: Instant) -> Samples {
    let mut samples = Samples::default();
    let mut rng = StdRng::from_os_rng();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        let t0 = Instant::now();
        let result = match kind {
            Kind::Submit => {
                seq += 1;
                let key = request_key(&mut rng);
                let title = issue_title(&g.agent_login, seq);
                pool.with(|conn| t_submit(conn, g, &key, &title))
            }
            Kind::Read => pool.with(|conn| read(conn, g)),
        };
        let t1 = Instant::now();
        if !tally(&mut samples, kind, result, [t0, t1], [warm_end, deadline]) {
            break;
        }
    }
    samples
}
