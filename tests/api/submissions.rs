//! The handoff: submit, replay, conflict, readback, byte-exact text, the
//! grant rules, tombstones, races and a lost response.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::io::AsyncWriteExt as _;

use crate::helpers::{Auth, Body, OTHER_DIGEST, Resp, TestApp, confirm_body, grant_path};
use crate::world::{
    ALICE, BOT, BOT_SCOPES, OWNER, Prepare, REPO, RIVAL, World, grant_of, is_hex64, is_timestamp,
    keys_of, new_key, readback_path, submission_of, submit_body, submit_path,
};

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

both_backends!(submit_replay_readback_and_conflict);
async fn submit_replay_readback_and_conflict(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Add the due-date field").await;
    let before = world.grant(id).await;
    assert_eq!(before["submission_count"], 0);
    let digest = world.digest(id).await;
    let key = new_key();
    let title = "Due dates for tasks";
    let body = "Adds a `due` column.\n\n- [x] migration\n";

    // New: 201 with the grant and the receipt.
    let resp = world
        .submit_with(id, submit_body(&digest, &key, title, body))
        .await;
    resp.assert_status(201);
    assert_ne!(resp.header("idempotent-replayed").as_deref(), Some("true"));
    let submission = submission_of(&resp);
    let grant = resp.json()["grant"].clone();
    assert_eq!(grant["submission_count"], 1);
    assert_eq!(grant["state"], "active");
    assert_eq!(grant["state_revision"], before["state_revision"]);
    assert_eq!(grant, world.grant(id).await);
    check_submission(&app, &submission, &grant, &key, 1, "submitted");

    // The issue exists, attributed, posted by the bot, text as sent.
    let issue = world.issue_at(OWNER, REPO, 1).await;
    issue.assert_status(200);
    let issue = issue.json();
    check_attributed_issue(&issue, &submission, &grant, title, body);
    assert_eq!(issue["index"], 1);
    assert_eq!(issue["repository"], grant["repository"]);
    assert_eq!(world.all_issues().await, vec![issue.clone()]);

    // Readback equals the submission.
    let readback = world.readback(id, &key).await;
    readback.assert_status(200);
    assert_eq!(submission_of(&readback), submission);
    assert_eq!(readback.json()["grant"], grant);

    // Same key, same content: a replay, nothing written.
    for _ in 0..2 {
        let replay = world
            .submit_with(id, submit_body(&digest, &key, title, body))
            .await;
        replay.assert_status(200);
        assert_eq!(
            replay.header("idempotent-replayed").as_deref(),
            Some("true")
        );
        assert_eq!(submission_of(&replay), submission);
        assert_eq!(replay.json()["grant"], grant);
        world.assert_unchanged(id, &grant).await;
    }

    // Same key, different content: 409 with the grant, nothing written.
    let conflicts = [
        ("other title", submit_body(&digest, &key, "Due dates", body)),
        (
            "title with a trailing space",
            submit_body(&digest, &key, &format!("{title} "), body),
        ),
        (
            "other body",
            submit_body(&digest, &key, title, &format!("{body}More.")),
        ),
        (
            "body without the final newline",
            submit_body(&digest, &key, title, body.trim_end()),
        ),
        (
            "body CRLF instead of LF",
            submit_body(&digest, &key, title, &body.replace('\n', "\r\n")),
        ),
        ("empty body", submit_body(&digest, &key, title, "")),
        ("other digest", submit_body(OTHER_DIGEST, &key, title, body)),
    ];
    for (label, request) in conflicts {
        let resp = world.submit_with(id, request).await;
        assert_eq!(resp.status.as_u16(), 409, "{label}: {}", resp.body);
        assert_eq!(resp.code(), "request_key_conflict", "{label}");
        assert_eq!(grant_of(&resp), grant, "{label}");
        world.assert_unchanged(id, &grant).await;
    }
    assert_eq!(world.all_issues().await, vec![issue.clone()]);
    assert_eq!(submission_of(&world.readback(id, &key).await), submission);

    // The same content under a new key is a new submission.
    let key2 = new_key();
    let resp = world
        .submit_with(id, submit_body(&digest, &key2, title, body))
        .await;
    resp.assert_status(201);
    let second = submission_of(&resp);
    let grant2 = resp.json()["grant"].clone();
    assert_eq!(grant2["submission_count"], 2);
    check_submission(&app, &second, &grant2, &key2, 2, "submitted");
    assert_ne!(second["issue"]["id"], submission["issue"]["id"]);
    assert_eq!(second["content_digest"], submission["content_digest"]);
    assert_eq!(world.all_issues().await.len(), 2);
    assert_eq!(submission_of(&world.readback(id, &key).await), submission);

    // A key belongs to its grant: the same key on another grant is new.
    let other = world.active("Another grant, same key").await;
    let other_digest = world.digest(other).await;
    let resp = world
        .submit_with(other, submit_body(&other_digest, &key, title, body))
        .await;
    resp.assert_status(201);
    let on_other = submission_of(&resp);
    assert_eq!(on_other["grant_id"], other);
    assert_eq!(on_other["issue"]["index"], 3);
    assert_eq!(world.receipt(other, &key).await, on_other);
    assert_eq!(submission_of(&world.readback(id, &key).await), submission);

    // Content-Type parameters and case do not matter.
    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        let key = new_key();
        let bytes = submit_body(&digest, &key, title, body)
            .to_string()
            .into_bytes();
        let resp = app
            .send(
                Method::POST,
                &submit_path(OWNER, REPO, id),
                Auth::Token(&world.bot),
                Body::Raw(Some(content_type), bytes),
            )
            .await;
        assert_eq!(resp.status.as_u16(), 201, "{content_type}: {}", resp.body);
    }
    // Another token of the same bot replays the same receipt.
    let token = app.create_token(BOT, BOT_SCOPES).await.token;
    let resp = app
        .post_json(
            &submit_path(OWNER, REPO, id),
            Auth::Token(&token),
            submit_body(&digest, &key, title, body),
        )
        .await;
    resp.assert_status(200);
    assert_eq!(submission_of(&resp), submission);
}

