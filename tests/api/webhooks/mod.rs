//! Webhooks (spec `events.md` "Webhooks"): subscriptions, deliveries
//! written with their events and delivered by Writ's workers to real
//! receivers on loopback whose signature check is the `standardwebhooks`
//! package (tests/webhooks_python), retries, rotation, auto-disable and the
//! safe-target rules.

mod claim;
mod cli;
mod delivery;
mod subscriptions;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{Auth, Body, Resp, TestApp};

/// The interpreter of the venv with `standardwebhooks`, from
/// `WRIT_TEST_WEBHOOK_PYTHON`; `None` (the test is skipped) when unset,
/// unless `WRIT_TEST_REQUIRE_WEBHOOK_PYTHON` is set.
pub fn python() -> Option<String> {
    match std::env::var("WRIT_TEST_WEBHOOK_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var_os("WRIT_TEST_REQUIRE_WEBHOOK_PYTHON").is_none_or(|v| v.is_empty()),
                "WRIT_TEST_REQUIRE_WEBHOOK_PYTHON is set but WRIT_TEST_WEBHOOK_PYTHON is unset"
            );
            eprintln!("skipped: WRIT_TEST_WEBHOOK_PYTHON unset");
            None
        }
    }
}

/// A receiver on loopback (tests/webhooks_python/receiver.py).
pub struct Receiver {
    pub port: u16,
    log: PathBuf,
    secrets: PathBuf,
    child: tokio::process::Child,
}

impl Receiver {
    /// Starts one that answers the first `fail_first` requests with 500.
    pub async fn start(python: &str, fail_first: u32) -> Receiver {
        Receiver::start_with(python, fail_first, None).await
    }

    /// Starts one speaking HTTPS with this certificate and key.
    pub async fn start_tls(python: &str, tls: &TestCa) -> Receiver {
        Receiver::start_with(python, 0, Some(tls)).await
    }

    async fn start_with(python: &str, fail_first: u32, tls: Option<&TestCa>) -> Receiver {
        let dir =
            std::env::temp_dir().join(format!("writ-hooks-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (log, secrets) = (dir.join("requests.jsonl"), dir.join("secrets.txt"));
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/webhooks_python/receiver.py"
        );
        let mut command = tokio::process::Command::new(python);
        command
            .arg(script)
            .arg("--log")
            .arg(&log)
            .arg("--secrets")
            .arg(&secrets)
            .arg("--fail-first")
            .arg(fail_first.to_string());
        if let Some(tls) = tls {
            command
                .arg("--tls-cert")
                .arg(tls.dir.join("leaf.pem"))
                .arg("--tls-key")
                .arg(tls.dir.join("leaf.key"));
        }
        let mut child = command
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the receiver");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the receiver starts within 30 s")
            .expect("read its port")
            .and_then(|l| l.strip_prefix("PORT ").and_then(|p| p.parse().ok()))
            .expect("PORT <n>");
        Receiver {
            port,
            log,
            secrets,
            child,
        }
    }

    /// `http://127.0.0.1:<port>/hook`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// The secrets its signature check accepts, in this order.
    pub fn trust(&self, secrets: &[&str]) {
        std::fs::write(&self.secrets, secrets.join("\n")).expect("write the secrets");
    }

    /// Every request it got so far.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// Waits (up to 60 s) until it got at least `n` requests.
    pub async fn wait_for(&self, n: usize) -> Vec<Value> {
        for _ in 0..600 {
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the receiver got {} of {n} requests in 60 s",
            self.requests().len()
        );
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if let Some(dir) = self.log.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A certificate authority made for one test with `openssl`, and a
/// certificate it signed for `hooks.writ.test` and 127.0.0.1.
pub struct TestCa {
    pub dir: PathBuf,
}

impl TestCa {
    pub fn new() -> TestCa {
        let dir = std::env::temp_dir().join(format!("writ-ca-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=DNS:hooks.writ.test,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )
        .expect("write the extensions");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let steps: [Vec<&str>; 3] = [
            [
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=Writ test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
            [
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "leaf.key",
                    "-out",
                    "leaf.csr",
                    "-subj",
                    "/CN=hooks.writ.test",
                ],
            ]
            .concat(),
            vec![
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        ];
        for args in steps {
            let out = std::process::Command::new("openssl")
                .args(&args)
                .current_dir(&dir)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        TestCa { dir }
    }

    pub fn ca_file(&self) -> String {
        self.dir.join("ca.pem").display().to_string()
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `POST /api/v1/admin/webhooks` with the admin token.
pub async fn subscribe(app: &TestApp, body: Value) -> Resp {
    app.send(
        Method::POST,
        "/api/v1/admin/webhooks",
        Auth::Token(&app.admin_token),
        Body::Json(body),
    )
    .await
}

/// Subscribes `receiver` (asserting 201) and has it trust the new secret;
/// the subscription's JSON.
pub async fn subscribed(app: &TestApp, receiver: &Receiver, mut body: Value) -> Value {
    body["url"] = Value::String(receiver.url());
    let resp = subscribe(app, body).await;
    resp.assert_status(201);
    let hook = resp.json();
    receiver.trust(&[hook["secret"].as_str().expect("the secret, once")]);
    hook
}

/// Writes an enabled subscription to `url` with SQL, past the API's check
/// of its target (a target that became private after it was checked).
pub async fn insert_unchecked(app: &TestApp, url: &str) {
    let mut conn = crate::db::SqlConn::connect(&app.database_url()).await;
    conn.execute(&format!(
        "INSERT INTO webhook_subscriptions (url, types, repos, format, description, enabled, \
         secret, created_at, updated_at) VALUES ('{url}', '[]', '[]', 'standard', '', TRUE, \
         'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '2026-01-01T00:00:00.000000Z', \
         '2026-01-01T00:00:00.000000Z')"
    ))
    .await
    .expect("insert");
    conn.close().await;
}

/// The deliveries of subscription `id` once its first has been attempted.
pub async fn first_attempted(app: &TestApp, id: i64) -> Vec<Value> {
    for _ in 0..600 {
        let d = deliveries(app, id).await;
        if d.first().is_some_and(|d| d["attempts"].as_i64() >= Some(1)) {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no delivery of subscription {id} attempted in 60 s");
}

/// The deliveries of subscription `id`, newest first.
pub async fn deliveries(app: &TestApp, id: i64) -> Vec<Value> {
    let resp = app
        .get(
            &format!("/api/v1/admin/webhooks/{id}/deliveries"),
            Auth::Token(&app.admin_token),
        )
        .await;
    resp.assert_status(200);
    resp.json().as_array().expect("an array").clone()
}

/// Waits (up to 60 s) until every delivery of subscription `id` is no
/// longer pending; returns them.
pub async fn settled_deliveries(app: &TestApp, id: i64, at_least: usize) -> Vec<Value> {
    for _ in 0..600 {
        let all = deliveries(app, id).await;
        if all.len() >= at_least && all.iter().all(|d| d["status"] != "pending") {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "deliveries still pending after 60 s: {:?}",
        deliveries(app, id).await
    );
}

/// Webhooks to loopback receivers, retried after 1 s, given up after
/// `give_up` seconds.
pub fn loopback(give_up: u64) -> impl Fn(&mut writ::Config) + Copy {
    move |config: &mut writ::Config| {
        config.webhooks.allow_private_targets = true;
        config.webhooks.retry_schedule_seconds = vec![1];
        config.webhooks.give_up_after_seconds = give_up;
    }
}
