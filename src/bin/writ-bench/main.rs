//! `writ-bench`: the benchmark harness of quality.md ("Benchmark harness").
//!
//! In one run, on one machine and one database kind (a SQLite temp file, or
//! fresh databases on the PostgreSQL named by `--database-url`):
//!
//! 1. the **baseline**: T_submit and a grant read issued straight to the
//!    engine with sqlx (no HTTP, no Writ code), on a database migrated by
//!    Writ's migrations, with Writ's durability settings ([`baseline`]);
//! 2. a release `writ serve` on a fresh database, set up the way users do it
//!    (admin CLI and API, browser forms, bot confirm; [`fixture`]) and driven
//!    over HTTP by N keep-alive bot clients ([`load`]);
//! 3. a table (stdout) and the same as JSON (`--json FILE`), with the
//!    Writ/baseline ratios and which bars hold ([`report`]).
//!
//! Every response status is checked; any unexpected one fails the run.
//! Only loopback addresses are contacted.

mod bars;
mod baseline;
mod fixture;
mod load;
mod report;
mod server;
mod stats;
mod target;

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
    /// Measured seconds per row.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Unmeasured seconds before each row.
    #[arg(long, default_value_t = 0.5)]
    pub warmup: f64,
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
    Ok(())
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
    let window = load::Window {
        warmup: Duration::from_secs_f64(args.warmup),
        measure: Duration::from_secs_f64(args.seconds),
    };

    let mut base = if args.no_baseline {
        None
    } else {
        Some(baseline::Baseline::prepare(target, bots, repos).await?)
    };
    let mut server = server::Server::start(args, target).await?;
    let mut world = fixture::build(&server, bots, repos, args.extra_grants).await?;
    eprintln!(
        "writ-bench: {} bots, {} repositories, server pid {} on {}",
        bots,
        repos,
        server.pid(),
        server.base()
    );

    // Baseline and server rows interleave by N, so a noisy neighbour hits
    // both sides of a ratio alike. Any unexpected outcome ends the run.
    let mut plan: Vec<(usize, Option<Mix>)> =
        args.clients.iter().map(|&n| (n, Some(args.mix))).collect();
    if !args.clients.contains(&args.bar_clients) {
        plan.push((args.bar_clients, None));
    }
    plan.push((args.bar_clients, Some(Mix::SUBMIT)));
    plan.push((args.bar_clients, Some(Mix::READ)));
    let mut baseline_done = Vec::new();
    for (n, mix) in plan {
        if let Some(base) = base.as_mut()
            && !baseline_done.contains(&n)
        {
            baseline_done.push(n);
            for kind in [baseline::Kind::Submit, baseline::Kind::Read] {
                if !bench.push(base.run(kind, n, window).await?) {
                    return bench.finish(&mut server).await;
                }
            }
        }
        let Some(mix) = mix else { continue };
        let scenario = match mix {
            Mix::SUBMIT => "submit only",
            Mix::READ => "read only",
            _ => "mix",
        };
        let rows = load::run(&server, &mut world, n, mix, scenario, window).await?;
        if !bench.push(rows) {
            return bench.finish(&mut server).await;
        }
    }
    bench.check_counters(&world, &server).await;
    bench.finish(&mut server).await
}
