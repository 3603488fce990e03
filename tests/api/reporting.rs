//! The reporting views and the admin report route: the same rows as the API
//! shows, the documented columns, the read-only role, and the same rows on
//! SQLite and PostgreSQL for the same operations.

use std::collections::BTreeMap;

use serde_json::Value;
use time::format_description::well_known::Rfc3339;

use crate::db::SqlConn;
use crate::helpers::{
    ADMIN_LOGIN, Auth, Backend, Resp, TestApp, grant_path, postgres_admin_url, skip_postgres,
    within_time_limit,
};
use crate::world::{ALICE, BOT, OWNER, Prepare, REPO, RIVAL, World, submission_of};

const RECEIPTS: &str = "report_receipts_v1";
const GRANTS: &str = "report_grants_v1";

/// The columns `spec/reporting.md` requires ("at least"), in its order.
const TOOL_CALLS: &str = "report_tool_calls_v1";

/// The audit record's fields (mcp-and-policy.md "Audit"), in the view.
const TOOL_CALLS_SPEC: &[&str] = &[
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
    "arg_names",
    "native_status",
    "error_code",
];

const RECEIPTS_SPEC: &[&str] = &[
    "grant_id",
    "request_key",
    "repository",
    "agent_login",
    "issuer_login",
    "approver_login",
    "issue_id",
    "issue_index",
    "issue_url",
    "outcome",
    "review_state",
    "handoff_evaluation_id",
    "handoff_status",
    "snapshot_id",
    "submitted_at",
];
const GRANTS_SPEC: &[&str] = &[
    "grant_id",
    "repository",
    "agent_login",
    "issuer_login",
    "approver_login",
    "state",
    "state_revision",
    "submission_count",
    "max_submissions",
    "created_at",
    "confirmed_at",
    "approved_at",
    "revoked_at",
    "last_admission_status",
];

/// Fixed request keys, so two apps run exactly the same sequence.
const KEYS: [&str; 3] = [
    "00000000-0000-4000-8000-000000000001",
    "00000000-0000-4000-9000-000000000002",
    "00000000-0000-4000-a000-000000000003",
];

/// `(name, type)` of each column of a view, as `docs/reporting.md` lists them.
fn documented_columns(view: &str) -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reporting.md");
    let text = std::fs::read_to_string(path).expect("read docs/reporting.md");
    let heading = format!("## `{view}`");
    let start = text
        .lines()
        .position(|l| l.starts_with(&heading))
        .unwrap_or_else(|| panic!("no section {heading} in docs/reporting.md"));
    let mut out = Vec::new();
    for line in text.lines().skip(start + 1) {
        if line.starts_with("## ") {
            break;
        }
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let (name, rest) = rest.split_once('`').expect("closing backquote");
        let kind = rest.split('|').nth(1).expect("type column").trim();
        out.push((name.to_owned(), kind.to_owned()));
    }
    assert!(!out.is_empty(), "no columns documented for {view}");
    out
}