/// `{"proposal_schema":..,"request_key":..,"title":TITLE,"body":BODY}` with
/// title and body given as raw JSON text.
fn raw_submit(digest: &str, key: &str, title: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{{\"proposal_schema\":\"agent_work_grant.v1\",\"proposal_version\":1,\"proposal_digest\":\"{digest}\",\"request_key\":\"{key}\",\"title\":"
    )
    .into_bytes();
    out.extend_from_slice(title);
    out.extend_from_slice(b",\"body\":");
    out.extend_from_slice(body);
    out.push(b'}');
    out
}

fn json_body(bytes: Vec<u8>) -> Body {
    Body::Raw(Some("application/json"), bytes)
}

both_backends!(titles_and_bodies_are_kept_byte_for_byte);
async fn titles_and_bodies_are_kept_byte_for_byte(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Byte exactness");
    form.max_submissions = "100".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let path = submit_path(OWNER, REPO, id);
    let bot = Auth::Token(&world.bot);

    let cases: Vec<(&str, String, String)> = vec![
        (
            "spaces",
            "  padded title  ".into(),
            "  padded body  ".into(),
        ),
        (
            "tabs and CRLF",
            "tab\there\t".into(),
            "line one\r\nline two\r\n\r\n".into(),
        ),
        (
            "lone CR, leading LF",
            "a\rb".into(),
            "\n\nstarts with newlines\r".into(),
        ),
        ("NFC", "caf\u{e9}".into(), "caf\u{e9}".into()),
        ("NFD", "cafe\u{301}".into(), "cafe\u{301}".into()),
        (
            "ligature and width forms",
            "\u{fb01}le \u{ff21}".into(),
            "\u{212b} vs \u{c5}".into(),
        ),
        ("emoji", "🚀 Launch 👩‍👩‍👧‍👦 ✓".into(), "🎉\u{fe0f} 🏳️‍🌈".into()),
        (
            "RTL",
            "مرحبا بالعالم".into(),
            "\u{202b}שלום עולם\u{202c} mixed עברית and English".into(),
        ),
        (
            "zero width and BOM",
            "\u{feff}zero\u{200b}width".into(),
            "\u{feff}".into(),
        ),
        ("empty body", "Empty body".into(), String::new()),
        (
            "JSON-looking text",
            "{\"title\": null}".into(),
            "\\u0000 is no NUL here; \"quotes\", \\ and </script>".into(),
        ),
        (
            "control characters",
            "bell\u{7}".into(),
            "\u{1}\u{1f}\u{7f}\u{85}".into(),
        ),
        (
            "noncharacters",
            "\u{e000}\u{fffd}\u{10ffff}".into(),
            "\u{fdd0}\u{fffe}".into(),
        ),
        (
            "255 four-byte scalars",
            "😀".repeat(255),
            "title at the limit".into(),
        ),
        ("255 two-byte scalars", "é".repeat(255), String::new()),
        (
            "255 ASCII, spaces around",
            format!(" {} ", "a".repeat(253)),
            " ".into(),
        ),
        (
            "whitespace around one letter",
            " \t x \u{3000}".into(),
            "\u{a0}".into(),
        ),
    ];
    let mut expected = Vec::new();
    for (n, (label, title, body)) in cases.iter().enumerate() {
        let key = new_key();
        let resp = world
            .submit_with(id, submit_body(&digest, &key, title, body))
            .await;
        assert_eq!(resp.status.as_u16(), 201, "{label}: {}", resp.body);
        let submission = submission_of(&resp);
        let index = n as i64 + 1;
        assert_eq!(submission["issue"]["index"], index, "{label}");
        let issue = world.issue_at(OWNER, REPO, index).await;
        issue.assert_status(200);
        let issue = issue.json();
        let grant = world.grant(id).await;
        check_attributed_issue(&issue, &submission, &grant, title, body);
        expected.push((key, title.clone(), body.clone(), submission));
    }
    // Listed with the same text, and replays match byte-exactly only.
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), cases.len());
    for (issue, (key, title, body, _)) in issues.iter().zip(&expected) {
        assert_eq!(issue["title"], title.as_str());
        assert_eq!(issue["body"], body.as_str());
        assert_eq!(issue["agent_work_grant"]["request_key"], key.as_str());
    }
    let (nfc, nfd) = (&expected[3], &expected[4]);
    assert_ne!(nfc.3["content_digest"], nfd.3["content_digest"]);
    let resp = world
        .submit_with(id, submit_body(&digest, &nfc.0, &nfd.1, &nfd.2))
        .await;
    resp.assert_error(409, "request_key_conflict");
    for (key, title, body, submission) in &expected {
        let resp = world
            .submit_with(id, submit_body(&digest, key, title, body))
            .await;
        resp.assert_status(200);
        assert_eq!(&submission_of(&resp), submission);
    }
    let mut submitted = cases.len() as i64;
    assert_eq!(count(&world, id).await, submitted);

    // A body that makes the request exactly 1 MiB is accepted whole.
    let key = new_key();
    let prefix = "é🚀\r\n\"";
    let base = serde_json::to_vec(&submit_body(&digest, &key, "Large body", prefix))
        .unwrap()
        .len();
    let large = format!("{prefix}{}", "x".repeat(1024 * 1024 - base));
    let bytes = serde_json::to_vec(&submit_body(&digest, &key, "Large body", &large)).unwrap();
    assert_eq!(bytes.len(), 1024 * 1024);
    let resp = app.send(Method::POST, &path, bot, json_body(bytes)).await;
    resp.assert_status(201);
    submitted += 1;
    let index = submission_of(&resp)["issue"]["index"].as_i64().unwrap();
    let issue = world.issue_at(OWNER, REPO, index).await;
    issue.assert_status(200);
    assert!(
        issue.json()["body"].as_str().unwrap() == large,
        "the large body changed"
    );

    // One byte more: 413, nothing written (a fresh connection is used).
    let key = new_key();
    let base = serde_json::to_vec(&submit_body(&digest, &key, "Too large", ""))
        .unwrap()
        .len();
    let large = "x".repeat(1024 * 1024 + 1 - base);
    let bytes = serde_json::to_vec(&submit_body(&digest, &key, "Too large", &large)).unwrap();
    assert_eq!(bytes.len(), 1024 * 1024 + 1);
    let resp = app.send(Method::POST, &path, bot, json_body(bytes)).await;
    resp.assert_error(413, "payload_too_large");
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    assert_eq!(count(&world, id).await, submitted);

    // Refusals, all with one key: each is 400 before anything is written, so
    // the key is still unused afterwards.
    let key = new_key();
    let k = key.as_str();
    let d = digest.as_str();
    let json = |title: &str, body: &str| Body::Json(submit_body(d, k, title, body));
    let raw = |title: &[u8], body: &[u8]| json_body(raw_submit(d, k, title, body));
    let mut without_body = submit_body(d, k, "No body", "");
    without_body.as_object_mut().unwrap().remove("body");
    let mut extra = submit_body(d, k, "Extra", "");
    extra["labels"] = json!(["bug"]);
    let mut duplicate = raw_submit(d, k, b"\"One\"", b"\"\"");
    duplicate.pop();
    duplicate.extend_from_slice(b",\"title\":\"Two\"}");
    let mut key_number = submit_body(d, k, "Key", "");
    key_number["request_key"] = json!(1);
    let mut other_schema = submit_body(d, k, "Schema", "");
    other_schema["proposal_schema"] = json!("agent_work_grant.v2");
    let mut version_2 = submit_body(d, k, "Version", "");
    version_2["proposal_version"] = json!(2);
    let mut version_text = submit_body(d, k, "Version", "");
    version_text["proposal_version"] = json!("1");
    const INVALID: &str = "invalid_input";
    const UNSUPPORTED: &str = "unsupported_proposal";
    let refusals: Vec<(&str, Body, &str)> = vec![
        (
            "256 four-byte scalars",
            json(&"😀".repeat(256), ""),
            INVALID,
        ),
        ("256 two-byte scalars", json(&"é".repeat(256), ""), INVALID),
        ("256 ASCII", json(&"a".repeat(256), ""), INVALID),
        (
            "255 letters and a combining mark",
            json(&format!("{}\u{301}", "e".repeat(255)), ""),
            INVALID,
        ),
        ("empty title", json("", "body"), INVALID),
        ("one space", json(" ", "body"), INVALID),
        ("ASCII whitespace", json(" \t\r\n ", "body"), INVALID),
        (
            "Unicode whitespace",
            json("\u{a0}\u{3000}\u{2028}\u{2003}", "body"),
            INVALID,
        ),
        ("NUL in title", raw(b"\"ti\\u0000tle\"", b"\"\""), INVALID),
        ("NUL alone as title", raw(b"\"\\u0000\"", b"\"\""), INVALID),
        (
            "NUL in body",
            raw(b"\"NUL body\"", b"\"a\\u0000b\""),
            INVALID,
        ),
        (
            "NUL at the end of the body",
            raw(b"\"NUL body\"", b"\"abc\\u0000\""),
            INVALID,
        ),
        (
            "lone high surrogate in title",
            raw(b"\"\\ud800\"", b"\"\""),
            INVALID,
        ),
        (
            "lone low surrogate in body",
            raw(b"\"Surrogate\"", b"\"x\\udc00y\""),
            INVALID,
        ),
        (
            "reversed surrogate pair",
            raw(b"\"Surrogate\"", b"\"\\udc00\\ud800\""),
            INVALID,
        ),
        (
            "high surrogate then text",
            raw(b"\"\\ud83dx\"", b"\"\""),
            INVALID,
        ),
        (
            "invalid UTF-8 in body",
            raw(b"\"Bytes\"", b"\"\xff\xfe\""),
            INVALID,
        ),
        (
            "truncated UTF-8 in body",
            raw(b"\"Bytes\"", b"\"\xe2\x82\""),
            INVALID,
        ),
        (
            "overlong UTF-8 in body",
            raw(b"\"Bytes\"", b"\"\xc0\xaf\""),
            INVALID,
        ),
        (
            "UTF-8 encoded surrogate in title",
            raw(b"\"\xed\xa0\x80\"", b"\"\""),
            INVALID,
        ),
        ("invalid UTF-8 in title", raw(b"\"\x80\"", b"\"\""), INVALID),
        ("title null", raw(b"null", b"\"\""), INVALID),
        ("title a number", raw(b"42", b"\"\""), INVALID),
        ("title an array", raw(b"[\"a\"]", b"\"\""), INVALID),
        ("body null", raw(b"\"Body null\"", b"null"), INVALID),
        ("body an object", raw(b"\"Body object\"", b"{}"), INVALID),
        ("body missing", Body::Json(without_body), INVALID),
        ("unknown field", Body::Json(extra), INVALID),
        ("duplicate title", json_body(duplicate), INVALID),
        ("key as a number", Body::Json(key_number), INVALID),
        (
            "uppercase key",
            Body::Json(submit_body(d, &k.to_uppercase(), "Key", "")),
            INVALID,
        ),
        ("other schema", Body::Json(other_schema), UNSUPPORTED),
        ("version 2", Body::Json(version_2), UNSUPPORTED),
        ("version \"1\"", Body::Json(version_text), INVALID),
        (
            "uppercase digest",
            Body::Json(submit_body(&d.to_uppercase(), k, "Digest", "")),
            INVALID,
        ),
        (
            "text/plain",
            Body::Raw(
                Some("text/plain"),
                submit_body(d, k, "Type", "").to_string().into_bytes(),
            ),
            INVALID,
        ),
        (
            "no content type",
            Body::Raw(None, submit_body(d, k, "Type", "").to_string().into_bytes()),
            INVALID,
        ),
        ("not JSON", json_body(b"title=x&body=y".to_vec()), INVALID),
        ("empty request body", json_body(Vec::new()), INVALID),
    ];
    let grant = world.grant(id).await;
    let issues_before = world.all_issues().await;
    for (label, body, code) in refusals {
        let resp = app.send(Method::POST, &path, bot, body).await;
        assert_eq!(resp.status.as_u16(), 400, "{label}: {}", resp.body);
        assert_eq!(resp.code(), code, "{label}: {}", resp.body);
        assert!(resp.json().get("grant").is_none(), "{label}: {}", resp.body);
        let readback = world.readback(id, &key).await;
        assert_eq!(readback.status.as_u16(), 404, "{label}: {}", readback.body);
        world.assert_unchanged(id, &grant).await;
    }
    assert_eq!(world.all_issues().await, issues_before);
    // The key is still free.
    let resp = world
        .submit_with(id, submit_body(&digest, &key, "Finally valid", ""))
        .await;
    resp.assert_status(201);
    assert_eq!(count(&world, id).await, submitted + 1);
}

