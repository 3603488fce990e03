//! axe-core, the accessibility checker, on every page state the browser
//! tests visit: injected through WebDriver's script execution (the pages
//! keep their Content-Security-Policy and carry no script of their own),
//! run on the document, and the test fails on any violation of impact
//! `serious` or `critical`. Every result (all impacts) is appended to
//! `axe.jsonl` beside the test's screenshots.
//!
//! axe-core comes from npm, pinned, installed by `.ci/run` (or
//! `scripts/test`) under `target/axe/`; `WRIT_TEST_AXE` may name another
//! `axe.min.js`. Without it the check is skipped with a note, unless
//! `WRIT_TEST_REQUIRE_BROWSER` is set (then it fails).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fantoccini::Client;
use serde_json::Value;

/// The pinned version `.ci/run` installs.
pub const VERSION: &str = "4.14.1";

fn location() -> PathBuf {
    match std::env::var_os("WRIT_TEST_AXE") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target/axe/node_modules/axe-core/axe.min.js"),
    }
}

fn source() -> Option<&'static str> {
    static SOURCE: OnceLock<Option<String>> = OnceLock::new();
    SOURCE
        .get_or_init(|| {
            let path = location();
            match std::fs::read_to_string(&path) {
                Ok(text) => Some(text),
                Err(e) => {
                    if std::env::var_os("WRIT_TEST_REQUIRE_BROWSER").is_some_and(|v| !v.is_empty())
                    {
                        panic!(
                            "WRIT_TEST_REQUIRE_BROWSER is set but axe-core is missing at {} ({e}); \
                             install it: npm install --prefix target/axe axe-core@{VERSION}",
                            path.display()
                        );
                    }
                    eprintln!(
                        "axe-core not found at {}: accessibility not checked",
                        path.display()
                    );
                    None
                }
            }
        })
        .as_deref()
}

/// Runs axe-core on the page now shown and fails on a serious or critical
/// violation; records every violation in `<shots>/axe.jsonl`.
pub async fn check(c: &Client, shots: &Path, path: &str) {
    let Some(source) = source() else {
        return;
    };
    let present = c
        .execute("return typeof window.axe === 'object';", vec![])
        .await
        .expect("ask whether axe-core is loaded");
    if present != Value::Bool(true) {
        c.execute(&format!("{source}\n;return true;"), vec![])
            .await
            .expect("inject axe-core");
    }
    let raw = c
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             axe.run(document, {resultTypes: ['violations']})\
               .then(r => done(JSON.stringify(r.violations.map(v => ({\
                 id: v.id, impact: v.impact, help: v.help,\
                 nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))})))))\
               .catch(e => done('error: ' + e));",
            vec![],
        )
        .await
        .expect("run axe-core");
    let text = raw.as_str().unwrap_or_default();
    let violations: Vec<Value> = serde_json::from_str(text)
        .unwrap_or_else(|_| panic!("axe-core on {path} did not answer a result: {raw}"));
    let _ = std::fs::create_dir_all(shots);
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(shots.join("axe.jsonl"))
    {
        let line = serde_json::json!({"path": path, "violations": violations});
        let _ = writeln!(log, "{line}");
    }
    let grave: Vec<&Value> = violations
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .collect();
    assert!(
        grave.is_empty(),
        "axe-core finds serious or critical accessibility violations on {path}:\n{}",
        serde_json::to_string_pretty(&grave).unwrap_or_default()
    );
}
