//! Who may do what outside the agent matrix: the setup privilege, revoked
//! tokens, and the wall between tokens (API) and sessions (browser).

use reqwest::Method;
use serde_json::json;

use crate::browser::{Browser, location_path, nonce_in, state_revision_in};
use crate::db::SqlConn;
use crate::helpers::{ADMIN_LOGIN, Auth, Body, Resp, TestApp, confirm_body, grant_path};
use crate::world::{
    ALICE, ALL_SCOPES, BOT, BOT_SCOPES, OWNER, REPO, World, action_path, new_key, readback_path,
    state_of, submit_body, submit_path,
};

both_backends!(admin_api_needs_an_admin_token_with_write_admin);
async fn admin_api_needs_an_admin_token_with_write_admin(app: TestApp) {
    let world = World::new(&app).await;
    app.create_user("bob", "human", Some("bob-password-1"))
        .await;
    let bob_plain = app
        .create_token(
            "bob",
            &["read:repository", "write:repository", "write:issue"],
        )
        .await
        .token;
    let admin_read_only = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    let admin_no_admin = app
        .create_token(ADMIN_LOGIN, &["write:repository"])
        .await
        .token;
    // A non-admin may or may not be given an admin scope; either way it
    // must not open the setup privilege.
    let bob_admin_scope = app
        .send(
            Method::POST,
            "/api/v1/admin/users/bob/tokens",
            Auth::Token(&app.admin_token),
            Body::Json(json!({"name": "bob-admin", "scopes": ["write:admin"]})),
        )
        .await;
    let bob_admin = (bob_admin_scope.status.as_u16() == 201)
        .then(|| bob_admin_scope.json()["token"].as_str().unwrap().to_owned());

    let mut refused: Vec<(&str, Auth, u16)> = vec![
        ("anonymous", Auth::None, 401),
        ("bad token", Auth::Token("writ_0123"), 401),
        ("non-admin human", Auth::Token(&bob_plain), 403),
        (
            "non-admin with every scope",
            Auth::Token(&world.alice_token),
            403,
        ),
        ("bot", Auth::Token(&world.bot), 403),
        (
            "admin with read:admin only",
            Auth::Token(&admin_read_only),
            403,
        ),
        (
            "admin without admin scopes",
            Auth::Token(&admin_no_admin),
            403,
        ),
    ];
    if let Some(token) = &bob_admin {
        refused.push(("non-admin with write:admin", Auth::Token(token), 403));
    }
    for (who, auth, status) in refused {
        let attempts = [
            (
                Method::POST,
                "/api/v1/admin/users".to_owned(),
                json!({"login": "mallory", "kind": "human", "password": "pw-mallory-1"}),
            ),
            (
                Method::POST,
                "/api/v1/admin/repos".to_owned(),
                json!({"owner": ALICE, "name": "sneaky", "private": false}),
            ),
            (
                Method::POST,
                format!("/api/v1/admin/users/{BOT}/tokens"),
                json!({"name": "stolen", "scopes": BOT_SCOPES}),
            ),
            (
                Method::PUT,
                format!("/api/v1/repos/{OWNER}/{REPO}/collaborators/mallory"),
                json!({"permission": "admin"}),
            ),
        ];
        for (method, path, body) in attempts {
            let resp = app.send(method, &path, auth, Body::Json(body)).await;
            assert_eq!(resp.status.as_u16(), status, "{who} {path}: {}", resp.body);
            if status == 401 {
                assert!(
                    resp.header("www-authenticate").is_some(),
                    "{who}: no WWW-Authenticate"
                );
            }
        }
    }
    // None of the refused attempts created anything.
    app.create_user("mallory", "human", Some("pw-mallory-1"))
        .await;
    app.create_repo(ALICE, "sneaky", false).await;
}

