//! One fresh database per test: a SQLite file in the temp dir, or a new
//! PostgreSQL database on the server named by `WRIT_TEST_POSTGRES_URL`;
//! removed again when the test ends.

use std::path::PathBuf;

use sqlx::{AssertSqlSafe, Connection as _, PgConnection};

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

impl DbGuard {
    /// The connection URL of the test's database (the one the app uses).
    pub fn url(&self) -> String {
        match self {
            DbGuard::Sqlite(path) => format!("sqlite://{}", path.display()),
            DbGuard::Postgres { admin_url, name } => with_database(admin_url, name),
        }
    }
}

/// A direct connection to a test database, for reading it with SQL the way
/// an auditor would (reporting views), beside the running app.
pub enum SqlConn {
    Sqlite(sqlx::SqliteConnection),
    Postgres(PgConnection),
}

impl SqlConn {
    pub async fn connect(url: &str) -> SqlConn {
        if url.starts_with("sqlite:") {
            let conn = sqlx::SqliteConnection::connect(url)
                .await
                .expect("connect to the SQLite test database");
            SqlConn::Sqlite(conn)
        } else {
            let conn = PgConnection::connect(url)
                .await
                .expect("connect to the PostgreSQL test database");
            SqlConn::Postgres(conn)
        }
    }

    /// Runs a query whose every column is text (or NULL) and returns the rows.
    pub async fn text_rows(&mut self, sql: &str) -> Vec<Vec<Option<String>>> {
        use sqlx::Row as _;
        macro_rules! rows {
            ($conn:expr) => {{
                let rows = sqlx::query(AssertSqlSafe(sql.to_owned()))
                    .fetch_all($conn)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|row| {
                        (0..row.len())
                            .map(|i| {
                                row.try_get::<Option<String>, _>(i)
                                    .unwrap_or_else(|e| panic!("{sql}: column {i}: {e}"))
                            })
                            .collect()
                    })
                    .collect()
            }};
        }
        match self {
            SqlConn::Sqlite(conn) => rows!(&mut *conn),
            SqlConn::Postgres(conn) => rows!(&mut *conn),
        }
    }

    /// The integer a scalar query gives (a count, a sum).
    pub async fn integer(&mut self, sql: &str) -> i64 {
        let rows = self
            .text_rows(&format!("SELECT CAST(({sql}) AS TEXT)"))
            .await;
        let text = rows[0][0]
            .as_deref()
            .unwrap_or_else(|| panic!("{sql}: NULL"));
        text.parse()
            .unwrap_or_else(|e| panic!("{sql}: {text:?} is not an integer: {e}"))
    }

    /// Runs one statement; the rows it changed, or the error text.
    pub async fn execute(&mut self, sql: &str) -> Result<u64, String> {
        let sql = AssertSqlSafe(sql.to_owned());
        let result = match self {
            SqlConn::Sqlite(c) => sqlx::raw_sql(sql)
                .execute(&mut *c)
                .await
                .map(|r| r.rows_affected()),
            SqlConn::Postgres(c) => sqlx::raw_sql(sql)
                .execute(&mut *c)
                .await
                .map(|r| r.rows_affected()),
        };
        result.map_err(|e| e.to_string())
    }

    pub async fn close(self) {
        let _ = match self {
            SqlConn::Sqlite(conn) => conn.close().await,
            SqlConn::Postgres(conn) => conn.close().await,
        };
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

/// Migrates a fresh test database with Writ's own migrations only up to
/// `version`, as an older Writ left it, then runs `sql` there.
pub async fn migrate_to(url: &str, version: i64, sql: &[&str]) {
    let mut conn = if url.starts_with("sqlite:") {
        use std::str::FromStr as _;
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .expect("SQLite test URL")
            .create_if_missing(true);
        let conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("create the SQLite test database");
        SqlConn::Sqlite(conn)
    } else {
        SqlConn::connect(url).await
    };
    match &mut conn {
        SqlConn::Sqlite(c) => {
            sqlx::migrate!("migrations/sqlite")
                .run_to(version, &mut *c)
                .await
        }
        SqlConn::Postgres(c) => {
            sqlx::migrate!("migrations/postgres")
                .run_to(version, &mut *c)
                .await
        }
    }
    .unwrap_or_else(|e| panic!("migrate to {version}: {e}"));
    for statement in sql {
        if let Err(e) = conn.execute(statement).await {
            panic!("{statement}: {e}");
        }
    }
    conn.close().await;
}

pub fn sqlite_database() -> (String, DbGuard) {
    let path = std::env::temp_dir().join(format!("writ-{}.db", uuid::Uuid::new_v4()));
    (
        format!("sqlite://{}", path.display()),
        DbGuard::Sqlite(path),
    )
}

#[test]
fn database_name_is_replaced_in_postgres_urls() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgres://u:p@h/db?sslmode=disable", "x"),
        "postgres://u:p@h/x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://h:5432", "x"),
        "postgres://h:5432/x"
    );
}

/// The admin connection URL of the PostgreSQL the tests use, if any.
pub fn postgres_admin_url() -> Option<String> {
    std::env::var("WRIT_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
}
