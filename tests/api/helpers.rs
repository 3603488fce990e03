//! The harness: a real Writ served on loopback, a fresh database per test,
//! and thin HTTP helpers for the JSON API and the setup (admin) API.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::HeaderMap;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::db::{DbGuard, create_postgres_database, migrate_to, sqlite_database};

/// Login and password of the admin every test app is bootstrapped with.
pub const ADMIN_LOGIN: &str = "root";
pub const ADMIN_PASSWORD: &str = "root-password-1";

/// Longest a single test body may run before it fails instead of hanging.
const TEST_TIME_LIMIT: Duration = Duration::from_secs(300);

/// The database engine a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The PostgreSQL admin URL from `WRIT_TEST_POSTGRES_URL`, if set.
pub use crate::db::postgres_admin_url;

/// A fresh database of `backend`: its URL and the guard that removes it.
async fn new_database(backend: Backend) -> (String, DbGuard) {
    match backend {
        Backend::Sqlite => sqlite_database(),
        Backend::Postgres => create_postgres_database().await,
    }
}

/// Reports a skipped PostgreSQL test; fails it instead when
/// `WRIT_TEST_REQUIRE_POSTGRES` is set (as CI does).
pub fn skip_postgres() {
    if std::env::var_os("WRIT_TEST_REQUIRE_POSTGRES").is_some_and(|v| !v.is_empty()) {
        panic!("WRIT_TEST_REQUIRE_POSTGRES is set but WRIT_TEST_POSTGRES_URL is unset");
    }
    eprintln!("skipped: WRIT_TEST_POSTGRES_URL unset");
}

/// Runs a test body, failing it if it takes longer than the time limit.
pub async fn within_time_limit(body: impl Future<Output = ()>) {
    if tokio::time::timeout(TEST_TIME_LIMIT, body).await.is_err() {
        panic!("test did not finish within {TEST_TIME_LIMIT:?}");
    }
}

fn init_logs() {
    if std::env::var_os("TEST_LOG").is_some() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// How a request authenticates.
#[derive(Clone, Copy, Debug)]
pub enum Auth<'a> {
    None,
    /// `Authorization: token <t>`
    Token(&'a str),
    /// `Authorization: Bearer <t>`
    Bearer(&'a str),
    /// `Authorization: Basic base64(login:secret)`
    Basic(&'a str, &'a str),
    /// The whole `Authorization` header value as given.
    Raw(&'a str),
}

impl Auth<'_> {
    fn header(&self) -> Option<String> {
        match self {
            Auth::None => None,
            Auth::Token(t) => Some(format!("token {t}")),
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Basic(login, secret) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{login}:{secret}"))
            )),
            Auth::Raw(value) => Some((*value).to_owned()),
        }
    }
}

/// A request body.
pub enum Body {
    None,
    Json(Value),
    /// Raw bytes with an optional `Content-Type`.
    Raw(Option<&'static str>, Vec<u8>),
}

/// A response read in full.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Resp {
    pub async fn read(response: reqwest::Response) -> Resp {
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.expect("read response body");
        Resp {
            status,
            headers,
            body,
        }
    }

    /// The body as JSON; panics with the body when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {}", self.status, self.body))
    }

    /// The error `code` of a JSON error body.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// A header value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("header is text").to_owned())
    }

    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn assert_status(&self, expected: u16) -> &Resp {
        assert_eq!(
            self.status.as_u16(),
            expected,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts status and error code.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> &Resp {
        self.assert_status(status);
        assert_eq!(
            self.code(),
            code,
            "unexpected error code; body: {}",
            self.body
        );
        self
    }
}

/// A token created through the admin API.
#[derive(Clone, Debug)]
pub struct Token {
    pub id: i64,
    pub token: String,
}

/// A running Writ with its own database.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`, also the configured public URL.
    pub base: String,
    /// A `write:admin` token of the bootstrapped admin `root`.
    pub admin_token: String,
    pub backend: Backend,
    /// A plain client: no cookies, no redirects followed.
    pub client: Client,
    /// The demo dataset, when spawned with [`TestApp::spawn_demo`].
    pub demo: Option<writ::service::demo::DemoInfo>,
    writ: writ::Writ,
    server: tokio::task::JoinHandle<()>,
    _db: DbGuard,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
        for dir in scratch_dirs(&self.writ.ctx().config) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The scratch directories a test's config names (a signing key's, an
/// archive directory): `writ-*` directories directly in the system's
/// temporary directory, removed with the app.
fn scratch_dirs(config: &writ::Config) -> Vec<std::path::PathBuf> {
    let temp = std::env::temp_dir();
    let key_dir = config
        .audit
        .signing_key_file
        .as_deref()
        .and_then(|file| std::path::Path::new(file).parent().map(|d| d.to_path_buf()));
    let archive_dir = config
        .audit
        .archive_dir
        .as_deref()
        .map(std::path::PathBuf::from);
    [key_dir, archive_dir]
        .into_iter()
        .flatten()
        .filter(|dir| {
            dir.parent() == Some(temp.as_path())
                && dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("writ-"))
        })
        .collect()
}

