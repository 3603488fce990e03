//! Headless Chromium through chromedriver (WebDriver) on loopback, and a thin
//! layer of page helpers: type into inputs, click buttons and wait for the
//! next page, read the page's text, take screenshots.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The Chromium binary Debian's `chromium` package installs.
const CHROMIUM: &str = "/usr/bin/chromium";

/// How long a page may take to load after a click before the test fails.
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// `chromedriver` on `PATH`, if any.
pub fn chromedriver_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromedriver"))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt as _;
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A chromedriver process of this test, on its own loopback port, in its own
/// process group (so the Chromium it starts goes with it).
pub struct Chromedriver {
    child: tokio::process::Child,
    pub port: u16,
    profile: PathBuf,
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            // The group this harness created for chromedriver: chromedriver
            // itself and any Chromium left behind by a failed test.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Chromedriver {
    /// Starts chromedriver on a free loopback port and waits until it is ready.
    pub async fn start(binary: &Path) -> Chromedriver {
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let mut command = tokio::process::Command::new(binary);
            command
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .kill_on_drop(true);
            let child = command.spawn().expect("start chromedriver");
            let profile =
                std::env::temp_dir().join(format!("writ-chromium-{}", uuid::Uuid::new_v4()));
            let mut driver = Chromedriver {
                child,
                port,
                profile,
            };
            match driver.wait_ready().await {
                Ok(()) => return driver,
                Err(e) => last_error = e,
            }
        }
        panic!("chromedriver did not become ready: {last_error}");
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        let url = format!("http://127.0.0.1:{}/status", self.port);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("chromedriver exited with {status}"));
            }
            if let Ok(resp) = client.get(&url).send().await
                && let Ok(body) = resp.json::<Value>().await
                && body["value"]["ready"] == json!(true)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("timed out".into())
    }

    /// Opens a new headless Chromium session with a fresh profile.
    pub async fn session(&self) -> Client {
        self.session_with(&[], None).await
    }

    /// A session with more Chromium arguments and, if given, a
    /// `mobileEmulation` (a phone's viewport: headless Chromium clamps
    /// `--window-size` widths below ~500 px).
    pub async fn session_with(&self, extra_args: &[&str], mobile: Option<Value>) -> Client {
        std::fs::create_dir_all(&self.profile).expect("create the Chromium profile dir");
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", self.profile.display()),
        ];
        args.push("--lang=en-US".to_owned());
        args.extend(extra_args.iter().map(|a| (*a).to_owned()));
        let mut options = json!({ "args": args });
        if let Some(mobile) = mobile {
            options["mobileEmulation"] = mobile;
        }
        if Path::new(CHROMIUM).exists() {
            options["binary"] = json!(CHROMIUM);
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("open a Chromium session through chromedriver")
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One person's browser: a WebDriver session on Writ, numbering its
/// screenshots.
pub struct Web {
    pub c: Client,
    /// Writ's base URL, e.g. `http://127.0.0.1:4000`.
    pub base: String,
    shots: PathBuf,
    counter: AtomicU32,
}

impl Web {
    pub fn new(c: Client, base: &str, shots: PathBuf) -> Web {
        Web {
            c,
            base: base.to_owned(),
            shots,
            counter: AtomicU32::new(0),
        }
    }

    /// Loads a path of Writ (or an absolute URL).
    pub async fn goto(&self, path_or_url: &str) {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            format!("{}{path_or_url}", self.base)
        };
        self.c
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        self.check_accessibility().await;
    }

    /// Runs axe-core on the page now shown ([`crate::axe`]), when it is
    /// one of Writ's (a test may also visit a page of another origin).
    pub async fn check_accessibility(&self) {
        if !self.url().await.starts_with(&format!("{}/", self.base)) {
            return;
        }
        let path = self.path().await;
        crate::axe::check(&self.c, &self.shots, &path).await;
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.c.current_url().await.expect("current URL").to_string()
    }

    /// The path (and query) of the current URL.
    pub async fn path(&self) -> String {
        let url = self.c.current_url().await.expect("current URL");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// The visible text of the page.
    pub async fn text(&self) -> String {
        self.c
            .find(Locator::Css("body"))
            .await
            .expect("a body")
            .text()
            .await
            .expect("body text")
    }

    /// The visible text of one element.
    pub async fn text_of(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("element text")
    }

    /// The HTTP status of the document now shown (Navigation Timing's
    /// `responseStatus`, which Chromium reports since version 109).
    pub async fn status(&self) -> u16 {
        let value = self
            .c
            .execute(
                "const e = performance.getEntriesByType('navigation')[0]; \
                 return e && e.responseStatus ? e.responseStatus : null;",
                vec![],
            )
            .await
            .expect("read the navigation status");
        value
            .as_u64()
            .map(|s| s as u16)
            .unwrap_or_else(|| panic!("Chromium did not report the page's HTTP status"))
    }

    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        match self.c.find(Locator::Css(css)).await {
            Ok(e) => e,
            Err(e) => {
                let path = self.path().await;
                let text = self.text().await;
                panic!("no `{css}` on {path} ({e}); the page says:\n{text}")
            }
        }
    }

    pub async fn exists(&self, css: &str) -> bool {
        !self
            .c
            .find_all(Locator::Css(css))
            .await
            .expect("find elements")
            .is_empty()
    }

    /// An attribute of the first element matching `css`.
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.find(css).await.attr(name).await.expect("attribute")
    }

    /// Types `value` into an empty input or textarea, as a person would.
    pub async fn fill(&self, css: &str, value: &str) {
        let field = self.find(css).await;
        field.clear().await.expect("clear the field");
        field.send_keys(value).await.expect("type into the field");
    }

    /// Chooses the option with this value of a `<select>`.
    pub async fn select(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("choose {value:?} in `{css}`: {e}"));
    }

    /// Clicks and waits until the next document has loaded.
    pub async fn click_and_wait(&self, css: &str) {
        self.c
            .execute("window.__writ_previous_page = true; return null;", vec![])
            .await
            .expect("mark the page");
        let target = self.find(css).await;
        target
            .click()
            .await
            .unwrap_or_else(|e| panic!("click `{css}`: {e}"));
        self.wait_new_page().await;
    }

    /// Waits until the page marked by [`Web::click_and_wait`] (or by a
    /// script) was replaced by a fully loaded new one.
    pub async fn wait_new_page(&self) {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        loop {
            let loaded = self
                .c
                .execute(
                    "return window.__writ_previous_page === undefined \
                     && document.readyState === 'complete';",
                    vec![],
                )
                .await;
            if matches!(loaded, Ok(Value::Bool(true))) {
                self.check_accessibility().await;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the next page did not load within {PAGE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a screenshot of the whole page as `NN-<state>.png`.
    pub async fn shot(&self, state: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        std::fs::create_dir_all(&self.shots).expect("create the screenshot dir");
        // Grow the window to the whole page so the screenshot shows all of it.
        let sizes = self
            .c
            .execute(
                "return [Math.max(document.documentElement.scrollHeight, \
                 document.body ? document.body.scrollHeight : 0), \
                 window.outerHeight - window.innerHeight];",
                vec![],
            )
            .await
            .ok();
        let size = |i: usize| sizes.as_ref().and_then(|v| v[i].as_u64());
        let height = size(0).unwrap_or(900).clamp(600, 8000) as u32;
        let frame = size(1).unwrap_or(0).min(400) as u32;
        let _ = self.c.set_window_size(1280, height + frame).await;
        let png = self.c.screenshot().await.expect("take a screenshot");
        let path = self.shots.join(format!("{n:02}-{state}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        let _ = self.c.set_window_size(1280, 900).await;
        path
    }

    // -- What people do -----------------------------------------------------

    /// Opens the login page, types login and password, clicks "Log in".
    pub async fn login_as(&self, login: &str, password: &str) {
        self.goto("/user/login").await;
        self.fill("form[action='/user/login'] input[name='login']", login)
            .await;
        self.fill(
            "form[action='/user/login'] input[name='password']",
            password,
        )
        .await;
        self.click_and_wait("form[action='/user/login'] button[type='submit']")
            .await;
    }

    /// Logs in and checks the dashboard greets this person.
    pub async fn login_ok(&self, login: &str, password: &str) {
        self.login_as(login, password).await;
        assert_eq!(
            self.path().await,
            "/",
            "login did not land on the dashboard"
        );
        let header = self.text_of("header").await;
        assert!(
            header.contains(&format!("Signed in as {login}")),
            "header after login: {header}"
        );
    }

    /// Clicks the header's "Log out" button.
    pub async fn logout(&self) {
        self.click_and_wait("header form[action='/user/logout'] button[type='submit']")
            .await;
    }

    /// The state of the grant page's badge (`awaiting_agent`, ...).
    pub async fn grant_state(&self) -> String {
        self.attr("#grant-state", "data-state")
            .await
            .unwrap_or_else(|| panic!("the state badge has no data-state"))
    }

    /// The value of a hidden input of the form posting to an action ending
    /// in `action_suffix`.
    pub async fn hidden(&self, action_suffix: &str, name: &str) -> String {
        let css = format!("form[action$='{action_suffix}'] input[name='{name}']");
        self.attr(&css, "value")
            .await
            .unwrap_or_else(|| panic!("no value on {css}"))
    }
}
