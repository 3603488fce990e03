//! The browser form contract: nonces, origin checks, stale revisions,
//! who may approve, field validation, logout.

use serde_json::json;

use crate::browser::{form_actions, location_path, nonce_in, state_revision_in};
use reqwest::Method;

use crate::helpers::{Auth, Body, Resp, TestApp, confirm_body, grant_path};
use crate::world::{BOT, OWNER, Prepare, REPO, World, action_path, page_path, state_of};

/// The fields of the form `action` on `page`: nonce and state_revision.
fn form_fields(page: &str, action: &str) -> Vec<(String, String)> {
    let nonce = nonce_in(page, action).unwrap_or_else(|| panic!("no nonce for {action}"));
    let revision = state_revision_in(page, action).expect("state_revision");
    vec![("nonce".into(), nonce), ("state_revision".into(), revision)]
}

/// How many grants builder-bot can see in any state.
async fn grant_count(world: &World<'_>) -> String {
    let resp = world
        .app
        .get(
            "/api/v1/agent-work-grants?state=all",
            Auth::Token(&world.bot),
        )
        .await;
    resp.assert_status(200);
    resp.header("x-total-count").expect("X-Total-Count")
}

both_backends!(a_replayed_nonce_changes_nothing);
async fn a_replayed_nonce_changes_nothing(app: TestApp) {
    let world = World::new(&app).await;
    // Prepare has no state_revision: a replay is refused by the nonce alone.
    let page = world
        .alice
        .get_page(&format!("/{OWNER}/{REPO}/agent-work-grants/new"))
        .await;
    let action = format!("/{OWNER}/{REPO}/agent-work-grants");
    let nonce = nonce_in(&page.body, &action).expect("prepare nonce");
    let mut fields = Prepare::new(BOT, "Submitted twice").fields();
    fields.push(("nonce".into(), nonce));
    let origin = world.alice.origin();
    world
        .alice
        .post_form(&action, &fields, Some(&origin))
        .await
        .assert_status(303);
    let replay = world.alice.post_form(&action, &fields, Some(&origin)).await;
    replay.assert_status(403);
    assert_eq!(grant_count(&world).await, "1");

    // The approve form posted twice: the grant moves exactly once.
    let id = world.confirmed("Approve twice").await;
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let approve = action_path(OWNER, REPO, id, "approve");
    let fields = form_fields(&page, &approve);
    world
        .alice
        .post_form(&approve, &fields, Some(&origin))
        .await
        .assert_status(303);
    let active = world.grant(id).await;
    assert_eq!(
        state_of(&active),
        json!({"state": "active", "state_revision": 3})
    );
    let replay = world
        .alice
        .post_form(&approve, &fields, Some(&origin))
        .await;
    assert_eq!(
        replay.status.as_u16(),
        403,
        "replayed nonce: {}",
        replay.body
    );
    world.assert_unchanged(id, &active).await;
}

