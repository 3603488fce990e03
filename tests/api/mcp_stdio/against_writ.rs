//! The adapter against a real Writ on loopback: the five tools, native
//! refusals, listing, credentials and path segments.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::{
    Cred, Stdio, TOOLS, adapter_command, is_error, native_refusal, ok, tool_error, without_status,
};
use crate::helpers::{Auth, OTHER_DIGEST, TestApp};
use crate::world::{BOT, OWNER, REPO, RIVAL, World, new_key, submit_body};

fn target(id: i64) -> Value {
    json!({"owner": OWNER, "repo": REPO, "grant_id": id})
}

fn confirm_args(id: i64, digest: &str) -> Value {
    let mut args = target(id);
    args["proposal_schema"] = json!("agent_work_grant.v1");
    args["proposal_version"] = json!(1);
    args["proposal_digest"] = json!(digest);
    args
}

fn submit_args(id: i64, digest: &str, key: &str, title: &str, body: &str) -> Value {
    let mut args = confirm_args(id, digest);
    args["request_key"] = json!(key);
    args["title"] = json!(title);
    args["body"] = json!(body);
    args
}

fn readback_args(id: i64, key: &str) -> Value {
    let mut args = target(id);
    args["request_key"] = json!(key);
    args
}

both_backends!(stdio_serves_the_five_tools_against_writ);
async fn stdio_serves_the_five_tools_against_writ(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Fix the widget frobnicator").await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    assert_eq!(adapter.tool_names().await, TOOLS);

    // get: the native grant plus native_status.
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["native_status"], 200, "{got}");
    assert_eq!(got["grant"]["id"], id, "{got}");
    assert_eq!(got["grant"]["state"], "awaiting_agent", "{got}");
    let rest = world.read(id).await;
    rest.assert_status(200);
    assert_eq!(without_status(got.clone()), rest.json());
    let digest = got["grant"]["proposal_digest"]
        .as_str()
        .expect("proposal_digest")
        .to_owned();

    // confirm with the digest read: awaiting_human, here and over REST.
    let confirmed = ok(&adapter
        .call("confirm_agent_work_grant", confirm_args(id, &digest))
        .await);
    assert_eq!(confirmed["native_status"], 200, "{confirmed}");
    assert_eq!(confirmed["grant"]["state"], "awaiting_human", "{confirmed}");
    assert_eq!(world.grant(id).await["state"], "awaiting_human");

    // alice approves; submit with a fresh key: 201, then the replay: 200.
    world.approve(id).await.assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");
    let key = new_key();
    let args = submit_args(id, &digest, &key, "Frobnicator fix", "Body\nline two");
    let first = ok(&adapter
        .call("submit_agent_work_proposal", args.clone())
        .await);
    assert_eq!(first["native_status"], 201, "{first}");
    assert_eq!(first["submission"]["request_key"], key, "{first}");
    assert_eq!(first["submission"]["grant_id"], id, "{first}");
    let replay = ok(&adapter.call("submit_agent_work_proposal", args).await);
    assert_eq!(replay["native_status"], 200, "{replay}");
    assert_eq!(
        replay["submission"]["issue"], first["submission"]["issue"],
        "the replay names another issue"
    );
    assert_eq!(world.all_issues().await.len(), 1, "one issue per key");

    // readback through the adapter and over REST agree.
    let read = ok(&adapter
        .call("get_agent_work_submission", readback_args(id, &key))
        .await);
    assert_eq!(read["native_status"], 200, "{read}");
    let rest = world.readback(id, &key).await;
    rest.assert_status(200);
    assert_eq!(without_status(read.clone()), rest.json());
    assert_eq!(read["submission"], first["submission"]);

    adapter.finish().await;
}

