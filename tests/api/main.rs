//! Black-box tests of Writ over real HTTP on loopback.
//!
//! Every behavioural test runs twice, once per backend: `<module>::<test>::sqlite`
//! and `<module>::<test>::postgres`. The PostgreSQL variant needs
//! `WRIT_TEST_POSTGRES_URL` (an admin connection URL, e.g.
//! `postgres://postgres@127.0.0.1:5432/postgres`); without it, it prints
//! `skipped: WRIT_TEST_POSTGRES_URL unset` and passes. Each test gets a fresh
//! database that is removed when the test ends (with `WRIT_TEST_REQUIRE_POSTGRES`
//! set, a missing URL fails the test instead). Set `TEST_LOG=1` to see the
//! server's logs.

/// Runs the async test function `name(app: TestApp)` once per backend:
/// `both_backends!(name);` next to `async fn name(app: TestApp) { ... }`
/// generates the module `name` with the tests `sqlite` and `postgres`, each
/// on a fresh app and database. `both_backends!(name, |config| ...)` first
/// adjusts the app's `writ::Config`; `both_backends!(name, spawn = f)` gets
/// the app from `f(backend)` (a future; it is expanded inside the module,
/// so names of the test file are `super::` there) instead.
macro_rules! both_backends {
    ($name:ident) => {
        both_backends!($name, |_config| {});
    };
    ($name:ident, spawn = $spawn:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = ($spawn)(crate::helpers::Backend::Sqlite).await;
                crate::helpers::within_time_limit(super::$name(app)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if crate::helpers::postgres_admin_url().is_none() {
                    crate::helpers::skip_postgres();
                    return;
                }
                let app = ($spawn)(crate::helpers::Backend::Postgres).await;
                crate::helpers::within_time_limit(super::$name(app)).await;
            }
        }
    };
    ($name:ident, $configure:expr) => {
        both_backends!(
            $name,
            spawn = |backend| { crate::helpers::TestApp::spawn_with(backend, $configure) }
        );
    };
}

mod browser;
mod db;
mod helpers;
mod world;

mod access;
mod admission;
mod agent;
mod archive;
mod audit;
mod backup;
mod bad_input;
mod catalogue;
mod demo;
mod digest;
mod edge;
mod errors;
mod events;
mod exhaustion;
mod forms;
mod hardening_contract;
mod hardening_web;
mod issue_page;
mod issues;
mod list_counts;
mod matrix;
mod mcp;
mod mcp_stdio;
mod model;
mod openapi;
mod pagination;
mod policy;
mod prober;
mod pruning;
mod reporting;
mod service;
mod sessions;
mod storage;
mod submissions;
mod submit_races;
mod webhooks;
