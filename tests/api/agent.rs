//! The agent routes' happy path and the lifecycle around confirm.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::helpers::{OTHER_DIGEST, TestApp, confirm_body};
use crate::world::{ALICE, BOT, OWNER, Prepare, REPO, World, grant_of, prepared_id, state_of};

fn is_timestamp(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| OffsetDateTime::parse(s, &Rfc3339).is_ok())
}

both_backends!(confirm_approve_withdraw_happy_path);
async fn confirm_approve_withdraw_happy_path(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Build the due-date field").await;

    // Prepared: awaiting the agent.
    let grant = world.grant(id).await;
    assert_eq!(grant["id"], id);
    assert_eq!(grant["state"], "awaiting_agent");
    assert_eq!(grant["state_revision"], 1);
    assert_eq!(grant["proposal"]["grant_id"], id);
    let repository = &grant["repository"];
    assert!(repository["id"].as_i64().unwrap() > 0);
    assert_eq!(repository["owner"], OWNER);
    assert_eq!(repository["name"], REPO);
    assert_eq!(repository["full_name"], format!("{OWNER}/{REPO}"));
    assert_eq!(repository["private"], true);
    assert_eq!(grant["agent"]["login"], BOT);
    assert!(grant["agent"]["id"].as_i64().unwrap() > 0);
    assert_eq!(grant["issuer"]["login"], ALICE);
    assert!(grant["issuer"]["id"].as_i64().unwrap() > 0);
    assert!(grant["approver"].is_null());
    assert!(grant["admission"].is_null());
    assert_eq!(grant["submission_count"], 0);
    assert_eq!(
        grant["html_url"],
        format!("{}/{OWNER}/{REPO}/agent-work-grants/{id}", app.base)
    );
    assert!(is_timestamp(&grant["created_at"]));
    assert!(is_timestamp(&grant["updated_at"]));
    for field in [
        "confirmed_at",
        "approved_at",
        "revoked_at",
        "revoked_by",
        "revoke_reason",
    ] {
        assert!(grant[field].is_null(), "{field} should be null: {grant}");
    }
    let digest = grant["proposal_digest"].as_str().unwrap().to_owned();

    // Confirmed: awaiting a human.
    let resp = world.confirm_with(id, confirm_body(&digest)).await;
    resp.assert_status(200);
    let confirmed = resp.json()["grant"].clone();
    assert_eq!(confirmed["state"], "awaiting_human");
    assert_eq!(confirmed["state_revision"], 2);
    assert!(is_timestamp(&confirmed["confirmed_at"]));
    assert_eq!(confirmed["proposal_digest"], digest.as_str());
    assert!(confirmed["approver"].is_null());
    assert_eq!(world.grant(id).await, confirmed);

    // A retry after a lost response: 200, unchanged.
    let resp = world.confirm_with(id, confirm_body(&digest)).await;
    resp.assert_status(200);
    assert_eq!(resp.json()["grant"], confirmed);

    // A bot's confirmation is not approval; alice approves in the browser.
    world.approve(id).await.assert_status(303);
    let active = world.grant(id).await;
    assert_eq!(active["state"], "active");
    assert_eq!(active["state_revision"], 3);
    assert_eq!(active["approver"]["login"], ALICE);
    assert!(is_timestamp(&active["approved_at"]));
    assert_eq!(active["confirmed_at"], confirmed["confirmed_at"]);

    let resp = world.confirm_with(id, confirm_body(&digest)).await;
    resp.assert_status(200);
    assert_eq!(resp.json()["grant"], active);
    world.assert_unchanged(id, &active).await;

    // Withdrawn: revoked, terminal.
    world.withdraw(id).await.assert_status(303);
    let revoked = world.grant(id).await;
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(revoked["state_revision"], 4);
    assert!(is_timestamp(&revoked["revoked_at"]));
    assert_eq!(revoked["revoked_by"]["login"], ALICE);

    let resp = world.confirm_with(id, confirm_body(&digest)).await;
    resp.assert_error(409, "grant_revoked");
    assert_eq!(grant_of(&resp), revoked);
    world.assert_unchanged(id, &revoked).await;
}

