//! The baseline: T_submit and a grant read issued straight to the engine with
//! sqlx (no HTTP, no Writ code), on a database migrated by Writ's own
//! migrations, opened with Writ's durability settings, at the same
//! concurrency as the server rows. On SQLite the same two operations also
//! run through rusqlite ([`crate::baseline_rusqlite`]), with this module's
//! fixture, statements and checks.
//!
//! T_submit, one transaction (`BEGIN IMMEDIATE` on SQLite, as Writ's writes;
//! `BEGIN` on PostgreSQL): read the grant (`FOR UPDATE` on PostgreSQL), check
//! state, digest, expiry and limit; take the next issue index from the
//! repository's counter; insert the issue; insert the receipt (`submissions`);
//! bump the grant's `submission_count`; commit. What Writ adds (the token and
//! access checks, the request-key lookup, the handoff admission evaluation,
//! reading the result back, HTTP and JSON) is exactly what the ratio shows.

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::load::{ISSUE_BODY, MAX_ERRORS, Window, issue_title, request_key};
use crate::stats::{CpuWindow, Samples, Slice};
use crate::target::{Engine, Target};

/// Which baseline operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// T_submit.
    Submit,
    /// One grant by id, joined with its repository.
    Read,
}

/// Which client library issues the baseline's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// sqlx, on both engines: the baseline the bars are judged against.
    Sqlx,
    /// rusqlite with cached prepared statements, SQLite only: the driver of
    /// Writ's own SQLite path.
    Rusqlite,
}

impl Driver {
    /// Every driver.
    pub const ALL: [Driver; 2] = [Driver::Sqlx, Driver::Rusqlite];

    /// The drivers the baseline runs on `engine`: PostgreSQL has sqlx only.
    pub fn on(engine: Engine) -> &'static [Driver] {
        match engine {
            Engine::Sqlite => &Driver::ALL,
            Engine::Postgres => &[Driver::Sqlx],
        }
    }

    /// `sqlx` or `rusqlite`.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Sqlx => "sqlx",
            Driver::Rusqlite => "rusqlite",
        }
    }
}

impl Kind {
    /// The row label (the sqlx rows keep the plain labels the bars name).
    pub fn label(self, driver: Driver) -> &'static str {
        match (self, driver) {
            (Kind::Submit, Driver::Sqlx) => "T_submit",
            (Kind::Read, Driver::Sqlx) => "grant read (SQL)",
            (Kind::Submit, Driver::Rusqlite) => "T_submit (rusqlite)",
            (Kind::Read, Driver::Rusqlite) => "grant read (rusqlite)",
        }
    }

    /// The operation and driver of a baseline row's label.
    pub fn of_label(label: &str) -> Option<(Kind, Driver)> {
        [Kind::Submit, Kind::Read]
            .into_iter()
            .flat_map(|k| Driver::ALL.map(|d| (k, d)))
            .find(|&(k, d)| k.label(d) == label)
    }
}

/// A grant of the baseline fixture.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) id: i64,
    pub(crate) agent_id: i64,
    pub(crate) agent_login: String,
    pub(crate) repo_full_name: String,
    pub(crate) digest: String,
}

/// The baseline database and its fixture.
pub struct Baseline {
    engine: Engine,
    url: String,
    synchronous: SqliteSynchronous,
    /// `PRAGMA synchronous` of the rusqlite connections (`FULL`, ...).
    synchronous_pragma: &'static str,
    max_connections: u32,
    grants: Vec<Grant>,
}

/// A pool on either engine.
#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

pub(crate) const LOCK_SQLITE: &str = "SELECT state, proposal_digest, submission_count, max_submissions, \
     expires_at, repository_id FROM grants WHERE id = $1";
const LOCK_POSTGRES: &str = "SELECT state, proposal_digest, submission_count, max_submissions, \
     expires_at, repository_id FROM grants WHERE id = $1 FOR UPDATE";
pub(crate) const NEXT_INDEX: &str = "UPDATE repositories SET next_issue_index = next_issue_index + 1 \
     WHERE id = $1 RETURNING next_issue_index";
pub(crate) const INSERT_ISSUE: &str = "INSERT INTO issues (repository_id, issue_index, title, body, \
     poster_id, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