/// A second Writ serving the same database as a [`TestApp`], as another
/// process behind the same public URL would.
pub struct Replica {
    /// `http://127.0.0.1:<port>` of this server (its public URL is the app's).
    pub base: String,
    _writ: writ::Writ,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A client that never follows redirects and never hangs for long.
pub fn plain_client(cookies: bool) -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .cookie_store(cookies)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}

impl TestApp {
    /// Binds a port, opens Writ on a fresh database, serves it, and
    /// bootstraps the admin.
    pub async fn spawn(backend: Backend) -> TestApp {
        TestApp::spawn_with(backend, |_| {}).await
    }

    /// Like [`TestApp::spawn`], with the configuration adjusted first.
    pub async fn spawn_with(
        backend: Backend,
        configure: impl FnOnce(&mut writ::Config),
    ) -> TestApp {
        let (database_url, db) = new_database(backend).await;
        TestApp::spawn_on(backend, database_url, db, configure, false).await
    }

    /// Like [`TestApp::spawn`], with the demo dataset `serve --demo` seeds
    /// into the empty database (before the admin is bootstrapped).
    pub async fn spawn_demo(backend: Backend) -> TestApp {
        let (database_url, db) = new_database(backend).await;
        TestApp::spawn_on(backend, database_url, db, |_| {}, true).await
    }

    /// Like [`TestApp::spawn`], on a database first migrated only up to
    /// `version` and given `sql` there (as an older Writ left it): Writ
    /// then opens it and runs the later migrations, as an upgrade does.
    pub async fn spawn_upgraded(backend: Backend, version: i64, sql: &[&str]) -> TestApp {
        let (database_url, db) = new_database(backend).await;
        migrate_to(&database_url, version, sql).await;
        TestApp::spawn_on(backend, database_url, db, |_| {}, false).await
    }

    /// Opens Writ on `database_url` (removed with `db`), serves it, and
    /// bootstraps the admin.
    async fn spawn_on(
        backend: Backend,
        database_url: String,
        db: DbGuard,
        configure: impl FnOnce(&mut writ::Config),
        seed_demo: bool,
    ) -> TestApp {
        init_logs();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let base = format!("http://127.0.0.1:{port}");
        let mut config = writ::Config {
            database_url,
            bind: format!("127.0.0.1:{port}"),
            public_url: Some(base.clone()),
            ..writ::Config::default()
        };
        // No test's target name ever reaches the system resolver.
        config.webhooks.resolver = writ::config::Resolver::Static;
        configure(&mut config);
        let writ = writ::Writ::open(config).await.expect("open Writ");
        let demo = if seed_demo {
            writ::service::demo::seed_if_empty(writ.ctx())
                .await
                .expect("seed the demo")
        } else {
            None
        };
        let admin_token = writ
            .bootstrap_admin(ADMIN_LOGIN, Some(ADMIN_PASSWORD))
            .await
            .expect("bootstrap admin");
        let served = writ.clone();
        let server = tokio::spawn(async move {
            served
                .serve(listener, std::future::pending())
                .await
                .expect("serve");
        });
        TestApp {
            base,
            admin_token,
            backend,
            client: plain_client(false),
            demo,
            writ,
            server,
            _db: db,
        }
    }

    /// Serves the same database from a second Writ (same public URL).
    pub async fn spawn_replica(&self) -> Replica {
        self.spawn_replica_with(|_| {}).await
    }

    /// Like [`TestApp::spawn_replica`], with the configuration adjusted
    /// first.
    pub async fn spawn_replica_with(&self, configure: impl FnOnce(&mut writ::Config)) -> Replica {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let mut config = writ::Config {
            database_url: self.database_url(),
            bind: format!("127.0.0.1:{port}"),
            public_url: Some(self.base.clone()),
            webhooks: self.writ.ctx().config.webhooks.clone(),
            ..writ::Config::default()
        };
        configure(&mut config);
        let writ = writ::Writ::open(config).await.expect("open the replica");
        let served = writ.clone();
        let server = tokio::spawn(async move {
            served
                .serve(listener, std::future::pending())
                .await
                .expect("serve");
        });
        Replica {
            base: format!("http://127.0.0.1:{port}"),
            _writ: writ,
            server,
        }
    }

    /// The URL of this app's own database, for reading it directly with SQL.
    pub fn database_url(&self) -> String {
        self._db.url()
    }