both_backends!(origin_and_fetch_metadata_are_checked);
async fn origin_and_fetch_metadata_are_checked(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Origin checks").await;
    let before = world.grant(id).await;
    let approve = action_path(OWNER, REPO, id, "approve");
    let origin = world.alice.origin();
    let referer = format!("{origin}{}", page_path(OWNER, REPO, id));
    let refused: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("foreign Origin", vec![("Origin", "http://evil.example")]),
        (
            "foreign Origin, good Referer",
            vec![("Origin", "http://evil.example"), ("Referer", &referer)],
        ),
        ("null Origin", vec![("Origin", "null")]),
        ("other port", vec![("Origin", "http://127.0.0.1:1")]),
        (
            "foreign Referer",
            vec![("Referer", "http://evil.example/acme/widgets")],
        ),
        ("neither Origin nor Referer", vec![]),
        (
            "cross-site fetch",
            vec![("Origin", &origin), ("Sec-Fetch-Site", "cross-site")],
        ),
        (
            "same-site fetch",
            vec![("Origin", &origin), ("Sec-Fetch-Site", "same-site")],
        ),
    ];
    for (label, headers) in refused {
        // A fresh page each time, so only the origin check can refuse it.
        let page = world.alice.grant_page(OWNER, REPO, id).await;
        let fields = form_fields(&page, &approve);
        let resp = world
            .alice
            .post_form_with(&approve, &fields, &headers)
            .await;
        assert_eq!(resp.status.as_u16(), 403, "{label}: {}", resp.body);
        world.assert_unchanged(id, &before).await;
    }
    // No Origin, but a Referer on the public origin, same-origin fetch: accepted.
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let fields = form_fields(&page, &approve);
    let headers = [
        ("Referer", referer.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    world
        .alice
        .post_form_with(&approve, &fields, &headers)
        .await
        .assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");
}

both_backends!(two_tabs_the_stale_one_gets_409);
async fn two_tabs_the_stale_one_gets_409(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Two tabs").await;
    let tab_a = world.alice.grant_page(OWNER, REPO, id).await;
    let tab_b = world.alice.grant_page(OWNER, REPO, id).await;

    let edited = Prepare::new(BOT, "Edited in tab A");
    world
        .alice
        .submit_from(&tab_a, OWNER, REPO, id, "edit", &edited.fields())
        .await
        .assert_status(303);
    let after_edit = world.grant(id).await;
    assert_eq!(
        state_of(&after_edit),
        json!({"state": "awaiting_agent", "state_revision": 3})
    );

    let resp = world
        .alice
        .submit_from(&tab_b, OWNER, REPO, id, "approve", &[])
        .await;
    resp.assert_status(409);
    assert!(
        resp.body.contains("changed since you opened it"),
        "{}",
        resp.body
    );
    world.assert_unchanged(id, &after_edit).await;
    let resp = world
        .alice
        .submit_from(&tab_b, OWNER, REPO, id, "withdraw", &[])
        .await;
    resp.assert_status(409);
    world.assert_unchanged(id, &after_edit).await;
}

both_backends!(only_repo_admins_approve);
async fn only_repo_admins_approve(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Needs an admin").await;
    let before = world.grant(id).await;
    let bob = world.human("bob", Some("write")).await;
    let approve = action_path(OWNER, REPO, id, "approve");
    let page = bob.grant_page(OWNER, REPO, id).await;
    assert!(
        !form_actions(&page).contains(&approve),
        "bob sees the approve form"
    );

    // bob borrows a nonce his session really holds (the prepare form's).
    let new_page = bob
        .get_page(&format!("/{OWNER}/{REPO}/agent-work-grants/new"))
        .await;
    let nonce = nonce_in(
        &new_page.body,
        &format!("/{OWNER}/{REPO}/agent-work-grants"),
    )
    .expect("nonce");
    let fields = [("nonce", nonce.as_str()), ("state_revision", "2")];
    let resp = bob.post_form(&approve, &fields, Some(&bob.origin())).await;
    let status = resp.status.as_u16();
    assert!(
        status == 403 || status == 404,
        "bob approving: {status} {}",
        resp.body
    );
    world.assert_unchanged(id, &before).await;

    // carol, with no access to the private repository: 404 page.
    let carol = world.human("carol", None).await;
    carol
        .get_page(&page_path(OWNER, REPO, id))
        .await
        .assert_status(404);
    let resp = carol
        .post_form(&approve, &fields, Some(&carol.origin()))
        .await;
    let status = resp.status.as_u16();
    assert!(status == 403 || status == 404, "carol approving: {status}");
    world.assert_unchanged(id, &before).await;
}

both_backends!(prepare_validates_its_fields);
async fn prepare_validates_its_fields(app: TestApp) {
    let world = World::new(&app).await;
    app.create_user("bob", "human", Some("bob-password-1"))
        .await;
    let mut cases: Vec<(&str, Prepare)> = Vec::new();
    cases.push(("human agent", Prepare::new("bob", "Humans are not agents")));
    cases.push(("unknown agent", Prepare::new("nobody-bot", "No such bot")));
    let mut zero = Prepare::new(BOT, "Zero submissions");
    zero.max_submissions = "0".into();
    cases.push(("max_submissions 0", zero));
    let mut negative = Prepare::new(BOT, "Negative");
    negative.max_submissions = "-1".into();
    cases.push(("max_submissions -1", negative));
    let mut word = Prepare::new(BOT, "Word");
    word.max_submissions = "ten".into();
    cases.push(("max_submissions ten", word));
    let mut bad_date = Prepare::new(BOT, "Bad date");
    bad_date.expires_at = Some("next tuesday".into());
    cases.push(("expires_at not RFC 3339", bad_date));
    let mut bad_json = Prepare::new(BOT, "Bad requirements");
    bad_json.mcp_requirements = Some("{not json".into());
    cases.push(("mcp_requirements not JSON", bad_json));
    for (label, form) in cases {
        let resp: Resp = world.alice.prepare(OWNER, REPO, &form).await;
        assert_eq!(resp.status.as_u16(), 422, "{label}: {}", resp.body);
    }
    assert_eq!(grant_count(&world).await, "0");
    // The same form with valid fields works.
    world.prepare("Valid after all").await;
    assert_eq!(grant_count(&world).await, "1");
}

both_backends!(logout_revokes_the_session_server_side);
async fn logout_revokes_the_session_server_side(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Logout").await;
    let before = world.grant(id).await;
    let cookies = world.alice.session_cookies.join("; ");
    assert!(!cookies.is_empty(), "login set no cookie");
    // The stolen cookie works while the session lives.
    let page = app
        .client
        .get(app.url(&page_path(OWNER, REPO, id)))
        .header("Cookie", &cookies);
    let page = Resp::read(page.send().await.unwrap()).await;
    page.assert_status(200);
    let approve = action_path(OWNER, REPO, id, "approve");
    let fields = form_fields(&page.body, &approve);

    world.alice.logout().await.assert_status(303);
    let home = world.alice.get_page("/").await;
    home.assert_status(303);
    assert!(location_path(&home, &app.base).starts_with("/user/login"));

    // The old cookie is dead on the server, not only forgotten by the browser.
    let again = app.client.get(app.url("/")).header("Cookie", &cookies);
    let again = Resp::read(again.send().await.unwrap()).await;
    again.assert_status(303);
    let post = app
        .client
        .post(app.url(&approve))
        .header("Cookie", &cookies)
        .header("Origin", &app.base)
        .form(&fields);
    let post = Resp::read(post.send().await.unwrap()).await;
    post.assert_status(403);
    world.assert_unchanged(id, &before).await;
}

both_backends!(a_nonce_is_bound_to_its_action_and_grant);
async fn a_nonce_is_bound_to_its_action_and_grant(app: TestApp) {
    let world = World::new(&app).await;
    let first = world.confirmed("First").await;
    let second = world.confirmed("Second").await;
    let first_before = world.grant(first).await;
    let second_before = world.grant(second).await;
    let origin = world.alice.origin();
    let page = world.alice.grant_page(OWNER, REPO, first).await;
    let withdraw = form_fields(&page, &action_path(OWNER, REPO, first, "withdraw"));
    let approve = form_fields(&page, &action_path(OWNER, REPO, first, "approve"));

    // The withdraw form's nonce cannot approve.
    let path = action_path(OWNER, REPO, first, "approve");
    let resp = world.alice.post_form(&path, &withdraw, Some(&origin)).await;
    assert_eq!(resp.status.as_u16(), 403, "{}", resp.body);
    // The first grant's approve nonce cannot approve the second grant.
    let path = action_path(OWNER, REPO, second, "approve");
    let resp = world.alice.post_form(&path, &approve, Some(&origin)).await;
    assert_eq!(resp.status.as_u16(), 403, "{}", resp.body);
    world.assert_unchanged(first, &first_before).await;
    world.assert_unchanged(second, &second_before).await;

    // Another person's session cannot use alice's nonce.
    let bob = world.human("bob", Some("admin")).await;
    let path = action_path(OWNER, REPO, first, "approve");
    let resp = bob.post_form(&path, &approve, Some(&bob.origin())).await;
    assert_eq!(resp.status.as_u16(), 403, "{}", resp.body);
    world.assert_unchanged(first, &first_before).await;
}

both_backends!(a_distinct_approver_can_be_required);
async fn a_distinct_approver_can_be_required(app: TestApp) {
    let world = World::new(&app).await;
    let body = json!({
        "owner": OWNER, "name": "strict", "private": true, "require_distinct_approver": true
    });
    let resp = app
        .send(
            Method::POST,
            "/api/v1/admin/repos",
            Auth::Token(&app.admin_token),
            Body::Json(body),
        )
        .await;
    resp.assert_status(201);
    assert_eq!(resp.json()["require_distinct_approver"], true);
    app.set_collaborator(OWNER, "strict", "alice", "admin")
        .await;
    app.set_collaborator(OWNER, "strict", BOT, "write").await;
    let id = world
        .alice
        .prepare_ok(OWNER, "strict", &Prepare::new(BOT, "Four eyes"))
        .await;
    let path = grant_path(OWNER, "strict", id);
    let auth = Auth::Token(&world.bot);
    let grant = app.get(&path, auth).await.json()["grant"].clone();
    let confirm = confirm_body(grant["proposal_digest"].as_str().unwrap());
    let resp = app
        .post_json(&format!("{path}/confirm"), auth, confirm)
        .await;
    resp.assert_status(200);
    let before = resp.json()["grant"].clone();

    // alice issued it: she may not approve it, form or no form.
    let page = world.alice.grant_page(OWNER, "strict", id).await;
    let approve = action_path(OWNER, "strict", id, "approve");
    let fields = if nonce_in(&page, &approve).is_some() {
        form_fields(&page, &approve)
    } else {
        form_fields(&page, &action_path(OWNER, "strict", id, "withdraw"))
    };
    let resp = world
        .alice
        .post_form(&approve, &fields, Some(&world.alice.origin()))
        .await;
    assert!(
        resp.status.is_client_error(),
        "issuer approved: {}",
        resp.status
    );
    assert_eq!(app.get(&path, auth).await.json()["grant"], before);

    // A second admin may.
    let bob = world.human("bob", None).await;
    app.set_collaborator(OWNER, "strict", "bob", "admin").await;
    let resp = bob.grant_action(OWNER, "strict", id, "approve", &[]).await;
    resp.assert_status(303);
    let active = app.get(&path, auth).await.json()["grant"].clone();
    assert_eq!(active["state"], "active");
    assert_eq!(active["approver"]["login"], "bob");
}
