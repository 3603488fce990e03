//! Rows, ratios, bars: the table on stdout and the same as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::Args;
use crate::baseline::{Driver, Kind};
use crate::fixture::World;
use crate::server::Server;
use crate::stats::{self, Samples, Slice};
use crate::target::{Engine, Target};

/// One line of the table: one operation kind of one row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `baseline`, `mix`, `submit only`, `read only`.
    pub scenario: String,
    /// Concurrent clients.
    pub clients: usize,
    /// `T_submit`, `grant read (SQL)` (sqlx), `T_submit (rusqlite)`,
    /// `grant read (rusqlite)`, `new submit`, `replay`, `grant read`,
    /// `list page`, `all`.
    pub op: String,
    /// The baseline's driver (`sqlx`, `rusqlite`); none on Writ's rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<&'static str>,
    /// Measured successes.
    pub requests: usize,
    /// Unexpected outcomes (any status but the expected one, transport or
    /// database errors), warm-up included.
    pub errors: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// Successes per second.
    pub per_s: f64,
    /// Latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Peak VmRSS of the server during the row (server rows).
    pub server_rss_peak_mib: Option<f64>,
    /// Server CPU over the measured window, % of one core (server rows).
    pub server_cpu_pct: Option<f64>,
    /// Machine busy over the measured window, % of all cores.
    pub host_cpu_pct: Option<f64>,
    /// The sqlx baseline at the same N this row compares with (the bars').
    pub baseline_per_s: Option<f64>,
    /// per_s / baseline_per_s.
    pub ratio: Option<f64>,
    /// Driver of the fastest baseline of the engine at the same N (on
    /// PostgreSQL always `sqlx`, its only driver).
    pub fastest_baseline: Option<&'static str>,
    /// The fastest baseline's rate.
    pub fastest_baseline_per_s: Option<f64>,
    /// per_s / fastest_baseline_per_s.
    pub fastest_ratio: Option<f64>,
    /// The first unexpected outcomes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_samples: Vec<String>,
}

impl Row {
    /// A row from merged samples over `seconds`.
    pub fn new(scenario: &str, clients: usize, op: &str, mut s: Samples, seconds: f64) -> Row {
        let [p50, p95, p99, max] = s.percentiles_ms();
        Row {
            scenario: scenario.to_owned(),
            clients,
            op: op.to_owned(),
            driver: Kind::of_label(op).map(|(_, d)| d.name()),
            requests: s.latencies_us.len(),
            errors: s.errors,
            seconds,
            per_s: s.latencies_us.len() as f64 / seconds,
            p50_ms: p50,
            p95_ms: p95,
            p99_ms: p99,
            max_ms: max,
            server_rss_peak_mib: None,
            server_cpu_pct: None,
            host_cpu_pct: None,
            baseline_per_s: None,
            ratio: None,
            fastest_baseline: None,
            fastest_baseline_per_s: None,
            fastest_ratio: None,
            error_samples: s.error_samples,
        }
    }

    /// The rows of a finished row's slices: one per operation, plus `all`
    /// when there are several.
    pub fn from_slice(scenario: &str, clients: usize, slice: Slice) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut total = Samples::default();
        let several = slice.ops.len() > 1;
        for (op, samples) in slice.ops {
            if several {
                total.merge(samples.clone());
            }
            rows.push(Row::new(scenario, clients, op, samples, slice.seconds));
        }
        if several {
            rows.push(Row::new(scenario, clients, "all", total, slice.seconds));
        }
        for row in &mut rows {
            row.server_rss_peak_mib = slice.rss_peak_mib;
            row.server_cpu_pct = slice.server_cpu_s.map(|c| 100.0 * c / slice.seconds);
            row.host_cpu_pct = slice
                .host_ticks
                .filter(|(_, total)| *total > 0)
                .map(|(busy, total)| 100.0 * busy as f64 / total as f64);
        }
        rows
    }

    fn is_baseline(&self) -> bool {
        self.scenario.ends_with("baseline")
    }

    /// The baseline scenario this row's ratio is taken against.
    fn baseline_scenario(&self) -> &'static str {
        if self.scenario == "mix" {
            BASELINE
        } else {
            BAR_BASELINE
        }
    }
}

/// Two decimals, three below 0.1 (a rusqlite read takes a few µs; a ratio
/// to it can be a few thousandths).
pub fn fine(v: f64) -> String {
    if v.abs() < 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.2}")
    }
}

/// The fastest baseline row of `kind` in `scenario` at `n` clients, over
/// every driver that ran.
pub fn fastest<'a>(rows: &'a [Row], scenario: &str, kind: Kind, n: usize) -> Option<&'a Row> {
    rows.iter()
        .filter(|r| r.scenario == scenario && r.clients == n)
        .filter(|r| Driver::ALL.iter().any(|&d| r.op == kind.label(d)))
        .max_by(|a, b| a.per_s.total_cmp(&b.per_s))
}

/// Scenario of the baseline rows interleaved with the mixed rows.
pub const BASELINE: &str = "baseline";
/// Scenario of the baseline rows interleaved with the bar rows.
pub const BAR_BASELINE: &str = "bar baseline";