both_backends!(submit_needs_an_active_grant);
async fn submit_needs_an_active_grant(app: TestApp) {
    let world = World::new(&app).await;
    let awaiting_agent = world.prepare("Not confirmed yet").await;
    let awaiting_human = world.confirmed("Not approved yet").await;
    let key = new_key();
    for id in [awaiting_agent, awaiting_human] {
        let before = world.grant(id).await;
        let digest = before["proposal_digest"].as_str().unwrap().to_owned();
        // State comes before the digest.
        for d in [digest.as_str(), OTHER_DIGEST] {
            let resp = world
                .submit_with(id, submit_body(d, &key, "Too early", ""))
                .await;
            resp.assert_error(409, "state_conflict");
            assert_eq!(grant_of(&resp), before);
            world.assert_unchanged(id, &before).await;
            world
                .readback(id, &key)
                .await
                .assert_error(404, "not_found");
        }
    }
    assert!(world.all_issues().await.is_empty());

    // Once approved, the refused key was never used and works.
    world.approve(awaiting_human).await.assert_status(303);
    let submission = world.submitted(awaiting_human, &key, "In time", "").await;
    assert_eq!(submission["issue"]["index"], 1);
    assert_eq!(world.grant(awaiting_human).await["submission_count"], 1);
}

both_backends!(withdrawal_refuses_new_keys_but_keeps_receipts);
async fn withdrawal_refuses_new_keys_but_keeps_receipts(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Withdrawn later").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let submission = world.submitted(id, &key, "Before withdrawal", "body").await;

    world.withdraw(id).await.assert_status(303);
    let revoked = world.grant(id).await;
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(revoked["submission_count"], 1);

    // A new key: refused, whatever the digest.
    let other = new_key();
    for d in [digest.as_str(), OTHER_DIGEST] {
        let resp = world
            .submit_with(id, submit_body(d, &other, "After withdrawal", ""))
            .await;
        resp.assert_error(409, "grant_revoked");
        assert_eq!(grant_of(&resp), revoked);
    }
    world
        .readback(id, &other)
        .await
        .assert_error(404, "not_found");

    // The earlier key: readback and replay still answer with the receipt.
    let readback = world.readback(id, &key).await;
    readback.assert_status(200);
    assert_eq!(submission_of(&readback), submission);
    assert_eq!(readback.json()["grant"], revoked);
    let replay = world
        .submit_with(id, submit_body(&digest, &key, "Before withdrawal", "body"))
        .await;
    replay.assert_status(200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(submission_of(&replay), submission);
    assert_eq!(replay.json()["grant"], revoked);
    // A withdrawal does not free the key either.
    let resp = world
        .submit_with(id, submit_body(&digest, &key, "Other content", "body"))
        .await;
    resp.assert_error(409, "request_key_conflict");
    assert_eq!(grant_of(&resp), revoked);

    world.assert_unchanged(id, &revoked).await;
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0]["agent_work_grant"]["request_key"], key.as_str());
}

