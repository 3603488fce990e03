//! A real Writ on loopback with a fresh database (as in `tests/api`), the
//! standard fixture created through the admin API, and the bot's side of
//! the story over the JSON API.

use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::db::{DbGuard, create_postgres_database, sqlite_database};

/// Login and password of the admin every test app is bootstrapped with.
pub const ADMIN_LOGIN: &str = "root";
pub const ADMIN_PASSWORD: &str = "root-password-1";

/// The private repository `alice/widgets`: alice owns it (admin), bob may
/// write, builder-bot may write.
pub const OWNER: &str = "alice";
pub const REPO: &str = "widgets";
pub const ALICE: &str = "alice";
pub const ALICE_PW: &str = "alice-password-1";
pub const BOB: &str = "bob";
pub const BOB_PW: &str = "bob-password-1";
pub const BOT: &str = "builder-bot";
/// What the adapter's bot token carries.
pub const BOT_SCOPES: &[&str] = &["read:repository", "write:issue", "read:issue"];

/// The database engine a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The PostgreSQL admin URL from `WRIT_TEST_POSTGRES_URL`, if set.
pub use crate::db::postgres_admin_url;

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

/// A response read in full.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {}", self.status, self.body))
    }

    #[track_caller]
    pub fn assert_status(&self, expected: u16) -> &Resp {
        assert_eq!(
            self.status, expected,
            "unexpected status; body: {}",
            self.body
        );
        self
    }
}

