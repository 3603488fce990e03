//! Malformed input on the agent routes: each gets its 4xx and changes nothing.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Auth, Body, OTHER_DIGEST, TestApp, confirm_body, grant_path};
use crate::world::{OWNER, REPO, World, grant_of};

const SCHEMA: &str = "agent_work_grant.v1";

/// A confirm body with one field set to `value`, or removed when `None`.
fn body_with(digest: &str, field: &str, value: Option<Value>) -> Value {
    let mut body = confirm_body(digest);
    let map = body.as_object_mut().unwrap();
    match value {
        Some(value) => map.insert(field.to_owned(), value),
        None => map.remove(field),
    };
    body
}

fn raw_json(text: impl Into<Vec<u8>>) -> Body {
    Body::Raw(Some("application/json"), text.into())
}

both_backends!(confirm_refuses_malformed_bodies);
async fn confirm_refuses_malformed_bodies(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Bad input target").await;
    let before = world.grant(id).await;
    let digest = before["proposal_digest"].as_str().unwrap().to_owned();
    let d = digest.as_str();
    let path = format!("{}/confirm", grant_path(OWNER, REPO, id));
    let nested = format!(
        "{{\"proposal_schema\":{}{}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let oversized = format!(
        "{{\"proposal_schema\":\"{SCHEMA}\",\"proposal_version\":1,\"proposal_digest\":\"{d}\",\"pad\":\"{}\"}}",
        "x".repeat(1024 * 1024 + 16)
    );
    let mut invalid_utf8 =
        format!("{{\"proposal_schema\":\"{SCHEMA}\",\"proposal_version\":1,\"proposal_digest\":\"")
            .into_bytes();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(b"\"}");

    // (label, body, status, code when the spec or decisions.md fix it)
    let confirm = |field: &str, value: Option<Value>| Body::Json(body_with(d, field, value));
    let text = |ct: &'static str| Body::Raw(Some(ct), confirm_body(d).to_string().into_bytes());
    let v1_0 = format!(
        "{{\"proposal_schema\":\"{SCHEMA}\",\"proposal_version\":1.0,\"proposal_digest\":\"{d}\"}}"
    );
    let surrogate = format!(
        "{{\"proposal_schema\":\"\\ud800\",\"proposal_version\":1,\"proposal_digest\":\"{d}\"}}"
    );
    let nul = format!(
        "{{\"proposal_schema\":\"{SCHEMA}\\u0000\",\"proposal_version\":1,\"proposal_digest\":\"{d}\"}}"
    );
    let invalid = Some("invalid_input");
    let unsupported = Some("unsupported_proposal");
    #[rustfmt::skip]
    let cases: Vec<(&str, Body, u16, Option<&str>)> = vec![
        ("uppercase digest", Body::Json(confirm_body(&d.to_uppercase())), 400, None),
        ("63-char digest", Body::Json(confirm_body(&d[..63])), 400, None),
        ("65-char digest", Body::Json(confirm_body(&format!("{d}0"))), 400, None),
        ("non-hex digest", Body::Json(confirm_body(&format!("g{}", &d[1..]))), 400, None),
        ("empty digest", Body::Json(confirm_body("")), 400, None),
        ("digest as number", confirm("proposal_digest", Some(json!(1))), 400, invalid),
        ("other schema", confirm("proposal_schema", Some(json!("agent_work_grant.v2"))), 400, unsupported),
        ("version 2", confirm("proposal_version", Some(json!(2))), 400, unsupported),
        ("version 0", confirm("proposal_version", Some(json!(0))), 400, unsupported),
        ("version \"1\"", confirm("proposal_version", Some(json!("1"))), 400, invalid),
        ("version true", confirm("proposal_version", Some(json!(true))), 400, invalid),
        ("version null", confirm("proposal_version", Some(Value::Null)), 400, invalid),
        ("version 1.0", raw_json(v1_0), 400, invalid),
        ("unknown state_revision", confirm("state_revision", Some(json!(1))), 400, invalid),
        ("unknown agent_id", confirm("agent_id", Some(json!(1))), 400, invalid),
        ("unknown issuer_id", confirm("issuer_id", Some(json!(1))), 400, invalid),
        ("unknown approved", confirm("approved", Some(json!(true))), 400, invalid),
        ("missing schema", confirm("proposal_schema", None), 400, invalid),
        ("missing version", confirm("proposal_version", None), 400, invalid),
        ("missing digest", confirm("proposal_digest", None), 400, invalid),
        ("empty object", Body::Json(json!({})), 400, invalid),
        ("array", Body::Json(json!([confirm_body(d)])), 400, invalid),
        ("the triple as an array", Body::Json(json!([SCHEMA, 1, d])), 400, invalid),
        ("string", Body::Json(json!("confirm")), 400, invalid),
        ("null", raw_json("null"), 400, invalid),
        ("number", raw_json("1"), 400, invalid),
        ("truncated JSON", raw_json("{\"proposal_schema\":"), 400, invalid),
        ("empty body", raw_json(""), 400, invalid),
        ("lone surrogate", raw_json(surrogate), 400, None),
        ("NUL in string", raw_json(nul), 400, None),
        ("invalid UTF-8", raw_json(invalid_utf8), 400, None),
        ("deeply nested", raw_json(nested), 400, None),
        ("text/plain", text("text/plain"), 400, invalid),
        ("form content type", text("application/x-www-form-urlencoded"), 400, invalid),
        ("no content type", Body::Raw(None, confirm_body(d).to_string().into_bytes()), 400, invalid),
        ("over 1 MiB", raw_json(oversized), 413, Some("payload_too_large")),
    ];
    for (label, body, status, code) in cases {
        let resp = app
            .send(Method::POST, &path, Auth::Token(&world.bot), body)
            .await;
        assert_eq!(resp.status.as_u16(), status, "{label}: {}", resp.body);
        let got = resp.code();
        match code {
            Some(code) => assert_eq!(got, code, "{label}: {}", resp.body),
            None => assert!(
                got == "invalid_input" || got == "unsupported_proposal",
                "{label}: {}",
                resp.body
            ),
        }
        world.assert_unchanged(id, &before).await;
    }

    // A well-formed digest that is not the grant's: 409 with the grant.
    let resp = world.confirm_with(id, confirm_body(OTHER_DIGEST)).await;
    resp.assert_error(409, "proposal_mismatch");
    assert_eq!(grant_of(&resp), before);
    world.assert_unchanged(id, &before).await;

    // After all that, the real triple still confirms.
    world
        .confirm_with(id, confirm_body(d))
        .await
        .assert_status(200);
}

