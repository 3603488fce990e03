//! Submit, replay, readback and conflict of one request key.

use reqwest::Method;

use super::{check_attributed_issue, check_submission};
use crate::helpers::{Auth, Body, OTHER_DIGEST, TestApp};
use crate::world::{
    BOT, BOT_SCOPES, OWNER, REPO, World, grant_of, new_key, submission_of, submit_body, submit_path,
};

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
