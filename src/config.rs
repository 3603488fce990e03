//! Layered configuration: embedded defaults, then a TOML file, then `WRIT_*`
//! environment variables, then command-line flags (applied by `main`).

use std::fmt;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::domain::time::Clock;

/// Every setting of a Writ process.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `sqlite://PATH` or `postgres://...`.
    pub database_url: String,
    /// Address `writ serve` listens on.
    pub bind: String,
    /// Absolute URL clients use to reach Writ; defaults to `http://` + bind.
    pub public_url: Option<String>,
    /// `text` or `json` log lines.
    pub log_format: String,
    /// Largest page size of list routes; larger requests are clamped.
    pub max_page_limit: u32,
    /// SQLite `synchronous` pragma: `full` (default) or `normal`.
    pub sqlite_synchronous: String,
    /// SQLite group commit: concurrent write transactions share one durable
    /// commit (each still atomic, each answered only after it). Default on.
    pub sqlite_group_commit: bool,
    /// SQLite with group commit: whether the audit records of calls that
    /// changed nothing (reads, refusals), when no write shares their commit,
    /// are committed with `fsync` like every write (`true`), or only written
    /// to the WAL and made durable by the next write's commit (`false`, the
    /// default: a killed process loses none; a power loss can lose the last
    /// ones). See ADR 0017 in docs/adr/.
    pub sqlite_durable_read_records: bool,
    /// SQLite: the most pages (of 4 KiB) the database file may grow to
    /// (`PRAGMA max_page_count` on the writer's connection); a write that
    /// would grow it further fails like a full disk (503
    /// `storage_unavailable`). Unset: SQLite's own limit.
    pub sqlite_max_page_count: Option<u64>,
    /// PostgreSQL: whether the audit records of calls that changed nothing
    /// (reads, refusals), each appended in a statement of its own, wait for
    /// the WAL flush (`true`), or commit with `synchronous_commit = off`
    /// (`false`, the default: a killed Writ process loses none; a crash of
    /// the PostgreSQL server can lose the last ones, never a write). See
    /// ADR 0017 in docs/adr/.
    pub postgres_durable_read_records: bool,
    /// Maximum pooled database connections.
    pub max_connections: u32,
    /// Sliding lifetime of a browser session, in seconds.
    pub session_idle_seconds: i64,
    /// Absolute cap on a browser session's lifetime, in seconds.
    pub session_absolute_seconds: i64,
    /// Lifetime of a form nonce, in seconds.
    pub nonce_seconds: i64,
    /// Failed logins for one login within `login_throttle_seconds` before
    /// further attempts are refused.
    pub login_throttle_failures: i64,
    /// Window of the login throttle, in seconds.
    pub login_throttle_seconds: i64,
    /// Failed logins for one login, from all addresses together, within
    /// `login_throttle_seconds` before attempts from addresses that never
    /// logged in as that user are refused (guessing spread over many
    /// addresses). `login_throttle_failures` applies per (login, address).
    pub login_throttle_login_ceiling: i64,
    /// Password hashes a process runs at once; 0 means one per core.
    pub login_hash_concurrency: u32,
    /// How long a login waits for a free hashing slot before it is
    /// answered 503 with `Retry-After`, in milliseconds.
    pub login_hash_wait_ms: u64,
    /// Pre-login sessions (login page visits without a session) kept per
    /// client address; the oldest beyond this are deleted.
    pub prelogin_sessions_per_address: i64,
    /// Pre-login sessions kept in all; the oldest beyond this are deleted.
    pub prelogin_sessions_total: i64,
    /// Reverse proxies (IP addresses or CIDR networks) whose
    /// `X-Forwarded-For` names the client; from any other peer it is ignored.
    pub trusted_proxies: Vec<String>,
    /// Seconds a connection may take to send a request's headers.
    pub header_read_timeout_seconds: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    pub idle_timeout_seconds: u64,
    /// Open HTTP connections at most (never more than the descriptor limit
    /// allows; see docs/runbook.md). Not `max_connections`, which is the
    /// database pool.
    pub max_connections_total: u32,
    /// Open HTTP connections from one client address at most (trusted
    /// proxies are exempt).
    pub max_connections_per_address: u32,
    /// Fewest characters a human's password may have, on every path that
    /// sets one (admin API, `writ admin user`, `writ admin bootstrap`).
    pub min_password_length: usize,
    /// An operator's MCP capability catalog (TOML) replacing the embedded one.
    pub catalog_file: Option<String>,
    /// MCP id → URL the built-in prober polls (2xx = healthy).
    pub mcp_probes: std::collections::BTreeMap<String, String>,
    /// Seconds between two probes.
    pub mcp_probe_seconds: u64,
    /// A TOML policy file of per-agent MCP tool grants, applied at
    /// `writ serve` start (`docs/policy.md`).
    pub policy_file: Option<String>,
    /// Webhook delivery (`[webhooks]`, docs/events.md).
    pub webhooks: WebhookSettings,
    /// Sealing of the audit records (`[audit]`, docs/audit.md).
    pub audit: AuditSettings,
    /// The clock every use case reads; only a debug build's tests move it
    /// (see [`Clock`]). Not a setting of any file or variable.
    #[serde(skip)]
    pub clock: Clock,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: "sqlite://writ.db".to_owned(),
            bind: "127.0.0.1:3000".to_owned(),
            public_url: None,
            log_format: "text".to_owned(),
            max_page_limit: 50,
            sqlite_synchronous: "full".to_owned(),
            sqlite_group_commit: true,
            sqlite_durable_read_records: false,
            sqlite_max_page_count: None,
            postgres_durable_read_records: false,
            max_connections: 16,
            session_idle_seconds: 7 * 24 * 3600,
            session_absolute_seconds: 30 * 24 * 3600,
            nonce_seconds: 30 * 60,
            login_throttle_failures: 5,
            login_throttle_seconds: 15 * 60,
            login_throttle_login_ceiling: 50,
            login_hash_concurrency: 0,
            login_hash_wait_ms: 2000,
            prelogin_sessions_per_address: 32,
            prelogin_sessions_total: 10_000,
            trusted_proxies: Vec::new(),
            header_read_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            max_connections_total: 4096,
            max_connections_per_address: 256,
            min_password_length: 12,
            catalog_file: None,
            mcp_probes: Default::default(),
            mcp_probe_seconds: 30,
            policy_file: None,
            webhooks: WebhookSettings::default(),
            audit: AuditSettings::default(),
            clock: Clock::default(),
        }
    }
}

