//! The Writ process under test: `writ serve` (release build) on 127.0.0.1,
//! its environment cleared of `WRIT_*` settings, its log in the temp dir.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::Args;
use crate::target::Target;

/// The first admin's login and password (a human, created by the CLI).
pub const OWNER: &str = "root";
/// The first admin's password.
pub const OWNER_PASSWORD: &str = "bench-password-1";

/// How to run the writ binary on the run's database.
struct Launcher {
    binary: PathBuf,
    database_url: String,
    synchronous: Option<String>,
}

impl Launcher {
    /// `writ --database-url URL`, environment cleared of `WRIT_*` settings.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("WRIT_") {
                cmd.env_remove(key);
            }
        }
        if let Some(s) = &self.synchronous {
            cmd.env("WRIT_SQLITE_SYNCHRONOUS", s);
        }
        cmd.env("NO_COLOR", "1")
            .args(["--database-url", &self.database_url]);
        cmd
    }

    /// Runs `writ --database-url URL ARGS...`; its stdout.
    async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.command().args(args).output().await?;
        anyhow::ensure!(
            out.status.success(),
            "writ {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// A running `writ serve`.
pub struct Server {
    child: Child,
    pid: u32,
    base: String,
    log: PathBuf,
    /// The admin's `write:admin` token (from `writ admin bootstrap`).
    pub admin_token: String,
}

impl Server {
    /// Bootstraps the admin with the CLI (which migrates the fresh database),
    /// then starts the server and waits for `/readyz`.
    pub async fn start(args: &Args, target: &Target) -> anyhow::Result<Server> {
        let binary = match &args.writ_binary {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name("writ"),
        };
        anyhow::ensure!(
            binary.is_file(),
            "{} does not exist: build it with `cargo build --release --bins` (scripts/bench does)",
            binary.display()
        );
        if !binary.components().any(|c| c.as_os_str() == "release") {
            eprintln!(
                "writ-bench: WARNING: {} is not a release build",
                binary.display()
            );
        }
        let launcher = Launcher {
            binary,
            database_url: target.server_url.clone(),
            synchronous: target
                .synchronous_override
                .then(|| target.config.sqlite_synchronous.clone()),
        };
        let out = launcher
            .cli(&[
                "admin",
                "bootstrap",
                "--login",
                OWNER,
                "--password",
                OWNER_PASSWORD,
            ])
            .await?;
        let admin_token = out.lines().last().unwrap_or_default().trim().to_owned();
        let log = target.dir.join("writ-serve.log");
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        let log_file = std::fs::File::create(&log)?;
        let mut cmd = launcher.command();
        if args.webhook {
            // The bench's receiver listens on loopback.
            let config = target.dir.join("writ.toml");
            std::fs::write(
                &config,
                "[webhooks]\nallow_private_targets = true\nresolver = \"static\"\n",
            )?;
            cmd.arg("--config").arg(config);
        }
        cmd.args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .args(["--public-url", &base])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        let child = cmd.spawn().context("starting writ serve")?;
        let mut server = Server {
            pid: child.id().unwrap_or(0),
            child,
            base,
            log,
            admin_token,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let began = Instant::now();
        let http = reqwest::Client::builder().no_proxy().build()?;
        let ready = format!("{}/readyz", self.base);
        while began.elapsed() < Duration::from_secs(60) {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("writ serve exited ({status}): {}", self.log_tail());
            }
            if let Ok(r) = http.get(&ready).send().await
                && r.status().is_success()
            {
                eprintln!(
                    "writ-bench: writ serve ready in {} ms",
                    began.elapsed().as_millis()
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::bail!("writ serve not ready after 60 s: {}", self.log_tail())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Stops the server; log lines that show an internal error or a panic.
    pub async fn stop(&mut self) -> Vec<String> {
        let _ = self.child.kill().await;
        problems(&self.log)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let chars: Vec<char> = text.chars().collect();
        chars[chars.len().saturating_sub(1500)..].iter().collect()
    }
}

/// Lines of an internal error, a panic or any ERROR (there must be none).
fn problems(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("internal error") || l.contains("panicked") || l.contains(" ERROR "))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