both_backends!(submission_limit_is_enforced);
async fn submission_limit_is_enforced(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Two submissions at most");
    form.max_submissions = "2".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let (k1, k2, k3) = (new_key(), new_key(), new_key());
    let first = world.submitted(id, &k1, "One", "").await;
    world.submitted(id, &k2, "Two", "").await;
    let full = world.grant(id).await;
    assert_eq!(full["submission_count"], 2);

    let resp = world
        .submit_with(id, submit_body(&digest, &k3, "Three", ""))
        .await;
    resp.assert_error(409, "submission_limit");
    assert_eq!(grant_of(&resp), full);
    world.readback(id, &k3).await.assert_error(404, "not_found");

    // Replays do not count against the limit; conflicts stay conflicts.
    let replay = world
        .submit_with(id, submit_body(&digest, &k1, "One", ""))
        .await;
    replay.assert_status(200);
    assert_eq!(submission_of(&replay), first);
    let resp = world
        .submit_with(id, submit_body(&digest, &k2, "Two, edited", ""))
        .await;
    resp.assert_error(409, "request_key_conflict");

    world.assert_unchanged(id, &full).await;
    assert_eq!(world.all_issues().await.len(), 2);
}

both_backends!(a_wrong_digest_is_proposal_mismatch);
async fn a_wrong_digest_is_proposal_mismatch(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("The right work").await;
    let other = world.active("Other work").await;
    let digest = world.digest(id).await;
    let other_digest = world.digest(other).await;
    let before = world.grant(id).await;
    let key = new_key();
    for d in [OTHER_DIGEST, other_digest.as_str()] {
        let resp = world
            .submit_with(id, submit_body(d, &key, "Mismatch", ""))
            .await;
        resp.assert_error(409, "proposal_mismatch");
        assert_eq!(grant_of(&resp), before);
        world.assert_unchanged(id, &before).await;
        world
            .readback(id, &key)
            .await
            .assert_error(404, "not_found");
    }
    // A malformed digest is 400, not a mismatch.
    let resp = world
        .submit_with(id, submit_body(&digest.to_uppercase(), &key, "Bad", ""))
        .await;
    resp.assert_status(400);
    assert!(world.all_issues().await.is_empty());

    // The key was never used.
    world.submitted(id, &key, "Mismatch", "").await;
    assert_eq!(world.grant(id).await["submission_count"], 1);
    assert_eq!(world.grant(other).await["submission_count"], 0);
}

both_backends!(an_expired_grant_refuses_new_submissions);
async fn an_expired_grant_refuses_new_submissions(app: TestApp) {
    let world = World::new(&app).await;
    let expires = (OffsetDateTime::now_utc() + time::Duration::seconds(12))
        .replace_nanosecond(0)
        .unwrap();
    let mut form = Prepare::new(BOT, "Expires in seconds");
    form.expires_at = Some(expires.format(&Rfc3339).unwrap());
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let key = new_key();
    let submission = world.submitted(id, &key, "In time", "").await;
    assert!(
        OffsetDateTime::now_utc() < expires,
        "setup took too long to test before expiry"
    );

    let wait = expires - OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "active");
    let late = new_key();
    let resp = world
        .submit_with(id, submit_body(&digest, &late, "Too late", ""))
        .await;
    resp.assert_error(409, "grant_expired");
    assert_eq!(grant_of(&resp), grant);
    world
        .readback(id, &late)
        .await
        .assert_error(404, "not_found");

    // The earlier receipt is still read back and replayed.
    assert_eq!(world.receipt(id, &key).await, submission);
    let replay = world
        .submit_with(id, submit_body(&digest, &key, "In time", ""))
        .await;
    replay.assert_status(200);
    assert_eq!(submission_of(&replay), submission);
    world.assert_unchanged(id, &grant).await;
    assert_eq!(grant["submission_count"], 1);
    assert_eq!(world.all_issues().await.len(), 1);
}

