//! The HTTP load: N bot clients, each on its own keep-alive connection and
//! its own active grant, sending a random mix of new submissions (fresh
//! request keys), same-key replays of earlier submissions, grant reads and
//! list pages for a fixed time. Every status is checked.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use axum::http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::fixture::{BotGrant, PROPOSAL_SCHEMA, World, grant_path};
use crate::server::Server;
use crate::stats::{CpuWindow, RssSampler, Samples, Slice};

/// Percent of each operation in a mixed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// New submissions (fresh request key): 201.
    pub new: u32,
    /// Same-key replays of an earlier submission: 200.
    pub replay: u32,
    /// `GET …/agent-work-grants/{id}`: 200.
    pub read: u32,
    /// `GET /api/v1/agent-work-grants?page=1&limit=50`: 200.
    pub list: u32,
}

impl Mix {
    /// Only new submissions.
    pub const SUBMIT: Mix = Mix {
        new: 100,
        replay: 0,
        read: 0,
        list: 0,
    };
    /// Only grant reads.
    pub const READ: Mix = Mix {
        new: 0,
        replay: 0,
        read: 100,
        list: 0,
    };

    fn pick(&self, rng: &mut StdRng) -> Op {
        let mut r = rng.random_range(0..self.new + self.replay + self.read + self.list);
        for (op, weight) in [
            (Op::New, self.new),
            (Op::Replay, self.replay),
            (Op::Read, self.read),
        ] {
            if r < weight {
                return op;
            }
            r -= weight;
        }
        Op::List
    }
}

impl FromStr for Mix {
    type Err = String;

    /// `new=40,replay=10,read=40,list=10` (missing parts are 0).
    fn from_str(s: &str) -> Result<Mix, String> {
        let mut mix = Mix {
            new: 0,
            replay: 0,
            read: 0,
            list: 0,
        };
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected name=percent"))?;
            let v: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: bad number"))?;
            match k.trim() {
                "new" => mix.new = v,
                "replay" => mix.replay = v,
                "read" => mix.read = v,
                "list" => mix.list = v,
                other => return Err(format!("unknown operation {other:?}")),
            }
        }
        if mix.new + mix.replay + mix.read + mix.list == 0 {
            return Err("the mix is empty".into());
        }
        Ok(mix)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "new={},replay={},read={},list={}",
            self.new, self.replay, self.read, self.list
        )
    }
}

/// One kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A submission with a fresh request key.
    New,
    /// A same-key replay.
    Replay,
    /// A grant read.
    Read,
    /// A list page.
    List,
}

impl Op {
    const ALL: [Op; 4] = [Op::New, Op::Replay, Op::Read, Op::List];

    /// The row label.
    pub fn label(self) -> &'static str {
        match self {
            Op::New => "new submit",
            Op::Replay => "replay",
            Op::Read => "grant read",
            Op::List => "list page",
        }
    }

    fn expected(self) -> StatusCode {
        match self {
            Op::New => StatusCode::CREATED,
            _ => StatusCode::OK,
        }
    }
}

/// Warm-up, then the measured time, of every row.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Measured time.
    pub measure: Duration,
}

/// Title and body of every submission (the baseline writes the same sizes).
pub const ISSUE_BODY: &str = "Benchmark submission. The ledger records this issue, its receipt \
     and the grant's counter in one durable transaction; the harness measures how many of \
     those Writ commits per second over HTTP next to the engine alone.";

/// The title of a bot's `seq`-th submission.
pub fn issue_title(login: &str, seq: u64) -> String {
    format!("bench {login} #{seq}")
}

/// A canonical lowercase UUIDv4.
pub fn request_key(rng: &mut StdRng) -> String {
    writ::domain::ids::RequestKey::from_random(rng.random())
        .as_str()
        .to_owned()
}

