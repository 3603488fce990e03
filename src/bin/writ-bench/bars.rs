//! The speed bars of quality.md, judged from one run's rows against the
//! sqlx baseline; each ratio is also reported against the fastest baseline
//! of the engine, which the verdicts do not use.

use crate::baseline::Kind;
use crate::report::{BAR_BASELINE, BASELINE, Bar, Row, fastest, fine};

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
    // Writ's row `w` against the fastest `kind` baseline of the bar group at N = `at`.
    let vs_fastest = |w: Option<&Row>, kind: Kind, at: usize| -> Option<String> {
        let (w, f) = (w?, fastest(rows, BAR_BASELINE, kind, at)?);
        (f.per_s > 0.0).then(|| {
            format!(
                "{:.0}/s vs {} {:.0}/s at N={at}: {}×{}",
                w.per_s,
                f.driver.unwrap_or("?"),
                f.per_s,
                fine(w.per_s / f.per_s),
                if sqlite {
                    ""
                } else {
                    " (sqlx is PostgreSQL's only driver: the same baseline)"
                }
            )
        })
    };
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
            vs_fastest: vs_fastest(submit, Kind::Submit, 1),
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
            vs_fastest: vs_fastest(submit, Kind::Submit, n),
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
            vs_fastest: None,
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
            vs_fastest: vs_fastest(read, Kind::Read, n),
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
        vs_fastest: None,
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
        vs_fastest: None,
        holds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::Driver;
    use crate::stats::Samples;

    /// A row of `per_s` operations per second (over one second).
    fn row(scenario: &str, n: usize, op: &str, per_s: usize) -> Row {
        let samples = Samples {
            latencies_us: vec![500; per_s],
            ..Samples::default()
        };
        Row::new(scenario, n, op, samples, 1.0)
    }

    fn rows(with_rusqlite: bool) -> Vec<Row> {
        let mut rows = vec![
            row(BAR_BASELINE, 1, Kind::Submit.label(Driver::Sqlx), 100),
            row(BAR_BASELINE, 8, Kind::Submit.label(Driver::Sqlx), 120),
            row("submit only", 8, "new submit", 60),
            row(BAR_BASELINE, 8, Kind::Read.label(Driver::Sqlx), 1000),
            row("read only", 8, "grant read", 500),
        ];
        if with_rusqlite {
            rows.push(row(
                BAR_BASELINE,
                1,
                Kind::Submit.label(Driver::Rusqlite),
                400,
            ));
            rows.push(row(
                BAR_BASELINE,
                8,
                Kind::Submit.label(Driver::Rusqlite),
                80,
            ));
            rows.push(row(
                BAR_BASELINE,
                8,
                Kind::Read.label(Driver::Rusqlite),
                10_000,
            ));
        }
        rows
    }

    /// The verdicts are the sqlx baseline's; the fastest baseline of each
    /// operation is only reported beside them.
    #[test]
    fn a_faster_baseline_is_reported_and_changes_no_verdict() {
        let sqlx_only = judge(&rows(false), "sqlite", "full", 8, 0);
        let both = judge(&rows(true), "sqlite", "full", 8, 0);
        let verdicts = |bars: &[Bar]| bars.iter().map(|b| b.holds).collect::<Vec<_>>();
        assert_eq!(verdicts(&sqlx_only), verdicts(&both));
        assert_eq!(both[0].holds, Some(true), "60/s ≥ 0.5 × 100/s");
        let measured = |bars: &[Bar]| bars.iter().map(|b| b.measured.clone()).collect::<Vec<_>>();
        assert_eq!(measured(&sqlx_only), measured(&both));
        let vs = |i: usize| both[i].vs_fastest.as_deref().unwrap_or("");
        assert_eq!(vs(0), "60/s vs rusqlite 400/s at N=1: 0.15×");
        // At N = 8 sqlx was the faster one: it is the fastest baseline.
        assert_eq!(vs(1), "60/s vs sqlx 120/s at N=8: 0.50×");
        assert_eq!(vs(3), "500/s vs rusqlite 10000/s at N=8: 0.050×");
        assert_eq!(both[2].vs_fastest, None);
        assert_eq!(
            sqlx_only[0].vs_fastest.as_deref(),
            Some("60/s vs sqlx 100/s at N=1: 0.60×")
        );
    }

    /// On PostgreSQL the fastest baseline is sqlx's, and the bar says so.
    #[test]
    fn postgres_names_sqlx_as_its_only_driver() {
        let bars = judge(&rows(false), "postgres", "full", 8, 0);
        assert_eq!(bars[1].holds, Some(true), "60/s ≥ 0.5 × 120/s");
        assert_eq!(
            bars[1].vs_fastest.as_deref(),
            Some(
                "60/s vs sqlx 120/s at N=8: 0.50× (sqlx is PostgreSQL's only driver: the same baseline)"
            )
        );
    }
}