pub(crate) const INSERT_RECEIPT: &str = "INSERT INTO submissions (grant_id, request_key, content_digest, \
     proposal_digest, agent_id, issue_id, issue_index, repository_id, repository_full_name, \
     issue_url, evaluation_id, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, $11)";
pub(crate) const BUMP: &str =
    "UPDATE grants SET submission_count = $1, updated_at = $2 WHERE id = $3";
pub(crate) const READ: &str = "SELECT g.id, g.repository_id, g.agent_id, g.issuer_id, g.approver_id, \
     g.state, g.state_revision, g.proposal, g.proposal_digest, g.max_submissions, g.expires_at, \
     g.submission_count, g.created_at, g.updated_at, g.confirmed_at, g.approved_at, \
     r.name AS repo_name, r.private AS repo_private \
     FROM grants g JOIN repositories r ON r.id = g.repository_id WHERE g.id = $1";

/// The row of [`READ`], decoded whole.
#[derive(sqlx::FromRow)]
#[allow(dead_code)] // read to be decoded, not used
pub(crate) struct GrantWithRepo {
    pub(crate) id: i64,
    repository_id: i64,
    agent_id: i64,
    issuer_id: i64,
    approver_id: Option<i64>,
    state: String,
    state_revision: i64,
    proposal: String,
    pub(crate) proposal_digest: String,
    max_submissions: i64,
    expires_at: Option<String>,
    submission_count: i64,
    created_at: String,
    updated_at: String,
    confirmed_at: Option<String>,
    approved_at: Option<String>,
    repo_name: String,
    repo_private: bool,
}

impl GrantWithRepo {
    /// A rusqlite row of [`READ`], by column position.
    pub(crate) fn from_rusqlite(r: &rusqlite::Row<'_>) -> rusqlite::Result<GrantWithRepo> {
        Ok(GrantWithRepo {
            id: r.get(0)?,
            repository_id: r.get(1)?,
            agent_id: r.get(2)?,
            issuer_id: r.get(3)?,
            approver_id: r.get(4)?,
            state: r.get(5)?,
            state_revision: r.get(6)?,
            proposal: r.get(7)?,
            proposal_digest: r.get(8)?,
            max_submissions: r.get(9)?,
            expires_at: r.get(10)?,
            submission_count: r.get(11)?,
            created_at: r.get(12)?,
            updated_at: r.get(13)?,
            confirmed_at: r.get(14)?,
            approved_at: r.get(15)?,
            repo_name: r.get(16)?,
            repo_private: r.get(17)?,
        })
    }

    /// The read found the grant it asked for.
    pub(crate) fn check(&self, g: &Grant) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.id == g.id && self.proposal_digest == g.digest,
            "grant {} read back wrong",
            g.id
        );
        Ok(())
    }
}

/// The grant's row as T_submit's first statement ([`LOCK_SQLITE`],
/// [`LOCK_POSTGRES`]) reads it: state, proposal digest, submission count,
/// limit, expiry, repository.
pub(crate) type Locked = (String, String, i64, i64, Option<String>, i64);

/// T_submit's checks on the locked grant: active, the same proposal, under
/// its limit, not expired.
pub(crate) fn admit(g: &Grant, locked: &Locked, now: &str) -> anyhow::Result<()> {
    let (state, digest, count, max, expires, _) = locked;
    anyhow::ensure!(
        state == "active"
            && *digest == g.digest
            && count < max
            && expires.as_deref().is_none_or(|e| e > now),
        "grant {} refused: {state}, {count}/{max}",
        g.id
    );
    Ok(())
}

/// The receipt's issue URL.
pub(crate) fn issue_url(g: &Grant, index: i64) -> String {
    format!("http://127.0.0.1/{}/issues/{index}", g.repo_full_name)
}

