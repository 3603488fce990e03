//! The security matrix of the agent routes: principal × route × repository.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Auth, Body, OTHER_DIGEST, TestApp, confirm_body, grant_path};
use crate::world::{ALICE, ALICE_PW, BOT, BOT_SCOPES, OWNER, Prepare, REPO, RIVAL, World};

/// One row: who calls what, and the expected status and error code.
struct Case<'a> {
    who: &'a str,
    auth: Auth<'a>,
    confirm: bool,
    path: &'a str,
    status: u16,
    code: Option<&'a str>,
}

async fn run(app: &TestApp, cases: &[Case<'_>]) {
    for case in cases {
        let resp = if case.confirm {
            let path = format!("{}/confirm", case.path);
            let body = Body::Json(confirm_body(OTHER_DIGEST));
            app.send(Method::POST, &path, case.auth, body).await
        } else {
            app.get(case.path, case.auth).await
        };
        let what = if case.confirm { "confirm" } else { "get" };
        assert_eq!(
            resp.status.as_u16(),
            case.status,
            "{} {what} {}: {}",
            case.who,
            case.path,
            resp.body
        );
        if let Some(code) = case.code {
            assert_eq!(
                resp.code(),
                code,
                "{} {what} {}: {}",
                case.who,
                case.path,
                resp.body
            );
        }
        if case.status == 401 {
            assert!(
                resp.header("www-authenticate").is_some(),
                "{}: 401 without WWW-Authenticate",
                case.who
            );
        }
    }
}

fn scoped(body_scopes: &[&str]) -> Value {
    json!({"name": format!("t-{}", uuid::Uuid::new_v4().simple()), "scopes": body_scopes})
}

both_backends!(agent_route_security_matrix);
async fn agent_route_security_matrix(app: TestApp) {
    let world = World::new(&app).await;
    // acme/public: public, alice writes it, builder-bot has no entry.
    app.create_repo(OWNER, "public", false).await;
    app.set_collaborator(OWNER, "public", ALICE, "admin").await;
    // acme/other: private, builder-bot can read it.
    app.create_repo(OWNER, "other", true).await;
    app.set_collaborator(OWNER, "other", BOT, "read").await;

    let private_id = world.prepare("Private work").await;
    let public_id = world
        .alice
        .prepare_ok(OWNER, "public", &Prepare::new(BOT, "Public work"))
        .await;
    let private_before = world.grant(private_id).await;

    let token = |body| app.create_token_with(BOT, body);
    let no_read_repo = token(scoped(&["write:issue", "read:issue"])).await.token;
    let no_write_issue = token(scoped(&["read:repository", "read:issue"]))
        .await
        .token;
    let mut body = scoped(BOT_SCOPES);
    body["public_only"] = json!(true);
    let public_only = token(body).await.token;
    let mut body = scoped(BOT_SCOPES);
    body["repositories"] = json!(["acme/other"]);
    let only_other = token(body).await.token;
    let mut body = scoped(BOT_SCOPES);
    body["repositories"] = json!(["acme/widgets"]);
    let only_widgets = token(body).await.token;
    let write_repo = token(scoped(&["write:repository", "write:issue"]))
        .await
        .token;

    let bot = world.bot.as_str();
    let bad = format!("writ_{}", "0".repeat(64));
    let private = grant_path(OWNER, REPO, private_id);
    let public = grant_path(OWNER, "public", public_id);
    let wrong_repo = grant_path(OWNER, "public", private_id);
    let no_repo = grant_path(OWNER, "nope", private_id);
    let no_owner = grant_path("nobody", REPO, private_id);
    let p = private.as_str();

    #[rustfmt::skip]
    let cases = [
        Case { who: "anonymous", auth: Auth::None, confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "anonymous", auth: Auth::None, confirm: true, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "unknown token", auth: Auth::Token(&bad), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "empty token", auth: Auth::Raw("token "), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "unknown scheme", auth: Auth::Raw("Digest abc"), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "token scheme", auth: Auth::Token(bot), confirm: false, path: p, status: 200, code: None },
        Case { who: "Bearer scheme", auth: Auth::Bearer(bot), confirm: false, path: p, status: 200, code: None },
        Case { who: "Basic login:token", auth: Auth::Basic(BOT, bot), confirm: false, path: p, status: 200, code: None },
        Case { who: "Basic login:token confirm", auth: Auth::Basic(BOT, bot), confirm: true, path: p, status: 409, code: Some("proposal_mismatch") },
        Case { who: "Basic login:wrong token", auth: Auth::Basic(BOT, &bad), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "Basic other login:token", auth: Auth::Basic(RIVAL, bot), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "Basic human password", auth: Auth::Basic(ALICE, ALICE_PW), confirm: false, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "Basic human password", auth: Auth::Basic(ALICE, ALICE_PW), confirm: true, path: p, status: 401, code: Some("unauthenticated") },
        Case { who: "human token", auth: Auth::Token(&world.alice_token), confirm: false, path: p, status: 403, code: Some("agent_only") },
        Case { who: "human token", auth: Auth::Token(&world.alice_token), confirm: true, path: p, status: 403, code: Some("agent_only") },
        Case { who: "Basic human:token", auth: Auth::Basic(ALICE, &world.alice_token), confirm: false, path: p, status: 403, code: Some("agent_only") },
        Case { who: "admin token", auth: Auth::Token(&app.admin_token), confirm: false, path: p, status: 403, code: Some("agent_only") },
        Case { who: "rival bot", auth: Auth::Token(&world.rival), confirm: false, path: p, status: 404, code: Some("not_found") },
        Case { who: "rival bot", auth: Auth::Token(&world.rival), confirm: true, path: p, status: 404, code: Some("not_found") },
        Case { who: "bot right scopes", auth: Auth::Token(bot), confirm: true, path: p, status: 409, code: Some("proposal_mismatch") },
        Case { who: "bot without read:repository", auth: Auth::Token(&no_read_repo), confirm: false, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "bot without read:repository", auth: Auth::Token(&no_read_repo), confirm: true, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "bot without write:issue", auth: Auth::Token(&no_write_issue), confirm: false, path: p, status: 200, code: None },
        Case { who: "bot without write:issue", auth: Auth::Token(&no_write_issue), confirm: true, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "bot write:repository implies read", auth: Auth::Token(&write_repo), confirm: true, path: p, status: 409, code: Some("proposal_mismatch") },
        Case { who: "public_only on private", auth: Auth::Token(&public_only), confirm: false, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "public_only on private", auth: Auth::Token(&public_only), confirm: true, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "limited to acme/other", auth: Auth::Token(&only_other), confirm: false, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "limited to acme/other", auth: Auth::Token(&only_other), confirm: true, path: p, status: 403, code: Some("insufficient_scope") },
        Case { who: "limited to acme/widgets", auth: Auth::Token(&only_widgets), confirm: false, path: p, status: 200, code: None },
        Case { who: "bot, public repo, no entry", auth: Auth::Token(bot), confirm: false, path: &public, status: 200, code: None },
        Case { who: "public_only, public repo", auth: Auth::Token(&public_only), confirm: false, path: &public, status: 200, code: None },
        Case { who: "limited to acme/other, public repo", auth: Auth::Token(&only_other), confirm: false, path: &public, status: 403, code: Some("insufficient_scope") },
        Case { who: "rival, public repo", auth: Auth::Token(&world.rival), confirm: false, path: &public, status: 404, code: Some("not_found") },
        Case { who: "grant on another repo's path", auth: Auth::Token(bot), confirm: false, path: &wrong_repo, status: 404, code: Some("not_found") },
        Case { who: "missing repo", auth: Auth::Token(bot), confirm: false, path: &no_repo, status: 404, code: Some("not_found") },
        Case { who: "missing owner", auth: Auth::Token(bot), confirm: false, path: &no_owner, status: 404, code: Some("not_found") },
    ];
    run(&app, &cases).await;
    world.assert_unchanged(private_id, &private_before).await;
}

both_backends!(losing_access_hides_the_grant);
async fn losing_access_hides_the_grant(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Access will go").await;
    let before = world.grant(id).await;
    let mut body = scoped(BOT_SCOPES);
    body["public_only"] = json!(true);
    let public_only = app.create_token_with(BOT, body).await.token;

    app.remove_collaborator(OWNER, REPO, BOT).await;
    let path = grant_path(OWNER, REPO, id);
    #[rustfmt::skip]
    let cases = [
        Case { who: "bot without access", auth: Auth::Token(&world.bot), confirm: false, path: &path, status: 404, code: Some("not_found") },
        Case { who: "bot without access", auth: Auth::Token(&world.bot), confirm: true, path: &path, status: 404, code: Some("not_found") },
        // No 403 reveals a repository the bot cannot read.
        Case { who: "public_only, no access", auth: Auth::Token(&public_only), confirm: false, path: &path, status: 404, code: Some("not_found") },
    ];
    run(&app, &cases).await;
    let list = app
        .get("/api/v1/agent-work-grants", Auth::Token(&world.bot))
        .await;
    list.assert_status(200);
    assert_eq!(list.json(), json!([]));
    assert_eq!(list.header("x-total-count").as_deref(), Some("0"));

    // Access restored: the grant is back, unchanged.
    app.set_collaborator(OWNER, REPO, BOT, "read").await;
    world.assert_unchanged(id, &before).await;
}
