//! One browser test: chromedriver + headless Chromium, a fresh Writ with the
//! standard fixture, the test body, and the cleanup whatever happened.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::FutureExt as _;

use crate::app::{Backend, OWNER, REPO, TestApp, postgres_admin_url};
use crate::driver::{Chromedriver, Web, chromedriver_path};

/// Longest a single test body may run before it fails instead of hanging.
const TEST_TIME_LIMIT: Duration = Duration::from_secs(240);

/// What a test body gets: Writ with the fixture (and the bot's API side),
/// and one browser on it (not logged in).
pub struct Case {
    pub app: TestApp,
    pub web: Web,
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The browser a test runs in.
#[derive(Debug, Clone, Copy)]
pub enum Device {
    /// A 1280×900 desktop window, light colour scheme.
    Desktop,
    /// A phone, 390×844 CSS pixels (Chromium's mobile emulation), in the
    /// dark colour scheme when `dark`.
    Phone { dark: bool },
}

/// Runs `body` on `backend` in the browser `device`, or reports why it is
/// skipped.
pub async fn run<F, Fut>(name: &str, backend: Backend, device: Device, body: F)
where
    F: FnOnce(Case) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(chromedriver) = chromedriver_path() else {
        if env_set("WRIT_TEST_REQUIRE_BROWSER") {
            panic!("WRIT_TEST_REQUIRE_BROWSER is set but chromedriver is not on PATH");
        }
        eprintln!("skipped: chromedriver not found");
        return;
    };
    if backend == Backend::Postgres && postgres_admin_url().is_none() {
        if env_set("WRIT_TEST_REQUIRE_POSTGRES") {
            panic!("WRIT_TEST_REQUIRE_POSTGRES is set but WRIT_TEST_POSTGRES_URL is unset");
        }
        eprintln!("skipped: WRIT_TEST_POSTGRES_URL unset");
        return;
    }
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("test-output")
        .join("browser")
        .join(format!("{name}-{}", backend.name()));
    let _ = std::fs::remove_dir_all(&shots);

    let driver = Chromedriver::start(&chromedriver).await;
    let mut app = TestApp::spawn(backend).await;
    app.fixture().await;
    let client = match device {
        Device::Desktop => driver.session().await,
        Device::Phone { dark } => {
            let phone = serde_json::json!({
                "deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 3.0, "touch": true, "mobile": true},
            });
            let args: &[&str] = if dark {
                &[
                    "--force-dark-mode",
                    "--blink-settings=preferredColorScheme=0",
                ]
            } else {
                &[]
            };
            driver.session_with(args, Some(phone)).await
        }
    };
    let web = Web::new(client.clone(), &app.base, shots.clone());
    let outcome = AssertUnwindSafe(tokio::time::timeout(
        TEST_TIME_LIMIT,
        body(Case { app, web }),
    ))
    .catch_unwind()
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(15), client.close()).await;
    drop(driver);
    match outcome {
        Ok(Ok(())) => eprintln!("screenshots: {}", shots.display()),
        Ok(Err(_)) => panic!("test did not finish within {TEST_TIME_LIMIT:?}"),
        Err(panic) => {
            eprintln!("screenshots so far: {}", shots.display());
            std::panic::resume_unwind(panic)
        }
    }
}

/// The prepare form's fields, as a person types them.
pub struct PrepareForm<'a> {
    pub agent: &'a str,
    pub task: &'a str,
    pub summary: &'a str,
    /// One MCP requirement, entered in the form's first requirement row (or,
    /// on a page without rows, as JSON in the `mcp_requirements` textarea).
    pub requirement: Option<Requirement<'a>>,
}

/// One MCP requirement as the prepare form's row asks for it.
pub struct Requirement<'a> {
    pub mcp_id: &'a str,
    pub agent: &'a str,
    /// `required` or `optional`.
    pub requirement: &'a str,
    pub capabilities: &'a [&'a str],
    /// `block`, `ask_user` or `continue_without_mcp`.
    pub fallback: &'a str,
}