both_backends!(a_deleted_token_no_longer_authenticates);
async fn a_deleted_token_no_longer_authenticates(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Token lifecycle").await;
    let token = app.create_token(BOT, BOT_SCOPES).await;
    let path = grant_path(OWNER, REPO, id);
    app.get(&path, Auth::Token(&token.token))
        .await
        .assert_status(200);
    app.delete_token(BOT, token.id).await;
    for auth in [
        Auth::Token(&token.token),
        Auth::Bearer(&token.token),
        Auth::Basic(BOT, &token.token),
    ] {
        let resp = app.get(&path, auth).await;
        resp.assert_error(401, "unauthenticated");
        assert!(resp.header("www-authenticate").is_some());
    }
    // Other tokens of the same bot are unaffected.
    app.get(&path, Auth::Token(&world.bot))
        .await
        .assert_status(200);
}

// A server remembers the tokens it has seen live; a revocation made
// anywhere (here through a second server on the same database) still
// refuses the token at its next use on the first, on every agent route,
// before any other refusal, and such a call leaves no audit record, issue
// or change.
both_backends!(a_token_revoked_elsewhere_is_refused_at_its_next_use);
async fn a_token_revoked_elsewhere_is_refused_at_its_next_use(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Revoked on the other server").await;
    let digest = world.digest(id).await;
    let token = app.create_token(BOT, BOT_SCOPES).await;
    let path = grant_path(OWNER, REPO, id);
    let key = new_key();
    // Seen live by this server: a read and a submit.
    app.get(&path, Auth::Token(&token.token))
        .await
        .assert_status(200);
    app.post_json(
        &submit_path(OWNER, REPO, id),
        Auth::Token(&token.token),
        submit_body(&digest, &key, "Before the revocation", ""),
    )
    .await
    .assert_status(201);

    let replica = app.spawn_replica().await;
    let revoked = app
        .client
        .delete(format!(
            "{}/api/v1/admin/users/{BOT}/tokens/{}",
            replica.base, token.id
        ))
        .header("Authorization", format!("token {}", app.admin_token))
        .send()
        .await
        .expect("revoke through the replica");
    assert_eq!(revoked.status().as_u16(), 204);

    let mut sql = SqlConn::connect(&app.database_url()).await;
    let counts = "SELECT CAST((SELECT COUNT(*) FROM tool_calls) AS TEXT), \
                  CAST((SELECT COUNT(*) FROM issues) AS TEXT), \
                  CAST((SELECT submission_count FROM grants WHERE id = 1) AS TEXT)";
    let grant_before = world.grant(id).await;
    let before = sql.text_rows(counts).await;
    let attempts: Vec<(Method, String, Body)> = vec![
        (Method::GET, path.clone(), Body::None),
        (
            Method::GET,
            grant_path(OWNER, REPO, "not-an-id"),
            Body::None,
        ),
        (Method::GET, grant_path(OWNER, REPO, 999_999), Body::None),
        (
            Method::POST,
            submit_path(OWNER, REPO, id),
            Body::Json(submit_body(&digest, &new_key(), "After the revocation", "")),
        ),
        (
            Method::POST,
            submit_path(OWNER, REPO, id),
            Body::Json(json!({"not": "a submission"})),
        ),
        (
            Method::POST,
            format!("{path}/confirm"),
            Body::Json(confirm_body(&digest)),
        ),
        (
            Method::GET,
            readback_path(OWNER, REPO, id, &key),
            Body::None,
        ),
    ];
    for (method, target, body) in attempts {
        let resp = app
            .send(method.clone(), &target, Auth::Token(&token.token), body)
            .await;
        assert_eq!(
            resp.status.as_u16(),
            401,
            "{method} {target}: {}",
            resp.body
        );
        resp.assert_error(401, "unauthenticated");
        assert!(
            resp.header("www-authenticate").is_some(),
            "{method} {target}"
        );
    }
    assert_eq!(
        sql.text_rows(counts).await,
        before,
        "no record, issue or count"
    );
    world.assert_unchanged(id, &grant_before).await;
    sql.close().await;
    // The bot's other token is unaffected.
    app.get(&path, Auth::Token(&world.bot))
        .await
        .assert_status(200);
}

