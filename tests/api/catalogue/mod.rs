//! The bad-input catalogue: every path segment, query parameter, form field
//! and JSON member of every route gets U+0000, bytes that are not UTF-8,
//! CRLF, 10 KiB, and a value of every other JSON type, with the credentials
//! that reach the handler, against a world with real data. The JSON API's
//! table comes from its OpenAPI document and `/mcp`'s from `tools/list`,
//! so a new operation or tool is covered without editing the catalogue;
//! pages and forms are listed in `web.rs`.
//!
//! Junk the contract forbids (judged by the schema the route publishes)
//! must be refused with a 4xx whose body is the route's error format, and
//! must leave the database as it was but for what a refusal writes (the
//! audit record of a refused agent call, sessions and nonces of page
//! loads, failed-login records): a dump of every table before and after
//! proves it. Junk the contract allows (CRLF in an issue body) may be
//! accepted but never answer 5xx. One valid request per route shows that
//! the refusals are the junk's doing.
//!
//! `CATALOGUE_OUTCOMES=<file>` appends every probe's answer to that file,
//! one line each, for reading what the server made of the junk.

mod api;
mod cases;
mod dump;
mod fixture;
mod mcp;
mod probe;
mod route;
mod schema;
mod web;

use std::collections::BTreeSet;
use std::time::Instant;

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::Value;

use crate::helpers::{Auth, TestApp};
use cases::Expect;
use fixture::Fixture;
use probe::{Probe, Send};

/// Requests in flight at once.
const CONCURRENCY: usize = 8;

/// Tables a refusal may write: sessions and nonces of page loads, failed
/// logins; the audit of agent calls is checked row by row instead.
const REFUSAL_TABLES: [&str; 4] = ["tool_calls", "sessions", "form_nonces", "login_failures"];

both_backends!(catalogue, |config| {
    // The login form's junk is many failed logins from one address: keep
    // them answered (401), not throttled, so that the last valid login works.
    config.login_throttle_failures = 1_000_000;
    config.login_throttle_login_ceiling = 1_000_000;
    config.login_hash_wait_ms = 60_000;
    // Seals are made by the fixture only: a background seal would change
    // the database while junk is refused.
    config.audit.seal = false;
});
async fn catalogue(app: TestApp) {
    let started = Instant::now();
    let fx = Fixture::new(&app).await;
    let resp = app.get("/api/v1/openapi.json", Auth::None).await;
    resp.assert_status(200);
    let doc: Value = resp.json();
    let checker = schema::Checker::new(doc.clone());
    let tools = mcp::tools(&fx).await;
    let mut probes = api::probes(&doc, &checker, &fx);
    probes.extend(mcp::probes(&tools, &checker, &fx));
    probes.extend(web::probes(&doc, &checker, &fx));
    // `/mcp` is one route with a row per tool.
    let routes: BTreeSet<&str> = probes
        .iter()
        .map(|p| p.route.split(" tools/call ").next().unwrap_or_default())
        .collect();
    let fields: BTreeSet<(&str, &str)> = probes
        .iter()
        .filter(|p| p.case.is_some())
        .map(|p| (p.route.as_str(), p.field.as_str()))
        .collect();
    let (controls, junk): (Vec<&Probe>, Vec<&Probe>) =
        probes.iter().partition(|p| p.case.is_none());
    let (refused, allowed): (Vec<&Probe>, Vec<&Probe>) =
        junk.into_iter().partition(|p| p.expect == Expect::Refuse);
    let setup = started.elapsed();

    let url = app.database_url();
    let before = dump::dump(&url).await;
    let mut faults = run(&fx, &refused, CONCURRENCY).await;
    let after = dump::dump(&url).await;
    let mut changes = dump::differences(&before, &after, &REFUSAL_TABLES);
    changes.extend(dump::audit_faults(&before, &after));

    let mut ordered = controls.clone();
    ordered.sort_by_key(|p| control_rank(p));
    let last = ordered.partition_point(|p| control_rank(p) < 3);
    faults.extend(run(&fx, &ordered[..last], 1).await);
    faults.extend(run(&fx, &allowed, CONCURRENCY).await);
    faults.extend(run(&fx, &ordered[last..], 1).await);

    eprintln!(
        "catalogue on {:?}: {} routes ({} MCP tools), {} fields, {} requests: {} junk to \
         refuse, {} junk the contract allows, {} valid; setup {:.1?}, total {:.1?}",
        app.backend,
        routes.len(),
        tools.len(),
        fields.len(),
        probes.len(),
        refused.len(),
        allowed.len(),
        controls.len(),
        setup,
        started.elapsed()
    );
    let mut report = Vec::new();
    if !changes.is_empty() {
        report.push(format!(
            "the database changed while junk was refused ({} lines):",
            changes.len()
        ));
        report.extend(changes);
    }
    if !faults.is_empty() {
        report.push(format!("{} answers broke the contract:", faults.len()));
        report.extend(faults);
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The valid requests run reads first, then writes and deletions; the
/// logout that ends alice's session runs after everything else.
fn control_rank(p: &Probe) -> u8 {
    match &p.send {
        Send::Api { method, .. } if *method == Method::GET => 0,
        Send::Page { .. } => 0,
        Send::Api { method, .. } if *method == Method::DELETE => 2,
        Send::Form(form) if form.post == "/user/logout" => 3,
        _ => 1,
    }
}

/// Sends the probes, `concurrency` at a time: a line per broken answer.
async fn run(fx: &Fixture<'_>, probes: &[&Probe], concurrency: usize) -> Vec<String> {
    let answers: Vec<(&Probe, probe::Answer)> = futures_util::stream::iter(probes)
        .map(|p| async move { (*p, p.send(fx).await) })
        .buffered(concurrency)
        .collect()
        .await;
    if let Some(path) = std::env::var_os("CATALOGUE_OUTCOMES") {
        write_outcomes(&path, &answers);
    }
    answers
        .iter()
        .filter_map(|(p, a)| {
            p.fault(a).map(|why| {
                let body: String = a.body.chars().take(300).collect();
                format!("{}: {why}; body: {body}", p.label())
            })
        })
        .collect()
}

/// Appends one line per answer to the file `CATALOGUE_OUTCOMES` names:
/// probe, expectation, status, the start of the body.
fn write_outcomes(path: &std::ffi::OsStr, answers: &[(&Probe, probe::Answer)]) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open CATALOGUE_OUTCOMES");
    for (p, a) in answers {
        let flag = if a.body.contains("\"isError\":true") {
            "isError "
        } else {
            ""
        };
        let head: String = a
            .body
            .chars()
            .take(160)
            .filter(|c| !c.is_control())
            .collect();
        let _ = writeln!(
            file,
            "{}\t{:?}\t{}\t{flag}{head}",
            p.label(),
            p.expect,
            a.status
        );
    }
}
