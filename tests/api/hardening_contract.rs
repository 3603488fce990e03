//! Inputs that end up in logs and exports, and contract details of the spec:
//! tool-grant patterns with control characters, grants without an id, CSV
//! cells that a spreadsheet would run as formulas, and the columns
//! `report_tool_calls_v1` must carry.

use reqwest::Method;
use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{Auth, Body, Resp, TestApp};
use crate::world::{BOT, OWNER, REPO, World};

const GET: &str = "get_agent_work_grant";
const LIST: &str = "list_agent_work_grants";
const SUBMIT: &str = "submit_agent_work_proposal";

fn grants_path(login: &str) -> String {
    format!("/api/v1/admin/agents/{login}/tool-grants")
}

async fn put_grants(app: &TestApp, login: &str, body: Value) -> Resp {
    app.send(
        Method::PUT,
        &grants_path(login),
        Auth::Token(&app.admin_token),
        Body::Json(body),
    )
    .await
}

async fn get_grants(app: &TestApp, login: &str) -> Value {
    let resp = app
        .get(&grants_path(login), Auth::Token(&app.admin_token))
        .await;
    resp.assert_status(200);
    resp.json()
}

async fn history_len(app: &TestApp) -> String {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn
        .text_rows("SELECT CAST(COUNT(*) AS TEXT) FROM agent_tool_grant_changes")
        .await;
    conn.close().await;
    rows[0][0].clone().unwrap()
}

/// Runs the `writ` binary with `args` against the app's database.
fn writ_command(app: &TestApp, args: &[&str]) -> tokio::process::Command {
    crate::helpers::writ_command(&app.database_url(), args)
}

fn temp_file(ext: &str, content: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("writ-hardening-{}.{ext}", uuid::Uuid::new_v4()));
    std::fs::write(&path, content).expect("write temp file");
    path
}

both_backends!(patterns_with_control_characters_are_refused);
async fn patterns_with_control_characters_are_refused(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    let good = json!({"grants": [{"id": "g", "repos": ["acme/x"], "tools": [GET]}]});
    put_grants(&app, BOT, good).await.assert_status(200);
    let before = get_grants(&app, BOT).await;
    let history = history_len(&app).await;

    for pattern in [
        "acme/x\nWARN forged line",
        "acme/x\r",
        "acme/\tx",
        "acme/x\u{7f}",
        "acme/x\u{85}",
        "\u{1b}[31macme/x",
    ] {
        let body = json!({"grants": [{"id": "g", "repos": ["acme/y", pattern], "tools": [GET]}]});
        let resp = put_grants(&app, BOT, body).await;
        resp.assert_error(400, "invalid_input");
        let message = resp.json()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("control character"), "{message}");
        assert!(!message.chars().any(char::is_control), "{message:?}");
    }
    assert_eq!(get_grants(&app, BOT).await, before);
    assert_eq!(history_len(&app).await, history);

    // `writ admin tool-grants put --file` refuses it too.
    let file = temp_file(
        "json",
        &json!({"grants": [{"repos": ["acme/x\nforged"], "tools": [GET]}]}).to_string(),
    );
    let out = writ_command(
        &app,
        &["admin", "tool-grants", "put", "--login", BOT, "--file"],
    )
    .arg(&file)
    .output()
    .await
    .expect("run writ admin tool-grants put");
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("control character"), "{stderr}");

    // And so does a policy file at `writ serve --policy`.
    let file = temp_file(
        "toml",
        &format!(
            "[[mcp.agents]]\nid = \"{BOT}\"\ntools = [\"{GET}\"]\nrepos = [\"acme/x\\nforged\"]\n"
        ),
    );
    let out = writ_command(&app, &["serve", "--bind", "127.0.0.1:0", "--policy"])
        .arg(&file)
        .output()
        .await
        .expect("run writ serve");
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("control character"), "{stderr}");
    assert_eq!(get_grants(&app, BOT).await, before);
    assert_eq!(history_len(&app).await, history);
}