both_backends!(submit_and_readback_access_rules);
async fn submit_and_readback_access_rules(app: TestApp) {
    let world = World::new(&app).await;
    app.create_repo(OWNER, "public", false).await;
    let id = world.active("Access rules").await;
    let second = world.active("Another grant").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let submission = world.submitted(id, &key, "Receipt", "").await;
    let other_key = new_key();
    world
        .submitted(second, &other_key, "Other receipt", "")
        .await;
    let grant = world.grant(id).await;

    let token = |scopes: &'static [&'static str]| app.create_token(BOT, scopes);
    let no_write_issue = token(&["read:repository", "read:issue"]).await.token;
    let only_read_repo = token(&["read:repository"]).await.token;
    let write_issue_only = token(&["read:repository", "write:issue"]).await.token;
    let no_read_repo = token(&["write:issue", "read:issue"]).await.token;
    let limited = app
        .create_token_with(
            BOT,
            json!({"name": "limited", "scopes": BOT_SCOPES, "repositories": ["acme/public"]}),
        )
        .await
        .token;
    let public_only = app
        .create_token_with(
            BOT,
            json!({"name": "public-only", "scopes": BOT_SCOPES, "public_only": true}),
        )
        .await
        .token;

    let new = new_key();
    #[rustfmt::skip]
    let cases: Vec<(&str, Auth, u16, &str, u16, &str)> = vec![
        // (who, auth, submit status, code, readback status, code)
        ("anonymous", Auth::None, 401, "unauthenticated", 401, "unauthenticated"),
        ("human token", Auth::Token(&world.alice_token), 403, "agent_only", 403, "agent_only"),
        ("admin token", Auth::Token(&app.admin_token), 403, "agent_only", 403, "agent_only"),
        ("rival bot", Auth::Token(&world.rival), 404, "not_found", 404, "not_found"),
        ("no write:issue", Auth::Token(&no_write_issue), 403, "insufficient_scope", 200, ""),
        ("read:repository only", Auth::Token(&only_read_repo), 403, "insufficient_scope", 403, "insufficient_scope"),
        ("write:issue implies read:issue", Auth::Token(&write_issue_only), 409, "request_key_conflict", 200, ""),
        ("no read:repository", Auth::Token(&no_read_repo), 403, "insufficient_scope", 403, "insufficient_scope"),
        ("limited to another repo", Auth::Token(&limited), 403, "insufficient_scope", 403, "insufficient_scope"),
        ("public_only", Auth::Token(&public_only), 403, "insufficient_scope", 403, "insufficient_scope"),
    ];
    let submit_path = submit_path(OWNER, REPO, id);
    let readback_path = readback_path(OWNER, REPO, id, &key);
    for (who, auth, submit_status, submit_code, read_status, read_code) in cases {
        // A new key for everyone but the "implies" row, which reuses the
        // committed key with other content to prove it got past the scopes.
        let k = if submit_code == "request_key_conflict" {
            &key
        } else {
            &new
        };
        let body = submit_body(&digest, k, "Access", "");
        let resp = app.post_json(&submit_path, auth, body).await;
        assert_eq!(
            resp.status.as_u16(),
            submit_status,
            "{who} submit: {}",
            resp.body
        );
        assert_eq!(resp.code(), submit_code, "{who} submit: {}", resp.body);
        let resp = app.get(&readback_path, auth).await;
        assert_eq!(
            resp.status.as_u16(),
            read_status,
            "{who} readback: {}",
            resp.body
        );
        if read_status == 200 {
            assert_eq!(submission_of(&resp), submission, "{who}");
        } else {
            assert_eq!(resp.code(), read_code, "{who} readback: {}", resp.body);
        }
    }
    world
        .readback(id, &new)
        .await
        .assert_error(404, "not_found");

    // Keys in the path: canonical lowercase UUIDv4 only.
    let upper = key.to_uppercase();
    let braces = format!("{{{key}}}");
    let v1 = format!("{}1{}", &key[..14], &key[15..]);
    let variant_c = format!("{}c{}", &key[..19], &key[20..]);
    let no_dashes = key.replace('-', "");
    let long = format!("{key}0");
    for bad in [
        upper.as_str(),
        &braces,
        &v1,
        &variant_c,
        &no_dashes,
        &long,
        "not-a-key",
        "%20",
    ] {
        let resp = world.readback(id, bad).await;
        assert_eq!(resp.status.as_u16(), 400, "key {bad:?}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "key {bad:?}");
        let resp = world
            .submit_with(id, submit_body(&digest, bad, "Bad key", ""))
            .await;
        assert_eq!(
            resp.status.as_u16(),
            400,
            "submit key {bad:?}: {}",
            resp.body
        );
    }
    // Percent-encoded segments are decoded once, then validated.
    let encoded = format!("%{:02x}{}", key.as_bytes()[0], &key[1..]);
    let resp = world.readback(id, &encoded).await;
    resp.assert_status(200);
    assert_eq!(submission_of(&resp), submission);
    let twice = format!("%25{:02x}{}", key.as_bytes()[0], &key[1..]);
    world
        .readback(id, &twice)
        .await
        .assert_error(400, "invalid_input");
    // Every segment percent-encoded in part: owner, repo, grant id.
    let id_text = id.to_string();
    let grant_path_encoded = format!(
        "/api/v1/repos/%61cme/widget%73/agent-work-grants/%3{}{}/submissions/{key}",
        &id_text[..1],
        &id_text[1..]
    );
    let resp = app.get(&grant_path_encoded, Auth::Token(&world.bot)).await;
    resp.assert_status(200);
    assert_eq!(submission_of(&resp), submission);

    // The body is validated before any state is read: an invalid body is
    // 400 on an unknown grant and on a grant that would refuse it.
    for target in [id, 999_999] {
        let resp = world
            .submit_with(target, submit_body(&digest, &new, "", ""))
            .await;
        resp.assert_error(400, "invalid_input");
        // With the committed key: still 400, not a conflict.
        let resp = world
            .submit_with(target, submit_body(&digest, &key, &"x".repeat(256), ""))
            .await;
        resp.assert_error(400, "invalid_input");
    }

    // Unknown key, another grant's key, another grant's path.
    world
        .readback(id, &new_key())
        .await
        .assert_error(404, "not_found");
    world
        .readback(id, &other_key)
        .await
        .assert_error(404, "not_found");
    world
        .readback(second, &key)
        .await
        .assert_error(404, "not_found");
    // Bad grant ids and paths.
    for bad in ["0", "01", "-1", "abc", "99999999999999999999"] {
        let resp = world
            .submit_with(bad, submit_body(&digest, &new, "Bad id", ""))
            .await;
        assert_eq!(resp.status.as_u16(), 400, "grant id {bad}: {}", resp.body);
        let resp = world.readback(bad, &key).await;
        assert_eq!(resp.status.as_u16(), 400, "grant id {bad}: {}", resp.body);
    }
    world
        .submit_with(999_999, submit_body(&digest, &new, "Unknown grant", ""))
        .await
        .assert_error(404, "not_found");
    let wrong_repo = crate::helpers::grant_path(OWNER, "public", id);
    app.post_json(
        &format!("{wrong_repo}/issues"),
        Auth::Token(&world.bot),
        submit_body(&digest, &new, "Wrong repo", ""),
    )
    .await
    .assert_error(404, "not_found");

    // Losing read access hides the receipt; restoring it shows it again.
    app.remove_collaborator(OWNER, REPO, BOT).await;
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    world
        .submit_with(id, submit_body(&digest, &new, "No access", ""))
        .await
        .assert_error(404, "not_found");
    app.set_collaborator(OWNER, REPO, BOT, "read").await;
    assert_eq!(world.receipt(id, &key).await, submission);

    world.assert_unchanged(id, &grant).await;
    assert_eq!(world.all_issues().await.len(), 2);
}