/// The `[webhooks]` settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Permits targets on loopback, link-local, private, unspecified and
    /// IPv4-mapped addresses, and `http://` URLs (tests, internal networks).
    pub allow_private_targets: bool,
    /// Seconds before each retry (the last one repeats), each moved by up
    /// to ±20 % at random.
    pub retry_schedule_seconds: Vec<u64>,
    /// A delivery still failing this long after its event is `failed`.
    pub give_up_after_seconds: u64,
    /// Host name → addresses, resolved here instead of by the system
    /// resolver (tests; pinning a receiver).
    pub hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
    /// Who resolves a target's name that is not in `hosts`: the system
    /// resolver, or nobody (`static`: such a name does not resolve; tests
    /// and harnesses, so no name of theirs reaches a real resolver).
    pub resolver: Resolver,
    /// Whether this process delivers (every process sharing a database may).
    pub deliver: bool,
    /// PEM certificates trusted for HTTPS targets besides the system roots.
    pub extra_ca_file: Option<String>,
}

/// The `[audit]` settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Whether this process seals (every process sharing a database may:
    /// one at a time seals, by lease).
    pub seal: bool,
    /// Seconds between two sealing rounds.
    pub seal_interval_seconds: u64,
    /// Seconds after its call a record without an outcome is sealed as it
    /// is (its call died); an outcome arriving later is refused.
    pub seal_grace_seconds: u64,
    /// A file holding an Ed25519 secret key (32 bytes as 64 hex digits,
    /// `writ audit new-key`); when set, every seal is signed with it.
    pub signing_key_file: Option<String>,
    /// Archive and delete, on the sealer's schedule, the records of seals
    /// made more than this many days ago (needs `archive_dir`); off when
    /// unset.
    pub retain_days: Option<u64>,
    /// The directory retention writes its archives to.
    pub archive_dir: Option<String>,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            seal: true,
            seal_interval_seconds: 10,
            seal_grace_seconds: 300,
            signing_key_file: None,
            retain_days: None,
            archive_dir: None,
        }
    }
}

/// `webhooks.resolver`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Resolver {
    /// `hosts` first, then the system resolver.
    System,
    /// `hosts` only.
    Static,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            allow_private_targets: false,
            retry_schedule_seconds: vec![5, 30, 120, 600, 3600, 6 * 3600],
            give_up_after_seconds: 24 * 3600,
            hosts: Default::default(),
            resolver: Resolver::System,
            deliver: true,
            extra_ca_file: None,
        }
    }
}

impl Config {
    /// Defaults, then `file` (if given), then `WRIT_*` environment variables.
    pub fn load(file: Option<&Path>) -> Result<Config, Box<figment::Error>> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        figment
            .merge(Env::prefixed("WRIT_").filter(|key| {
                // Variables of the adapter, the logger and the test harnesses
                // share the prefix but are not settings. Keys keep the
                // variable's case (`LOG`), so compare in lowercase.
                let key = key.as_str().to_ascii_lowercase();
                let key = key.as_str();
                !matches!(key, "token" | "log")
                    && !key.starts_with("test_")
                    && !key.starts_with("harness_")
            }))
            .extract()
            .map_err(Box::new)
    }

    /// The public base URL without a trailing slash.
    pub fn public_base(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", self.bind),
        }
    }

    /// `scheme://host[:port]` of the public URL, the only origin forms accept.
    pub fn public_origin(&self) -> String {
        let base = self.public_base();
        match base.find("://") {
            Some(i) => match base[i + 3..].find('/') {
                Some(j) => base[..i + 3 + j].to_owned(),
                None => base,
            },
            None => base,
        }
    }

    /// True when cookies must carry `Secure`.
    pub fn public_is_https(&self) -> bool {
        self.public_base().starts_with("https://")
    }
}

/// Debug never prints credentials embedded in the database URL.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field("bind", &self.bind)
            .field("public_url", &self.public_url)
            .field("log_format", &self.log_format)
            .field("max_page_limit", &self.max_page_limit)
            .field("sqlite_synchronous", &self.sqlite_synchronous)
            .field("sqlite_group_commit", &self.sqlite_group_commit)
            .field(
                "sqlite_durable_read_records",
                &self.sqlite_durable_read_records,
            )
            .field(
                "postgres_durable_read_records",
                &self.postgres_durable_read_records,
            )
            .field("max_connections", &self.max_connections)
            .field("webhooks", &self.webhooks)
            .field("audit", &self.audit)
            .finish_non_exhaustive()
    }
}

/// Replaces the password of `scheme://user:password@host` with `***`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}://{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("sqlite://writ.db"), "sqlite://writ.db");
    }

    #[test]
    fn origin_of_public_url() {
        let config = Config {
            public_url: Some("https://writ.example/base/".into()),
            ..Config::default()
        };
        assert_eq!(config.public_origin(), "https://writ.example");
        assert_eq!(config.public_base(), "https://writ.example/base");
    }
}
