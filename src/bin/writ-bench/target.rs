//! Where a run's databases live: two SQLite files in a temp directory, or two
//! fresh databases on a loopback PostgreSQL (`writ_bench_<pid>` for the server,
//! `writ_bench_<pid>_base` for the baseline), dropped at the end.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, Connection};

use crate::Args;

/// The database engine under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite in WAL mode (temp files).
    Sqlite,
    /// PostgreSQL on loopback.
    Postgres,
}

/// The run's databases, temp directory and the settings Writ runs with.
pub struct Target {
    /// SQLite or PostgreSQL.
    pub engine: Engine,
    /// Temp directory: server log, SQLite files.
    pub dir: PathBuf,
    /// Database of the Writ server.
    pub server_url: String,
    /// Database of the baseline.
    pub baseline_url: String,
    /// Writ's configuration for this run (defaults, plus `--sqlite-synchronous`).
    pub config: writ::Config,
    /// `synchronous` was given explicitly (the server gets it by environment).
    pub synchronous_override: bool,
    /// e.g. "SQLite 3.x, WAL, synchronous=full" or "PostgreSQL 15.2, synchronous_commit=on".
    pub description: String,
    admin: Option<PgConnectOptions>,
    databases: Vec<String>,
}

impl Target {
    /// Creates the temp directory and, on PostgreSQL, the two databases.
    pub async fn create(args: &Args) -> anyhow::Result<Target> {
        let mut config = writ::Config::default();
        if let Some(s) = &args.sqlite_synchronous {
            anyhow::ensure!(
                matches!(s.as_str(), "full" | "normal" | "extra"),
                "--sqlite-synchronous must be full, normal or extra"
            );
            config.sqlite_synchronous = s.clone();
        }
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("writ-bench-{pid}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut target = Target {
            engine: Engine::Sqlite,
            dir: dir.clone(),
            server_url: format!("sqlite://{}", dir.join("writ.db").display()),
            baseline_url: format!("sqlite://{}", dir.join("baseline.db").display()),
            config,
            synchronous_override: args.sqlite_synchronous.is_some(),
            description: String::new(),
            admin: None,
            databases: Vec::new(),
        };
        match &args.database_url {
            None => {
                target.description = format!(
                    "SQLite {}, WAL, synchronous={}",
                    sqlite_version().await?,
                    target.config.sqlite_synchronous
                );
            }
            Some(url) => {
                if let Err(e) = target.create_postgres(url, pid).await {
                    target.cleanup(false).await;
                    return Err(e);
                }
            }
        }
        target.config.database_url = target.server_url.clone();
        Ok(target)
    }

    async fn create_postgres(&mut self, admin_url: &str, pid: u32) -> anyhow::Result<()> {
        let parsed = reqwest::Url::parse(admin_url).context("--database-url")?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "postgres" | "postgresql"),
            "--database-url must be a postgres:// URL (SQLite needs no URL: it uses temp files)"
        );
        let host = parsed.host_str().unwrap_or("");
        anyhow::ensure!(
            matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "::1"),
            "refusing a PostgreSQL that is not on loopback: {host:?}"
        );
        let options = PgConnectOptions::from_str(admin_url)?;
        let mut conn = PgConnection::connect_with(&options)
            .await
            .context("connecting to --database-url")?;
        let (version,): (String,) = sqlx::query_as("SHOW server_version")
            .fetch_one(&mut conn)
            .await?;
        let (commit,): (String,) = sqlx::query_as("SHOW synchronous_commit")
            .fetch_one(&mut conn)
            .await?;
        self.admin = Some(options);
        self.engine = Engine::Postgres;
        self.description = format!("PostgreSQL {version}, synchronous_commit={commit}");
        let server_db = format!("writ_bench_{pid}");
        let base_db = format!("writ_bench_{pid}_base");
        for name in [&server_db, &base_db] {
            // The name is ours: letters, digits and the pid.
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await
                .with_context(|| format!("CREATE DATABASE {name}"))?;
            self.databases.push(name.clone());
        }
        conn.close().await?;
        let with_db = |name: &str| {
            let mut u = parsed.clone();
            u.set_path(&format!("/{name}"));
            u.to_string()
        };
        self.server_url = with_db(&server_db);
        self.baseline_url = with_db(&base_db);
        eprintln!("writ-bench: created PostgreSQL databases {server_db} and {base_db}");
        Ok(())
    }

    /// Drops the PostgreSQL databases and removes the temp directory
    /// (unless `keep`). Best effort: problems are printed, not returned.
    pub async fn cleanup(&self, keep: bool) {
        if keep {
            eprintln!(
                "writ-bench: kept {} and databases {:?}",
                self.dir.display(),
                self.databases
            );
            return;
        }
        if let Some(options) = &self.admin
            && !self.databases.is_empty()
        {
            match PgConnection::connect_with(options).await {
                Ok(mut conn) => {
                    for name in &self.databases {
                        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                        match sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await {
                            Ok(_) => eprintln!("writ-bench: dropped database {name}"),
                            Err(e) => eprintln!("writ-bench: could not drop {name}: {e}"),
                        }
                    }
                    let _ = conn.close().await;
                }
                Err(e) => eprintln!("writ-bench: could not connect to drop databases: {e}"),
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("writ-bench: could not remove {}: {e}", self.dir.display());
        }
    }

    /// The Writ configuration with the baseline's database URL.
    pub fn baseline_config(&self) -> writ::Config {
        writ::Config {
            database_url: self.baseline_url.clone(),
            ..self.config.clone()
        }
    }
}

async fn sqlite_version() -> anyhow::Result<String> {
    let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await?;
    let (v,): (String,) = sqlx::query_as("SELECT sqlite_version()")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(v)
}
