//! Per-agent MCP tool grants: the admin API, the change history, the policy
//! file (service and `writ serve --policy`), the CLI, and the decision the
//! MCP endpoint will call.

use std::path::PathBuf;

use reqwest::Method;
use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{ADMIN_LOGIN, Auth, Body, Resp, TestApp};
use crate::world::World;

const BOT: &str = "builder-bot";
const GET: &str = "get_agent_work_grant";
const LIST: &str = "list_agent_work_grants";
const SUBMIT: &str = "submit_agent_work_proposal";

fn path(login: &str) -> String {
    format!("/api/v1/admin/agents/{login}/tool-grants")
}

async fn put(app: &TestApp, token: &str, login: &str, body: Value) -> Resp {
    app.send(
        Method::PUT,
        &path(login),
        Auth::Token(token),
        Body::Json(body),
    )
    .await
}

async fn get(app: &TestApp, login: &str) -> Value {
    let resp = app.get(&path(login), Auth::Token(&app.admin_token)).await;
    resp.assert_status(200);
    resp.json()
}

fn is_fixed_width_utc(text: &str) -> bool {
    text.len() == 27 && text.ends_with('Z') && text.as_bytes()[19] == b'.'
}

fn temp_file(ext: &str, content: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("writ-policy-{}.{ext}", uuid::Uuid::new_v4()));
    std::fs::write(&path, content).expect("write temp file");
    path
}

