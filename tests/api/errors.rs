//! Error bodies: `{message, code, url}`, short, and never an echo of a
//! credential or of the request body.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{Auth, Body, OTHER_DIGEST, Resp, TestApp, confirm_body, grant_path};
use crate::world::{ALICE, ALICE_PW, BOT, OWNER, REPO, RIVAL, World};

const CODES: &[&str] = &[
    "invalid_input",
    "unsupported_proposal",
    "unauthenticated",
    "insufficient_scope",
    "agent_only",
    "forbidden",
    "not_found",
    "proposal_mismatch",
    "state_conflict",
    "grant_revoked",
    "grant_expired",
    "request_key_conflict",
    "submission_limit",
    "admission_blocked",
    "payload_too_large",
];

#[track_caller]
fn check_error(label: &str, resp: &Resp, secrets: &[&str]) {
    assert!(
        resp.status.is_client_error(),
        "{label}: {} {}",
        resp.status,
        resp.body
    );
    let content_type = resp.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "{label}: {content_type}"
    );
    let body = resp.json();
    let message = body["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: no message"));
    assert!(
        !message.is_empty() && message.len() <= 512,
        "{label}: message {message:?}"
    );
    let code = body["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: no code"));
    assert!(CODES.contains(&code), "{label}: unknown code {code}");
    let url = body["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: no url"));
    assert!(!url.is_empty(), "{label}: empty url");
    for secret in secrets {
        assert!(
            !resp.body.contains(secret),
            "{label}: the body echoes {secret:?}"
        );
        for (name, value) in &resp.headers {
            let value = value.to_str().unwrap_or_default();
            assert!(
                !value.contains(secret),
                "{label}: header {name} echoes a secret"
            );
        }
    }
    if resp.status.as_u16() == 409 {
        assert!(body["grant"].is_object(), "{label}: 409 without grant");
    }
}

both_backends!(error_bodies_have_the_documented_shape);
async fn error_bodies_have_the_documented_shape(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Errors").await;
    let before = world.grant(id).await;
    let digest = before["proposal_digest"].as_str().unwrap().to_owned();
    let path = grant_path(OWNER, REPO, id);
    let confirm = format!("{path}/confirm");
    let fake = format!("writ_{}", "ab".repeat(32));
    let marker = "zz-echo-marker-7f3a9c";
    let secrets = [
        world.bot.as_str(),
        world.alice_token.as_str(),
        ALICE_PW,
        fake.as_str(),
        marker,
    ];
    let bot = Auth::Token(&world.bot);

    let mut with_marker = confirm_body(&digest);
    with_marker["note"] = json!(marker);
    let mut schema_is_token = confirm_body(&digest);
    schema_is_token["proposal_schema"] = json!(world.bot);
    let mut digest_is_marker = confirm_body(&digest);
    digest_is_marker["proposal_digest"] = json!(marker);
    let oversized = format!(
        "{{\"proposal_digest\":\"{marker}{}\"}}",
        "y".repeat(1100 * 1024)
    );

    let requests: Vec<(&str, Method, String, Auth, Body)> = vec![
        (
            "anonymous",
            Method::GET,
            path.clone(),
            Auth::None,
            Body::None,
        ),
        (
            "unknown token",
            Method::GET,
            path.clone(),
            Auth::Token(&fake),
            Body::None,
        ),
        (
            "unknown bearer",
            Method::GET,
            path.clone(),
            Auth::Bearer(&fake),
            Body::None,
        ),
        (
            "basic bot:unknown",
            Method::GET,
            path.clone(),
            Auth::Basic(BOT, &fake),
            Body::None,
        ),
        (
            "basic password",
            Method::GET,
            path.clone(),
            Auth::Basic(ALICE, ALICE_PW),
            Body::None,
        ),
        (
            "human token",
            Method::GET,
            path.clone(),
            Auth::Token(&world.alice_token),
            Body::None,
        ),
        (
            "rival bot",
            Method::GET,
            path.clone(),
            Auth::Token(&world.rival),
            Body::None,
        ),
        (
            "bad id",
            Method::GET,
            grant_path(OWNER, REPO, "01"),
            bot,
            Body::None,
        ),
        (
            "unknown route",
            Method::GET,
            "/api/v1/no-such-route".to_owned(),
            bot,
            Body::None,
        ),
        (
            "bad page",
            Method::GET,
            "/api/v1/agent-work-grants?page=abc".to_owned(),
            bot,
            Body::None,
        ),
        (
            "unknown field",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Json(with_marker),
        ),
        (
            "schema is a token",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Json(schema_is_token),
        ),
        (
            "digest is text",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Json(digest_is_marker),
        ),
        (
            "mismatch",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Json(confirm_body(OTHER_DIGEST)),
        ),
        (
            "too large",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Raw(Some("application/json"), oversized.into_bytes()),
        ),
        (
            "not JSON",
            Method::POST,
            confirm.clone(),
            bot,
            Body::Raw(Some("application/json"), marker.as_bytes().to_vec()),
        ),
    ];
    for (label, method, path, auth, body) in requests {
        let resp = app.send(method, &path, auth, body).await;
        check_error(label, &resp, &secrets);
    }
    world.assert_unchanged(id, &before).await;

    // A token of another login in Basic auth is not echoed either.
    let resp = app.get(&path, Auth::Basic(RIVAL, &world.bot)).await;
    check_error("basic rival:bot-token", &resp, &secrets);
}