/// A bar of quality.md and whether this run shows it holding.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    /// The bar as quality.md states it.
    pub bar: String,
    /// What was measured (against the sqlx baseline, as the bar is judged).
    pub measured: String,
    /// The same Writ figure against the fastest baseline of the engine,
    /// for the record (the verdict does not use it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_fastest: Option<String>,
    /// None when this run cannot judge it.
    pub holds: Option<bool>,
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct Bench {
    /// `sqlite` or `postgres`.
    pub engine: &'static str,
    /// Engine version and durability setting.
    pub database: String,
    /// Measured seconds per row.
    pub seconds: f64,
    /// Slices per row (rows of a group alternate slice by slice).
    pub slices: u32,
    /// Warm-up seconds per slice.
    pub warmup: f64,
    /// The mix of the mixed rows.
    pub mix: String,
    /// Repositories the grants are spread over.
    pub repositories: Option<usize>,
    /// Grants in the server's database while the rows ran.
    pub grants: i64,
    /// Logical CPUs of the machine.
    pub cpus: usize,
    /// 1-minute load average before and after.
    pub loadavg: [Option<f64>; 2],
    /// The drivers the baseline ran through (`sqlx`; on SQLite also `rusqlite`).
    pub baseline_drivers: Vec<&'static str>,
    /// Every row in run order.
    pub rows: Vec<Row>,
    /// The bars.
    pub bars: Vec<Bar>,
    /// Problems: unexpected statuses, counter mismatches, server log errors.
    pub problems: Vec<String>,
    /// With `--webhook`: what the receiver saw.
    pub webhooks: Option<crate::webhooks::WebhookStats>,
    #[serde(skip)]
    synchronous: String,
    #[serde(skip)]
    json: Option<std::path::PathBuf>,
    #[serde(skip)]
    bar_clients: usize,
}

impl Bench {
    /// An empty report for this run.
    pub fn new(args: &Args, target: &Target) -> Bench {
        Bench {
            engine: match target.engine {
                Engine::Sqlite => "sqlite",
                Engine::Postgres => "postgres",
            },
            database: target.description.clone(),
            seconds: args.seconds,
            slices: args.slices,
            warmup: args.warmup,
            mix: args.mix.to_string(),
            repositories: args.repos,
            grants: 0,
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg: [stats::loadavg(), None],
            baseline_drivers: if args.no_baseline {
                Vec::new()
            } else {
                Driver::on(target.engine).iter().map(|d| d.name()).collect()
            },
            rows: Vec::new(),
            bars: Vec::new(),
            problems: Vec::new(),
            webhooks: None,
            synchronous: target.config.sqlite_synchronous.clone(),
            json: args.json.clone(),
            bar_clients: args.bar_clients,
        }
    }

    /// Adds rows; false (and the run should stop) if any saw an unexpected outcome.
    pub fn push(&mut self, rows: Vec<Row>) -> bool {
        let mut clean = true;
        for row in rows {
            if row.errors > 0 && row.op != "all" {
                clean = false;
                self.problems.push(format!(
                    "{} {} N={}: {} unexpected outcomes, e.g. {:?}",
                    row.scenario, row.op, row.clients, row.errors, row.error_samples
                ));
            }
            eprintln!(
                "writ-bench:   {:<12} N={:<3} {:<21} {:>8.0}/s  p50 {} ms  p99 {} ms  errors {}",
                row.scenario,
                row.clients,
                row.op,
                row.per_s,
                fine(row.p50_ms),
                fine(row.p99_ms),
                row.errors
            );
            self.rows.push(row);
        }
        if !clean {
            eprintln!("writ-bench: UNEXPECTED RESPONSES; stopping the run");
        }
        clean
    }

    /// Each bot's grant must count exactly the 201s its client received.
    pub async fn check_counters(&mut self, world: &World, server: &Server) {
        let http = match reqwest::Client::builder().no_proxy().build() {
            Ok(h) => h,
            Err(e) => return self.problems.push(format!("HTTP client: {e}")),
        };
        for bot in &world.bots {
            let path = crate::fixture::grant_path(&bot.grant);
            let got = async {
                http.get(format!("{}{path}", server.base()))
                    .header("Authorization", format!("token {}", bot.grant.token))
                    .send()
                    .await?
                    .json::<serde_json::Value>()
                    .await
            }
            .await
            .map(|v| v["grant"]["submission_count"].as_u64());
            match got {
                Ok(Some(n)) if n == bot.created => {}
                other => self.problems.push(format!(
                    "grant {} of {}: submission_count {other:?}, but the client got {} × 201",
                    bot.grant.grant_id, bot.grant.login, bot.created
                )),
            }
        }
    }

