//! Real-browser tests: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) driven over WebDriver against a real Writ on loopback.
//!
//! Every test runs once per backend, `<module>::<test>::sqlite` and
//! `<module>::<test>::postgres`, each with its own Writ, database,
//! chromedriver (own loopback port) and Chromium profile. Humans act only
//! through the pages (typing, clicking); the bot acts over the JSON API;
//! outcomes are checked on the page and through the API.
//!
//! - Without `chromedriver` on `PATH` every test prints
//!   `skipped: chromedriver not found` and passes, unless
//!   `WRIT_TEST_REQUIRE_BROWSER` is set (then it fails).
//! - The PostgreSQL variant needs `WRIT_TEST_POSTGRES_URL` (skipped without
//!   it, failed with `WRIT_TEST_REQUIRE_POSTGRES` set), as in `tests/api`.
//! - Screenshots of the pages in each state go to
//!   `test-output/browser/<test>-<backend>/NN-<state>.png`.
//! - axe-core checks every page state a test visits ([`axe`]); its
//!   findings go to `test-output/browser/<test>-<backend>/axe.jsonl`.
//!
//! Run: `cargo nextest run --test browser` (or `cargo test --test browser`).

/// `both_backends!(name);` next to `async fn name(case: Case) { ... }`
/// generates the module `name` with the tests `sqlite` and `postgres`, in a
/// desktop browser; `both_backends!(name, device)` in another
/// ([`harness::Device`]).
macro_rules! both_backends {
    ($name:ident) => {
        both_backends!($name, crate::harness::Device::Desktop);
    };
    ($name:ident, $device:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                crate::harness::run(
                    stringify!($name),
                    crate::app::Backend::Sqlite,
                    $device,
                    super::$name,
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                crate::harness::run(
                    stringify!($name),
                    crate::app::Backend::Postgres,
                    $device,
                    super::$name,
                )
                .await;
            }
        }
    };
}

mod app;
mod axe;
/// The same per-test databases as the HTTP tests (one file, shared).
#[allow(dead_code)]
#[path = "../api/db.rs"]
mod db;
mod driver;
mod harness;

mod forms;
mod grants;
mod pages;
mod sessions;
