//! The tool-call audit: one record per call saying what happened, never a
//! value, and the admin report of those records.

use serde_json::{Value, json};

use super::{
    CONFIRM, GADGETS, GET, LIST, Mcp, READBACK, Row, SCHEMA, SUBMIT, arg_names, audit_rows, col,
    confirm_args, gadgets, put_grants, submit_args, target,
};
use crate::helpers::{Auth, OTHER_DIGEST, TestApp};
use crate::world::{ALICE, ALL_SCOPES, BOT, OWNER, REPO, World, new_key, submit_body, submit_path};

/// What one audit row must say.
struct Expected {
    via: &'static str,
    tool: &'static str,
    repository: Option<&'static str>,
    decision: &'static str,
    matched_grant: Option<&'static str>,
    reason: &'static str,
    rpc_id: Option<String>,
    arg_names: Vec<&'static str>,
    native_status: Option<u16>,
    error_code: Option<String>,
}

const TARGET_NAMES: [&str; 3] = ["grant_id", "owner", "repo"];
const CONFIRM_NAMES: [&str; 6] = [
    "grant_id",
    "owner",
    "proposal_digest",
    "proposal_schema",
    "proposal_version",
    "repo",
];
const SUBMIT_NAMES: [&str; 9] = [
    "body",
    "grant_id",
    "owner",
    "proposal_digest",
    "proposal_schema",
    "proposal_version",
    "repo",
    "request_key",
    "title",
];
const READBACK_NAMES: [&str; 4] = ["grant_id", "owner", "repo", "request_key"];

impl Expected {
    fn mcp(tool: &'static str, rpc_id: &Value, names: &[&'static str]) -> Expected {
        Expected {
            via: "mcp",
            tool,
            repository: Some("acme/widgets"),
            decision: "allow",
            matched_grant: Some("widgets"),
            reason: "granted",
            rpc_id: Some(rpc_id.to_string()),
            arg_names: names.to_vec(),
            native_status: Some(200),
            error_code: None,
        }
    }

    fn api(tool: &'static str, names: &[&'static str], status: u16) -> Expected {
        Expected {
            via: "api",
            tool,
            repository: Some("acme/widgets"),
            decision: "allow",
            matched_grant: None,
            reason: "native_api",
            rpc_id: None,
            arg_names: names.to_vec(),
            native_status: Some(status),
            error_code: None,
        }
    }

    fn status(mut self, status: u16, code: Option<&str>) -> Expected {
        self.native_status = Some(status);
        self.error_code = code.map(str::to_owned);
        self
    }

    fn denied(mut self, reason: &'static str) -> Expected {
        self.decision = "deny";
        self.matched_grant = None;
        self.reason = reason;
        self.native_status = None;
        self
    }

    #[track_caller]
    fn check(&self, n: usize, row: &Row) {
        let what = format!("row {n} ({} {}): {row:?}", self.via, self.tool);
        assert_eq!(col(row, "via"), Some(self.via), "{what}");
        assert_eq!(col(row, "tool"), Some(self.tool), "{what}");
        assert_eq!(col(row, "repository"), self.repository, "{what}");
        assert_eq!(col(row, "decision"), Some(self.decision), "{what}");
        assert_eq!(col(row, "matched_grant"), self.matched_grant, "{what}");
        assert_eq!(col(row, "reason"), Some(self.reason), "{what}");
        assert_eq!(col(row, "rpc_id"), self.rpc_id.as_deref(), "{what}");
        assert_eq!(arg_names(row), self.arg_names, "{what}");
        let status = self.native_status.map(|s| s.to_string());
        assert_eq!(col(row, "native_status"), status.as_deref(), "{what}");
        assert_eq!(col(row, "error_code"), self.error_code.as_deref(), "{what}");
        assert_eq!(col(row, "agent_login"), Some(BOT), "{what}");
        assert!(col(row, "agent_id").is_some(), "{what}");
        assert!(col(row, "token_id").is_some(), "{what}");
        assert!(col(row, "called_at").is_some(), "{what}");
        if self.decision == "allow" {
            let done = col(row, "completed_at").unwrap_or_else(|| panic!("not completed: {what}"));
            assert!(done >= col(row, "called_at").unwrap(), "{what}");
        }
    }
}