both_backends!(a_session_cookie_never_authenticates_the_api);
async fn a_session_cookie_never_authenticates_the_api(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Cookie wall").await;
    let before = world.grant(id).await;
    // alice's logged-in browser, which holds a session cookie.
    let home = world.alice.get_page("/").await;
    home.assert_status(200);
    let paths = [
        "/api/v1/agent-work-grants".to_owned(),
        grant_path(OWNER, REPO, id),
    ];
    for path in &paths {
        let resp = world.alice.client.get(app.url(path)).send().await.unwrap();
        let resp = Resp::read(resp).await;
        resp.assert_error(401, "unauthenticated");
    }
    let digest = before["proposal_digest"].as_str().unwrap();
    let resp = world
        .alice
        .client
        .post(app.url(&format!("{}/confirm", paths[1])))
        .json(&confirm_body(digest))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    world.assert_unchanged(id, &before).await;
}

both_backends!(no_token_route_can_approve_prepare_or_withdraw);
async fn no_token_route_can_approve_prepare_or_withdraw(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Only the form approves").await;
    let before = world.grant(id).await;
    let admin_all = app.create_token(ADMIN_LOGIN, ALL_SCOPES).await.token;
    let base = format!("/api/v1/repos/{OWNER}/{REPO}/agent-work-grants");
    let attempts = [
        (Method::POST, format!("{base}/{id}/approve")),
        (Method::POST, format!("{base}/{id}/withdraw")),
        (Method::POST, format!("{base}/{id}/edit")),
        (Method::PUT, format!("{base}/{id}")),
        (Method::PATCH, format!("{base}/{id}")),
        (Method::DELETE, format!("{base}/{id}")),
        (Method::POST, base.clone()),
    ];
    let tokens = [&world.alice_token, &admin_all, &world.bot];
    for token in tokens {
        for (method, path) in &attempts {
            let body = json!({"state_revision": 2, "acknowledge_warnings": "on", "agent": BOT, "task": "x", "summary": "x"});
            let resp = app
                .send(method.clone(), path, Auth::Token(token), Body::Json(body))
                .await;
            let status = resp.status.as_u16();
            assert!(
                status == 404 || status == 405,
                "{method} {path}: {status} {}",
                resp.body
            );
        }
    }
    world.assert_unchanged(id, &before).await;
    assert_eq!(before["state"], "awaiting_human");
}

both_backends!(a_bot_can_never_use_the_browser);
async fn a_bot_can_never_use_the_browser(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Bots stay out of forms").await;
    let before = world.grant(id).await;

    // A bot cannot log in, with anything as password, not even its token.
    for password in ["anything", world.bot.as_str(), ""] {
        let mut bot_browser = Browser::new(&app.base);
        let resp = bot_browser.login(BOT, password).await;
        assert_eq!(resp.status.as_u16(), 401, "bot login: {}", resp.body);
        let home = bot_browser.get_page("/").await;
        home.assert_status(303);
        assert!(location_path(&home, &app.base).starts_with("/user/login"));
    }

    // A form posted with a token and no session cookie: 403, nothing changes.
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let approve = action_path(OWNER, REPO, id, "approve");
    let nonce = nonce_in(&page, &approve).expect("approve form");
    let revision = state_revision_in(&page, &approve).expect("revision");
    let fields = [
        ("nonce", nonce.as_str()),
        ("state_revision", revision.as_str()),
    ];
    let stranger = Browser::new(&app.base);
    for token in [&world.bot, &world.alice_token] {
        let auth = format!("token {token}");
        let headers = [
            ("Origin", app.base.as_str()),
            ("Authorization", auth.as_str()),
        ];
        let resp = stranger.post_form_with(&approve, &fields, &headers).await;
        assert_eq!(resp.status.as_u16(), 403, "form with token: {}", resp.body);
    }
    world.assert_unchanged(id, &before).await;
    assert_eq!(
        state_of(&before),
        json!({"state": "awaiting_human", "state_revision": 2})
    );
}