both_backends!(grant_ids_in_paths_are_strict);
async fn grant_ids_in_paths_are_strict(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Path target").await;
    let before = world.grant(id).await;
    let digest = before["proposal_digest"].as_str().unwrap().to_owned();
    let bad = [
        "0",
        "-1",
        "+1",
        "01",
        "%201",
        "1%20",
        "%2B1",
        "9223372036854775808",
        "99999999999999999999999",
        "true",
        "abc",
        "1.0",
        "1e3",
        "0x1",
        "%2531",
        "1%00",
    ];
    for raw in bad {
        let resp = world.read(raw).await;
        resp.assert_error(400, "invalid_input");
        let resp = world.confirm_with(raw, confirm_body(&digest)).await;
        resp.assert_error(400, "invalid_input");
        // Validation comes before looking up the repository.
        let path = grant_path(OWNER, "no-such-repo", raw);
        app.get(&path, Auth::Token(&world.bot))
            .await
            .assert_error(400, "invalid_input");
    }
    world.assert_unchanged(id, &before).await;

    // Well-formed ids of no grant: 404, exactly like a hidden one.
    for missing in ["9223372036854775807", "999999"] {
        world.read(missing).await.assert_error(404, "not_found");
        world
            .confirm_with(missing, confirm_body(&digest))
            .await
            .assert_error(404, "not_found");
    }

    // A percent-encoded id is decoded once, then validated: %3X is a digit.
    let encoded: String = id
        .to_string()
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    let resp = world.read(&encoded).await;
    resp.assert_status(200);
    assert_eq!(resp.json()["grant"], before);
    world.assert_unchanged(id, &before).await;
}