both_backends!(stdio_refusals_keep_their_native_code);
async fn stdio_refusals_keep_their_native_code(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Refusals").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    // A wrong digest: a definite 409 proposal_mismatch, not uncertain.
    let result = adapter
        .call("confirm_agent_work_grant", confirm_args(id, OTHER_DIGEST))
        .await;
    let content = native_refusal(&result, 409, "proposal_mismatch");
    assert_ne!(content["code"], "delivery_uncertain");
    world.assert_unchanged(id, &before).await;

    // Submitting before approval: the native route's own refusal.
    let key = new_key();
    let args = submit_args(id, &digest, &key, "Too early", "");
    let result = adapter.call("submit_agent_work_proposal", args).await;
    let rest = world
        .submit_with(id, submit_body(&digest, &new_key(), "Too early", ""))
        .await;
    rest.assert_status(409);
    native_refusal(&result, 409, &rest.code());

    // An unknown grant: 404 not_found.
    let result = adapter
        .call("get_agent_work_grant", target(id + 1000))
        .await;
    native_refusal(&result, 404, "not_found");

    // Strict inputs: refused by the adapter itself.
    for (member, value) in [
        ("grant_id", json!(1.0)),
        ("grant_id", json!(format!("{id}"))),
        ("grant_id", json!(0)),
        ("extra", json!(true)),
    ] {
        let mut args = target(id);
        args[member] = value.clone();
        let result = adapter.call("get_agent_work_grant", args).await;
        let content = tool_error(&result, "invalid_input");
        assert!(content.get("native_status").is_none(), "{member}={value}");
    }

    // A used key with other content: 409 request_key_conflict.
    let id = world.active("Conflicts").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let first = adapter
        .call(
            "submit_agent_work_proposal",
            submit_args(id, &digest, &key, "Title A", "same"),
        )
        .await;
    assert_eq!(ok(&first)["native_status"], 201);
    let second = adapter
        .call(
            "submit_agent_work_proposal",
            submit_args(id, &digest, &key, "Title B", "same"),
        )
        .await;
    native_refusal(&second, 409, "request_key_conflict");
    assert_eq!(world.all_issues().await.len(), 1);

    adapter.finish().await;
}

both_backends!(stdio_lists_every_page_by_total_count);
async fn stdio_lists_every_page_by_total_count(app: TestApp) {
    let world = World::new(&app).await;
    let mut ids = Vec::new();
    for n in 0..31 {
        ids.push(world.prepare(&format!("Listed grant {n}")).await);
    }
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    let first = ok(&adapter.call("list_agent_work_grants", json!({})).await);
    assert_eq!(first["native_status"], 200, "{first}");
    assert_eq!(first["total_count"], 31);
    assert_eq!(first["page"], 1);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["next_page"], 2);
    assert_eq!(first["snapshot"], false);
    let page_one: Vec<i64> = first["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| g["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(page_one, ids[..30]);

    let second = ok(&adapter
        .call("list_agent_work_grants", json!({"page": 2}))
        .await);
    assert_eq!(second["total_count"], 31);
    assert_eq!(second["page"], 2);
    assert_eq!(second["has_more"], false);
    assert_eq!(second["next_page"], Value::Null);
    let page_two: Vec<i64> = second["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| g["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(page_two, ids[30..]);

    // The grants are the native list's, page by page.
    for (page, content) in [(1, &first), (2, &second)] {
        let rest = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}&limit=30"),
                Auth::Token(&world.bot),
            )
            .await;
        rest.assert_status(200);
        assert_eq!(content["grants"], rest.json(), "page {page}");
    }

    // A state filter goes through; nothing is active yet.
    let active = ok(&adapter
        .call("list_agent_work_grants", json!({"state": "active"}))
        .await);
    assert_eq!(active["total_count"], 0);
    assert_eq!(active["grants"], json!([]));
    assert_eq!(active["has_more"], false);

    adapter.finish().await;
}

