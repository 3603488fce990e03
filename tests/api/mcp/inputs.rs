//! Strict inputs: malformed tool arguments are refused before any native
//! work.

use serde_json::{Value, json};

use super::{
    ALL_TOOLS, CONFIRM, GET, LIST, Mcp, READBACK, Row, SUBMIT, audit_rows, col, confirm_args,
    post_mcp, put_grants, submit_args, target,
};
use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, REPO, World, new_key};

/// A pending and an active grant of builder-bot, every tool granted on any
/// repository, and well-formed arguments of each tool to break.
struct Strict<'a> {
    world: World<'a>,
    id: i64,
    pending: i64,
    digest: String,
    before: Value,
    before_pending: Value,
    mcp: Mcp<'a>,
    key: String,
    get: Value,
    confirm: Value,
    submit: Value,
    readback: Value,
}

impl<'a> Strict<'a> {
    async fn new(app: &'a TestApp) -> Strict<'a> {
        let world = World::new(app).await;
        let pending = world.prepare("Strict: pending").await;
        let id = world.active("Strict: active").await;
        let digest = world.digest(id).await;
        let pending_digest = world.digest(pending).await;
        put_grants(
            app,
            BOT,
            json!([{"id": "any", "repos": [], "tools": ALL_TOOLS}]),
        )
        .await;
        let before = world.grant(id).await;
        let before_pending = world.grant(pending).await;
        let mcp = Mcp::new(app, &world.bot);
        let key = new_key();
        let get = target(OWNER, REPO, id);
        let confirm = confirm_args(OWNER, REPO, pending, &pending_digest);
        let submit = submit_args(id, &digest, &key, "Strict title", "Strict body");
        let readback = json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key});
        Strict {
            world,
            id,
            pending,
            digest,
            before,
            before_pending,
            mcp,
            key,
            get,
            confirm,
            submit,
            readback,
        }
    }

    /// Nothing happened: both grants as they were, no issue, no receipt.
    async fn assert_nothing_happened(&self) {
        let world = &self.world;
        world.assert_unchanged(self.id, &self.before).await;
        world
            .assert_unchanged(self.pending, &self.before_pending)
            .await;
        assert!(world.all_issues().await.is_empty());
        world
            .readback(self.id, &self.key)
            .await
            .assert_error(404, "not_found");
    }
}

/// `base` with `key` set to `value`.
fn with(base: Value, key: &str, value: Value) -> Value {
    let mut args = base;
    args[key] = value;
    args
}

/// `base` without `key`.
fn without(base: Value, key: &str) -> Value {
    let mut args = base;
    args.as_object_mut().unwrap().remove(key);
    args
}

