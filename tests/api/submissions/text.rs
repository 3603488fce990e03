//! Titles and bodies: kept byte for byte, a 1 MiB request limit, and the
//! refusals of invalid text before anything is written.

use reqwest::Method;
use serde_json::json;

use super::{check_attributed_issue, count};
use crate::helpers::{Auth, Body, TestApp};
use crate::world::{
    BOT, OWNER, Prepare, REPO, World, new_key, submission_of, submit_body, submit_path,
};

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

/// A grant of builder-bot that allows 100 submissions: its id and digest.
async fn byte_exact_grant(world: &World<'_>) -> (i64, String) {
    let mut form = Prepare::new(BOT, "Byte exactness");
    form.max_submissions = "100".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    (id, digest)
}

both_backends!(titles_and_bodies_are_kept_byte_for_byte);
async fn titles_and_bodies_are_kept_byte_for_byte(app: TestApp) {
    let world = World::new(&app).await;
    let (id, digest) = byte_exact_grant(&world).await;

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
    let submitted = cases.len() as i64;
    assert_eq!(count(&world, id).await, submitted);
}

both_backends!(a_request_of_exactly_1_mib_is_accepted_and_one_byte_more_is_413);
async fn a_request_of_exactly_1_mib_is_accepted_and_one_byte_more_is_413(app: TestApp) {
    let world = World::new(&app).await;
    let (id, digest) = byte_exact_grant(&world).await;
    let path = submit_path(OWNER, REPO, id);
    let bot = Auth::Token(&world.bot);
    let mut submitted = 0;

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
}

both_backends!(invalid_titles_and_bodies_are_refused_before_anything_is_written);
async fn invalid_titles_and_bodies_are_refused_before_anything_is_written(app: TestApp) {
    let world = World::new(&app).await;
    let (id, digest) = byte_exact_grant(&world).await;
    let path = submit_path(OWNER, REPO, id);
    let bot = Auth::Token(&world.bot);
    let submitted = 0;

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
