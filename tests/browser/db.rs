//! One fresh database per test: a SQLite file in the temp dir, or a new
//! PostgreSQL database on the server named by `WRIT_TEST_POSTGRES_URL`;
//! removed again when the test ends. (Same approach as `tests/api/db.rs`.)

use std::path::PathBuf;

use sqlx::{AssertSqlSafe, Connection as _, PgConnection};

use crate::app::postgres_admin_url;

/// Removes the test's database when dropped (also when the test panics).
pub enum DbGuard {
    Sqlite(PathBuf),
    Postgres { admin_url: String, name: String },
}

impl Drop for DbGuard {
    fn drop(&mut self) {
        match self {
            DbGuard::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm", "-journal"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            DbGuard::Postgres { admin_url, name } => {
                let (url, name) = (admin_url.clone(), name.clone());
                // Drop runs inside the test's runtime: use a thread with its own.
                let _ = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("cleanup runtime");
                    runtime.block_on(async {
                        let Ok(mut conn) = PgConnection::connect(&url).await else {
                            return;
                        };
                        let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                        let _ = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await;
                        let _ = conn.close().await;
                    });
                })
                .join();
            }
        }
    }
}

/// Replaces the database name in a `postgres://` URL, keeping its query.
fn with_database(url: &str, name: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let (head, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let base = match head[after_scheme..].find('/') {
        Some(slash) => &head[..after_scheme + slash],
        None => head,
    };
    format!("{base}/{name}{query}")
}

pub async fn create_postgres_database() -> (String, DbGuard) {
    let admin_url = postgres_admin_url().expect("WRIT_TEST_POSTGRES_URL");
    let name = format!("writ_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(&admin_url)
        .await
        .expect("connect to WRIT_TEST_POSTGRES_URL");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let _ = conn.close().await;
    let url = with_database(&admin_url, &name);
    (url, DbGuard::Postgres { admin_url, name })
}

pub fn sqlite_database() -> (String, DbGuard) {
    let path = std::env::temp_dir().join(format!("writ-{}.db", uuid::Uuid::new_v4()));
    (
        format!("sqlite://{}", path.display()),
        DbGuard::Sqlite(path),
    )
}