    /// The loopback port the app listens on.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in the base URL")
    }

    /// The absolute URL of a path.
    /// The Writ instance behind this app (for background tasks in tests).
    pub fn writ(&self) -> &writ::Writ {
        &self.writ
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends one request and reads the whole response.
    pub async fn send(&self, method: Method, path: &str, auth: Auth<'_>, body: Body) -> Resp {
        // A server may close the connection after refusing a body it did not
        // read; keep such requests off the shared connection pool.
        let oversized = matches!(&body, Body::Raw(_, bytes) if bytes.len() > 512 * 1024);
        let client = if oversized {
            plain_client(false)
        } else {
            self.client.clone()
        };
        let mut request = client.request(method, self.url(path));
        if let Some(value) = auth.header() {
            request = request.header("Authorization", value);
        }
        request = match body {
            Body::None => request,
            Body::Json(value) => request.json(&value),
            Body::Raw(content_type, bytes) => {
                let request = match content_type {
                    Some(ct) => request.header("Content-Type", ct),
                    None => request,
                };
                request.body(bytes)
            }
        };
        Resp::read(request.send().await.expect("send request")).await
    }

    pub async fn get(&self, path: &str, auth: Auth<'_>) -> Resp {
        self.send(Method::GET, path, auth, Body::None).await
    }

    pub async fn post_json(&self, path: &str, auth: Auth<'_>, body: Value) -> Resp {
        self.send(Method::POST, path, auth, Body::Json(body)).await
    }

    async fn admin(&self, method: Method, path: &str, body: Value) -> Resp {
        self.send(
            method,
            path,
            Auth::Token(&self.admin_token),
            Body::Json(body),
        )
        .await
    }

    /// Creates a user; `password` only for humans.
    pub async fn create_user(&self, login: &str, kind: &str, password: Option<&str>) -> Value {
        let mut body = json!({"login": login, "kind": kind});
        if let Some(password) = password {
            body["password"] = json!(password);
        }
        let resp = self.admin(Method::POST, "/api/v1/admin/users", body).await;
        resp.assert_status(201);
        let user = resp.json();
        assert_eq!(user["login"], login);
        assert_eq!(user["kind"], kind);
        user
    }

    /// Creates a token from a full request body (`name`, `scopes`, reducers).
    pub async fn create_token_with(&self, login: &str, body: Value) -> Token {
        let path = format!("/api/v1/admin/users/{login}/tokens");
        let resp = self.admin(Method::POST, &path, body).await;
        resp.assert_status(201);
        let json = resp.json();
        Token {
            id: json["id"].as_i64().expect("token id"),
            token: json["token"].as_str().expect("token").to_owned(),
        }
    }

    /// Creates a token with these scopes and no resource reducer.
    pub async fn create_token(&self, login: &str, scopes: &[&str]) -> Token {
        let name = format!("t-{}", uuid::Uuid::new_v4().simple());
        self.create_token_with(login, json!({"name": name, "scopes": scopes}))
            .await
    }

    pub async fn delete_token(&self, login: &str, id: i64) {
        let path = format!("/api/v1/admin/users/{login}/tokens/{id}");
        self.admin(Method::DELETE, &path, Value::Null)
            .await
            .assert_status(204);
    }

    pub async fn create_repo(&self, owner: &str, name: &str, private: bool) -> Value {
        let body = json!({"owner": owner, "name": name, "private": private});
        let resp = self.admin(Method::POST, "/api/v1/admin/repos", body).await;
        resp.assert_status(201);
        let repo = resp.json();
        assert_eq!(repo["full_name"], format!("{owner}/{name}"));
        repo
    }

    pub async fn set_collaborator(&self, owner: &str, repo: &str, login: &str, permission: &str) {
        let path = format!("/api/v1/repos/{owner}/{repo}/collaborators/{login}");
        self.admin(Method::PUT, &path, json!({"permission": permission}))
            .await
            .assert_status(204);
    }

    pub async fn remove_collaborator(&self, owner: &str, repo: &str, login: &str) {
        let path = format!("/api/v1/repos/{owner}/{repo}/collaborators/{login}");
        self.send(
            Method::DELETE,
            &path,
            Auth::Token(&self.admin_token),
            Body::None,
        )
        .await
        .assert_status(204);
    }
}

/// `/api/v1/repos/{owner}/{repo}/agent-work-grants/{id}`
pub fn grant_path(owner: &str, repo: &str, id: impl std::fmt::Display) -> String {
    format!("/api/v1/repos/{owner}/{repo}/agent-work-grants/{id}")
}

/// The body of a confirm request for a digest.
pub fn confirm_body(digest: &str) -> Value {
    json!({
        "proposal_schema": "agent_work_grant.v1",
        "proposal_version": 1,
        "proposal_digest": digest,
    })
}

/// A well-formed digest that is no grant's digest.
pub const OTHER_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A loopback address (`127.0.0.1:port`) nothing listens on now, for a
/// `writ serve` child process to bind.
pub fn free_loopback_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    format!("127.0.0.1:{port}")
}

/// Waits (at most 20 s) until the `writ serve` child bound to `bind`
/// answers `/readyz` with a 2xx; panics if the child exits first.
pub async fn await_ready(client: &Client, bind: &str, child: &mut tokio::process::Child) {
    let ready = format!("http://{bind}/readyz");
    for _ in 0..200 {
        if let Ok(r) = client.get(&ready).send().await
            && r.status().is_success()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("writ serve exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("writ serve did not become ready on {bind}");
}

/// The `writ` binary with `args` against the database at `database_url`
/// (warnings only in its log, killed when dropped, no stdin).
pub fn writ_command(database_url: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.arg("--database-url")
        .arg(database_url)
        .args(args)
        .env("WRIT_LOG", "warn")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    cmd
}
