//! The speed bars of quality.md, judged from one run's rows.

use crate::report::{BAR_BASELINE, BASELINE, Bar, Row};

fn find<'a>(rows: &'a [Row], scenario: &str, op: &str, n: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.op == op && r.clients == n)
}

/// Judges every bar this run can speak to; `n` is the submit-only and
/// read-only rows' client count (8 in quality.md).
/// `grants` is how many grants the server's database held.
pub fn judge(rows: &[Row], engine: &str, synchronous: &str, n: usize, grants: i64) -> Vec<Bar> {
    let sqlite = engine == "sqlite";
    let submit = find(rows, "submit only", "new submit", n);
    let read = find(rows, "read only", "grant read", n);
    let base_1 = find(rows, BAR_BASELINE, "T_submit", 1);
    let base_n = find(rows, BAR_BASELINE, "T_submit", n);
    let mut bars = Vec::new();

    let ratio = |w: Option<&Row>, b: Option<&Row>| match (w, b) {
        (Some(w), Some(b)) if b.per_s > 0.0 => Some((w.per_s, b.per_s, w.per_s / b.per_s)),
        _ => None,
    };
    let sqlite_full = sqlite && synchronous.eq_ignore_ascii_case("full");
    bars.push(match ratio(submit, base_1) {
        Some((w, b, x)) => Bar {
            bar: format!(
                "SQLite FULL, {n} clients, new submissions/s ≥ 0.5 × baseline single-transaction rate (goal ≥ 1.0×)"
            ),
            measured: format!(
                "{w:.0}/s vs {b:.0}/s baseline at N=1: {x:.2}×{}",
                find(rows, BASELINE, "T_submit", 1).map_or(String::new(), |o| format!(
                    " (the other N=1 baseline of this run: {:.0}/s, {:.2}×)",
                    o.per_s,
                    w / o.per_s
                ))
            ),
            holds: sqlite_full.then_some(x >= 0.5),
        },
        None => unmeasured("SQLite FULL, new submissions/s ≥ 0.5 × baseline at N=1"),
    });
    bars.push(match ratio(submit, base_n) {
        Some((w, b, x)) => Bar {
            bar: format!(
                "PostgreSQL, {n} clients, new submissions/s ≥ 0.5 × baseline at the same concurrency"
            ),
            measured: format!("{w:.0}/s vs {b:.0}/s baseline at N={n}: {x:.2}×"),
            holds: (!sqlite).then_some(x >= 0.5),
        },
        None => unmeasured("PostgreSQL, new submissions/s ≥ 0.5 × baseline at the same N"),
    });
    bars.push(match submit {
        Some(r) => Bar {
            bar: format!("submit p99 at {n} clients (SQLite) < 10 ms"),
            measured: format!(
                "p99 {:.2} ms (p50 {:.2}, p95 {:.2}) submit only{}",
                r.p99_ms,
                r.p50_ms,
                r.p95_ms,
                find(rows, "mix", "new submit", n).map_or(String::new(), |m| format!(
                    "; {:.2} ms in the mix",
                    m.p99_ms
                ))
            ),
            holds: sqlite.then_some(r.p99_ms < 10.0),
        },
        None => unmeasured("submit p99 at 8 clients (SQLite) < 10 ms"),
    });
    bars.push(match read {
        Some(r) => Bar {
            bar: format!("grant read, {n} clients, ≥ 20k/s on SQLite"),
            measured: format!(
                "{:.0}/s (p99 {:.2} ms); baseline SQL read {}",
                r.per_s,
                r.p99_ms,
                find(rows, BAR_BASELINE, "grant read (SQL)", n)
                    .map_or("not run".to_owned(), |b| format!("{:.0}/s", b.per_s))
            ),
            holds: sqlite.then_some(r.per_s >= 20_000.0),
        },
        None => unmeasured("grant read, 8 clients, ≥ 20k/s on SQLite"),
    });
    let peak = rows
        .iter()
        .filter_map(|r| r.server_rss_peak_mib)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    bars.push(Bar {
        bar: "server RSS under the bench at 100k grants < 64 MiB".to_owned(),
        measured: peak.map_or("no server row".to_owned(), |p| {
            if grants >= 100_000 {
                format!("peak {p:.1} MiB with {grants} grants")
            } else {
                format!(
                    "peak {p:.1} MiB, but with {grants} grants, not 100k (--bulk-grants 100000)"
                )
            }
        }),
        holds: match peak {
            Some(p) if grants >= 100_000 => Some(p < 64.0),
            _ => None,
        },
    });
    bars
}

fn unmeasured(bar: &str) -> Bar {
    Bar {
        bar: bar.to_owned(),
        measured: "a row it needs was not run".to_owned(),
        holds: None,
    }
}