/// T_submit's body, the same on both engines (`$tx` is an open transaction).
macro_rules! t_submit {
    ($tx:ident, $lock:expr, $g:expr, $key:expr, $title:expr) => {{
        let now = crate::baseline::timestamp();
        let locked: Locked = sqlx::query_as($lock)
            .bind($g.id)
            .fetch_one(&mut *$tx)
            .await?;
        admit($g, &locked, &now)?;
        let (count, repo) = (locked.2, locked.5);
        let (next,): (i64,) = sqlx::query_as(NEXT_INDEX)
            .bind(repo)
            .fetch_one(&mut *$tx)
            .await?;
        let index = next - 1;
        let (issue_id,): (i64,) = sqlx::query_as(INSERT_ISSUE)
            .bind(repo)
            .bind(index)
            .bind($title)
            .bind(ISSUE_BODY)
            .bind($g.agent_id)
            .bind(&now)
            .fetch_one(&mut *$tx)
            .await?;
        let content = content_digest(&$g.digest, $title);
        let url = issue_url($g, index);
        sqlx::query(INSERT_RECEIPT)
            .bind($g.id)
            .bind($key)
            .bind(content)
            .bind(&$g.digest)
            .bind($g.agent_id)
            .bind(issue_id)
            .bind(index)
            .bind(repo)
            .bind(&$g.repo_full_name)
            .bind(url)
            .bind(&now)
            .execute(&mut *$tx)
            .await?;
        let bumped = sqlx::query(BUMP)
            .bind(count + 1)
            .bind(&now)
            .bind($g.id)
            .execute(&mut *$tx)
            .await?
            .rows_affected();
        anyhow::ensure!(bumped == 1, "grant {} vanished", $g.id);
        $tx.commit().await?;
        Ok(())
    }};
}

impl Pool {
    async fn t_submit(&self, g: &Grant, key: &str, title: &str) -> anyhow::Result<()> {
        match self {
            Pool::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                t_submit!(tx, LOCK_SQLITE, g, key, title)
            }
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                t_submit!(tx, LOCK_POSTGRES, g, key, title)
            }
        }
    }

    async fn read(&self, g: &Grant) -> anyhow::Result<()> {
        let row: GrantWithRepo = match self {
            Pool::Sqlite(pool) => sqlx::query_as(READ).bind(g.id).fetch_one(pool).await?,
            Pool::Postgres(pool) => sqlx::query_as(READ).bind(g.id).fetch_one(pool).await?,
        };
        row.check(g)
    }

    /// Runs a script of statements built by this module (no outside input).
    async fn script(&self, sql: String) -> anyhow::Result<()> {
        let sql = sqlx::raw_sql(sqlx::AssertSqlSafe(sql));
        match self {
            Pool::Sqlite(pool) => {
                sql.execute(pool).await?;
            }
            Pool::Postgres(pool) => {
                sql.execute(pool).await?;
            }
        }
        Ok(())
    }

    async fn close(&self) {
        match self {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }
}

/// Writ's fixed-width UTC timestamp, e.g. `2026-11-30T09:16:27.123456Z`.
pub fn timestamp() -> String {
    let f = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    time::OffsetDateTime::now_utc()
        .format(&f)
        .expect("formatting a UTC time")
}