both_backends!(deleted_and_transferred_issues_keep_their_receipts);
async fn deleted_and_transferred_issues_keep_their_receipts(app: TestApp) {
    let world = World::new(&app).await;
    app.create_repo(OWNER, "gadgets", true).await;
    app.set_collaborator(OWNER, "gadgets", ALICE, "admin").await;
    let id = world.active("Tombstones").await;
    let digest = world.digest(id).await;
    let (k1, k2, k3, k4) = (new_key(), new_key(), new_key(), new_key());
    let s1 = world.submitted(id, &k1, "First", "1").await;
    let s2 = world.submitted(id, &k2, "Second", "2").await;
    assert_eq!(s1["issue"]["index"], 1);
    assert_eq!(s2["issue"]["index"], 2);

    // Deleted: the receipt shows issue_deleted with its historical issue.
    world.delete_issue(OWNER, REPO, 1).await.assert_status(204);
    world
        .issue_at(OWNER, REPO, 1)
        .await
        .assert_error(404, "not_found");
    let deleted = world.receipt(id, &k1).await;
    let mut expected = s1.clone();
    expected["status"] = json!("issue_deleted");
    assert_eq!(deleted, expected);
    // A replay answers the tombstone and creates nothing.
    let replay = world
        .submit_with(id, submit_body(&digest, &k1, "First", "1"))
        .await;
    replay.assert_status(200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(submission_of(&replay), expected);
    // The key is not freed.
    world
        .submit_with(id, submit_body(&digest, &k1, "First again", "1"))
        .await
        .assert_error(409, "request_key_conflict");
    assert_eq!(world.grant(id).await["submission_count"], 2);
    assert_eq!(world.all_issues().await.len(), 1);
    world
        .delete_issue(OWNER, REPO, 1)
        .await
        .assert_error(404, "not_found");

    // Indexes are never reused, not even the highest one.
    // The newest issue (highest id and index) is deleted: neither its id nor
    // its index comes back, and its receipt never points at a new issue.
    let s3 = world.submitted(id, &k3, "Third", "3").await;
    assert_eq!(s3["issue"]["index"], 3);
    world.delete_issue(OWNER, REPO, 3).await.assert_status(204);
    let ordinary = app
        .post_json(
            &crate::world::issues_path(OWNER, REPO),
            Auth::Token(&world.alice_token),
            json!({"title": "Ordinary", "body": ""}),
        )
        .await;
    ordinary.assert_status(201);
    let ordinary = ordinary.json();
    assert_eq!(ordinary["index"], 4);
    assert_ne!(ordinary["id"], s3["issue"]["id"]);
    assert!(ordinary["agent_work_grant"].is_null(), "{ordinary}");
    let mut expected3 = s3.clone();
    expected3["status"] = json!("issue_deleted");
    assert_eq!(world.receipt(id, &k3).await, expected3);
    let s4 = world.submitted(id, &k4, "Fourth", "4").await;
    assert_eq!(s4["issue"]["index"], 5);
    assert_ne!(s4["issue"]["id"], s3["issue"]["id"]);

    // Transferred: issue_binding_changed, history kept, attribution moves.
    let moved = world.transfer_issue(OWNER, REPO, 2, "acme/gadgets").await;
    moved.assert_status(200);
    let moved = moved.json();
    assert_eq!(keys_of(&moved), ISSUE_KEYS);
    assert_eq!(moved["id"], s2["issue"]["id"]);
    assert_eq!(moved["index"], 1);
    assert_eq!(moved["repository"]["full_name"], "acme/gadgets");
    assert_eq!(moved["title"], "Second");
    assert_eq!(
        moved["agent_work_grant"],
        json!({"grant_id": id, "request_key": k2})
    );
    let at_new = world.issue_at(OWNER, "gadgets", 1).await;
    at_new.assert_status(200);
    assert_eq!(at_new.json(), moved);
    world
        .issue_at(OWNER, REPO, 2)
        .await
        .assert_error(404, "not_found");
    let mut expected = s2.clone();
    expected["status"] = json!("issue_binding_changed");
    assert_eq!(world.receipt(id, &k2).await, expected);
    let replay = world
        .submit_with(id, submit_body(&digest, &k2, "Second", "2"))
        .await;
    replay.assert_status(200);
    assert_eq!(submission_of(&replay), expected);

    // Moved back it gets a new index: still not where it was committed.
    let back = world
        .transfer_issue(OWNER, "gadgets", 1, "acme/widgets")
        .await;
    back.assert_status(200);
    assert_eq!(back.json()["index"], 6);
    assert_eq!(world.receipt(id, &k2).await, expected);
    let at_six = world.issue_at(OWNER, REPO, 6).await;
    assert_eq!(
        at_six.json()["agent_work_grant"],
        json!({"grant_id": id, "request_key": k2})
    );
    // And a moved issue that is then deleted reads issue_deleted.
    world.delete_issue(OWNER, REPO, 6).await.assert_status(204);
    expected["status"] = json!("issue_deleted");
    assert_eq!(world.receipt(id, &k2).await, expected);

    // The untouched receipt still reads submitted.
    assert_eq!(world.receipt(id, &k4).await, s4);
    assert_eq!(world.grant(id).await["submission_count"], 4);
    let remaining: Vec<Value> = world
        .all_issues()
        .await
        .iter()
        .map(|i| i["index"].clone())
        .collect();
    assert_eq!(remaining, vec![json!(4), json!(5)]);
    assert_eq!(world.receipt(id, &k3).await, expected3);
    assert!(world.all_issues_of(OWNER, "gadgets").await.is_empty());
}

both_backends!(concurrent_same_key_submits_make_one_issue);
async fn concurrent_same_key_submits_make_one_issue(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Racing one key").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let body = submit_body(&digest, &key, "Raced", "same content");
    let results = join_all((0..16).map(|_| world.submit_with(id, body.clone()))).await;
    let mut created = 0;
    let mut issue_ids = BTreeSet::new();
    let mut submissions = BTreeSet::new();
    for resp in &results {
        match resp.status.as_u16() {
            201 => created += 1,
            200 => assert_eq!(resp.header("idempotent-replayed").as_deref(), Some("true")),
            other => panic!("unexpected {other}: {}", resp.body),
        }
        let submission = submission_of(resp);
        issue_ids.insert(submission["issue"]["id"].as_i64().unwrap());
        submissions.insert(submission.to_string());
    }
    assert_eq!(created, 1, "exactly one submit creates");
    assert_eq!(issue_ids.len(), 1);
    assert_eq!(submissions.len(), 1, "every answer shows the same receipt");
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0]["id"], *issue_ids.first().unwrap());
    assert_eq!(world.grant(id).await["submission_count"], 1);

    // One key raced with two contents: one creates, its twins replay, the
    // others conflict.
    let key = new_key();
    let bodies = [
        submit_body(&digest, &key, "Content A", "a"),
        submit_body(&digest, &key, "Content B", "b"),
    ];
    let results = join_all((0..16).map(|n| world.submit_with(id, bodies[n % 2].clone()))).await;
    let winner: Vec<usize> = (0..16)
        .filter(|n| results[*n].status.as_u16() == 201)
        .collect();
    assert_eq!(winner.len(), 1, "exactly one submit creates");
    let side = winner[0] % 2;
    let receipt = submission_of(&results[winner[0]]);
    for (n, resp) in results.iter().enumerate() {
        if n == winner[0] {
            continue;
        }
        if n % 2 == side {
            resp.assert_status(200);
            assert_eq!(submission_of(resp), receipt);
        } else {
            resp.assert_error(409, "request_key_conflict");
        }
    }
    assert_eq!(world.receipt(id, &key).await, receipt);
    assert_eq!(world.all_issues().await.len(), 2);
    assert_eq!(world.grant(id).await["submission_count"], 2);
}