    /// Stops the server, fills in ratios and bars, prints the table and
    /// writes the JSON. True when nothing unexpected happened.
    pub async fn finish(mut self, server: &mut Server) -> anyhow::Result<bool> {
        for line in server.stop().await {
            self.problems.push(format!("server log: {line}"));
        }
        self.loadavg[1] = stats::loadavg();
        self.ratios();
        self.bars = crate::bars::judge(
            &self.rows,
            self.engine,
            &self.synchronous,
            self.bar_clients,
            self.grants,
        );
        print!("{}", self.render());
        if let Some(path) = &self.json {
            std::fs::write(path, serde_json::to_string_pretty(&self)?)?;
            eprintln!("writ-bench: wrote {}", path.display());
        }
        if !self.problems.is_empty() {
            eprintln!("writ-bench: FAILED: {} problems:", self.problems.len());
            for p in &self.problems {
                eprintln!("  {p}");
            }
        }
        Ok(self.problems.is_empty())
    }

    /// Writ rows against the baselines at the same N (submissions against
    /// T_submit, grant reads against the grant read): the sqlx one, and the
    /// fastest of every driver that ran.
    fn ratios(&mut self) {
        let snapshot = self.rows.clone();
        for row in self.rows.iter_mut().filter(|r| !r.is_baseline()) {
            let scenario = row.baseline_scenario();
            let kind = match row.op.as_str() {
                "new submit" => Kind::Submit,
                "grant read" => Kind::Read,
                _ => continue,
            };
            let sqlx = kind.label(Driver::Sqlx);
            let base = snapshot
                .iter()
                .find(|r| r.scenario == scenario && r.op == sqlx && r.clients == row.clients)
                .map(|r| r.per_s);
            row.baseline_per_s = base;
            row.ratio = base.filter(|b| *b > 0.0).map(|b| row.per_s / b);
            if let Some(f) = fastest(&snapshot, scenario, kind, row.clients) {
                row.fastest_baseline = f.driver;
                row.fastest_baseline_per_s = Some(f.per_s);
                row.fastest_ratio = (f.per_s > 0.0).then(|| row.per_s / f.per_s);
            }
        }
    }

    /// What "fastest baseline" means in this run.
    fn fastest_note(&self) -> &'static str {
        match self.baseline_drivers.as_slice() {
            [] => "No baseline ran.",
            ["sqlx"] => {
                "Baseline: sqlx only (PostgreSQL has no other driver here), so the fastest \
                 baseline is the sqlx one; the bars are judged against it."
            }
            _ => {
                "Baselines: sqlx (`T_submit`, `grant read (SQL)`) and rusqlite with cached \
                 prepared statements (`… (rusqlite)`). \"fastest baseline\" is the faster of \
                 the two in the same group at the same N; the bars are judged against sqlx."
            }
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## writ-bench: {} ({}); {} grants; {} s per row in {} interleaved slices, {} s warm-up each; mix {}; {} CPUs, load {:.2} → {:.2}\n",
            self.engine,
            self.database,
            self.grants,
            self.seconds,
            self.slices,
            self.warmup,
            self.mix,
            self.cpus,
            self.loadavg[0].unwrap_or(f64::NAN),
            self.loadavg[1].unwrap_or(f64::NAN)
        );
        out += "| scenario | N | operation | ok | errors | per s | p50 ms | p95 ms | p99 ms | server RSS MiB | server CPU % | host busy % | baseline /s | Writ / baseline | fastest baseline /s | Writ / fastest |\n";
        out += "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        let opt =
            |v: Option<f64>, digits: usize| v.map_or("".to_owned(), |v| format!("{v:.digits$}"));
        let ratio = |x: Option<f64>| x.map_or("".to_owned(), |x| format!("{}×", fine(x)));
        for r in &self.rows {
            let fastest = match (r.fastest_baseline_per_s, r.fastest_baseline) {
                (Some(v), Some(d)) => format!("{v:.0} {d}"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.scenario,
                r.clients,
                r.op,
                r.requests,
                r.errors,
                r.per_s,
                fine(r.p50_ms),
                fine(r.p95_ms),
                fine(r.p99_ms),
                opt(r.server_rss_peak_mib, 1),
                opt(r.server_cpu_pct, 0),
                opt(r.host_cpu_pct, 0),
                opt(r.baseline_per_s, 0),
                ratio(r.ratio),
                fastest,
                ratio(r.fastest_ratio),
            );
        }
        let _ = writeln!(out, "\n{}", self.fastest_note());
        out += "\n### Bars\n\n| bar | measured (sqlx baseline) | vs fastest baseline | holds? |\n| --- | --- | --- | --- |\n";
        for b in &self.bars {
            let holds = match b.holds {
                Some(true) => "**yes**",
                Some(false) => "**NO**",
                None => "not judged",
            };
            let vs = b.vs_fastest.as_deref().unwrap_or("");
            let _ = writeln!(out, "| {} | {} | {vs} | {holds} |", b.bar, b.measured);
        }
        if let Some(w) = &self.webhooks {
            let _ = writeln!(
                out,
                "\n### Webhooks\n\nOne subscription matching every event: {} delivered ({} duplicates), {:.0}/s, event to arrival p50 {} ms, p99 {} ms",
                w.delivered,
                w.duplicates,
                w.per_s,
                fine(w.latency_p50_ms),
                fine(w.latency_p99_ms)
            );
        }
        if !self.problems.is_empty() {
            let _ = writeln!(out, "\n### Problems\n");
            for p in &self.problems {
                let _ = writeln!(out, "- {p}");
            }
        }
        out
    }
}