fn documented_names(view: &str) -> Vec<String> {
    documented_columns(view)
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Whether `sub` appears in `all` in the same order.
fn is_subsequence(sub: &[&str], all: &[String]) -> bool {
    let mut it = all.iter();
    sub.iter().all(|s| it.any(|a| a == s))
}

/// The timestamp columns of the views.
fn is_time_column(name: &str) -> bool {
    name.ends_with("_at")
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the fixed-width form docs/reporting.md
/// promises.
fn is_fixed_width_utc(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            26 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// What the sequence made.
struct Sequence {
    /// active, max 3, two receipts (one issue deleted, one transferred)
    a: i64,
    /// withdrawn after one receipt
    b: i64,
    /// awaiting_agent
    c: i64,
    /// awaiting_human
    d: i64,
    /// rival-bot's, withdrawn before confirmation
    e: i64,
}

/// The operation sequence: five grants in every state, three receipts with
/// every outcome.
async fn run_sequence(world: &World<'_>) -> Sequence {
    let app = world.app;
    app.create_repo(OWNER, "gadgets", true).await;
    app.set_collaborator(OWNER, "gadgets", ALICE, "admin").await;
    let mut form = Prepare::new(BOT, "Reporting A");
    form.max_submissions = "3".to_owned();
    let a = world.active_with(&form).await;
    let b = world.active("Reporting B").await;
    let c = world.prepare("Reporting C").await;
    let d = world.confirmed("Reporting D").await;
    let e = world
        .alice
        .prepare_ok(OWNER, REPO, &Prepare::new(RIVAL, "Reporting E"))
        .await;
    world.submitted(a, KEYS[0], "Receipt one", "1").await;
    world.submitted(a, KEYS[1], "Receipt two", "2").await;
    world.submitted(b, KEYS[2], "Receipt three", "3").await;
    world.delete_issue(OWNER, REPO, 1).await.assert_status(204);
    world
        .transfer_issue(OWNER, REPO, 2, "acme/gadgets")
        .await
        .assert_status(200);
    world.withdraw(b).await.assert_status(303);
    world.withdraw(e).await.assert_status(303);
    Sequence { a, b, c, d, e }
}

/// `GET /api/v1/admin/reports/{name}?{query}` with a token.
async fn report_as(app: &TestApp, auth: Auth<'_>, name: &str, query: &str) -> Resp {
    let path = match query {
        "" => format!("/api/v1/admin/reports/{name}"),
        q => format!("/api/v1/admin/reports/{name}?{q}"),
    };
    app.get(&path, auth).await
}

/// The admin's JSON report rows.
async fn report_rows(app: &TestApp, name: &str, query: &str) -> Vec<Value> {
    let query = match query {
        "" => "format=json".to_owned(),
        q => format!("format=json&{q}"),
    };
    let resp = report_as(app, Auth::Token(&app.admin_token), name, &query).await;
    resp.assert_status(200);
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    resp.json().as_array().expect("a JSON array").clone()
}

/// A JSON cell as the text a view shows (NULL as `None`).
fn cell_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A grant read by its own agent.
async fn grant_as(app: &TestApp, token: &str, id: i64) -> Value {
    let resp = app
        .get(&grant_path(OWNER, REPO, id), Auth::Token(token))
        .await;
    resp.assert_status(200);
    resp.json()["grant"].clone()
}

both_backends!(report_rows_match_the_api);
async fn report_rows_match_the_api(app: TestApp) {
    let world = World::new(&app).await;
    let seq = run_sequence(&world).await;

    // Receipts: one row per submission, outcome == the API's status.
    let rows = report_rows(&app, "receipts", "").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let names = documented_names(RECEIPTS);
    let mut outcomes = BTreeMap::new();
    for row in &rows {
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        assert_eq!(keys, names.iter().collect::<Vec<_>>(), "column order");
        let grant_id = row["grant_id"].as_i64().expect("grant_id");
        let key = row["request_key"].as_str().expect("request_key");
        let readback = world.readback(grant_id, key).await;
        readback.assert_status(200);
        let submission = submission_of(&readback);
        let grant = readback.json()["grant"].clone();
        assert_eq!(row["outcome"], submission["status"], "{key}");
        assert_eq!(row["review_state"], submission["review_state"]);
        assert_eq!(row["issue_id"], submission["issue"]["id"]);
        assert_eq!(row["issue_index"], submission["issue"]["index"]);
        assert_eq!(row["issue_url"], submission["issue"]["url"]);
        assert_eq!(
            row["repository"],
            submission["issue"]["repository"]["full_name"]
        );
        assert_eq!(row["agent_login"], submission["agent"]["login"]);
        assert_eq!(row["issuer_login"], grant["issuer"]["login"]);
        assert_eq!(row["approver_login"], grant["approver"]["login"]);
        assert_eq!(row["submitted_at"], submission["created_at"]);
        let admission = &submission["admission"];
        if admission.is_null() {
            for column in ["handoff_evaluation_id", "handoff_status", "snapshot_id"] {
                assert!(row[column].is_null(), "{column}: {row}");
            }
        } else {
            assert_eq!(row["handoff_evaluation_id"], admission["evaluation_id"]);
            assert_eq!(row["handoff_status"], admission["status"]);
            assert_eq!(row["snapshot_id"], admission["snapshot_id"]);
        }
        outcomes.insert(key.to_owned(), row["outcome"].clone());
    }
    assert_eq!(outcomes[KEYS[0]], "issue_deleted");
    assert_eq!(outcomes[KEYS[1]], "issue_binding_changed");
    assert_eq!(outcomes[KEYS[2]], "submitted");
    // The transferred one keeps its repository as committed.
    assert!(rows.iter().all(|r| r["repository"] == "acme/widgets"));
    // In time order.
    let times: Vec<&str> = rows
        .iter()
        .map(|r| r["submitted_at"].as_str().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // Grants: one row per grant, equal to the grant JSON.
    let rows = report_rows(&app, "grants", "").await;
    let names = documented_names(GRANTS);
    let expected = [
        (seq.a, world.bot.as_str(), "active", 2),
        (seq.b, world.bot.as_str(), "revoked", 1),
        (seq.c, world.bot.as_str(), "awaiting_agent", 0),
        (seq.d, world.bot.as_str(), "awaiting_human", 0),
        (seq.e, world.rival.as_str(), "revoked", 0),
    ];
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (row, (id, token, state, count)) in rows.iter().zip(expected) {
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        assert_eq!(keys, names.iter().collect::<Vec<_>>(), "column order");
        let grant = grant_as(&app, token, id).await;
        assert_eq!(row["grant_id"], id);
        assert_eq!(row["state"], state);
        assert_eq!(row["state"], grant["state"]);
        assert_eq!(row["submission_count"], count);
        assert_eq!(row["submission_count"], grant["submission_count"]);
        assert_eq!(row["state_revision"], grant["state_revision"]);
        assert_eq!(row["approver_login"], grant["approver"]["login"]);
        assert_eq!(row["issuer_login"], grant["issuer"]["login"]);
        assert_eq!(row["agent_login"], grant["agent"]["login"]);
        assert_eq!(row["repository"], grant["repository"]["full_name"]);
        assert_eq!(
            row["max_submissions"],
            grant["proposal"]["limits"]["max_submissions"]
        );
        for column in ["created_at", "confirmed_at", "approved_at", "revoked_at"] {
            assert_eq!(row[column], grant[column], "{column} of grant {id}");
        }
        assert_eq!(row["last_admission_status"], grant["admission"]["status"]);
    }
    assert_eq!(rows[0]["approver_login"], ALICE);
    assert!(rows[2]["approver_login"].is_null());
    assert_eq!(rows[4]["agent_login"], RIVAL);
}

/// Splits a CSV body whose cells hold no commas, quotes or newlines.
fn csv_lines(body: &str) -> Vec<Vec<String>> {
    assert!(body.ends_with('\n'), "CSV ends with a newline");
    body.lines()
        .map(|l| {
            l.trim_end_matches('\r')
                .split(',')
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

both_backends!(report_route_formats_filters_and_refusals);
async fn report_route_formats_filters_and_refusals(app: TestApp) {
    let world = World::new(&app).await;
    run_sequence(&world).await;
    let admin = Auth::Token(&app.admin_token);

    // CSV (the default): a header line equal to the columns, then the rows.
    for (name, view) in [("receipts", RECEIPTS), ("grants", GRANTS)] {
        let names = documented_names(view);
        let json_rows = report_rows(&app, name, "").await;
        let default = report_as(&app, admin, name, "").await;
        default.assert_status(200);
        let content_type = default.header("content-type").unwrap_or_default();
        assert!(content_type.starts_with("text/csv"), "{content_type}");
        let explicit = report_as(&app, admin, name, "format=csv").await;
        explicit.assert_status(200);
        assert_eq!(explicit.body, default.body);
        let lines = csv_lines(&default.body);
        assert_eq!(lines[0], names, "{name} CSV header");
        assert_eq!(
            default.body.lines().next().unwrap(),
            names.join(","),
            "{name} header line"
        );
        assert_eq!(lines.len(), json_rows.len() + 1, "{name}: {}", default.body);
        for (line, row) in lines[1..].iter().zip(&json_rows) {
            let cells: Vec<String> = names
                .iter()
                .map(|n| cell_text(&row[n.as_str()]).unwrap_or_default())
                .collect();
            assert_eq!(line, &cells, "{name}");
        }
    }

    // Filters.
    let all = report_rows(&app, "receipts", "").await;
    let count = |rows: Vec<Value>| rows.len();
    #[rustfmt::skip]
    let filters: Vec<(&str, &str, usize)> = vec![
        ("receipts", "repo=acme/widgets", 3),
        ("receipts", "repo=ACME/Widgets", 3),
        ("receipts", "repo=acme/gadgets", 0),
        ("receipts", "agent=builder-bot", 3),
        ("receipts", "agent=BUILDER-BOT", 3),
        ("receipts", "agent=rival-bot", 0),
        ("grants", "agent=rival-bot", 1),
        ("grants", "repo=acme/widgets", 5),
        ("receipts", "since=2999-01-01T00:00:00Z", 0),
        ("receipts", "until=2000-01-01T00:00:00Z", 0),
        ("receipts", "since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z", 3),
        ("grants", "since=2999-01-01T00:00:00Z", 0),
    ];
    for (name, query, expected) in filters {
        assert_eq!(
            count(report_rows(&app, name, query).await),
            expected,
            "{name}?{query}"
        );
    }
    // since is inclusive, until exclusive, on submitted_at.
    let second = all[1]["submitted_at"].as_str().unwrap();
    let since = report_rows(&app, "receipts", &format!("since={second}")).await;
    let expected: Vec<&Value> = all
        .iter()
        .filter(|r| r["submitted_at"].as_str().unwrap() >= second)
        .collect();
    assert_eq!(since.iter().collect::<Vec<_>>(), expected);
    let until = report_rows(&app, "receipts", &format!("until={second}")).await;
    let expected: Vec<&Value> = all
        .iter()
        .filter(|r| r["submitted_at"].as_str().unwrap() < second)
        .collect();
    assert_eq!(until.iter().collect::<Vec<_>>(), expected);
    // The same instant with an offset selects the same rows.
    let instant = time::OffsetDateTime::parse(second, &Rfc3339).unwrap();
    let shifted = instant
        .to_offset(time::macros::offset!(+02:00))
        .format(&Rfc3339)
        .unwrap();
    assert!(shifted.ends_with("+02:00"), "{shifted}");
    let query = format!("since={}", shifted.replace('+', "%2B"));
    assert_eq!(report_rows(&app, "receipts", &query).await, since);

    // Who may read it.
    let read_admin = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    let no_admin_scope = app
        .create_token(ADMIN_LOGIN, &["write:repository", "read:issue"])
        .await
        .token;
    report_as(&app, Auth::Token(&read_admin), "receipts", "format=json")
        .await
        .assert_status(200);
    #[rustfmt::skip]
    let refused: Vec<(&str, Auth, u16, &str)> = vec![
        ("anonymous", Auth::None, 401, "unauthenticated"),
        ("human with every scope", Auth::Token(&world.alice_token), 403, "forbidden"),
        ("bot", Auth::Token(&world.bot), 403, "forbidden"),
        ("admin without admin scopes", Auth::Token(&no_admin_scope), 403, "insufficient_scope"),
    ];
    for (who, auth, status, code) in refused {
        for name in ["receipts", "grants"] {
            let resp = report_as(&app, auth, name, "format=json").await;
            assert_eq!(resp.status.as_u16(), status, "{who} {name}: {}", resp.body);
            assert_eq!(resp.code(), code, "{who} {name}");
        }
    }

    // Bad names and parameters.
    for name in ["nope", "receipt", "report_receipts_v1"] {
        let resp = report_as(&app, admin, name, "").await;
        assert_eq!(resp.status.as_u16(), 404, "{name}: {}", resp.body);
        assert_eq!(resp.code(), "not_found");
    }
    for query in [
        "foo=1",
        "format=xml",
        "format=json&format=csv",
        "format=",
        "since=yesterday",
        "until=2026-13-01T00:00:00Z",
        "repo=acme/widgets&limit=10",
    ] {
        let resp = report_as(&app, admin, "receipts", query).await;
        assert_eq!(resp.status.as_u16(), 400, "{query}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{query}");
    }
}

/// The view's column names (and on PostgreSQL their data types), in order.
async fn view_columns(conn: &mut SqlConn, view: &str) -> Vec<(String, Option<String>)> {
    match conn {
        SqlConn::Sqlite(_) => conn
            .text_rows(&format!(
                "SELECT name FROM pragma_table_info('{view}') ORDER BY cid"
            ))
            .await
            .into_iter()
            .map(|r| (r[0].clone().unwrap(), None))
            .collect(),
        SqlConn::Postgres(_) => conn
            .text_rows(&format!(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = '{view}' \
                 ORDER BY ordinal_position"
            ))
            .await
            .into_iter()
            .map(|r| (r[0].clone().unwrap(), r[1].clone()))
            .collect(),
    }
}

/// Every documented column of a view as text, in the route's order.
async fn view_rows(conn: &mut SqlConn, view: &str, order: &str) -> Vec<Vec<Option<String>>> {
    let columns: Vec<String> = documented_names(view)
        .iter()
        .map(|c| format!("CAST({c} AS TEXT) AS {c}"))
        .collect();
    let sql = format!("SELECT {} FROM {view} ORDER BY {order}", columns.join(", "));
    conn.text_rows(&sql).await
}

const RECEIPTS_ORDER: &str = "submitted_at, grant_id, request_key";

both_backends!(views_match_the_documented_contract);
async fn views_match_the_documented_contract(app: TestApp) {
    let world = World::new(&app).await;
    run_sequence(&world).await;
    let mut conn = SqlConn::connect(&app.database_url()).await;

    for (view, spec, name, order) in [
        (RECEIPTS, RECEIPTS_SPEC, "receipts", RECEIPTS_ORDER),
        (GRANTS, GRANTS_SPEC, "grants", "grant_id"),
        (
            TOOL_CALLS,
            TOOL_CALLS_SPEC,
            "tool-calls",
            "report_tool_calls_v1.call_id",
        ),
    ] {
        // Columns: the documented names in the documented order.
        let documented = documented_columns(view);
        let names: Vec<String> = documented.iter().map(|(n, _)| n.clone()).collect();
        assert!(
            is_subsequence(spec, &names),
            "{view}: docs miss spec columns"
        );
        let columns = view_columns(&mut conn, view).await;
        let actual: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(actual, names, "{view} columns on {:?}", app.backend);

        // Types.
        match app.backend {
            Backend::Postgres => {
                for ((column, data_type), (_, kind)) in columns.iter().zip(&documented) {
                    let expected = match kind.as_str() {
                        "integer" => "bigint",
                        "text" => "text",
                        other => panic!("undocumented type {other}"),
                    };
                    assert_eq!(data_type.as_deref(), Some(expected), "{view}.{column} type");
                }
            }
            Backend::Sqlite => {
                let typeofs: Vec<String> = names.iter().map(|c| format!("typeof({c})")).collect();
                let sql = format!("SELECT {} FROM {view}", typeofs.join(", "));
                for row in conn.text_rows(&sql).await {
                    for ((cell, column), (_, kind)) in row.iter().zip(&names).zip(&documented) {
                        let cell = cell.as_deref().unwrap_or_default();
                        assert!(
                            cell == "null" || cell == kind,
                            "{view}.{column} holds {cell}, documented {kind}"
                        );
                    }
                }
            }
        }

        // Rows: what SQL reads equals what the admin route streams.
        let sql_rows = view_rows(&mut conn, view, order).await;
        let route_rows: Vec<Vec<Option<String>>> = report_rows(&app, name, "")
            .await
            .iter()
            .map(|row| names.iter().map(|n| cell_text(&row[n.as_str()])).collect())
            .collect();
        assert_eq!(sql_rows, route_rows, "{view}");
        assert!(!sql_rows.is_empty());
        for row in &sql_rows {
            for (cell, column) in row.iter().zip(&names) {
                if let (true, Some(text)) = (is_time_column(column), cell) {
                    assert!(is_fixed_width_utc(text), "{view}.{column}: {text:?}");
                }
            }
        }
    }

    // PostgreSQL: the read-only reporting role.
    if app.backend == Backend::Postgres {
        let role = conn
            .text_rows("SELECT rolcanlogin::text FROM pg_roles WHERE rolname = 'writ_reporting'")
            .await;
        assert_eq!(role, vec![vec![Some("false".to_owned())]], "NOLOGIN role");
        for view in [RECEIPTS, GRANTS, TOOL_CALLS] {
            for (privilege, expected) in [
                ("SELECT", "true"),
                ("INSERT", "false"),
                ("UPDATE", "false"),
                ("DELETE", "false"),
            ] {
                let got = conn
                    .text_rows(&format!(
                        "SELECT has_table_privilege('writ_reporting', '{view}', '{privilege}')::text"
                    ))
                    .await;
                assert_eq!(
                    got[0][0].as_deref(),
                    Some(expected),
                    "{privilege} on {view}"
                );
            }
        }
        let tables = conn
            .text_rows(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
            )
            .await;
        assert!(tables.len() >= 5, "{tables:?}");
        for table in tables {
            let table = table[0].clone().unwrap();
            let got = conn
                .text_rows(&format!(
                    "SELECT has_table_privilege('writ_reporting', '\"{table}\"', 'SELECT')::text"
                ))
                .await;
            assert_eq!(
                got[0][0].as_deref(),
                Some("false"),
                "writ_reporting can read base table {table}"
            );
        }
    }
    conn.close().await;
}

/// The sequence's view rows with ids ranked, times and the base URL masked:
/// what must be identical on both backends.
async fn normalized_view_rows(
    app: &TestApp,
) -> Vec<(String, Vec<BTreeMap<String, Option<String>>>)> {
    let world = World::new(app).await;
    run_sequence(&world).await;
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let mut out = Vec::new();
    for (view, order) in [(RECEIPTS, "request_key"), (GRANTS, "grant_id")] {
        let names = documented_names(view);
        let rows = view_rows(&mut conn, view, order).await;
        // Rank the ids of each id column.
        let mut ranks: BTreeMap<&str, BTreeMap<i64, usize>> = BTreeMap::new();
        for (i, column) in names.iter().enumerate() {
            if column.ends_with("_id") {
                let mut ids: Vec<i64> = rows
                    .iter()
                    .filter_map(|r| r[i].as_deref().map(|t| t.parse().expect("integer id")))
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ranks.insert(
                    column,
                    ids.into_iter()
                        .enumerate()
                        .map(|(n, id)| (id, n + 1))
                        .collect(),
                );
            }
        }
        let normalized = rows
            .iter()
            .map(|row| {
                names
                    .iter()
                    .zip(row)
                    .map(|(column, cell)| {
                        let value = cell.as_ref().map(|text| {
                            if let Some(rank) = ranks.get(column.as_str()) {
                                format!("#{}", rank[&text.parse::<i64>().unwrap()])
                            } else if is_time_column(column) {
                                assert!(is_fixed_width_utc(text), "{view}.{column}: {text}");
                                "<time>".to_owned()
                            } else if column == "issue_url" {
                                text.strip_prefix(&app.base)
                                    .unwrap_or_else(|| panic!("{text} not on {}", app.base))
                                    .to_owned()
                            } else {
                                text.clone()
                            }
                        });
                        (column.clone(), value)
                    })
                    .collect()
            })
            .collect();
        out.push((view.to_owned(), normalized));
    }
    conn.close().await;
    out
}

/// The same operations on a SQLite app and a PostgreSQL app give the same
/// view rows (ids, times and the base URL normalized).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_agree_across_backends() {
    if postgres_admin_url().is_none() {
        skip_postgres();
        return;
    }
    within_time_limit(async {
        let sqlite = TestApp::spawn(Backend::Sqlite).await;
        let postgres = TestApp::spawn(Backend::Postgres).await;
        let on_sqlite = normalized_view_rows(&sqlite).await;
        let on_postgres = normalized_view_rows(&postgres).await;
        for ((view, a), (_, b)) in on_sqlite.iter().zip(&on_postgres) {
            assert!(!a.is_empty(), "{view} is empty");
            assert_eq!(a.len(), b.len(), "{view} row count");
            for (row_a, row_b) in a.iter().zip(b) {
                assert_eq!(row_a, row_b, "{view}: SQLite vs PostgreSQL");
            }
        }
        let outcomes: Vec<Option<String>> = on_sqlite[0]
            .1
            .iter()
            .map(|r| r["outcome"].clone())
            .collect();
        assert_eq!(
            outcomes,
            ["issue_deleted", "issue_binding_changed", "submitted"]
                .map(|s| Some(s.to_owned()))
                .to_vec()
        );
    })
    .await;
}