/// The calls [`make_the_calls`] made: what each record must say, the
/// argument values and the credential they carried, and builder-bot's token.
struct Calls {
    expected: Vec<Expected>,
    values: Vec<String>,
    bot: String,
}

/// Calls over MCP (allowed with their outcomes, refused and denied) and
/// over the native agent routes, beside MCP requests that are not tool
/// calls.
async fn make_the_calls(app: &TestApp) -> Calls {
    let world = World::new(app).await;
    gadgets(app).await;
    put_grants(
        app,
        BOT,
        json!([
            {"id": "widgets", "repos": ["acme/widgets"], "tools": [GET, CONFIRM, SUBMIT, READBACK]},
            {"id": "list-anywhere", "repos": [], "tools": [LIST]},
        ]),
    )
    .await;
    let id = world.prepare("Audited grant").await;
    let digest = world.digest(id).await;
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let title = format!("AUDIT-TITLE-{mark}");
    let body = format!("AUDIT-BODY-{mark}");
    let sneaky = format!("AUDIT-SNEAKY-{mark}");
    let key = new_key();
    let mcp = Mcp::new(app, &world.bot);
    // world.digest read the grant over REST.
    let mut expected: Vec<Expected> = vec![Expected::api(GET, &TARGET_NAMES, 200)];
    let mut audited = |e: Expected| expected.push(e);

    // Not tool calls: never audited.
    mcp.result(
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "writ-tests", "version": "1"}})),
    )
    .await;
    mcp.tools().await;
    mcp.result("ping", None).await;

    // MCP calls: allowed (with outcomes) and denied.
    let rpc = json!(101);
    mcp.call_with_id(rpc.clone(), LIST, json!({})).await.ok(200);
    let mut list = Expected::mcp(LIST, &rpc, &[]);
    list.repository = None;
    list.matched_grant = Some("list-anywhere");
    audited(list);

    let rpc = json!("get-one");
    mcp.call_with_id(rpc.clone(), GET, target(OWNER, REPO, id))
        .await
        .ok(200);
    audited(Expected::mcp(GET, &rpc, &TARGET_NAMES));

    let rpc = json!(103);
    mcp.call_with_id(rpc.clone(), CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .ok(200);
    audited(Expected::mcp(CONFIRM, &rpc, &CONFIRM_NAMES));
    world.approve(id).await.assert_status(303);

    let rpc = json!(104);
    let args = submit_args(id, &digest, &key, &title, &body);
    mcp.call_with_id(rpc.clone(), SUBMIT, args.clone())
        .await
        .ok(201);
    audited(Expected::mcp(SUBMIT, &rpc, &SUBMIT_NAMES).status(201, None));
    let rpc = json!(105);
    mcp.call_with_id(rpc.clone(), SUBMIT, args).await.ok(200);
    audited(Expected::mcp(SUBMIT, &rpc, &SUBMIT_NAMES));

    let rpc = json!(106);
    let readback = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key});
    mcp.call_with_id(rpc.clone(), READBACK, readback)
        .await
        .ok(200);
    audited(Expected::mcp(READBACK, &rpc, &READBACK_NAMES));

    let rpc = json!(107);
    mcp.call_with_id(rpc.clone(), GET, target(OWNER, GADGETS, id))
        .await
        .denied("repository_not_in_grant");
    let mut denied = Expected::mcp(GET, &rpc, &TARGET_NAMES).denied("repository_not_in_grant");
    denied.repository = Some("acme/gadgets");
    audited(denied);

    let rpc = json!(108);
    let mut extra = submit_args(id, &digest, &new_key(), &title, &body);
    extra["sneaky"] = json!(sneaky);
    mcp.call_with_id(rpc.clone(), SUBMIT, extra)
        .await
        .error(400, "invalid_input");
    let mut names = SUBMIT_NAMES.to_vec();
    names.push("sneaky");
    names.sort_unstable();
    audited(Expected::mcp(SUBMIT, &rpc, &names).status(400, Some("invalid_input")));

    let rpc = json!(109);
    let stale = mcp
        .call_with_id(
            rpc.clone(),
            CONFIRM,
            confirm_args(OWNER, REPO, id, OTHER_DIGEST),
        )
        .await;
    let code = stale.content["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        stale.is_error && stale.native_status() == 409,
        "{:?}",
        stale
    );
    audited(Expected::mcp(CONFIRM, &rpc, &CONFIRM_NAMES).status(409, Some(&code)));

    let rpc = json!("unknown-tool");
    mcp.call_with_id(
        rpc.clone(),
        "create_issue",
        json!({"title": title, "body": body}),
    )
    .await
    .denied("unknown_tool");
    let mut unknown =
        Expected::mcp("create_issue", &rpc, &["body", "title"]).denied("unknown_tool");
    unknown.repository = None;
    audited(unknown);

    let rpc = json!(111);
    mcp.call_with_id(
        rpc.clone(),
        LIST,
        json!({"owner": OWNER, "repo": REPO, "page": 1}),
    )
    .await
    .error(400, "invalid_input");
    let mut list_extra =
        Expected::mcp(LIST, &rpc, &["owner", "page", "repo"]).status(400, Some("invalid_input"));
    list_extra.matched_grant = Some("list-anywhere");
    audited(list_extra);

    // The native agent routes, without MCP: via = api.
    let bot = Auth::Token(&world.bot);
    app.get("/api/v1/agent-work-grants?page=1&state=all", bot)
        .await
        .assert_status(200);
    let mut list = Expected::api(LIST, &["page", "state"], 200);
    list.repository = None;
    audited(list);
    world.read(id).await.assert_status(200);
    audited(Expected::api(GET, &TARGET_NAMES, 200));
    let resp = world
        .confirm_with(id, crate::helpers::confirm_body(OTHER_DIGEST))
        .await;
    resp.assert_status(409);
    audited(Expected::api(CONFIRM, &CONFIRM_NAMES, 409).status(409, Some(&resp.code())));
    let key2 = new_key();
    let title2 = format!("AUDIT-REST-TITLE-{mark}");
    let body2 = format!("AUDIT-REST-BODY-{mark}");
    world
        .submit_with(id, submit_body(&digest, &key2, &title2, &body2))
        .await
        .assert_status(201);
    audited(Expected::api(SUBMIT, &SUBMIT_NAMES, 201));
    world.readback(id, &key2).await.assert_status(200);
    audited(Expected::api(READBACK, &READBACK_NAMES, 200));
    world
        .readback(id, &new_key())
        .await
        .assert_error(404, "not_found");
    audited(Expected::api(READBACK, &READBACK_NAMES, 404).status(404, Some("not_found")));
    // A rejected body is recorded by its member names only.
    let path = submit_path(OWNER, REPO, id);
    let mut sneaky_body = submit_body(&digest, &new_key(), &title2, &body2);
    sneaky_body["sneaky"] = json!(sneaky);
    app.post_json(&path, bot, sneaky_body)
        .await
        .assert_error(400, "invalid_input");
    let mut names = SUBMIT_NAMES.to_vec();
    names.push("sneaky");
    names.sort_unstable();
    audited(Expected::api(SUBMIT, &names, 400).status(400, Some("invalid_input")));

    let values = [
        title.as_str(),
        body.as_str(),
        sneaky.as_str(),
        key.as_str(),
        key2.as_str(),
        title2.as_str(),
        body2.as_str(),
        digest.as_str(),
        OTHER_DIGEST,
        SCHEMA,
        mark.as_str(),
        world.bot.as_str(),
    ];
    Calls {
        expected,
        values: values.map(str::to_owned).to_vec(),
        bot: world.bot.clone(),
    }
}