/// Malformed arguments of each tool (two of them carrying `secret`).
fn malformed(fx: &Strict<'_>, secret: &str) -> Vec<(&'static str, Value)> {
    let (id, digest, key) = (fx.id, &fx.digest, &fx.key);
    let (get, confirm, submit, readback) = (&fx.get, &fx.confirm, &fx.submit, &fx.readback);
    let bad_ids = [
        json!(1.0),
        json!(id as f64),
        json!(id.to_string()),
        json!(0),
        json!(-1),
        json!(-id),
        json!(9_223_372_036_854_775_808_u64),
        json!(u64::MAX),
        json!(1e20),
        json!(true),
        json!(null),
        json!([id]),
        json!({"id": id}),
    ];
    let mut cases: Vec<(&'static str, Value)> = Vec::new();
    for (tool, base) in [
        (GET, get),
        (CONFIRM, confirm),
        (SUBMIT, submit),
        (READBACK, readback),
    ] {
        for bad in &bad_ids {
            cases.push((tool, with(base.clone(), "grant_id", bad.clone())));
        }
        for member in base.as_object().unwrap().keys() {
            cases.push((tool, without(base.clone(), member)));
        }
        cases.push((tool, with(base.clone(), "sneaky", json!(secret))));
        cases.push((tool, with(base.clone(), "state_revision", json!(1))));
        cases.push((tool, with(base.clone(), "owner", json!(7))));
        cases.push((tool, with(base.clone(), "owner", json!(""))));
        cases.push((tool, with(base.clone(), "repo", json!(["widgets"]))));
        cases.push((tool, with(base.clone(), "repo", json!("w".repeat(101)))));
    }
    for (tool, base) in [(CONFIRM, confirm), (SUBMIT, submit)] {
        for version in [json!("1"), json!(1.0), json!(true), json!(null)] {
            cases.push((tool, with(base.clone(), "proposal_version", version)));
        }
        cases.push((tool, with(base.clone(), "proposal_schema", json!(1))));
        cases.push((tool, with(base.clone(), "proposal_digest", json!(7))));
        cases.push((
            tool,
            with(
                base.clone(),
                "proposal_digest",
                json!(digest.to_uppercase()),
            ),
        ));
        cases.push((
            tool,
            with(base.clone(), "proposal_digest", json!(&digest[..63])),
        ));
    }
    for bad_key in [
        json!(key.to_uppercase()),
        json!(format!("{{{key}}}")),
        json!(key.replace('-', "")),
        json!("not-a-key"),
        json!(""),
        json!(7),
    ] {
        cases.push((SUBMIT, with(submit.clone(), "request_key", bad_key.clone())));
        cases.push((READBACK, with(readback.clone(), "request_key", bad_key)));
    }
    for (name, bad) in [
        ("title", json!("")),
        ("title", json!("   ")),
        ("title", json!("x".repeat(256))),
        ("title", json!(5)),
        ("title", json!(null)),
        ("body", json!(null)),
        ("body", json!(["b"])),
    ] {
        cases.push((SUBMIT, with(submit.clone(), name, bad)));
    }
    for bad in [
        json!({"page": 0}),
        json!({"page": -1}),
        json!({"page": 1.0}),
        json!({"page": "2"}),
        json!({"page": 9_223_372_036_854_775_808_u64}),
        json!({"state": "done"}),
        json!({"state": 1}),
        json!({"limit": 50}),
        json!({"page": 1, "sneaky": secret}),
    ] {
        cases.push((LIST, bad));
    }
    cases
}

both_backends!(malformed_arguments_are_invalid_input_and_never_echoed);
async fn malformed_arguments_are_invalid_input_and_never_echoed(app: TestApp) {
    let fx = Strict::new(&app).await;
    let mcp = &fx.mcp;
    let secret = format!("SECRET-VALUE-{}", uuid::Uuid::new_v4().simple());
    let cases = malformed(&fx, &secret);

    for (n, (tool, args)) in cases.iter().enumerate() {
        let result = mcp.call(tool, args.clone()).await;
        assert!(
            result.is_error,
            "case {n} {tool} {args}: accepted: {}",
            result.content
        );
        assert_eq!(
            result.content["native_status"], 400,
            "case {n} {tool} {args}: {}",
            result.content
        );
        assert_eq!(
            result.content["code"], "invalid_input",
            "case {n} {tool} {args}: {}",
            result.content
        );
        let message = result.content["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty() && message.len() <= 512, "{message}");
        assert!(!message.contains(&secret), "case {n}: {message}");
        assert!(!result.content.to_string().contains(&secret), "case {n}");
    }

    fx.assert_nothing_happened().await;

    // Each refusal is audited as an allowed call that ended in 400.
    let rows = audit_rows(&app).await;
    let mcp_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| col(r, "via") == Some("mcp"))
        .collect();
    assert_eq!(mcp_rows.len(), cases.len());
    for row in &mcp_rows {
        assert_eq!(col(row, "decision"), Some("allow"), "{row:?}");
        assert_eq!(col(row, "native_status"), Some("400"), "{row:?}");
        assert_eq!(col(row, "error_code"), Some("invalid_input"), "{row:?}");
    }
    for row in &rows {
        for value in row.values().flatten() {
            assert!(!value.contains(&secret), "{row:?}");
        }
    }
}

both_backends!(well_formed_unsupported_proposals_are_the_native_400);
async fn well_formed_unsupported_proposals_are_the_native_400(app: TestApp) {
    let fx = Strict::new(&app).await;
    let (mcp, confirm, submit) = (&fx.mcp, &fx.confirm, &fx.submit);

    // Well-formed but unsupported proposals are the native 400.
    for (name, value) in [
        ("proposal_version", json!(2)),
        ("proposal_schema", json!("agent_work_grant.v2")),
    ] {
        for (tool, base) in [(CONFIRM, confirm), (SUBMIT, submit)] {
            mcp.call(tool, with(base.clone(), name, value.clone()))
                .await
                .error(400, "unsupported_proposal");
        }
    }

    fx.assert_nothing_happened().await;
}

both_backends!(the_largest_grant_id_is_well_formed);
async fn the_largest_grant_id_is_well_formed(app: TestApp) {
    let fx = Strict::new(&app).await;
    let (mcp, get) = (&fx.mcp, &fx.get);

    // The largest id is well-formed: the native 404.
    mcp.call(GET, with(get.clone(), "grant_id", json!(i64::MAX)))
        .await
        .error(404, "not_found");

    fx.assert_nothing_happened().await;
}

both_backends!(a_call_without_object_arguments_runs_nothing);
async fn a_call_without_object_arguments_runs_nothing(app: TestApp) {
    let fx = Strict::new(&app).await;
    let (world, mcp) = (&fx.world, &fx.mcp);

    // No `arguments` at all: missing members.
    let result = mcp
        .call_params(json!("no-args"), json!({"name": GET}))
        .await;
    result.error(400, "invalid_input");
    // `arguments` that is not an object never runs anything.
    for args in [json!([1]), json!("x"), json!(3)] {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                          "params": {"name": GET, "arguments": args}});
        let resp = post_mcp(&app, &world.bot, &[], &body).await;
        let json = resp.json();
        let refused = json.get("error").is_some() || json["result"]["isError"] == true;
        assert!(refused, "{}: {}", resp.status, resp.body);
    }

    fx.assert_nothing_happened().await;
}
