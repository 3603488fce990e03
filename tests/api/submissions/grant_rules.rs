//! The grant rules at handoff: an active grant, withdrawal, the submission
//! limit, the proposal digest and expiry.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::helpers::{OTHER_DIGEST, TestApp};
use crate::world::{BOT, Prepare, World, grant_of, new_key, submission_of, submit_body};

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