both_backends!(concurrent_submits_on_many_grants_share_the_index_sequence);
async fn concurrent_submits_on_many_grants_share_the_index_sequence(app: TestApp) {
    let world = World::new(&app).await;
    let mut grants = Vec::new();
    for n in 0..3 {
        let id = world.active(&format!("Parallel grant {n}")).await;
        grants.push((id, world.bot.clone(), world.digest(id).await));
    }
    // rival-bot's grant on the same repository, confirmed by rival-bot.
    let rival_id = world
        .alice
        .prepare_ok(OWNER, REPO, &Prepare::new(RIVAL, "Rival's parallel grant"))
        .await;
    let rival_grant = app
        .get(
            &grant_path(OWNER, REPO, rival_id),
            Auth::Token(&world.rival),
        )
        .await
        .json()["grant"]
        .clone();
    let rival_digest = rival_grant["proposal_digest"].as_str().unwrap().to_owned();
    app.post_json(
        &format!("{}/confirm", grant_path(OWNER, REPO, rival_id)),
        Auth::Token(&world.rival),
        confirm_body(&rival_digest),
    )
    .await
    .assert_status(200);
    world.approve(rival_id).await.assert_status(303);
    grants.push((rival_id, world.rival.clone(), rival_digest));

    let mut jobs = Vec::new();
    for (id, token, digest) in &grants {
        for n in 0..4 {
            jobs.push((*id, token.clone(), digest.clone(), new_key(), n));
        }
    }
    let app = &app;
    let submits = join_all(jobs.iter().map(|(id, token, digest, key, n)| async move {
        app.post_json(
            &submit_path(OWNER, REPO, id),
            Auth::Token(token),
            submit_body(digest, key, &format!("Grant {id} work {n}"), ""),
        )
        .await
    }));
    let alice = world.alice_token.as_str();
    let ordinary = join_all((0..4).map(|n| async move {
        app.post_json(
            &crate::world::issues_path(OWNER, REPO),
            Auth::Token(alice),
            json!({"title": format!("Ordinary {n}"), "body": ""}),
        )
        .await
    }));
    let (submitted, opened) = tokio::join!(submits, ordinary);
    let mut expected = BTreeMap::new();
    for ((id, _, _, key, _), resp) in jobs.iter().zip(&submitted) {
        resp.assert_status(201);
        let submission = submission_of(resp);
        let index = submission["issue"]["index"].as_i64().unwrap();
        let attribution = json!({"grant_id": id, "request_key": key});
        assert!(
            expected.insert(index, attribution).is_none(),
            "index {index} twice"
        );
    }
    for resp in &opened {
        resp.assert_status(201);
        let index = resp.json()["index"].as_i64().unwrap();
        assert!(
            expected.insert(index, Value::Null).is_none(),
            "index {index} twice"
        );
    }
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        (1..=20).collect::<Vec<i64>>()
    );
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 20);
    let mut ids = BTreeSet::new();
    for issue in &issues {
        let index = issue["index"].as_i64().unwrap();
        assert_eq!(issue["agent_work_grant"], expected[&index], "issue {index}");
        assert!(ids.insert(issue["id"].as_i64().unwrap()));
    }
    for (id, token, _) in &grants {
        let grant = app
            .get(&grant_path(OWNER, REPO, id), Auth::Token(token))
            .await
            .json()["grant"]
            .clone();
        assert_eq!(grant["submission_count"], 4, "grant {id}");
    }
}