/// A running Writ with its own database, plus the fixture's tokens.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`, also the configured public URL.
    pub base: String,
    /// A `write:admin` token of the bootstrapped admin `root`.
    pub admin_token: String,
    /// builder-bot's token with [`BOT_SCOPES`]; set by [`TestApp::fixture`].
    pub bot_token: String,
    client: Client,
    _writ: writ::Writ,
    server: tokio::task::JoinHandle<()>,
    _db: DbGuard,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestApp {
    /// Binds a loopback port, opens Writ on a fresh database, serves it and
    /// bootstraps the admin.
    pub async fn spawn(backend: Backend) -> TestApp {
        init_logs();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let base = format!("http://127.0.0.1:{port}");
        let (database_url, db) = match backend {
            Backend::Sqlite => sqlite_database(),
            Backend::Postgres => create_postgres_database().await,
        };
        let config = writ::Config {
            database_url,
            bind: format!("127.0.0.1:{port}"),
            public_url: Some(base.clone()),
            ..writ::Config::default()
        };
        let writ = writ::Writ::open(config).await.expect("open Writ");
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
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .expect("reqwest client");
        TestApp {
            base,
            admin_token,
            bot_token: String::new(),
            client,
            _writ: writ,
            server,
            _db: db,
        }
    }

    /// The standard fixture: humans alice (owner of the private repository
    /// alice/widgets) and bob (write collaborator), builder-bot (write
    /// collaborator) with a token of [`BOT_SCOPES`].
    pub async fn fixture(&mut self) {
        self.create_user(ALICE, "human", Some(ALICE_PW)).await;
        self.create_user(BOB, "human", Some(BOB_PW)).await;
        self.create_user(BOT, "bot", None).await;
        let repo = self
            .admin(
                Method::POST,
                "/api/v1/admin/repos",
                json!({"owner": OWNER, "name": REPO, "private": true}),
            )
            .await;
        repo.assert_status(201);
        for (login, permission) in [(BOB, "write"), (BOT, "write")] {
            let path = format!("/api/v1/repos/{OWNER}/{REPO}/collaborators/{login}");
            self.admin(Method::PUT, &path, json!({"permission": permission}))
                .await
                .assert_status(204);
        }
        let path = format!("/api/v1/admin/users/{BOT}/tokens");
        let token = self
            .admin(
                Method::POST,
                &path,
                json!({"name": "adapter", "scopes": BOT_SCOPES}),
            )
            .await;
        token.assert_status(201);
        self.bot_token = token.json()["token"].as_str().expect("token").to_owned();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends one JSON request with `Authorization: token <token>`.
    pub async fn send(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> Resp {
        let mut request = self
            .client
            .request(method, self.url(path))
            .header("Authorization", format!("token {token}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("send request");
        let status = response.status().as_u16();
        let body = response.text().await.expect("read body");
        Resp { status, body }
    }

    async fn admin(&self, method: Method, path: &str, body: Value) -> Resp {
        self.send(method, path, &self.admin_token, Some(body)).await
    }

    async fn create_user(&self, login: &str, kind: &str, password: Option<&str>) {
        let mut body = json!({"login": login, "kind": kind});
        if let Some(password) = password {
            body["password"] = json!(password);
        }
        self.admin(Method::POST, "/api/v1/admin/users", body)
            .await
            .assert_status(201);
    }

    /// A human who is a site administrator and an admin of alice/widgets.
    pub async fn add_site_admin(&self, login: &str, password: &str) {
        let body = json!({"login": login, "kind": "human", "password": password, "is_admin": true});
        self.admin(Method::POST, "/api/v1/admin/users", body)
            .await
            .assert_status(201);
        let path = format!("/api/v1/repos/{OWNER}/{REPO}/collaborators/{login}");
        self.admin(Method::PUT, &path, json!({"permission": "admin"}))
            .await
            .assert_status(204);
    }

    /// The admin sets an MCP's health.
    pub async fn set_mcp_health(&self, mcp_id: &str, installed: bool, healthy: bool) {
        let path = format!("/api/v1/admin/mcp/{mcp_id}/health");
        let body = json!({"installed": installed, "healthy": healthy, "detail": "set by the browser test"});
        self.admin(Method::PUT, &path, body)
            .await
            .assert_status(200);
    }

    // -- The bot, over the JSON API --------------------------------------

    /// builder-bot reads grant `id` of alice/widgets: the response.
    pub async fn read_grant(&self, id: i64) -> Resp {
        self.send(Method::GET, &grant_path(id), &self.bot_token, None)
            .await
    }

    /// builder-bot reads grant `id`: the `grant` object.
    pub async fn grant(&self, id: i64) -> Value {
        let resp = self.read_grant(id).await;
        resp.assert_status(200);
        resp.json()["grant"].clone()
    }

    /// builder-bot confirms grant `id` with this digest: the response.
    pub async fn confirm_with(&self, id: i64, digest: &str) -> Resp {
        let body = json!({
            "proposal_schema": "agent_work_grant.v1",
            "proposal_version": 1,
            "proposal_digest": digest,
        });
        let path = format!("{}/confirm", grant_path(id));
        self.send(Method::POST, &path, &self.bot_token, Some(body))
            .await
    }

    /// builder-bot confirms grant `id` with its current digest; expects 200.
    pub async fn confirm(&self, id: i64) -> Value {
        let grant = self.grant(id).await;
        let digest = grant["proposal_digest"]
            .as_str()
            .expect("digest")
            .to_owned();
        let resp = self.confirm_with(id, &digest).await;
        resp.assert_status(200);
        resp.json()["grant"].clone()
    }

    /// builder-bot files an issue under grant `id` with a new request key;
    /// expects 201: the response.
    pub async fn submit(&self, id: i64, title: &str) -> Value {
        let grant = self.grant(id).await;
        let body = json!({
            "proposal_schema": "agent_work_grant.v1",
            "proposal_version": 1,
            "proposal_digest": grant["proposal_digest"],
            "request_key": uuid::Uuid::new_v4().to_string(),
            "title": title,
            "body": "Found while working under the grant.",
        });
        let path = format!("{}/issues", grant_path(id));
        let resp = self
            .send(Method::POST, &path, &self.bot_token, Some(body))
            .await;
        resp.assert_status(201);
        resp.json()
    }

    /// Every grant of builder-bot, in any state.
    pub async fn bot_grants(&self) -> Vec<Value> {
        let resp = self
            .send(
                Method::GET,
                "/api/v1/agent-work-grants?state=all&limit=50",
                &self.bot_token,
                None,
            )
            .await;
        resp.assert_status(200);
        let json = resp.json();
        json.as_array()
            .or_else(|| json["grants"].as_array())
            .or_else(|| json["items"].as_array())
            .unwrap_or_else(|| panic!("a list of grants: {}", resp.body))
            .clone()
    }

    /// Reads grant `id` again and asserts it is exactly `before`.
    pub async fn assert_unchanged(&self, id: i64, before: &Value) {
        let after = self.grant(id).await;
        assert_eq!(before, &after, "grant {id} changed");
    }
}

/// `/api/v1/repos/alice/widgets/agent-work-grants/{id}`
pub fn grant_path(id: i64) -> String {
    format!("/api/v1/repos/{OWNER}/{REPO}/agent-work-grants/{id}")
}

/// `/alice/widgets/agent-work-grants/{id}`: the grant page.
pub fn page_path(id: i64) -> String {
    format!("/{OWNER}/{REPO}/agent-work-grants/{id}")
}
