//! `writ-bench`: the benchmark harness of quality.md ("Benchmark harness").
//!
//! In one run, on one machine and one database kind (a SQLite temp file, or
//! fresh databases on the PostgreSQL named by `--database-url`):
//!
//! 1. the **baseline**: T_submit and a grant read issued straight to the
//!    engine with sqlx (no HTTP, no Writ code), on a database migrated by
//!    Writ's migrations, with Writ's durability settings ([`baseline`]); on
//!    SQLite the same again through rusqlite with cached prepared
//!    statements ([`baseline_rusqlite`]);
//! 2. a release `writ serve` on a fresh database, set up the way users do it
//!    (admin CLI and API, browser forms, bot confirm; [`fixture`]) and driven
//!    over HTTP by N keep-alive bot clients ([`load`]);
//! 3. a table (stdout) and the same as JSON (`--json FILE`), with the
//!    Writ/baseline ratios (against sqlx, which the bars are judged by, and
//!    against the fastest baseline of the engine) and which bars hold
//!    ([`report`], [`bars`]).
//!
//! Rows come in groups (per N: the baselines and the mixed row; then the
//! bar rows with their own baselines). Each row's time is cut into slices and
//! the rows of a group take turns, so the noise of a shared machine falls on
//! both sides of a ratio alike.
//!
//! Every response status is checked; any unexpected one fails the run.
//! Only loopback addresses are contacted.

/// The same allocator as the server: the load generator shares the two
/// cores with it, and its baseline is a plain program, allocator included.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bars;
mod baseline;
mod baseline_rusqlite;
mod bulk;
mod fixture;
mod load;
mod report;
mod server;
mod stats;
mod target;
mod webhooks;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use load::Mix;
use report::Bench;