impl Requirement<'_> {
    /// The requirement as the proposal's JSON shows it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "mcp_id": self.mcp_id,
            "agent": self.agent,
            "requirement": self.requirement,
            "capabilities": self.capabilities,
            "fallback": self.fallback,
        })
    }
}

/// The action of the prepare form.
pub fn prepare_action() -> String {
    format!("/{OWNER}/{REPO}/agent-work-grants")
}

/// Fills the prepare form already shown and clicks its submit button.
pub async fn fill_and_prepare(web: &Web, form: &PrepareForm<'_>) {
    fill_prepare(web, form).await;
    web.click_and_wait(&format!(
        "form[action='{}'] button[type='submit']",
        prepare_action()
    ))
    .await;
}

/// Fills the prepare form already shown, as a person types it.
pub async fn fill_prepare(web: &Web, form: &PrepareForm<'_>) {
    let f = format!("form[action='{}']", prepare_action());
    web.fill(&format!("{f} [name='agent']"), form.agent).await;
    web.fill(&format!("{f} [name='task']"), form.task).await;
    web.fill(&format!("{f} [name='summary']"), form.summary)
        .await;
    if let Some(r) = &form.requirement {
        if web.exists(&format!("{f} [name='req_mcp_id']")).await {
            // The first requirement row.
            let row = format!("{f} fieldset.requirement");
            web.fill(&format!("{row} [name='req_mcp_id']"), r.mcp_id)
                .await;
            web.fill(&format!("{row} [name='req_agent']"), r.agent)
                .await;
            web.select(
                &format!("{row} select[name='req_requirement']"),
                r.requirement,
            )
            .await;
            web.select(&format!("{row} select[name='req_fallback']"), r.fallback)
                .await;
            web.fill(
                &format!("{row} [name='req_capabilities']"),
                &r.capabilities.join(", "),
            )
            .await;
        } else {
            let area = format!("{f} textarea[name='mcp_requirements']");
            if !web.find(&area).await.is_displayed().await.unwrap_or(true) {
                // Folded away in a <details>: open it as a person would.
                web.find(&format!("{f} details > summary"))
                    .await
                    .click()
                    .await
                    .expect("open details");
            }
            let json = serde_json::Value::Array(vec![r.json()]).to_string();
            web.fill(&area, &json).await;
        }
    }
}

/// The grant id of the grant page now shown.
pub async fn grant_id_on_page(web: &Web) -> i64 {
    let path = web.path().await;
    let prefix = format!("/{OWNER}/{REPO}/agent-work-grants/");
    path.strip_prefix(&prefix)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("expected a grant page after prepare, got {path}"))
}

/// Opens the prepare page, fills it and submits: the new grant's id.
pub async fn prepare(web: &Web, form: &PrepareForm<'_>) -> i64 {
    web.goto(&format!("/{OWNER}/{REPO}/agent-work-grants/new"))
        .await;
    fill_and_prepare(web, form).await;
    grant_id_on_page(web).await
}

/// A plain grant for builder-bot.
pub fn plain(task: &str) -> PrepareForm<'_> {
    PrepareForm {
        agent: crate::app::BOT,
        task,
        summary: "Triage the open bug reports and file one issue per duplicate cluster.",
        requirement: None,
    }
}

/// Clicks the grant page's approve button.
pub async fn click_approve(web: &Web) {
    web.click_and_wait("form[action$='/approve'] button[type='submit']")
        .await;
}

/// Types a reason and clicks the grant page's withdraw button.
pub async fn click_withdraw(web: &Web, reason: &str) {
    web.fill("form[action$='/withdraw'] input[name='reason']", reason)
        .await;
    web.click_and_wait("form[action$='/withdraw'] button[type='submit']")
        .await;
}

/// Asserts the page text contains `needle`, showing the page otherwise.
#[track_caller]
pub fn assert_says(text: &str, needle: &str) {
    assert!(
        text.contains(needle),
        "the page does not say {needle:?}; it says:\n{text}"
    );
}