both_backends!(grants_without_an_id_are_named_by_position);
async fn grants_without_an_id_are_named_by_position(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    let body = json!({"grants": [
        {"repos": ["acme/*"], "tools": [GET]},
        {"id": "named", "repos": [], "tools": [LIST]},
        {"repos": [], "tools": [SUBMIT]},
    ]});
    let resp = put_grants(&app, BOT, body).await;
    resp.assert_status(200);
    let ids: Vec<Value> = get_grants(&app, BOT).await["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [json!("grants[0]"), json!("named"), json!("grants[2]")]
    );

    // A default id is an id like any other: it may not be used twice.
    let body = json!({"grants": [
        {"id": "grants[1]", "repos": [], "tools": [LIST]},
        {"repos": [], "tools": [GET]},
    ]});
    put_grants(&app, BOT, body)
        .await
        .assert_error(400, "invalid_input");
}

/// A `tools/call` over `/mcp` with the bot's token: the tool result.
async fn call_tool(app: &TestApp, token: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    let response = app
        .client
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /mcp");
    let resp = Resp::read(response).await;
    resp.assert_status(200);
    resp.json()["result"].clone()
}

/// Two audited MCP calls: one allowed by the unnamed grant `grants[0]`,
/// one denied on a repository whose owner reads as a formula.
async fn audited_calls(app: &TestApp) -> World<'_> {
    let world = World::new(app).await;
    let id = world.prepare("Report columns").await;
    let body = json!({"grants": [{"repos": ["acme/*"], "tools": [GET]}]});
    put_grants(app, BOT, body).await.assert_status(200);
    let allowed = call_tool(
        app,
        &world.bot,
        GET,
        json!({"owner": OWNER, "repo": REPO, "grant_id": id}),
    )
    .await;
    assert_ne!(allowed["isError"], json!(true), "{allowed}");
    let denied = call_tool(
        app,
        &world.bot,
        GET,
        json!({"owner": "=1+2", "repo": "x", "grant_id": 1}),
    )
    .await;
    assert_eq!(denied["isError"], json!(true), "{denied}");
    world
}

both_backends!(csv_reports_neutralize_formula_cells);
async fn csv_reports_neutralize_formula_cells(app: TestApp) {
    let _world = audited_calls(&app).await;

    // The admin route.
    let csv = app
        .get(
            "/api/v1/admin/reports/tool-calls?format=csv",
            Auth::Token(&app.admin_token),
        )
        .await;
    csv.assert_status(200);
    let lines: Vec<&str> = csv.body.lines().collect();
    assert_eq!(lines.len(), 3, "{}", csv.body);
    assert!(lines[2].contains(",'=1+2/x,"), "{}", lines[2]);
    for line in &lines {
        for cell in line.split(',') {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{cell:?} in {line}"
            );
        }
    }
    // JSON and SQL keep the value as recorded.
    let json = app
        .get(
            "/api/v1/admin/reports/tool-calls?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    json.assert_status(200);
    assert_eq!(json.json()[1]["repository"], "=1+2/x");

    // `writ report --format csv` writes the same cells.
    let out = writ_command(&app, &["report", "tool-calls", "--format", "csv"])
        .output()
        .await
        .expect("run writ report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().nth(2), Some(lines[2]));
}

both_backends!(tool_calls_view_has_the_spec_columns);
async fn tool_calls_view_has_the_spec_columns(app: TestApp) {
    let _world = audited_calls(&app).await;
    // The columns `spec/reporting.md` names, selected by name.
    let spec = [
        "at",
        "agent_login",
        "via",
        "tool",
        "repository",
        "decision",
        "grant_rule_id",
        "native_status",
        "error_code",
    ];
    let columns: Vec<String> = spec.iter().map(|c| format!("CAST({c} AS TEXT)")).collect();
    let sql = format!(
        "SELECT {}, called_at, matched_grant FROM report_tool_calls_v1 ORDER BY call_id",
        columns.join(", ")
    );
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let rows = conn.text_rows(&sql).await;
    conn.close().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let text = |s: &str| Some(s.to_owned());
    let (allowed, denied) = (&rows[0], &rows[1]);
    assert_eq!(
        allowed[1..9],
        [
            text(BOT),
            text("mcp"),
            text(GET),
            text("acme/widgets"),
            text("allow"),
            text("grants[0]"),
            text("200"),
            None,
        ]
    );
    assert_eq!(
        denied[1..9],
        [
            text(BOT),
            text("mcp"),
            text(GET),
            text("=1+2/x"),
            text("deny"),
            None,
            None,
            None,
        ]
    );
    for row in &rows {
        assert_eq!(row[0], row[9], "at is called_at");
        assert_eq!(row[6], row[10], "grant_rule_id is matched_grant");
        assert_eq!(row[0].as_ref().map(String::len), Some(27), "{row:?}");
    }
}