/// One bot's client: its keep-alive connection, its grant, what it submitted.
///
/// The connection is hyper's plain HTTP/1.1 client connection (no pool, no
/// URL parsing, no redirects): the load generator shares the machine with
/// the server, so every microsecond it spends per request is one the
/// server does not get (reqwest cost ~40 µs of CPU per request here).
pub struct BotClient {
    /// The bot and its grant.
    pub grant: BotGrant,
    conn: Option<SendRequest<Full<Bytes>>>,
    auth: HeaderValue,
    grant_url: String,
    submit_url: String,
    list_url: String,
    /// Bodies of acknowledged submissions (the newest 64), for replays.
    acked: Vec<Vec<u8>>,
    /// 201s this client received over the whole run.
    pub created: u64,
    seq: u64,
    rng: StdRng,
}

impl BotClient {
    /// A client; it connects at its first request.
    pub fn new(grant: BotGrant) -> anyhow::Result<BotClient> {
        Ok(BotClient {
            auth: HeaderValue::from_str(&format!("token {}", grant.token))?,
            grant_url: grant_path(&grant),
            submit_url: format!("{}/issues", grant_path(&grant)),
            list_url: "/api/v1/agent-work-grants?page=1&limit=50".to_owned(),
            grant,
            conn: None,
            acked: Vec::new(),
            created: 0,
            seq: 0,
            rng: StdRng::from_os_rng(),
        })
    }

    fn submit_body(&mut self) -> Vec<u8> {
        self.seq += 1;
        let key = request_key(&mut self.rng);
        let body = json!({
            "proposal_schema": PROPOSAL_SCHEMA,
            "proposal_version": 1,
            "proposal_digest": self.grant.digest,
            "request_key": key,
            "title": issue_title(&self.grant.login, self.seq),
            "body": ISSUE_BODY,
        });
        serde_json::to_vec(&body).expect("JSON of a json! value")
    }

    /// The keep-alive connection to `base` (`http://host:port`), opened
    /// when there is none or the last one closed.
    async fn connection(&mut self, base: &str) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        if self.conn.as_ref().is_none_or(|c| c.is_closed()) {
            let addr = base.trim_start_matches("http://");
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connecting to {addr}: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
            tokio::spawn(conn);
            self.conn = Some(send);
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.ready()
            .await
            .map_err(|e| format!("connection: {}", chain(&e)))?;
        Ok(conn)
    }

    /// Sends `method path` with `body`; the status and the whole body.
    async fn send(
        &mut self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), String> {
        let host =
            HeaderValue::from_str(base.trim_start_matches("http://")).map_err(|e| e.to_string())?;
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, host)
            .header(AUTHORIZATION, self.auth.clone());
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let conn = self.connection(base).await?;
        let resp = tokio::time::timeout(Duration::from_secs(60), conn.send_request(req))
            .await
            .map_err(|_| "no answer within 60 s".to_owned())?
            .map_err(|e| format!("transport error: {}", chain(&e)))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    /// Sends one request of kind `op` (a replay with nothing to replay yet
    /// becomes a new submission); the kind sent and Err on anything unexpected.
    async fn one(&mut self, base: &str, op: Op) -> (Op, Result<(), String>) {
        let op = if op == Op::Replay && self.acked.is_empty() {
            Op::New
        } else {
            op
        };
        let body = match op {
            Op::New => Some(self.submit_body()),
            Op::Replay => Some(self.acked[self.rng.random_range(0..self.acked.len())].clone()),
            _ => None,
        };
        let (method, path) = match (&body, op) {
            (Some(_), _) => (Method::POST, self.submit_url.clone()),
            (None, Op::Read) => (Method::GET, self.grant_url.clone()),
            (None, _) => (Method::GET, self.list_url.clone()),
        };
        let result = match self.send(base, method, &path, body.clone()).await {
            Err(e) => {
                // The connection may be broken: the next request opens one.
                self.conn = None;
                Err(format!("{}: {e}", op.label()))
            }
            Ok((status, _)) if status == op.expected() => Ok(()),
            Ok((status, text)) => Err(format!(
                "{}: {status} (wanted {}): {}",
                op.label(),
                op.expected(),
                String::from_utf8_lossy(&text[..text.len().min(300)])
            )),
        };
        if result.is_ok() && op == Op::New {
            self.created += 1;
            if self.acked.len() >= 64 {
                self.acked.swap_remove(self.rng.random_range(0..64));
            }
            if let Some(b) = body {
                self.acked.push(b);
            }
        }
        (op, result)
    }
}

