//! The handoff: submit, replay, conflict, readback, byte-exact text, the
//! grant rules, access, tombstones, races and a lost response. This module
//! holds the shared checks of a receipt and of the issue it made.

mod access;
mod delivery;
mod grant_rules;
mod handoff;
mod races;
mod text;
mod tombstones;

use serde_json::{Value, json};

use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, REPO, World, is_hex64, is_timestamp, keys_of};

const SUBMISSION_KEYS: &[&str] = &[
    "admission",
    "agent",
    "content_digest",
    "created_at",
    "grant_id",
    "issue",
    "request_key",
    "review_state",
    "status",
];

const ISSUE_KEYS: &[&str] = &[
    "agent_work_grant",
    "body",
    "created_at",
    "id",
    "index",
    "poster",
    "repository",
    "title",
];

/// Checks a submission object against its grant, key, committed index (in
/// acme/widgets) and expected status.
#[track_caller]
fn check_submission(
    app: &TestApp,
    submission: &Value,
    grant: &Value,
    key: &str,
    index: i64,
    status: &str,
) {
    assert_eq!(keys_of(submission), SUBMISSION_KEYS, "{submission}");
    assert_eq!(submission["grant_id"], grant["id"]);
    assert_eq!(submission["request_key"], key);
    assert_eq!(submission["status"], status, "{submission}");
    assert_eq!(submission["review_state"], "awaiting_review");
    assert!(is_hex64(&submission["content_digest"]), "{submission}");
    let issue = &submission["issue"];
    assert_eq!(keys_of(issue), ["id", "index", "repository", "url"]);
    assert!(issue["id"].as_i64().unwrap() > 0);
    assert_eq!(issue["index"], index);
    assert_eq!(
        issue["url"],
        app.url(&format!("/{OWNER}/{REPO}/issues/{index}"))
    );
    assert_eq!(
        issue["repository"],
        json!({"id": grant["repository"]["id"], "full_name": format!("{OWNER}/{REPO}")})
    );
    assert_eq!(submission["agent"], grant["agent"]);
    assert_eq!(submission["agent"]["login"], BOT);
    // The handoff admission the receipt was admitted under.
    let admission = &submission["admission"];
    assert_eq!(
        keys_of(admission),
        ["evaluation_id", "phase", "snapshot_id", "status"],
        "{submission}"
    );
    assert!(admission["evaluation_id"].as_i64().unwrap() > 0);
    assert!(admission["snapshot_id"].as_i64().unwrap() > 0);
    assert_eq!(admission["phase"], "handoff");
    assert!(
        admission["status"] == "allowed" || admission["status"] == "warning",
        "{submission}"
    );
    assert!(is_timestamp(&submission["created_at"]), "{submission}");
}

/// Checks an issue created by `submission` of `grant`, with this text.
#[track_caller]
fn check_attributed_issue(
    issue: &Value,
    submission: &Value,
    grant: &Value,
    title: &str,
    body: &str,
) {
    assert_eq!(keys_of(issue), ISSUE_KEYS, "{issue}");
    assert_eq!(issue["id"], submission["issue"]["id"]);
    assert_eq!(
        issue["title"].as_str().unwrap().as_bytes(),
        title.as_bytes()
    );
    assert_eq!(issue["body"].as_str().unwrap().as_bytes(), body.as_bytes());
    assert_eq!(issue["poster"], grant["agent"]);
    assert_eq!(
        issue["agent_work_grant"],
        json!({"grant_id": grant["id"], "request_key": submission["request_key"]})
    );
    assert!(is_timestamp(&issue["created_at"]));
}

async fn count(world: &World<'_>, id: i64) -> i64 {
    world.grant(id).await["submission_count"]
        .as_i64()
        .expect("submission_count")
}