/// One row per call, in order, saying what happened.
fn check_one_row_per_call(rows: &[Row], calls: &Calls) {
    let expected = &calls.expected;
    assert_eq!(rows.len(), expected.len(), "{rows:#?}");
    for (n, (row, want)) in rows.iter().zip(expected).enumerate() {
        want.check(n, row);
    }
    let token_ids: std::collections::BTreeSet<_> =
        rows.iter().map(|r| col(r, "token_id")).collect();
    assert_eq!(token_ids.len(), 1, "one token made every call");
    let times: Vec<&str> = rows.iter().map(|r| col(r, "called_at").unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

/// No argument value, and no credential, in any column of any row.
fn check_no_value_in_any_row(rows: &[Row], calls: &Calls) {
    for row in rows {
        for (column, value) in row {
            let Some(value) = value else { continue };
            for secret in &calls.values {
                assert!(
                    !value.contains(secret),
                    "column {column} holds the value {secret:?}: {row:?}"
                );
            }
        }
    }
}

/// The admin report shows the same rows.
async fn check_the_report(app: &TestApp, rows: &[Row], calls: &Calls) {
    let resp = app
        .get(
            "/api/v1/admin/reports/tool-calls?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    resp.assert_status(200);
    let report = resp.json();
    let report = report.as_array().expect("a JSON array");
    assert_eq!(report.len(), rows.len());
    let text = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    for (line, row) in report.iter().zip(rows) {
        assert_eq!(text(&line["call_id"]).as_deref(), col(row, "id"), "{line}");
        for name in [
            "called_at",
            "via",
            "agent_login",
            "token_id",
            "tool",
            "repository",
            "decision",
            "matched_grant",
            "reason",
            "rpc_id",
            "request_id",
            "arg_names",
            "native_status",
            "error_code",
            "completed_at",
        ] {
            assert_eq!(
                text(&line[name]).as_deref(),
                col(row, name),
                "{name}: {line}"
            );
        }
        for secret in &calls.values {
            assert!(!line.to_string().contains(secret.as_str()), "{line}");
        }
    }
    let csv = app
        .get(
            "/api/v1/admin/reports/tool-calls",
            Auth::Token(&app.admin_token),
        )
        .await;
    csv.assert_status(200);
    assert_eq!(csv.body.lines().count(), rows.len() + 1, "{}", csv.body);
}

/// Only an admin reads the report.
async fn check_only_an_admin_reads_the_report(app: &TestApp, bot_token: &str) {
    let bot = Auth::Token(bot_token);
    app.get("/api/v1/admin/reports/tool-calls?format=json", bot)
        .await
        .assert_status(403);
    let alice = app.create_token(ALICE, ALL_SCOPES).await.token;
    app.get(
        "/api/v1/admin/reports/tool-calls?format=json",
        Auth::Token(&alice),
    )
    .await
    .assert_error(403, "forbidden");
}

both_backends!(audit_records_every_call_in_order);
async fn audit_records_every_call_in_order(app: TestApp) {
    let calls = make_the_calls(&app).await;
    check_one_row_per_call(&audit_rows(&app).await, &calls);
}

both_backends!(audit_records_never_hold_a_value_or_a_credential);
async fn audit_records_never_hold_a_value_or_a_credential(app: TestApp) {
    let calls = make_the_calls(&app).await;
    check_no_value_in_any_row(&audit_rows(&app).await, &calls);
}

both_backends!(the_tool_call_report_shows_every_record);
async fn the_tool_call_report_shows_every_record(app: TestApp) {
    let calls = make_the_calls(&app).await;
    check_the_report(&app, &audit_rows(&app).await, &calls).await;
}

both_backends!(only_an_admin_reads_the_tool_call_report);
async fn only_an_admin_reads_the_tool_call_report(app: TestApp) {
    let world = World::new(&app).await;
    check_only_an_admin_reads_the_report(&app, &world.bot).await;
}

// The same calls and records with the records of calls that changed
// nothing committed durably (fsync on SQLite, `synchronous_commit` as the
// server sets it on PostgreSQL) instead of relaxed, the default.
both_backends!(every_call_is_recorded_with_durable_read_records, |config| {
    config.sqlite_durable_read_records = true;
    config.postgres_durable_read_records = true;
});
async fn every_call_is_recorded_with_durable_read_records(app: TestApp) {
    let calls = make_the_calls(&app).await;
    let rows = audit_rows(&app).await;
    check_one_row_per_call(&rows, &calls);
    check_no_value_in_any_row(&rows, &calls);
    check_the_report(&app, &rows, &calls).await;
    check_only_an_admin_reads_the_report(&app, &calls.bot).await;
}