both_backends!(withdrawn_before_confirm_refuses_confirm);
async fn withdrawn_before_confirm_refuses_confirm(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Never confirmed").await;
    let digest = world.grant(id).await["proposal_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    world.withdraw(id).await.assert_status(303);
    let revoked = world.grant(id).await;
    assert_eq!(
        state_of(&revoked),
        json!({"state": "revoked", "state_revision": 2})
    );
    world
        .confirm_with(id, confirm_body(&digest))
        .await
        .assert_error(409, "grant_revoked");
    world
        .confirm_with(id, confirm_body(OTHER_DIGEST))
        .await
        .assert_status(409);
    world.assert_unchanged(id, &revoked).await;
}

both_backends!(edit_clears_confirmation_and_old_digest_mismatches);
async fn edit_clears_confirmation_and_old_digest_mismatches(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("First version").await;
    let old = world.grant(id).await;
    assert_eq!(old["state"], "awaiting_human");
    let old_digest = old["proposal_digest"].as_str().unwrap().to_owned();

    let edited = Prepare::new(BOT, "Second version");
    world
        .alice
        .grant_action(OWNER, REPO, id, "edit", &edited.fields())
        .await
        .assert_status(303);
    let grant = world.grant(id).await;
    assert_eq!(
        state_of(&grant),
        json!({"state": "awaiting_agent", "state_revision": 3})
    );
    assert!(grant["confirmed_at"].is_null());
    assert_eq!(grant["proposal"]["task"], "Second version");
    assert_ne!(grant["proposal_digest"], old_digest.as_str());

    // The digest the bot confirmed before no longer confirms anything.
    let resp = world.confirm_with(id, confirm_body(&old_digest)).await;
    resp.assert_error(409, "proposal_mismatch");
    assert_eq!(grant_of(&resp), grant);
    world.assert_unchanged(id, &grant).await;

    world.confirm(id).await.assert_status(200);
    assert_eq!(
        state_of(&world.grant(id).await),
        json!({"state": "awaiting_human", "state_revision": 4})
    );
}

both_backends!(a_digest_of_one_grant_never_confirms_another);
async fn a_digest_of_one_grant_never_confirms_another(app: TestApp) {
    let world = World::new(&app).await;
    let first = world.prepare("Same words").await;
    let second = world.prepare("Same words").await;
    let first_digest = world.grant(first).await["proposal_digest"].clone();
    let before = world.grant(second).await;
    let resp = world
        .confirm_with(second, confirm_body(first_digest.as_str().unwrap()))
        .await;
    resp.assert_error(409, "proposal_mismatch");
    assert_eq!(grant_of(&resp), before);
    world.assert_unchanged(second, &before).await;
}

/// Prepares a grant that expires now or within seconds, then waits for it
/// to expire. A past `expires_at` may be refused by the form (422).
async fn expired_grant(world: &World<'_>) -> i64 {
    let second = |offset: i64| {
        (OffsetDateTime::now_utc() + time::Duration::seconds(offset))
            .replace_nanosecond(0)
            .unwrap()
            .format(&Rfc3339)
            .unwrap()
    };
    let mut form = Prepare::new(BOT, "Expires soon");
    form.expires_at = Some(second(-60));
    let resp = world.alice.prepare(OWNER, REPO, &form).await;
    if resp.status.as_u16() == 422 {
        form.expires_at = Some(second(3));
        let id = world.alice.prepare_ok(OWNER, REPO, &form).await;
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        return id;
    }
    prepared_id(&resp, &world.app.base, OWNER, REPO)
}

both_backends!(confirm_after_expiry_is_grant_expired);
async fn confirm_after_expiry_is_grant_expired(app: TestApp) {
    let world = World::new(&app).await;
    let id = expired_grant(&world).await;
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "awaiting_agent");
    assert!(grant["proposal"]["limits"]["expires_at"].is_string());
    let digest = grant["proposal_digest"].as_str().unwrap().to_owned();
    let resp = world.confirm_with(id, confirm_body(&digest)).await;
    resp.assert_error(409, "grant_expired");
    assert_eq!(grant_of(&resp), grant);
    // Still readable, and unchanged.
    world.assert_unchanged(id, &grant).await;
}