both_backends!(concurrent_submits_respect_the_limit);
async fn concurrent_submits_respect_the_limit(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Five at most, raced");
    form.max_submissions = "5".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let results = join_all(keys.iter().enumerate().map(|(n, key)| {
        world.submit_with(id, submit_body(&digest, key, &format!("Raced {n}"), ""))
    }))
    .await;
    let mut created = BTreeMap::new();
    let mut limited = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => {
                created.insert(key.clone(), submission_of(resp));
            }
            409 => {
                assert_eq!(resp.code(), "submission_limit", "{}", resp.body);
                limited.push(key.clone());
            }
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    assert_eq!(created.len(), 5);
    assert_eq!(limited.len(), 11);
    assert_eq!(world.grant(id).await["submission_count"], 5);
    for (key, submission) in &created {
        assert_eq!(&world.receipt(id, key).await, submission);
    }
    for key in &limited {
        world.readback(id, key).await.assert_error(404, "not_found");
    }
    let issues = world.all_issues().await;
    let indexes: Vec<i64> = issues
        .iter()
        .map(|i| i["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
    let attributed: BTreeSet<String> = issues
        .iter()
        .map(|i| {
            i["agent_work_grant"]["request_key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(attributed, created.keys().cloned().collect());
}

both_backends!(withdraw_racing_submits_keeps_every_receipt);
async fn withdraw_racing_submits_keeps_every_receipt(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Withdrawn while submitting");
    form.max_submissions = "100".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let reason = vec![("reason".to_owned(), "stop".to_owned())];
    let submits = join_all(keys.iter().enumerate().map(|(n, key)| {
        world.submit_with(id, submit_body(&digest, key, &format!("Race {n}"), ""))
    }));
    let withdraw = async {
        // Let some submits start first.
        tokio::time::sleep(Duration::from_millis(5)).await;
        world
            .alice
            .submit_from(&page, OWNER, REPO, id, "withdraw", &reason)
            .await
    };
    let (results, withdrawn) = tokio::join!(submits, withdraw);
    withdrawn.assert_status(303);

    let mut created = BTreeMap::new();
    let mut refused = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => {
                created.insert(key.clone(), submission_of(resp));
            }
            409 => {
                assert_eq!(resp.code(), "grant_revoked", "{}", resp.body);
                assert_eq!(grant_of(resp)["state"], "revoked");
                refused.push(key.clone());
            }
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "revoked");
    assert_eq!(grant["submission_count"], created.len() as i64);
    for (key, submission) in &created {
        assert_eq!(&world.receipt(id, key).await, submission);
    }
    for key in &refused {
        world.readback(id, key).await.assert_error(404, "not_found");
    }
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), created.len());
    let attributed: BTreeSet<String> = issues
        .iter()
        .map(|i| {
            i["agent_work_grant"]["request_key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(attributed, created.keys().cloned().collect());
    eprintln!(
        "{} created before the withdrawal, {} refused",
        created.len(),
        refused.len()
    );
}

/// How a raw submit ends.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Half the body is sent, then the connection is dropped.
    MidBody,
    /// The whole request is sent and the connection dropped at once.
    AfterRequest,
    /// The whole request is sent; the connection is held (never read) until
    /// the receipt is readable, then dropped.
    AfterCommit,
}

/// Sends a submit over a raw TCP connection and drops it without reading
/// the answer.
async fn submit_and_drop(world: &World<'_>, id: i64, body: &Value, key: &str, cut: Cut) {
    let app = world.app;
    let bytes = serde_json::to_vec(body).unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: token {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        submit_path(OWNER, REPO, id),
        app.port(),
        world.bot,
        bytes.len()
    );
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
        .await
        .expect("connect");
    stream.write_all(head.as_bytes()).await.unwrap();
    match cut {
        Cut::MidBody => {
            stream.write_all(&bytes[..bytes.len() / 2]).await.unwrap();
            stream.flush().await.unwrap();
        }
        Cut::AfterRequest => {
            stream.write_all(&bytes).await.unwrap();
            stream.flush().await.unwrap();
        }
        Cut::AfterCommit => {
            stream.write_all(&bytes).await.unwrap();
            stream.flush().await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let resp = world.readback(id, key).await;
                if resp.status.as_u16() == 200 {
                    break;
                }
                resp.assert_error(404, "not_found");
                assert!(tokio::time::Instant::now() < deadline, "never committed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(stream);
}

/// Reads back a key for up to `patience`, while it is 404.
async fn readback_soon(world: &World<'_>, id: i64, key: &str, patience: Duration) -> Resp {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let resp = world.readback(id, key).await;
        if resp.status.as_u16() != 404 || tokio::time::Instant::now() >= deadline {
            return resp;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_backends!(a_lost_response_is_resolved_by_readback_and_same_key_retry);
async fn a_lost_response_is_resolved_by_readback_and_same_key_retry(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Uncertain delivery").await;
    let digest = world.digest(id).await;
    let mut keys = Vec::new();
    for (n, cut) in [Cut::MidBody, Cut::AfterRequest, Cut::AfterCommit]
        .into_iter()
        .enumerate()
    {
        let key = new_key();
        let body = submit_body(&digest, &key, &format!("Lost answer {n}"), "body");
        submit_and_drop(&world, id, &body, &key, cut).await;

        // The adapter's rule: read back the same key, then retry it.
        let patience = match cut {
            Cut::MidBody => Duration::from_millis(300),
            _ => Duration::from_secs(3),
        };
        let readback = readback_soon(&world, id, &key, patience).await;
        let known = match readback.status.as_u16() {
            200 => Some(submission_of(&readback)),
            404 => None,
            other => panic!("{cut:?}: readback {other}: {}", readback.body),
        };
        match cut {
            Cut::MidBody => assert!(known.is_none(), "a half-sent request committed"),
            Cut::AfterCommit => assert!(known.is_some()),
            Cut::AfterRequest => {}
        }
        let retry = world.submit_with(id, body.clone()).await;
        match &known {
            Some(submission) => {
                retry.assert_status(200);
                assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
                assert_eq!(&submission_of(&retry), submission);
            }
            None => {
                // Either it never committed (201 now), or it committed just
                // after the last readback (a replay): never a second issue.
                let status = retry.status.as_u16();
                assert!(status == 201 || status == 200, "{cut:?}: {}", retry.body);
            }
        }
        let final_receipt = world.receipt(id, &key).await;
        assert_eq!(final_receipt, submission_of(&retry));
        eprintln!("{cut:?}: readback found it: {}", known.is_some());
        keys.push(key);
    }

    // Exactly one issue per key, and the count matches.
    let issues = world.all_issues().await;
    for key in &keys {
        let n = issues
            .iter()
            .filter(|i| i["agent_work_grant"]["request_key"] == key.as_str())
            .count();
        assert_eq!(n, 1, "issues for {key}");
    }
    assert_eq!(issues.len(), keys.len());
    assert_eq!(world.grant(id).await["submission_count"], keys.len() as i64);
    // The server is still well.
    app.get("/readyz", Auth::None).await.assert_status(200);
}

/// Sends a submit with a chunked body (no Content-Length) over a raw
/// connection and returns the answer's status and text.
async fn chunked_submit(world: &World<'_>, id: i64, body: &[u8]) -> (u16, String) {
    use tokio::io::AsyncReadExt as _;
    let app = world.app;
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: token {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        submit_path(OWNER, REPO, id),
        app.port(),
        world.bot,
    )
    .into_bytes();
    for chunk in body.chunks(64 * 1024) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
        .await
        .expect("connect");
    // The server may answer and close before reading everything.
    let _ = stream.write_all(&request).await;
    let _ = stream.flush().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer within 30 s");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    (status, text)
}

both_backends!(chunked_bodies_are_limited_too);
async fn chunked_bodies_are_limited_too(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Chunked bodies").await;
    let digest = world.digest(id).await;

    // A small chunked body is accepted.
    let key = new_key();
    let body = serde_json::to_vec(&submit_body(&digest, &key, "Chunked", "in pieces")).unwrap();
    let (status, text) = chunked_submit(&world, id, &body).await;
    assert_eq!(status, 201, "{text}");
    let submission = world.receipt(id, &key).await;
    let issue = world
        .issue_at(OWNER, REPO, submission["issue"]["index"].as_i64().unwrap())
        .await
        .json();
    assert_eq!(issue["body"], "in pieces");

    // Without a Content-Length, more than 1 MiB is still 413.
    let key = new_key();
    let base = serde_json::to_vec(&submit_body(&digest, &key, "Chunked, too large", ""))
        .unwrap()
        .len();
    let large = "x".repeat(1024 * 1024 + 1 - base);
    let body =
        serde_json::to_vec(&submit_body(&digest, &key, "Chunked, too large", &large)).unwrap();
    assert_eq!(body.len(), 1024 * 1024 + 1);
    let (status, text) = chunked_submit(&world, id, &body).await;
    assert_eq!(status, 413, "{}", &text[..text.len().min(500)]);
    assert!(text.contains("payload_too_large"), "{text}");
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    assert_eq!(world.grant(id).await["submission_count"], 1);
    assert_eq!(world.all_issues().await.len(), 1);
}

/// POSTs JSON to `base` + `path` (another server of the same app).
async fn post_to(app: &TestApp, base: &str, path: &str, token: &str, body: &Value) -> Resp {
    let response = app
        .client
        .post(format!("{base}{path}"))
        .header("Authorization", format!("token {token}"))
        .json(body)
        .send()
        .await
        .expect("send request");
    Resp::read(response).await
}

both_backends!(two_servers_on_one_database_keep_the_invariants);
async fn two_servers_on_one_database_keep_the_invariants(app: TestApp) {
    let world = World::new(&app).await;
    let replica = app.spawn_replica().await;
    let servers = [app.base.clone(), replica.base.clone()];
    let mut form = Prepare::new(BOT, "Two servers, one ledger");
    form.max_submissions = "5".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let path = submit_path(OWNER, REPO, id);

    // One key raced through both servers: one issue.
    let key = new_key();
    let body = submit_body(&digest, &key, "Raced through two servers", "");
    let results =
        join_all((0..16).map(|n| post_to(&app, &servers[n % 2], &path, &world.bot, &body))).await;
    let created = results.iter().filter(|r| r.status.as_u16() == 201).count();
    assert_eq!(created, 1, "exactly one submit creates");
    let receipt = world.receipt(id, &key).await;
    for resp in &results {
        assert!(
            resp.status.as_u16() == 201 || resp.status.as_u16() == 200,
            "{}",
            resp.body
        );
        assert_eq!(submission_of(resp), receipt);
    }

    // Different keys through both servers: the limit holds across them.
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let bodies: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(n, k)| submit_body(&digest, k, &format!("Replica work {n}"), ""))
        .collect();
    let results = join_all(
        bodies
            .iter()
            .enumerate()
            .map(|(n, b)| post_to(&app, &servers[n % 2], &path, &world.bot, b)),
    )
    .await;
    let mut won = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => won.push(key.clone()),
            409 => assert_eq!(resp.code(), "submission_limit", "{}", resp.body),
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    assert_eq!(won.len(), 4, "5 allowed, 1 already used");
    assert_eq!(world.grant(id).await["submission_count"], 5);
    let issues = world.all_issues().await;
    let indexes: Vec<i64> = issues
        .iter()
        .map(|i| i["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
    for key in &won {
        world.receipt(id, key).await;
    }
}
