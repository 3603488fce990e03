//! Who may submit and read back, and how keys, grant ids and paths are
//! validated.

use serde_json::{Value, json};

use crate::helpers::{Auth, TestApp};
use crate::world::{
    BOT, BOT_SCOPES, OWNER, REPO, World, new_key, readback_path, submission_of, submit_body,
    submit_path,
};

/// Two active grants of builder-bot on acme/widgets with one receipt each,
/// acme/public beside them, and the first grant as it is after its receipt.
struct Receipts<'a> {
    world: World<'a>,
    id: i64,
    second: i64,
    digest: String,
    key: String,
    submission: Value,
    other_key: String,
    grant: Value,
}

async fn receipts(app: &TestApp) -> Receipts<'_> {
    let world = World::new(app).await;
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
    Receipts {
        world,
        id,
        second,
        digest,
        key,
        submission,
        other_key,
        grant,
    }
}

impl Receipts<'_> {
    /// Nothing the test sent changed the grant or made an issue.
    async fn assert_nothing_written(&self) {
        self.world.assert_unchanged(self.id, &self.grant).await;
        assert_eq!(self.world.all_issues().await.len(), 2);
    }
}

both_backends!(submit_and_readback_need_an_agent_with_the_scopes_and_the_repository);
async fn submit_and_readback_need_an_agent_with_the_scopes_and_the_repository(app: TestApp) {
    let fx = receipts(&app).await;
    let (world, id) = (&fx.world, fx.id);
    let (digest, key) = (fx.digest.clone(), fx.key.clone());
    let submission = fx.submission.clone();

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

    fx.assert_nothing_written().await;
}

both_backends!(keys_in_the_path_are_canonical_and_decoded_once);
async fn keys_in_the_path_are_canonical_and_decoded_once(app: TestApp) {
    let fx = receipts(&app).await;
    let (world, id) = (&fx.world, fx.id);
    let (digest, key) = (fx.digest.clone(), fx.key.clone());
    let submission = fx.submission.clone();

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

    fx.assert_nothing_written().await;
}

both_backends!(the_body_is_validated_before_any_state_is_read);
async fn the_body_is_validated_before_any_state_is_read(app: TestApp) {
    let fx = receipts(&app).await;
    let (world, id) = (&fx.world, fx.id);
    let (digest, key) = (fx.digest.clone(), fx.key.clone());
    let new = new_key();

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

    fx.assert_nothing_written().await;
}

both_backends!(unknown_keys_grants_and_paths_are_refused);
async fn unknown_keys_grants_and_paths_are_refused(app: TestApp) {
    let fx = receipts(&app).await;
    let (world, id, second) = (&fx.world, fx.id, fx.second);
    let (digest, key, other_key) = (fx.digest.clone(), fx.key.clone(), fx.other_key.clone());
    let new = new_key();

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

    fx.assert_nothing_written().await;
}

both_backends!(losing_read_access_hides_the_receipt);
async fn losing_read_access_hides_the_receipt(app: TestApp) {
    let fx = receipts(&app).await;
    let (world, id) = (&fx.world, fx.id);
    let (digest, key) = (fx.digest.clone(), fx.key.clone());
    let submission = fx.submission.clone();
    let new = new_key();

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

    fx.assert_nothing_written().await;
}