/// SHA-256 over the proposal digest, title and body (the receipt's content digest).
pub(crate) fn content_digest(proposal_digest: &str, title: &str) -> String {
    let mut h = Sha256::new();
    for part in [proposal_digest, title, ISSUE_BODY] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The fixture as one script with explicit ids (the database is fresh): user
/// 1 owns every repository and issued and approved every grant; bot i (user
/// i + 2) holds grant i + 1, active, on repository (i mod repos) + 1.
fn fixture(bots: usize, repos: usize) -> (String, Vec<Grant>) {
    let now = timestamp();
    let mut sql = format!(
        "INSERT INTO users (id, login, lower_login, kind, is_admin, created_at) \
         VALUES (1, 'root', 'root', 'human', TRUE, '{now}');\n"
    );
    for r in 1..=repos {
        sql += &format!(
            "INSERT INTO repositories (id, owner_id, name, lower_name, private, created_at) \
             VALUES ({r}, 1, 'bench-{r}', 'bench-{r}', TRUE, '{now}');\n"
        );
    }
    let mut grants = Vec::with_capacity(bots);
    for i in 0..bots {
        let (user, id, repo) = (i + 2, i + 1, i % repos + 1);
        let login = format!("bench-bot-{i}");
        let full_name = format!("root/bench-{repo}");
        // Shaped and sized like the canonical proposal Writ stores.
        let proposal = format!(
            r#"{{"agent":{{"id":{user},"login":"{login}"}},"grant_id":{id},"limits":{{"expires_at":null,"max_submissions":1000000}},"mcp_requirements":[],"repository":{{"full_name":"{full_name}","id":{repo}}},"schema":"agent_work_grant.v1","summary":"writ-bench","task":"Benchmark work: file issues as fast as the ledger takes them.","version":1}}"#
        );
        let digest = hex::encode(Sha256::digest(proposal.as_bytes()));
        sql += &format!(
            "INSERT INTO users (id, login, lower_login, kind, is_admin, created_at) \
             VALUES ({user}, '{login}', '{login}', 'bot', FALSE, '{now}');\n\
             INSERT INTO grants (id, repository_id, agent_id, issuer_id, approver_id, state, \
             state_revision, proposal, proposal_digest, max_submissions, submission_count, \
             created_at, updated_at, confirmed_at, approved_at) VALUES ({id}, {repo}, {user}, \
             1, 1, 'active', 3, '{proposal}', '{digest}', 1000000, 0, '{now}', '{now}', \
             '{now}', '{now}');\n"
        );
        grants.push(Grant {
            id: i64::try_from(id).expect("small"),
            agent_id: i64::try_from(user).expect("small"),
            agent_login: login,
            repo_full_name: full_name,
            digest,
        });
    }
    (sql, grants)
}

impl Baseline {
    /// Migrates the baseline database with Writ's migrations and inserts the
    /// fixture: an owner, `bots` bots, `repos` repositories, one active grant
    /// per bot (bot i on repository i mod repos).
    pub async fn prepare(target: &Target, bots: usize, repos: usize) -> anyhow::Result<Baseline> {
        Baseline::prepare_with(target.engine, &target.baseline_config(), bots, repos).await
    }

    /// [`Baseline::prepare`] on the database `config` names.
    async fn prepare_with(
        engine: Engine,
        config: &writ::Config,
        bots: usize,
        repos: usize,
    ) -> anyhow::Result<Baseline> {
        let store = writ::store::Store::connect(config).await?;
        store.migrate().await.context("migrating the baseline")?;
        store.close().await;
        let synchronous = SqliteSynchronous::from_str(&config.sqlite_synchronous)
            .map_err(|e| anyhow::anyhow!("sqlite_synchronous: {e}"))?;
        let synchronous_pragma = match config.sqlite_synchronous.to_ascii_lowercase().as_str() {
            "normal" => "NORMAL",
            "extra" => "EXTRA",
            _ => "FULL",
        };
        let mut base = Baseline {
            engine,
            url: config.database_url.clone(),
            synchronous,
            synchronous_pragma,
            max_connections: config.max_connections,
            grants: Vec::new(),
        };
        let pool = base.open(2).await?;
        let (script, grants) = fixture(bots, repos);
        pool.script(script).await.context("baseline fixture")?;
        base.grants = grants;
        pool.close().await;
        Ok(base)
    }

    /// A pool like Writ's: same options; `size` connections.
    async fn open(&self, size: u32) -> anyhow::Result<Pool> {
        Ok(match self.engine {
            Engine::Sqlite => {
                let options = SqliteConnectOptions::from_str(&self.url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(self.synchronous)
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(10));
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(size)
                        .connect_with(options)
                        .await?,
                )
            }
            Engine::Postgres => Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(size)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(PgConnectOptions::from_str(&self.url)?)
                    .await?,
            ),
        })
    }

    /// One slice of a row: `n` clients, client i on grant i, sharing a pool
    /// of min(n, Writ's `max_connections`) connections; through sqlx, `n`
    /// tasks, through rusqlite, `n` threads ([`crate::baseline_rusqlite`]).
    pub async fn run(
        &self,
        kind: Kind,
        driver: Driver,
        n: usize,
        window: Window,
    ) -> anyhow::Result<Slice> {
        anyhow::ensure!(n <= self.grants.len(), "only {} grants", self.grants.len());
        let size = u32::try_from(n)?.clamp(1, self.max_connections.max(1));
        if driver == Driver::Rusqlite {
            anyhow::ensure!(self.engine == Engine::Sqlite, "rusqlite is SQLite's driver");
            let path = SqliteConnectOptions::from_str(&self.url)?
                .get_filename()
                .to_owned();
            let clients = self.grants[..n].to_vec();
            let pool =
                crate::baseline_rusqlite::Pool::open(path, self.synchronous_pragma, size).await?;
            return crate::baseline_rusqlite::run(pool, clients, kind, window).await;
        }
        let pool = self.open(size).await?;
        let start = Instant::now();
        let warm_end = start + window.warmup;
        let deadline = warm_end + window.measure;
        let tasks: Vec<_> = self.grants[..n]
            .iter()
            .cloned()
            .map(|g| tokio::spawn(drive(pool.clone(), g, kind, warm_end, deadline)))
            .collect();
        tokio::time::sleep_until(warm_end.into()).await;
        let cpu = CpuWindow::start(None);
        tokio::time::sleep_until(deadline.into()).await;
        let (_, host_ticks) = cpu.finish();
        let mut merged = Samples::default();
        for task in tasks {
            merged.merge(task.await?);
        }
        pool.close().await;
        Ok(Slice {
            ops: vec![(kind.label(driver), merged)],
            seconds: window.measure.as_secs_f64(),
            host_ticks,
            ..Slice::default()
        })
    }
}