/// `(changed_by, grants)` of a bot's history rows, oldest first.
async fn history(app: &TestApp, login: &str) -> Vec<(String, Value)> {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let sql = format!(
        "SELECT c.changed_by, c.grants, c.changed_at FROM agent_tool_grant_changes c \
         JOIN users u ON u.id = c.user_id WHERE u.lower_login = '{}' ORDER BY c.id",
        login.to_ascii_lowercase()
    );
    let rows = conn.text_rows(&sql).await;
    conn.close().await;
    rows.into_iter()
        .map(|r| {
            assert!(is_fixed_width_utc(r[2].as_deref().unwrap()), "{r:?}");
            (
                r[0].clone().unwrap(),
                serde_json::from_str(r[1].as_deref().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// A second Writ on the app's database, for calling services directly.
async fn open_same(app: &TestApp) -> writ::Writ {
    let config = writ::Config {
        database_url: app.database_url(),
        ..writ::Config::default()
    };
    writ::Writ::open(config)
        .await
        .expect("open the same database")
}

both_backends!(put_then_get_round_trip_and_history);
async fn put_then_get_round_trip_and_history(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    let never = get(&app, BOT).await;
    assert_eq!(
        never,
        json!({"login": BOT, "grants": [], "updated_at": null, "updated_by": null})
    );

    let first = json!({"grants": [
        {"id": "read-a", "repos": ["acme/repo-a"], "tools": [GET, "get_agent_work_submission"]},
        {"id": "write-b", "repos": ["acme/repo-b", "acme/*"], "tools": [GET, SUBMIT]},
    ]});
    let resp = put(&app, &app.admin_token, BOT, first.clone()).await;
    resp.assert_status(200);
    let put_view = resp.json();
    assert_eq!(put_view["grants"], first["grants"]);
    assert_eq!(put_view["updated_by"], ADMIN_LOGIN);
    let at = put_view["updated_at"].as_str().expect("updated_at");
    assert!(is_fixed_width_utc(at), "{at}");
    // The login is found case-insensitively and shown as created.
    assert_eq!(get(&app, "Builder-Bot").await, put_view);

    // A PUT replaces the whole set.
    let second = json!({"grants": [{"id": "any", "repos": [], "tools": [LIST]}]});
    let resp = put(&app, &app.admin_token, BOT, second.clone()).await;
    resp.assert_status(200);
    let now = get(&app, BOT).await;
    assert_eq!(now["grants"], second["grants"]);
    assert!(now["updated_at"].as_str().unwrap() >= at);

    // An empty set is a set too (the bot may call nothing).
    put(&app, &app.admin_token, BOT, json!({"grants": []}))
        .await
        .assert_status(200);
    assert_eq!(get(&app, BOT).await["grants"], json!([]));

    let rows = history(&app, BOT).await;
    let expected = vec![
        (ADMIN_LOGIN.to_owned(), first["grants"].clone()),
        (ADMIN_LOGIN.to_owned(), second["grants"].clone()),
        (ADMIN_LOGIN.to_owned(), json!([])),
    ];
    assert_eq!(rows, expected);

    let doc = app.get("/api/v1/openapi.json", Auth::None).await.json();
    let route = &doc["paths"]["/api/v1/admin/agents/{login}/tool-grants"];
    assert!(
        route["get"].is_object() && route["put"].is_object(),
        "{route}"
    );
}

both_backends!(validation_errors_change_nothing);
async fn validation_errors_change_nothing(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    app.create_user("alice", "human", None).await;
    let good = json!({"grants": [{"id": "g", "repos": ["acme/x"], "tools": [GET]}]});
    put(&app, &app.admin_token, BOT, good.clone())
        .await
        .assert_status(200);
    let before = get(&app, BOT).await;

    let g =
        |id: &str, repos: Value, tools: Value| json!({"id": id, "repos": repos, "tools": tools});
    let many_grants: Vec<Value> = (0..65)
        .map(|n| g(&format!("g{n}"), json!([]), json!([GET])))
        .collect();
    let many_patterns: Vec<String> = (0..257).map(|n| format!("acme/r{n}")).collect();
    let bad = [
        json!({"grants": [g("a", json!([]), json!([GET])), g("a", json!([]), json!([LIST]))]}),
        json!({"grants": [g("", json!([]), json!([GET]))]}),
        json!({"grants": [g(&"x".repeat(65), json!([]), json!([GET]))]}),
        json!({"grants": [g("a", json!([]), json!(["create_issue"]))]}),
        json!({"grants": [g("a", json!([]), json!([]))]}),
        json!({"grants": [g("a", json!([]), json!([GET, GET]))]}),
        json!({"grants": many_grants}),
        json!({"grants": [g("a", json!(many_patterns), json!([GET]))]}),
        json!({"grants": [{"id": "a", "tools": [GET]}]}),
        json!({"grants": [{"id": "a", "repos": [], "tools": [GET], "permissions": {}}]}),
        json!({"grants": [g("a", json!("acme/x"), json!([GET]))]}),
        json!({"grants": {}}),
        json!({}),
        json!({"grants": [], "extra": 1}),
    ];
    for body in bad {
        let resp = put(&app, &app.admin_token, BOT, body.clone()).await;
        assert_eq!(resp.status.as_u16(), 400, "{body}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{body}");
    }
    let resp = app
        .send(
            Method::PUT,
            &path(BOT),
            Auth::Token(&app.admin_token),
            Body::Raw(Some("text/plain"), good.to_string().into_bytes()),
        )
        .await;
    resp.assert_error(400, "invalid_input");

    // Only bots are agents: a human's login, like an unknown one, is 404.
    put(&app, &app.admin_token, "alice", good.clone())
        .await
        .assert_error(404, "not_found");
    app.get(&path("alice"), Auth::Token(&app.admin_token))
        .await
        .assert_error(404, "not_found");
    put(&app, &app.admin_token, "nobody", good.clone())
        .await
        .assert_error(404, "not_found");
    app.get(&path("nobody"), Auth::Token(&app.admin_token))
        .await
        .assert_error(404, "not_found");

    assert_eq!(get(&app, BOT).await, before);
    assert_eq!(history(&app, BOT).await.len(), 1);

    // Malformed patterns are stored as given (they never match).
    let odd = json!({"grants": [g("odd", json!(["*/x", "acme/x*", " acme/y"]), json!([GET]))]});
    put(&app, &app.admin_token, BOT, odd.clone())
        .await
        .assert_status(200);
    assert_eq!(get(&app, BOT).await["grants"], odd["grants"]);
}

both_backends!(only_admins_reach_tool_grants);
async fn only_admins_reach_tool_grants(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    app.create_user("alice", "human", Some("alice-password-1"))
        .await;
    let body = json!({"grants": [{"id": "g", "repos": [], "tools": [GET]}]});
    // Anonymous.
    app.get(&path(BOT), Auth::None)
        .await
        .assert_error(401, "unauthenticated");
    app.send(
        Method::PUT,
        &path(BOT),
        Auth::None,
        Body::Json(body.clone()),
    )
    .await
    .assert_error(401, "unauthenticated");
    // A non-admin with every scope, and the bot itself.
    let every = [
        "read:repository",
        "write:repository",
        "read:issue",
        "write:issue",
        "read:admin",
        "write:admin",
    ];
    let alice = app.create_token("alice", &every).await.token;
    let bot = app.create_token(BOT, &every).await.token;
    for token in [&alice, &bot] {
        app.get(&path(BOT), Auth::Token(token))
            .await
            .assert_error(403, "forbidden");
        put(&app, token, BOT, body.clone())
            .await
            .assert_error(403, "forbidden");
    }
    // An admin token with read:admin only reads.
    let reader = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    app.get(&path(BOT), Auth::Token(&reader))
        .await
        .assert_status(200);
    put(&app, &reader, BOT, body.clone())
        .await
        .assert_error(403, "insufficient_scope");
    let writer = app.create_token(ADMIN_LOGIN, &["write:admin"]).await.token;
    put(&app, &writer, BOT, body).await.assert_status(200);
    assert!(history(&app, BOT).await.len() == 1);
}

const POLICY: &str = r#"
[[mcp.agents]]
id = "builder-bot"

  [[mcp.agents.grants]]
  id = "read-a"
  repos = ["acme/repo-a"]
  tools = ["get_agent_work_grant", "get_agent_work_submission"]

  [[mcp.agents.grants]]
  repos = ["acme/repo-b", "acme/*"]
  tools = ["get_agent_work_grant", "confirm_agent_work_grant", "submit_agent_work_proposal"]

[[mcp.agents]]
id = "flat-bot"
tools = ["list_agent_work_grants"]
repos = []
"#;

both_backends!(policy_file_seeds_and_decides);
async fn policy_file_seeds_and_decides(app: TestApp) {
    use writ::domain::policy::{Decision, Denial};
    use writ::service::policy::{allowed, seed_from_file};
    let bot_id = app.create_user(BOT, "bot", None).await["id"]
        .as_i64()
        .unwrap();
    let flat_id = app.create_user("flat-bot", "bot", None).await["id"]
        .as_i64()
        .unwrap();
    app.create_user("alice", "human", None).await;
    let other = app.create_user("other-bot", "bot", None).await;
    let other_id = other["id"].as_i64().unwrap();
    let writ = open_same(&app).await;
    let ctx = writ.ctx();

    // Unknown logins and humans: an error naming them, nothing applied.
    let bad = temp_file(
        "toml",
        &format!("{POLICY}\n[[mcp.agents]]\nid = \"ghost-bot\"\n[[mcp.agents]]\nid = \"alice\"\n"),
    );
    let err = seed_from_file(ctx, &bad).await.expect_err("unknown bot");
    let text = err.to_string();
    assert!(
        text.contains("ghost-bot") && text.contains("alice"),
        "{text}"
    );
    assert_eq!(get(&app, BOT).await["updated_by"], Value::Null);
    let _ = std::fs::remove_file(bad);

    let file = temp_file("toml", POLICY);
    let report = seed_from_file(ctx, &file).await.expect("seed");
    assert_eq!(report.changed, vec![BOT, "flat-bot"]);
    let view = get(&app, BOT).await;
    assert_eq!(view["updated_by"], "policy-file");
    assert_eq!(view["grants"][0]["id"], "read-a");
    assert_eq!(view["grants"][1]["id"], "grants[1]");
    assert_eq!(
        get(&app, "flat-bot").await["grants"],
        json!([{"id": "flat", "repos": [], "tools": [LIST]}])
    );
    // Seeding the same file again changes nothing and records nothing.
    let again = seed_from_file(ctx, &file).await.expect("seed again");
    assert!(again.changed.is_empty());
    assert_eq!(again.unchanged, vec![BOT, "flat-bot"]);
    assert_eq!(history(&app, BOT).await.len(), 1);
    let _ = std::fs::remove_file(file);

    // The decision the MCP endpoint will ask for.
    let args = |v: Value| v.as_object().unwrap().clone();
    let check = |id, tool: &'static str, a: Value| {
        let a = args(a);
        async move { allowed(ctx, id, tool, &a).await.expect("check").decision }
    };
    let allow = |g: &str| Decision::Allow {
        grant_id: g.to_owned(),
    };
    let repo_a = json!({"owner": "acme", "repo": "repo-a", "grant_id": 1});
    let repo_c = json!({"owner": " ACME ", "repo": "repo-c"});
    let foreign = json!({"owner": "other", "repo": "repo-a"});
    assert_eq!(check(bot_id, GET, repo_a.clone()).await, allow("read-a"));
    assert_eq!(check(bot_id, SUBMIT, repo_c).await, allow("grants[1]"));
    assert_eq!(
        check(bot_id, GET, foreign).await,
        Decision::Deny(Denial::RepositoryNotGranted)
    );
    assert_eq!(
        check(bot_id, LIST, json!({"page": 1})).await,
        Decision::Deny(Denial::ToolNotGranted)
    );
    assert_eq!(check(flat_id, LIST, json!({})).await, allow("flat"));
    assert_eq!(
        check(other_id, GET, repo_a.clone()).await,
        Decision::Deny(Denial::NoGrants)
    );
    let full = allowed(ctx, bot_id, GET, &args(repo_a)).await.unwrap();
    assert_eq!(full.repository.unwrap().full_name(), "acme/repo-a");
    writ.close().await;
}

/// Runs the `writ` binary with `args` against the app's database.
fn writ_command(app: &TestApp, args: &[&str]) -> tokio::process::Command {
    crate::helpers::writ_command(&app.database_url(), args)
}

both_backends!(cli_and_serve_policy);
async fn cli_and_serve_policy(app: TestApp) {
    app.create_user(BOT, "bot", None).await;
    app.create_user("flat-bot", "bot", None).await;

    // writ admin tool-grants put / get
    let file = temp_file(
        "json",
        &json!({"grants": [{"id": "cli", "repos": ["acme/x"], "tools": [GET]}]}).to_string(),
    );
    let out = writ_command(
        &app,
        &["admin", "tool-grants", "put", "--login", BOT, "--file"],
    )
    .arg(&file)
    .output()
    .await
    .expect("run writ admin tool-grants put");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(file);
    let out = writ_command(&app, &["admin", "tool-grants", "get", "--login", BOT])
        .output()
        .await
        .expect("run writ admin tool-grants get");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(printed["updated_by"], "cli");
    assert_eq!(printed["grants"][0]["id"], "cli");
    assert_eq!(get(&app, BOT).await, printed);

    // writ serve --policy with an unknown bot refuses to start.
    let bad = temp_file("toml", "[[mcp.agents]]\nid = \"ghost-bot\"\n");
    let out = writ_command(&app, &["serve", "--bind", "127.0.0.1:0", "--policy"])
        .arg(&bad)
        .output()
        .await
        .expect("run writ serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ghost-bot"), "{stderr}");
    let _ = std::fs::remove_file(bad);

    // writ serve --policy seeds at start.
    let file = temp_file("toml", POLICY);
    let bind = crate::helpers::free_loopback_address();
    let mut child = writ_command(&app, &["serve", "--bind", &bind, "--policy"])
        .arg(&file)
        .spawn()
        .expect("spawn writ serve");
    crate::helpers::await_ready(&app.client, &bind, &mut child).await;
    let _ = child.kill().await;
    let _ = std::fs::remove_file(file);
    let view = get(&app, BOT).await;
    assert_eq!(view["updated_by"], "policy-file");
    assert_eq!(view["grants"][1]["id"], "grants[1]");
    let rows = history(&app, BOT).await;
    let authors: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(authors, ["cli", "policy-file"]);
}

both_backends!(site_admins_read_the_bots_tool_grants_in_the_browser);
async fn site_admins_read_the_bots_tool_grants_in_the_browser(app: TestApp) {
    let world = World::new(&app).await;
    let grants = json!({"grants": [
        {"id": "triage", "repos": ["acme/*"], "tools": [GET, LIST]},
        {"id": "anywhere", "repos": [], "tools": [SUBMIT]},
    ]});
    put(&app, &app.admin_token, BOT, grants)
        .await
        .assert_status(200);
    // alice administers a repository but is no site admin: as if absent.
    for page in ["/admin", "/admin/tool-grants"] {
        world.alice.get_page(page).await.assert_status(404);
    }
    let root = crate::browser::Browser::logged_in(
        &app.base,
        crate::helpers::ADMIN_LOGIN,
        crate::helpers::ADMIN_PASSWORD,
    )
    .await;
    let index = root.get_page("/admin").await;
    index.assert_status(200);
    for link in ["href=\"/admin/mcp\"", "href=\"/admin/tool-grants\""] {
        assert!(index.body.contains(link), "{link} missing: {}", index.body);
    }
    let page = root.get_page("/admin/tool-grants").await;
    page.assert_status(200);
    let bot = &page.body[page
        .body
        .find(&format!("id=\"bot-{BOT}\""))
        .unwrap_or_else(|| panic!("no section for {BOT}: {}", page.body))..];
    for text in [
        "<code>triage</code>",
        "<code>acme/*</code>",
        GET,
        LIST,
        "<code>anywhere</code>",
        "any repository, and calls that name none",
        SUBMIT,
    ] {
        assert!(bot.contains(text), "{text} missing: {}", page.body);
    }
    // A bot without grants is said to call nothing; no form changes them.
    assert!(page.body.contains("may call no MCP tool"), "{}", page.body);
    assert!(!page.body.contains("<form method=\"post\" action=\"/admin"));
}