/// An error with its causes ("error sending request: … : Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// A client stops after this many unexpected outcomes in one slice (the run
/// stops after the slice anyway; this keeps a dead server from being spun on).
pub const MAX_ERRORS: u64 = 20;

/// Drives one client until `deadline`; samples of requests wholly inside
/// `[warm_end, deadline]`, errors of all.
async fn drive(
    mut bot: BotClient,
    base: String,
    mix: Mix,
    warm_end: Instant,
    deadline: Instant,
) -> (BotClient, [Samples; 4]) {
    let mut samples: [Samples; 4] = Default::default();
    while Instant::now() < deadline {
        let op = mix.pick(&mut bot.rng);
        let t0 = Instant::now();
        let (op, result) = bot.one(&base, op).await;
        let t1 = Instant::now();
        let s = &mut samples[op as usize];
        match result {
            Ok(()) if t0 >= warm_end && t1 <= deadline => s.record(t1 - t0),
            Ok(()) => {}
            Err(e) => {
                s.error(e);
                if samples.iter().map(|s| s.errors).sum::<u64>() >= MAX_ERRORS {
                    break;
                }
            }
        }
    }
    (bot, samples)
}

/// The runtime the bot clients run on: one thread of its own, polling every
/// client's connection from one event loop (as `wrk` does). On a multi-
/// threaded runtime each answer woke a parked worker thread, and the client
/// cost as much CPU per request as the work it measures.
fn client_runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-clients".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the clients' runtime");
                tx.send(runtime.handle().clone())
                    .expect("the bench waits for the handle");
                runtime.block_on(std::future::pending::<()>());
            })
            .expect("the clients' thread");
        rx.recv().expect("the clients' runtime started")
    })
}

/// One slice of a row: the first `n` bots drive the server with `mix`.
pub async fn run(
    server: &Server,
    world: &mut World,
    n: usize,
    mix: Mix,
    window: Window,
) -> anyhow::Result<Slice> {
    anyhow::ensure!(n <= world.bots.len(), "only {} bots", world.bots.len());
    let start = Instant::now();
    let warm_end = start + window.warmup;
    let deadline = warm_end + window.measure;
    let rss = RssSampler::start(server.pid());
    let tasks: Vec<_> = world
        .bots
        .drain(..n)
        .map(|bot| {
            client_runtime().spawn(drive(
                bot,
                server.base().to_owned(),
                mix,
                warm_end,
                deadline,
            ))
        })
        .collect();
    tokio::time::sleep_until(warm_end.into()).await;
    let cpu = CpuWindow::start(Some(server.pid()));
    tokio::time::sleep_until(deadline.into()).await;
    let (server_cpu_s, host_ticks) = cpu.finish();
    let mut merged: [Samples; 4] = Default::default();
    let mut returned = Vec::with_capacity(n);
    for task in tasks {
        let (bot, samples) = task.await?;
        returned.push(bot);
        for (m, s) in merged.iter_mut().zip(samples) {
            m.merge(s);
        }
    }
    world.bots.splice(0..0, returned);
    Ok(Slice {
        ops: Op::ALL
            .into_iter()
            .zip(merged)
            .filter(|(_, s)| !s.latencies_us.is_empty() || s.errors > 0)
            .map(|(op, s)| (op.label(), s))
            .collect(),
        seconds: window.measure.as_secs_f64(),
        server_cpu_s,
        host_ticks,
        rss_peak_mib: Some(rss.finish().await),
    })
}