async fn drive(pool: Pool, g: Grant, kind: Kind, warm_end: Instant, deadline: Instant) -> Samples {
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
                pool.t_submit(&g, &key, &title).await
            }
            Kind::Read => pool.read(&g).await,
        };
        let t1 = Instant::now();
        if !tally(&mut samples, kind, result, [t0, t1], [warm_end, deadline]) {
            break;
        }
    }
    samples
}

/// Counts one baseline operation that ran from `t0` to `t1`: its latency if
/// it succeeded wholly inside the measured `[warm_end, deadline]`, its
/// error otherwise. False when the client should stop (too many errors).
pub(crate) fn tally(
    samples: &mut Samples,
    kind: Kind,
    result: anyhow::Result<()>,
    [t0, t1]: [Instant; 2],
    [warm_end, deadline]: [Instant; 2],
) -> bool {
    match result {
        Ok(()) if t0 >= warm_end && t1 <= deadline => samples.record(t1 - t0),
        Ok(()) => {}
        Err(e) => {
            samples.error(format!("{kind:?}: {e:#}"));
            return samples.errors < MAX_ERRORS;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both drivers run T_submit and the grant read clean on a SQLite file
    /// migrated by Writ, and every committed T_submit left one issue, one
    /// receipt and one count on its grant, with no gap in issue indices.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_drivers_submit_and_read_on_sqlite() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("writ-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("baseline.db");
        let config = writ::Config {
            database_url: format!("sqlite://{}", file.display()),
            ..writ::Config::default()
        };
        let clients = 3;
        let base = Baseline::prepare_with(Engine::Sqlite, &config, clients, 2).await?;
        let window = Window {
            warmup: Duration::ZERO,
            measure: Duration::from_millis(300),
        };
        let mut recorded = 0;
        for driver in Driver::ALL {
            for kind in [Kind::Submit, Kind::Read] {
                let slice = base.run(kind, driver, clients, window).await?;
                assert_eq!(slice.errors(), 0, "{kind:?} {driver:?}: {:?}", slice.ops);
                let [(label, samples)] = &slice.ops[..] else {
                    panic!("one operation per baseline row: {:?}", slice.ops);
                };
                assert_eq!(*label, kind.label(driver));
                assert_eq!(Kind::of_label(label), Some((kind, driver)));
                assert!(!samples.latencies_us.is_empty(), "{label}: nothing ran");
                if kind == Kind::Submit {
                    recorded += samples.latencies_us.len();
                }
            }
        }
        let conn = rusqlite::Connection::open(&file)?;
        let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
        let counted = one("SELECT SUM(submission_count) FROM grants")?;
        assert_eq!(counted, one("SELECT COUNT(*) FROM submissions")?);
        assert_eq!(counted, one("SELECT COUNT(*) FROM issues")?);
        // A T_submit that ended after its slice's deadline committed
        // unrecorded: at most one per client and slice (two slices).
        let counted = usize::try_from(counted)?;
        assert!(
            (recorded..=recorded + 2 * clients).contains(&counted),
            "{counted} committed, {recorded} recorded"
        );
        let gaps = one(
            "SELECT COUNT(*) FROM repositories r WHERE r.next_issue_index - 1 != \
             (SELECT COUNT(DISTINCT issue_index) FROM issues i WHERE i.repository_id = r.id)",
        )?;
        assert_eq!(gaps, 0, "issue indices with gaps or repeats");
        drop(conn);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