/// A fresh path for a token file.
fn temp_file(contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("writ-token-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, contents).expect("write the token file");
    path
}

both_backends!(stdio_token_file_and_basic_user);
async fn stdio_token_file_and_basic_user(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Credentials").await;

    // --token-file (with a trailing newline), no WRIT_TOKEN.
    let path = temp_file(&format!("{}\n", world.bot));
    let mut adapter = Stdio::start_with(&app.base, Cred::File(&path), &world.bot).await;
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["grant"]["id"], id);
    adapter.finish().await;
    let _ = std::fs::remove_file(&path);

    // --basic-user: the token is the Basic password of that login.
    let mut adapter = Stdio::start_with(&app.base, Cred::Basic(BOT, &world.bot), &world.bot).await;
    let got = ok(&adapter.call("get_agent_work_grant", target(id)).await);
    assert_eq!(got["grant"]["id"], id);
    adapter.finish().await;

    // Basic with a login the token does not belong to: Writ refuses it, so
    // the token really went as a Basic password.
    let mut adapter =
        Stdio::start_with(&app.base, Cred::Basic(RIVAL, &world.bot), &world.bot).await;
    let result = adapter.call("get_agent_work_grant", target(id)).await;
    native_refusal(&result, 401, "unauthenticated");
    adapter.finish().await;

    // No token at all: the adapter does not start.
    let mut child = adapter_command(&app.base, &Cred::Nothing)
        .spawn()
        .expect("spawn writ mcp-stdio");
    drop(child.stdin.take());
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("stderr");
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        let _ = pipe.read_to_string(&mut stderr).await;
        child.wait().await.expect("wait")
    })
    .await
    .expect("the adapter without a token exits");
    assert!(!status.success(), "started without a token");
    assert!(stderr.contains("WRIT_TOKEN"), "{stderr}");
}

both_backends!(stdio_path_segments_stay_in_their_route);
async fn stdio_path_segments_stay_in_their_route(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Segments").await;
    let digest = world.digest(id).await;
    let key = new_key();
    world.submitted(id, &key, "Segments", "").await;
    let mut adapter = Stdio::start(&app.base, &world.bot).await;

    // Owner or repo with `..` or `/` never reach another route: the adapter
    // refuses `.` and `..` itself (`invalid_input`), the rest is Writ's 404/400.
    for (owner, repo) in [
        ("..", REPO),
        (OWNER, ".."),
        ("..", ".."),
        (".", REPO),
        ("acme/widgets", "x"),
        ("acme", "widgets/agent-work-grants"),
        ("%2E%2E", REPO),
    ] {
        let args = json!({"owner": owner, "repo": repo, "grant_id": id});
        let result = adapter.call("get_agent_work_grant", args).await;
        assert!(is_error(&result), "{owner}/{repo} succeeded: {result}");
        let status = &result["structuredContent"]["native_status"];
        assert!(
            *status == 404
                || *status == 400
                || result["structuredContent"]["code"] == "invalid_input",
            "{owner}/{repo}: not a native 404/400: {result}"
        );
        let mut args = readback_args(id, &key);
        args["owner"] = json!(owner);
        args["repo"] = json!(repo);
        let result = adapter.call("get_agent_work_submission", args).await;
        assert!(is_error(&result), "{owner}/{repo} succeeded: {result}");
        let status = &result["structuredContent"]["native_status"];
        assert!(
            *status == 404
                || *status == 400
                || result["structuredContent"]["code"] == "invalid_input",
            "{owner}/{repo}: not a native 404/400: {result}"
        );
    }

    // A request key of `..` or `.` is the readback route's to judge (or the
    // adapter's own input refusal), never another route's answer.
    for bad_key in ["..", ".", "%2E%2E", "a/b"] {
        let result = adapter
            .call("get_agent_work_submission", readback_args(id, bad_key))
            .await;
        assert!(is_error(&result), "key {bad_key:?} succeeded: {result}");
        let content = &result["structuredContent"];
        let native = content["native_status"] == 404 || content["native_status"] == 400;
        assert!(
            native || content["code"] == "invalid_input",
            "key {bad_key:?}: not the readback route's refusal: {result}"
        );
    }

    // The real receipt is still there, and a submit with `..` changes nothing.
    let args = json!({
        "owner": "..", "repo": REPO, "grant_id": id,
        "proposal_schema": "agent_work_grant.v1", "proposal_version": 1,
        "proposal_digest": digest, "request_key": new_key(), "title": "x", "body": "",
    });
    let result = adapter.call("submit_agent_work_proposal", args).await;
    assert!(is_error(&result), "{result}");
    assert_eq!(world.all_issues().await.len(), 1);
    let read = ok(&adapter
        .call("get_agent_work_submission", readback_args(id, &key))
        .await);
    assert_eq!(read["submission"]["request_key"], key);

    adapter.finish().await;
}
