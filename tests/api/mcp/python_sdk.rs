//! The official MCP Python SDK (a client Writ did not write), over HTTP and
//! over the stdio adapter.

use std::time::Duration;

use serde_json::{Value, json};

use super::{CONFIRM, DISCOVER_VERSION, GET, HANDSHAKE_VERSIONS, Row, audit_rows, col, put_grants};
use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, REPO, World};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/mcp_python/client_check.py"
);
const REQUIREMENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/mcp_python/requirements.txt"
);

/// The interpreter of the venv with the SDK, from `WRIT_TEST_MCP_PYTHON`.
/// Unset: the test is skipped, unless `WRIT_TEST_REQUIRE_MCP_PYTHON` is set
/// (as CI does), which fails it.
fn mcp_python() -> Option<String> {
    let python = std::env::var("WRIT_TEST_MCP_PYTHON")
        .ok()
        .filter(|p| !p.trim().is_empty());
    if python.is_none() {
        if std::env::var_os("WRIT_TEST_REQUIRE_MCP_PYTHON").is_some_and(|v| !v.is_empty()) {
            panic!("WRIT_TEST_REQUIRE_MCP_PYTHON is set but WRIT_TEST_MCP_PYTHON is unset");
        }
        eprintln!("skipped: WRIT_TEST_MCP_PYTHON unset");
    }
    python
}

/// The SDK version `requirements.txt` pins.
fn pinned_sdk_version() -> String {
    let text = std::fs::read_to_string(REQUIREMENTS).expect("read requirements.txt");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("mcp=="))
        .expect("requirements.txt pins mcp==")
        .trim()
        .to_owned()
}

/// Runs `client_check.py` with these arguments: its JSON line.
async fn run_client_check(python: &str, args: &[String]) -> Value {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(SCRIPT)
        .args(args)
        .env("WRIT_LOG", "warn")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .expect("client_check.py did not finish within 180 s")
        .unwrap_or_else(|e| panic!("run {python} {SCRIPT}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let seen: Value = line
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line; stdout: {stdout}\nstderr: {stderr}"));
    eprintln!("client_check.py: {seen}");
    assert!(
        output.status.success() && seen["ok"] == true,
        "client_check.py failed ({}): {seen}\nstderr: {stderr}",
        output.status
    );
    seen
}

fn check_args(token: &str, id: i64, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--token",
        token,
        "--owner",
        OWNER,
        "--repo",
        REPO,
        "--grant-id",
        &id.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

both_backends!(python_sdk_over_http);
async fn python_sdk_over_http(app: TestApp) {
    let Some(python) = mcp_python() else { return };
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM]}]),
    )
    .await;
    let tools = format!("{GET},{CONFIRM}");
    let pinned = pinned_sdk_version();
    // The SDK's default (probe server/discover, else initialize) and the
    // initialize handshake, each on a grant of its own.
    for (mode, expected_version) in [("auto", None), ("legacy", Some("2025-11-25"))] {
        let id = world
            .prepare(&format!("Python SDK over HTTP ({mode})"))
            .await;
        let args = check_args(
            &world.bot,
            id,
            &[
                "--url",
                &app.base,
                "--mode",
                mode,
                "--expect-tools",
                &tools,
                "--denied-repo",
                "acme/gadgets",
            ],
        );
        let seen = run_client_check(&python, &args).await;
        assert_eq!(seen["sdk_version"], pinned.as_str(), "{seen}");
        assert_eq!(seen["transport"], "streamable-http");
        let version = seen["protocol_version"].as_str().unwrap_or_default();
        match expected_version {
            Some(v) => assert_eq!(version, v, "{seen}"),
            None => assert!(
                HANDSHAKE_VERSIONS.contains(&version) || version == DISCOVER_VERSION,
                "{seen}"
            ),
        }
        assert_eq!(seen["server_info"]["name"], "writ", "{seen}");
        assert_eq!(seen["get"]["state"], "awaiting_agent", "{seen}");
        assert_eq!(seen["confirm"]["state"], "awaiting_human", "{seen}");
        assert_eq!(
            seen["denied"]["reason"], "repository_not_in_grant",
            "{seen}"
        );
        // The confirm really happened, through /mcp, audited as such.
        assert_eq!(world.grant(id).await["state"], "awaiting_human");
        let rows = audit_rows(&app).await;
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| col(r, "via") == Some("mcp"))
            .rev()
            .take(3)
            .collect();
        let called: Vec<_> = mine.iter().rev().map(|r| col(r, "tool")).collect();
        assert_eq!(called, [Some(GET), Some(CONFIRM), Some(GET)]);
        let decisions: Vec<_> = mine.iter().rev().map(|r| col(r, "decision")).collect();
        assert_eq!(decisions, [Some("allow"), Some("allow"), Some("deny")]);
    }
}

both_backends!(python_sdk_over_stdio);
async fn python_sdk_over_stdio(app: TestApp) {
    let Some(python) = mcp_python() else { return };
    let writ = env!("CARGO_BIN_EXE_writ");
    // The adapter subcommand must exist in this build.
    let help = tokio::process::Command::new(writ)
        .args(["mcp-stdio", "--help"])
        .output()
        .await
        .expect("run writ mcp-stdio --help");
    assert!(
        help.status.success(),
        "`writ mcp-stdio` is not available in this build: {}",
        String::from_utf8_lossy(&help.stderr)
    );
    let world = World::new(&app).await;
    let command = format!("{writ} mcp-stdio --url {}", app.base);
    for (mode, expected_version) in [("auto", None), ("legacy", Some("2025-11-25"))] {
        let id = world
            .prepare(&format!("Python SDK over stdio ({mode})"))
            .await;
        let args = check_args(
            &world.bot,
            id,
            &["--stdio-command", &command, "--mode", mode],
        );
        let seen = run_client_check(&python, &args).await;
        assert_eq!(seen["sdk_version"], pinned_sdk_version().as_str(), "{seen}");
        assert_eq!(seen["transport"], "stdio");
        let version = seen["protocol_version"].as_str().unwrap_or_default();
        match expected_version {
            Some(v) => assert_eq!(version, v, "{seen}"),
            None => assert!(
                HANDSHAKE_VERSIONS.contains(&version) || version == DISCOVER_VERSION,
                "{seen}"
            ),
        }
        let tools = seen["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 5, "the adapter serves the five tools: {seen}");
        assert_eq!(seen["confirm"]["state"], "awaiting_human", "{seen}");
        assert_eq!(world.grant(id).await["state"], "awaiting_human");
    }
    // The adapter called the native routes: audited as via = api.
    let rows = audit_rows(&app).await;
    let adapter: Vec<(Option<&str>, Option<&str>)> = rows
        .iter()
        .map(|r| (col(r, "via"), col(r, "tool")))
        .filter(|(via, _)| *via == Some("api"))
        .collect();
    assert!(
        adapter.contains(&(Some("api"), Some(GET)))
            && adapter.contains(&(Some("api"), Some(CONFIRM))),
        "{adapter:?}"
    );
    assert!(
        rows.iter().all(|r| col(r, "via") == Some("api")),
        "{rows:?}"
    );
}