/// Command-line options (`scripts/bench --help`).
#[derive(Parser, Debug, Clone)]
#[command(name = "writ-bench", about = "Writ's benchmark harness (quality.md)")]
pub struct Args {
    /// An admin connection to a PostgreSQL on loopback (e.g.
    /// postgres://postgres@127.0.0.1:5432/postgres): the run creates its own
    /// databases there and drops them at the end. Without it: SQLite temp files.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Measured seconds per row (all its slices).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds before each slice.
    #[arg(long, default_value_t = 0.2)]
    pub warmup: f64,
    /// Slices each row's time is cut into; the rows of a group take turns
    /// slice by slice, so slow changes in the machine's load hit them alike.
    #[arg(long, default_value_t = 5)]
    pub slices: u32,
    /// Client counts of the mixed rows and the baseline rows.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub clients: Vec<usize>,
    /// Client count of the submit-only and read-only rows (the bars' N).
    #[arg(long, default_value_t = 8)]
    pub bar_clients: usize,
    /// Request mix of the mixed rows, as percentages.
    #[arg(long, default_value = "new=40,replay=10,read=40,list=10")]
    pub mix: Mix,
    /// Repositories the bots' grants are spread over (default: one per bot, so
    /// no two bots share a repository's issue counter; 1 = all share one).
    #[arg(long)]
    pub repos: Option<usize>,
    /// Extra grants per bot, prepared through the form and left awaiting the
    /// bot, so list pages carry more than the one active grant.
    #[arg(long, default_value_t = 0)]
    pub extra_grants: usize,
    /// Grants copied in SQL into the server's database after the fixture
    /// (awaiting the bench bots, on their repositories), for the RSS bar at
    /// 100k grants: `--bulk-grants 100000`.
    #[arg(long, default_value_t = 0)]
    pub bulk_grants: usize,
    /// SQLite `synchronous` for both the baseline and the server
    /// (default: Writ's default configuration).
    #[arg(long)]
    pub sqlite_synchronous: Option<String>,
    /// The writ binary (default: `writ` next to this binary, i.e. the release
    /// build when run by scripts/bench).
    #[arg(long)]
    pub writ_binary: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Skip the baseline rows (no ratios).
    #[arg(long)]
    pub no_baseline: bool,
    /// Keep the temp directory (server log, SQLite files) and the databases.
    #[arg(long)]
    pub keep: bool,
    /// Subscribe a receiver in this process to every event (webhook
    /// deliveries run with the rows) and report what it got.
    #[arg(long)]
    pub webhook: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run_and_clean(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("writ-bench: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the bench; the databases and temp files go whatever happens
/// (an error, Ctrl-C). True when no unexpected response was seen.
async fn run_and_clean(args: Args) -> anyhow::Result<bool> {
    validate(&args)?;
    let target = target::Target::create(&args).await?;
    let outcome = tokio::select! {
        r = run(&args, &target) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    target.cleanup(args.keep).await;
    outcome
}

fn validate(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds > 0.0, "--seconds must be positive");
    anyhow::ensure!(args.warmup >= 0.0, "--warmup must not be negative");
    anyhow::ensure!(
        !args.clients.is_empty() && args.clients.iter().all(|&n| n > 0) && args.bar_clients > 0,
        "client counts must be positive"
    );
    anyhow::ensure!(args.repos != Some(0), "--repos must be positive");
    anyhow::ensure!(args.slices > 0, "--slices must be positive");
    Ok(())
}

/// One row of the table while it is measured.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// A baseline row, straight to the engine.
    Baseline(baseline::Kind, baseline::Driver, usize, &'static str),
    /// A server row: N bot clients with a mix.
    Writ(Mix, usize, &'static str),
}

async fn run(args: &Args, target: &target::Target) -> anyhow::Result<bool> {
    let mut bench = Bench::new(args, target);
    let bots = args
        .clients
        .iter()
        .copied()
        .chain([args.bar_clients])
        .max()
        .unwrap_or(1);
    let repos = args.repos.unwrap_or(bots).min(bots);
    let base = if args.no_baseline {
        None
    } else {
        Some(baseline::Baseline::prepare(target, bots, repos).await?)
    };
    let mut server = server::Server::start(args, target).await?;
    let mut world = fixture::build(&server, bots, repos, args.extra_grants).await?;
    bench.grants = bulk::add_grants(target, args.bulk_grants).await?;
    let receiver = match args.webhook {
        true => Some(webhooks::Receiver::start(&server).await?),
        false => None,
    };
    eprintln!(
        "writ-bench: {bots} bots, {repos} repositories, server pid {} on {}",
        server.pid(),
        server.base()
    );
    let mut run = Runner {
        args,
        base: base.as_ref(),
        server: &server,
        world: &mut world,
    };
    for group in plan(args, target.engine) {
        let (rows, clean) = run.group(&group).await?;
        if !bench.push(rows) || !clean {
            return bench.finish(&mut server).await;
        }
    }
    bench.check_counters(&world, &server).await;
    if let Some(receiver) = receiver {
        bench.webhooks = Some(receiver.finish().await);
    }
    bench.finish(&mut server).await
}

/// The groups of rows: per N of `--clients`, the baselines (T_submit and
/// the grant read, through each driver of the engine) and the mixed row;
/// then the bar rows (submit only, read only) with their baselines.
/// Without a baseline, the baseline jobs are dropped.
fn plan(args: &Args, engine: target::Engine) -> Vec<Vec<Job>> {
    use baseline::Kind::{self, Read, Submit};
    use report::{BAR_BASELINE, BASELINE};
    let base = |kind: Kind, n: usize, scenario: &'static str| -> Vec<Job> {
        if args.no_baseline {
            return Vec::new();
        }
        baseline::Driver::on(engine)
            .iter()
            .map(|&d| Job::Baseline(kind, d, n, scenario))
            .collect()
    };
    let mut groups: Vec<Vec<Job>> = args
        .clients
        .iter()
        .map(|&n| {
            let mut jobs = base(Submit, n, BASELINE);
            jobs.extend(base(Read, n, BASELINE));
            jobs.push(Job::Writ(args.mix, n, "mix"));
            jobs
        })
        .collect();
    let n = args.bar_clients;
    let mut bar = base(Submit, 1, BAR_BASELINE);
    bar.extend(base(Submit, n, BAR_BASELINE));
    bar.push(Job::Writ(Mix::SUBMIT, n, "submit only"));
    bar.extend(base(Read, n, BAR_BASELINE));
    bar.push(Job::Writ(Mix::READ, n, "read only"));
    groups.push(bar);
    groups
}

/// Runs groups of rows, slice by slice.
struct Runner<'a> {
    args: &'a Args,
    base: Option<&'a baseline::Baseline>,
    server: &'a server::Server,
    world: &'a mut fixture::World,
}

impl Runner<'_> {
    /// Each row's `--seconds` is cut into `--slices` slices and the rows of
    /// the group take turns (ABCABC…), so a change in the machine's load hits
    /// every row of the group alike. Stops at the first slice with an
    /// unexpected outcome; (rows, clean).
    async fn group(&mut self, jobs: &[Job]) -> anyhow::Result<(Vec<report::Row>, bool)> {
        let slices = self.args.slices;
        let window = load::Window {
            warmup: Duration::from_secs_f64(self.args.warmup),
            measure: Duration::from_secs_f64(self.args.seconds / slices as f64),
        };
        let names: Vec<String> = jobs.iter().map(describe).collect();
        eprintln!("writ-bench: {} × {slices} slices", names.join(" / "));
        let mut acc: Vec<stats::Slice> = vec![stats::Slice::default(); jobs.len()];
        let mut clean = true;
        'slices: for _ in 0..slices {
            for (job, acc) in jobs.iter().zip(acc.iter_mut()) {
                let slice = match *job {
                    Job::Baseline(kind, driver, n, _) => match self.base {
                        Some(base) => base.run(kind, driver, n, window).await?,
                        None => continue,
                    },
                    Job::Writ(mix, n, _) => {
                        load::run(self.server, self.world, n, mix, window).await?
                    }
                };
                clean &= slice.errors() == 0;
                acc.merge(slice);
                if !clean {
                    break 'slices;
                }
            }
        }
        let mut rows = Vec::new();
        for (job, slice) in jobs.iter().zip(acc) {
            if slice.ops.is_empty() {
                continue;
            }
            let (n, scenario) = match *job {
                Job::Baseline(_, _, n, s) | Job::Writ(_, n, s) => (n, s),
            };
            rows.extend(report::Row::from_slice(scenario, n, slice));
        }
        Ok((rows, clean))
    }
}

fn describe(job: &Job) -> String {
    match job {
        Job::Baseline(kind, driver, n, s) => format!("{s} {} N={n}", kind.label(*driver)),
        Job::Writ(mix, n, s) => format!("writ {s} N={n} ({mix})"),
    }
}
