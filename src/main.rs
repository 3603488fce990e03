//! `writ`: the command line. Serve, migrate, and the setup privilege.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use writ::service::admin::{
    self, CollaboratorInput, NewRepoInput, NewTokenInput, NewUserInput, Setup,
};
use writ::{Config, Writ};

/// mimalloc instead of glibc's malloc: a grant read spent a quarter of its
/// instructions in glibc's malloc and free (ADR 0023 in docs/adr/).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v2 and v3 alike;
/// the unit test below checks it is the option whose default is v3's
/// 1000 ms). libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc give memory freed in whole pages back to the OS at once
/// instead of after a second. A login's argon2 hash takes 19 MiB; on an
/// idle blocking thread that memory stayed resident, and two of them put
/// the server's peak RSS at 68–75 MiB in the bench's first row (37–39 MiB
/// with this; no change in throughput, ADR 0023 in docs/adr/).
fn return_freed_memory_promptly() {
    // SAFETY: mi_option_set stores an integer in mimalloc's option table (an
    // atomic store); any option index and value are accepted.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

#[derive(Parser)]
#[command(
    name = "writ",
    version,
    about = "The durable ledger of native agent work grants"
)]
struct Cli {
    /// TOML file with any setting (environment variables WRIT_* override it).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// sqlite://PATH or postgres://... (default sqlite://writ.db).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// `text` or `json` log lines.
    #[arg(long, global = true)]
    log_format: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve {
        /// Listen address (default 127.0.0.1:3000).
        #[arg(long)]
        bind: Option<String>,
        /// Public base URL (default http:// + bind).
        #[arg(long)]
        public_url: Option<String>,
        /// Seed a small demo dataset when the database has no user.
        #[arg(long)]
        demo: bool,
        /// TOML policy file of per-agent MCP tool grants, applied at start.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Setup privilege on the database directly.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Stream a reporting view (receipts, grants, admissions, tool-calls, webhook-deliveries).
    Report(ReportArgs),
    /// The MCP adapter over stdio: the five agent tools, each call one
    /// request to the Core at --url (token from WRIT_TOKEN or --token-file).
    McpStdio(McpStdioArgs),
    /// Write a consistent, checked copy of the SQLite database while Writ
    /// serves (PostgreSQL: use pg_dump or base backups, see the runbook).
    Backup {
        /// The backup file to write (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Put a backup in place as the database of --database-url (which must
    /// not exist), after checking it.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
    },
    /// Check the database: SQLite's integrity checks, the audit seals and
    /// the receipt invariants; exits 1 naming what does not hold. Changes
    /// nothing.
    Check,
    /// Seals over the audit records (docs/audit.md): verify them, seal
    /// now, or make a signing key.
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Recompute every seal from the records in the database; exits 1
    /// naming the first seal and record that do not match. Changes nothing.
    Verify {
        /// Start at this seal (trusting the one before it).
        #[arg(long, default_value_t = 1, conflicts_with = "archive")]
        from: i64,
        /// Verify this archive file instead, offline; with --database-url
        /// also check that its seals are that database's.
        #[arg(long)]
        archive: Option<PathBuf>,
    },
    /// Write the records of every seal not archived yet through
    /// --through-seal to a file (JSON Lines, zstd), verify the file, then
    /// delete those records from the database in one transaction.
    Archive {
        /// The last seal to archive.
        #[arg(long)]
        through_seal: i64,
        /// The archive file to write (must not exist), e.g. audit-1-40.jsonl.zst.
        #[arg(long)]
        out: PathBuf,
    },
    /// Seal every final record not sealed yet, now (what `writ serve` does
    /// every audit.seal_interval_seconds).
    Seal,
    /// Write a new Ed25519 signing key to a file (for
    /// audit.signing_key_file) and print its key id.
    NewKey {
        /// The key file to write (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
struct McpStdioArgs {
    /// The Core's base URL, e.g. http://127.0.0.1:3000.
    #[arg(long)]
    url: String,
    /// Read the bot's token from this file instead of WRIT_TOKEN.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Send the token as this login's password (HTTP Basic) instead of Bearer.
    #[arg(long)]
    basic_user: Option<String>,
    /// Timeout of one request, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_seconds: u64,
}

async fn mcp_stdio(args: McpStdioArgs) -> anyhow::Result<()> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read --token-file {}: {e}", path.display()))?,
        None => std::env::var("WRIT_TOKEN")
            .map_err(|_| anyhow::anyhow!("set WRIT_TOKEN or pass --token-file"))?,
    };
    let config = writ::adapter::AdapterConfig::new(
        &args.url,
        &token,
        args.basic_user.as_deref(),
        std::time::Duration::from_secs(args.timeout_seconds.max(1)),
    )?;
    writ::adapter::run_stdio(config).await
}

#[derive(Args)]
struct ReportArgs {
    /// receipts, grants, admissions, tool-calls or webhook-deliveries
    name: String,
    /// Only this repository (owner/name).
    #[arg(long)]
    repo: Option<String>,
    /// Only this agent login.
    #[arg(long)]
    agent: Option<String>,
    /// From this RFC 3339 time (inclusive).
    #[arg(long)]
    since: Option<String>,
    /// Until this RFC 3339 time (exclusive).
    #[arg(long)]
    until: Option<String>,
    /// table, csv or json
    #[arg(long, default_value = "table")]
    format: String,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create the first admin (a human) and print only its write:admin token.
    Bootstrap {
        #[arg(long)]
        login: String,
        #[arg(long)]
        password: Option<String>,
    },
    /// Create a user.
    User(UserArgs),
    /// Create a token (printed once) or revoke one.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Create a repository.
    Repo(RepoArgs),
    /// Add, change or remove a collaborator.
    #[command(subcommand)]
    Collaborator(CollaboratorCommand),
    /// Set an MCP's health (installed, healthy, detail).
    McpHealth {
        /// MCP id, e.g. filesystem
        #[arg(long)]
        mcp: String,
        #[arg(long)]
        installed: bool,
        #[arg(long)]
        healthy: bool,
        #[arg(long, default_value = "")]
        detail: String,
    },
    /// Read or replace a bot's MCP tool grants.
    #[command(subcommand)]
    ToolGrants(ToolGrantsCommand),
    /// Webhook subscriptions (docs/events.md): list, create, change,
    /// delete, rotate the secret, read deliveries, retry one.
    #[command(subcommand)]
    Webhook(WebhookCommand),
}

#[derive(Subcommand)]
enum WebhookCommand {
    /// Print every subscription as JSON lines.
    List,
    /// Create one; prints it with its signing secret (shown only now).
    Create {
        #[arg(long)]
        url: String,
        /// An event type or `prefix.*` (repeatable; none: every type).
        #[arg(long = "type")]
        types: Vec<String>,
        /// `owner/name` or `owner/*` (repeatable; none: every repository).
        #[arg(long = "repo")]
        repos: Vec<String>,
        /// standard or slack
        #[arg(long, default_value = "standard")]
        format: String,
        #[arg(long, default_value = "")]
        description: String,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
    },
    /// Enable or disable one.
    Set {
        #[arg(long)]
        id: i64,
        #[arg(long)]
        enabled: bool,
    },
    /// Delete one (its deliveries stay on record).
    Delete {
        #[arg(long)]
        id: i64,
    },
    /// A new secret, printed once; the previous one signs too for 24 h.
    RotateSecret {
        #[arg(long)]
        id: i64,
    },
    /// Print its newest deliveries as JSON lines.
    Deliveries {
        #[arg(long)]
        id: i64,
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// Make a delivery due now.
    Retry {
        #[arg(long)]
        id: i64,
        #[arg(long)]
        delivery: i64,
    },
}

#[derive(Subcommand)]
enum ToolGrantsCommand {
    /// Print a bot's tool grants as JSON.
    Get {
        #[arg(long)]
        login: String,
    },
    /// Replace a bot's whole set from a JSON file `{"grants": [...]}`.
    Put {
        #[arg(long)]
        login: String,
        #[arg(long)]
        file: PathBuf,
    },
}

#[derive(Args)]
struct UserArgs {
    #[arg(long)]
    login: String,
    /// human or bot
    #[arg(long)]
    kind: String,
    #[arg(long)]
    password: Option<String>,
    #[arg(long)]
    admin: bool,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token and print it.
    Create {
        #[arg(long)]
        login: String,
        #[arg(long)]
        name: String,
        /// Repeatable: read:repository, write:issue, ...
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        #[arg(long)]
        public_only: bool,
        /// Repeatable owner/name the token is limited to.
        #[arg(long = "repository")]
        repositories: Vec<String>,
    },
    /// Revoke a token.
    Revoke {
        #[arg(long)]
        login: String,
        #[arg(long)]
        id: i64,
    },
}

#[derive(Args)]
struct RepoArgs {
    #[arg(long)]
    owner: String,
    #[arg(long)]
    name: String,
    #[arg(long)]
    private: bool,
    #[arg(long)]
    require_distinct_approver: bool,
}

#[derive(Subcommand)]
enum CollaboratorCommand {
    /// Add or change a collaborator.
    Set {
        /// owner/name
        #[arg(long)]
        repo: String,
        #[arg(long)]
        login: String,
        /// read, write or admin
        #[arg(long)]
        permission: String,
    },
    /// Remove a collaborator.
    Remove {
        #[arg(long)]
        repo: String,
        #[arg(long)]
        login: String,
    },
}

fn init_logging(format: &str) {
    let filter =
        EnvFilter::try_from_env("WRIT_LOG").unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    // Colours only on a terminal: a log file or journal gets plain text
    // (and each request's span is formatted without escape codes).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> anyhow::Result<()> {
    return_freed_memory_promptly();
    run()
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut config = Config::load(cli.config.as_deref())?;
    let database_given = cli.database_url.is_some();
    if let Some(url) = cli.database_url {
        config.database_url = url;
    }
    if let Some(format) = cli.log_format {
        config.log_format = format;
    }
    if let Command::Serve {
        bind,
        public_url,
        policy,
        ..
    } = &cli.command
    {
        if let Some(policy) = policy {
            config.policy_file = Some(policy.display().to_string());
        }
        if let Some(bind) = bind {
            config.bind = bind.clone();
        }
        if let Some(url) = public_url {
            config.public_url = Some(url.clone());
        }
    }
    init_logging(&config.log_format);
    if let Command::McpStdio(args) = cli.command {
        // Needs no database: it only talks HTTP to a Core.
        return mcp_stdio(args).await;
    }
    match cli.command {
        Command::McpStdio(_) => unreachable!("handled above"),
        Command::Serve { demo, .. } => serve(config, demo).await,
        Command::Migrate => {
            let writ = Writ::open(config).await?;
            writ.close().await;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Backup { out } => {
            let copied = writ::service::backup::backup(&config.database_url, &out)?;
            println!("{}", copied_line("backup written", &copied));
            Ok(())
        }
        Command::Restore { from } => {
            let copied = writ::service::backup::restore(&from, &config.database_url)?;
            println!("{}", copied_line("restored", &copied));
            println!(
                "next: writ serve --database-url {}, then writ check",
                config.database_url
            );
            Ok(())
        }
        Command::Check => run_check(&config).await,
        Command::Audit(cmd) => run_audit(config, cmd, database_given).await,
        Command::Report(args) => {
            let writ = Writ::open(config).await?;
            let result = run_report(&writ, args).await;
            writ.close().await;
            result
        }
        Command::Admin(cmd) => {
            let writ = Writ::open(config).await?;
            let result = run_admin(&writ, cmd).await;
            writ.close().await;
            result
        }
    }
}

async fn serve(config: Config, demo: bool) -> anyhow::Result<()> {
    let bind = config.bind.clone();
    let writ = Writ::open(config.clone()).await?;
    if demo && let Some(info) = writ::service::demo::seed_if_empty(writ.ctx()).await? {
        println!("{}", info.guide(&config.public_base()));
    }
    // After the demo seed, so a policy file may name the demo's bot.
    if let Some(path) = &config.policy_file {
        let report =
            writ::service::policy::seed_from_file(writ.ctx(), std::path::Path::new(path)).await?;
        tracing::info!(changed = ?report.changed, unchanged = ?report.unchanged, "policy file {path} applied");
    }
    tokio::spawn(writ::service::health::run_prober(writ.ctx().clone()));
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    tracing::info!(address = %listener.local_addr()?, public_url = %config.public_base(), "writ ready, listening on {}", listener.local_addr()?);
    writ.serve(listener, shutdown()).await?;
    writ.close().await;
    Ok(())
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

async fn run_admin(writ: &Writ, cmd: AdminCommand) -> anyhow::Result<()> {
    let ctx = writ.ctx();
    match cmd {
        AdminCommand::Bootstrap { login, password } => {
            println!(
                "{}",
                writ.bootstrap_admin(&login, password.as_deref()).await?
            );
        }
        AdminCommand::User(u) => {
            let input = NewUserInput {
                login: u.login,
                kind: u.kind,
                password: u.password,
                is_admin: Some(u.admin),
            };
            let user = admin::create_user(ctx, Setup::CLI, input).await?;
            println!("{}", serde_json::to_string(&user)?);
        }
        AdminCommand::Token(TokenCommand::Create {
            login,
            name,
            scopes,
            public_only,
            repositories,
        }) => {
            let input = NewTokenInput {
                name,
                scopes,
                public_only: Some(public_only),
                repositories: (!repositories.is_empty()).then_some(repositories),
            };
            println!(
                "{}",
                admin::create_token(ctx, Setup::CLI, &login, input)
                    .await?
                    .token
            );
        }
        AdminCommand::Token(TokenCommand::Revoke { login, id }) => {
            admin::revoke_token(ctx, Setup::CLI, &login, id).await?;
        }
        AdminCommand::Repo(r) => {
            let input = NewRepoInput {
                owner: r.owner,
                name: r.name,
                private: r.private,
                require_distinct_approver: Some(r.require_distinct_approver),
            };
            println!(
                "{}",
                serde_json::to_string(&admin::create_repo(ctx, Setup::CLI, input).await?)?
            );
        }
        AdminCommand::Collaborator(CollaboratorCommand::Set {
            repo,
            login,
            permission,
        }) => {
            let (owner, name) = repo
                .split_once('/')
                .ok_or_else(|| anyhow::anyhow!("--repo must be owner/name"))?;
            admin::set_collaborator(
                ctx,
                Setup::CLI,
                owner,
                name,
                &login,
                CollaboratorInput { permission },
            )
            .await?;
        }
        AdminCommand::McpHealth {
            mcp,
            installed,
            healthy,
            detail,
        } => {
            let input = writ::service::health::HealthInput {
                installed,
                healthy,
                detail,
            };
            let view = writ::service::health::set(ctx, Setup::CLI, &mcp, input, "cli").await?;
            println!("{}", serde_json::to_string(&view)?);
        }
        AdminCommand::ToolGrants(ToolGrantsCommand::Get { login }) => {
            let view = writ::service::policy::get(ctx, &login).await?;
            println!("{}", serde_json::to_string(&view)?);
        }
        AdminCommand::ToolGrants(ToolGrantsCommand::Put { login, file }) => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            let input: writ::service::policy::ToolGrantsInput = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let view = writ::service::policy::put(ctx, Setup::CLI, &login, input, "cli").await?;
            println!("{}", serde_json::to_string(&view)?);
        }
        AdminCommand::Webhook(cmd) => webhook(ctx, cmd).await?,
        AdminCommand::Collaborator(CollaboratorCommand::Remove { repo, login }) => {
            let (owner, name) = repo
                .split_once('/')
                .ok_or_else(|| anyhow::anyhow!("--repo must be owner/name"))?;
            admin::remove_collaborator(ctx, Setup::CLI, owner, name, &login).await?;
        }
    }
    Ok(())
}

/// One line saying what a backup or restore wrote.
fn copied_line(what: &str, c: &writ::service::backup::Copied) -> String {
    let (receipts, last) = c.receipts;
    format!(
        "{what}: {} ({} bytes, integrity_check ok, {receipts} receipts, highest receipt id {}) in {} ms",
        c.path.display(),
        c.bytes,
        last.map_or_else(|| "none".to_owned(), |id| id.to_string()),
        c.took.as_millis()
    )
}

/// The store of `config`'s database, which must exist and be at this
/// Writ's schema (a read-only command neither creates nor migrates it).
async fn existing_store(config: &Config) -> anyhow::Result<writ::store::Store> {
    if let Some(path) = writ::store::sqlite_file(&config.database_url)?
        && !path.is_file()
    {
        anyhow::bail!("{} is not a database file", path.display());
    }
    let store = writ::store::Store::connect(config).await?;
    if !store.ready().await {
        store.close().await;
        anyhow::bail!("the database is not at this Writ's schema: run writ migrate first");
    }
    Ok(store)
}

async fn run_audit(config: Config, cmd: AuditCommand, database_given: bool) -> anyhow::Result<()> {
    use writ::service::seal;
    match cmd {
        AuditCommand::NewKey { out } => {
            let key_id = seal::new_key(&out)?;
            println!("key {key_id} written to {}", out.display());
            println!("set signing_key_file in the [audit] section of the config file to its path");
            Ok(())
        }
        AuditCommand::Seal => {
            let signer = seal::signer(&config)?;
            let writ = Writ::open(config).await?;
            let sealed = seal::seal_all(writ.ctx(), signer.as_ref()).await;
            writ.close().await;
            let sealed = sealed?;
            let records: i64 = sealed.iter().map(|s| s.count).sum();
            match (sealed.first(), sealed.last()) {
                (Some(first), Some(last)) => println!(
                    "sealed {records} records in seals {}..={}",
                    first.seq, last.seq
                ),
                _ => println!("nothing final to seal"),
            }
            Ok(())
        }
        AuditCommand::Verify {
            archive: Some(file),
            ..
        } => verify_archive(&config, &file, database_given).await,
        AuditCommand::Archive { through_seal, out } => {
            let writ = Writ::open(config).await?;
            let archived =
                writ::service::archive::archive(writ.ctx(), through_seal, &out, "cli").await;
            writ.close().await;
            let a = archived?.row;
            println!(
                "archived seals {}..={} ({} records) to {} ({} bytes, sha256 {}), verified, \
                 and deleted them from the database (archive {})",
                a.first_seal,
                a.through_seal,
                a.record_count,
                out.display(),
                a.file_bytes,
                a.file_sha256,
                a.seq
            );
            Ok(())
        }
        AuditCommand::Verify {
            from,
            archive: None,
        } => {
            let store = existing_store(&config).await?;
            let verified = seal::verify(&store, from).await;
            store.close().await;
            let verified = match verified {
                Err(writ::service::Error::NotFound) => {
                    anyhow::bail!("there is no seal {} to start after", from - 1)
                }
                other => other?,
            };
            match verified.mismatch {
                None => {
                    let archived = match verified.archived_seals {
                        0 => String::new(),
                        n => format!(" ({n} archived)"),
                    };
                    println!(
                        "ok: {} seals{archived}, {} records verified",
                        verified.seals, verified.records
                    );
                    Ok(())
                }
                Some(m) => {
                    let record = m
                        .call_id
                        .map(|id| format!(" record {id}"))
                        .unwrap_or_default();
                    println!("FAIL seal {}{record}: {}", m.seal, m.problem);
                    anyhow::bail!(
                        "audit verification failed after {} good seals",
                        verified.seals
                    )
                }
            }
        }
    }
}

/// `writ audit verify --archive FILE`: the file against its own seals,
/// then (with --database-url) against the database's.
async fn verify_archive(
    config: &Config,
    file: &std::path::Path,
    database_given: bool,
) -> anyhow::Result<()> {
    use writ::service::archive;
    let (checked, digest) = archive::check_file(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let checked = match checked {
        Ok(c) => c,
        Err(finding) => {
            println!("FAIL {finding}");
            anyhow::bail!("the archive {} does not verify", file.display());
        }
    };
    let h = &checked.header;
    let mut said = format!(
        "ok: archive {} holds seals {}..={} ({} records), sha256 {}, {} bytes",
        file.display(),
        h.first_seal,
        h.through_seal,
        checked.records,
        digest.sha256,
        digest.bytes
    );
    if database_given {
        let store = existing_store(config).await?;
        let compared = archive::compare(&store, &checked, &digest).await;
        store.close().await;
        if let Some(finding) = compared? {
            println!("FAIL {finding}");
            anyhow::bail!("the archive {} is not the database's", file.display());
        }
        said.push_str("; its seals are the database's");
    }
    println!("{said}");
    Ok(())
}

async fn run_check(config: &Config) -> anyhow::Result<()> {
    let store = existing_store(config).await?;
    let findings = writ::service::check::check(&store).await;
    store.close().await;
    let mut failed = 0;
    for finding in findings? {
        if finding.holds() {
            println!("ok    {}", finding.name);
        } else {
            failed += 1;
            println!("FAIL  {}: {}", finding.name, finding.problems.join(", "));
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} check(s) failed");
    }
    println!("all checks hold");
    Ok(())
}

async fn run_report(writ: &Writ, args: ReportArgs) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    use std::io::Write;
    use writ::service::report::{self, Format};
    let report = writ::store::reports::Report::parse(&args.name).ok_or_else(|| {
        anyhow::anyhow!(
            "report must be receipts, grants, admissions, tool-calls or webhook-deliveries"
        )
    })?;
    let format = Format::parse(&args.format)
        .ok_or_else(|| anyhow::anyhow!("--format must be table, csv or json"))?;
    let filter = report::filter(
        args.repo,
        args.agent,
        args.since.as_deref(),
        args.until.as_deref(),
    )?;
    let mut chunks = Box::pin(report::formatted(
        &writ.ctx().store,
        report,
        &filter,
        format,
    ));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while let Some(chunk) = chunks.next().await {
        out.write_all(chunk?.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

async fn webhook(ctx: &writ::service::Ctx, cmd: WebhookCommand) -> anyhow::Result<()> {
    use writ::service::webhooks::{self, SubscriptionInput, SubscriptionPatch};
    match cmd {
        WebhookCommand::List => {
            for s in webhooks::every(ctx).await? {
                print_json(&s)?;
            }
        }
        WebhookCommand::Create {
            url,
            types,
            repos,
            format,
            description,
            disabled,
        } => {
            let input = SubscriptionInput {
                url,
                types,
                repos,
                format: Some(format),
                description: Some(description),
                enabled: Some(!disabled),
            };
            print_json(&webhooks::create(ctx, Setup::CLI, input).await?)?;
        }
        WebhookCommand::Set { id, enabled } => {
            let patch = SubscriptionPatch {
                enabled: Some(enabled),
                ..SubscriptionPatch::default()
            };
            print_json(&webhooks::update(ctx, Setup::CLI, id, patch).await?)?;
        }
        WebhookCommand::Delete { id } => webhooks::delete(ctx, Setup::CLI, id).await?,
        WebhookCommand::RotateSecret { id } => {
            print_json(&webhooks::rotate_secret(ctx, Setup::CLI, id).await?)?;
        }
        WebhookCommand::Deliveries { id, limit } => {
            for d in webhooks::deliveries_of(ctx, id, limit.clamp(1, 1000)).await? {
                print_json(&d)?;
            }
        }
        WebhookCommand::Retry { id, delivery } => {
            print_json(&webhooks::retry(ctx, Setup::CLI, id, delivery).await?)?;
        }
    }
    Ok(())
}

/// Prints one value as a JSON line.
fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MI_OPTION_PURGE_DELAY;

    /// The option index is mimalloc's purge delay: its default is v3's
    /// 1000 ms (unless the environment overrides it).
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: mi_option_get reads mimalloc's option table.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(delay, 1000);
        }
    }
}
