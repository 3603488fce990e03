//! Issue routes: ordinary issues are never attributed; who may read, open,
//! delete and transfer.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{ADMIN_LOGIN, Auth, Body, TestApp};
use crate::world::{
    ALICE, BOT, BOT_SCOPES, OWNER, REPO, RIVAL, World, is_timestamp, issue_path, issues_path,
    keys_of, new_key,
};

const ISSUE_KEYS: &[&str] = &[
    "agent_work_grant",
    "body",
    "created_at",
    "id",
    "index",
    "poster",
    "repository",
    "title",
];

/// Opens an issue on acme/widgets with `token`.
async fn open(app: &TestApp, token: &str, title: &str, body: &str) -> crate::helpers::Resp {
    app.post_json(
        &issues_path(OWNER, REPO),
        Auth::Token(token),
        json!({"title": title, "body": body}),
    )
    .await
}

/// Checks an ordinary (unattributed) issue.
#[track_caller]
fn check_ordinary(issue: &Value, index: i64, poster: &str, title: &str, body: &str) {
    assert_eq!(keys_of(issue), ISSUE_KEYS, "{issue}");
    assert!(issue["id"].as_i64().unwrap() > 0);
    assert_eq!(issue["index"], index);
    assert_eq!(issue["title"], title);
    assert_eq!(issue["body"], body);
    assert_eq!(issue["poster"]["login"], poster);
    assert!(issue["poster"]["id"].as_i64().unwrap() > 0);
    assert_eq!(issue["repository"]["full_name"], format!("{OWNER}/{REPO}"));
    assert!(is_timestamp(&issue["created_at"]));
    assert!(
        issue["agent_work_grant"].is_null(),
        "an ordinary issue is attributed: {issue}"
    );
}

both_backends!(ordinary_issues_are_never_attributed);
async fn ordinary_issues_are_never_attributed(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("The bot also has a grant").await;
    world.human("bob", Some("write")).await;
    let bob = app
        .create_token("bob", &["read:repository", "write:issue"])
        .await
        .token;
    world.human("carol", Some("read")).await;
    let carol = app.create_token("carol", &["write:issue"]).await.token;
    let bob_read_only = app.create_token("bob", &["read:issue"]).await.token;

    // A repo admin, a human write collaborator, and bots with write access.
    let by_alice = open(&app, &world.alice_token, "  Human issue  ", "by alice\r\n").await;
    by_alice.assert_status(201);
    check_ordinary(
        &by_alice.json(),
        1,
        ALICE,
        "  Human issue  ",
        "by alice\r\n",
    );
    let by_bob = open(&app, &bob, "Bob's issue", "").await;
    by_bob.assert_status(201);
    check_ordinary(&by_bob.json(), 2, "bob", "Bob's issue", "");
    // builder-bot opens an ordinary issue while holding an active grant.
    let by_bot = open(&app, &world.bot, "Bot's own issue", "no grant").await;
    by_bot.assert_status(201);
    check_ordinary(&by_bot.json(), 3, BOT, "Bot's own issue", "no grant");
    assert_eq!(by_bot.json()["poster"], world.grant(id).await["agent"]);

    // A submission in between is attributed.
    let key = new_key();
    let submission = world.submitted(id, &key, "Submitted", "work").await;
    assert_eq!(submission["issue"]["index"], 4);
    // The same text opened ordinarily is not.
    let copy = open(&app, &world.bot, "Submitted", "work").await;
    copy.assert_status(201);
    check_ordinary(&copy.json(), 5, BOT, "Submitted", "work");
    let by_rival = open(&app, &world.rival, "Rival's", "").await;
    by_rival.assert_status(201);
    check_ordinary(&by_rival.json(), 6, RIVAL, "Rival's", "");

    // An attribution cannot be smuggled in.
    for extra in [
        json!({"agent_work_grant": {"grant_id": id, "request_key": key}}),
        json!({"grant_id": id}),
        json!({"request_key": key}),
        json!({"poster_id": 1}),
    ] {
        let mut body = json!({"title": "Smuggled", "body": ""});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let resp = app
            .post_json(&issues_path(OWNER, REPO), Auth::Token(&world.bot), body)
            .await;
        resp.assert_error(400, "invalid_input");
    }
    // Title rules as for submissions.
    for (title, label) in [
        (String::new(), "empty"),
        ("  \t ".to_owned(), "whitespace"),
        ("é".repeat(256), "256 scalars"),
    ] {
        let resp = open(&app, &world.bot, &title, "").await;
        assert_eq!(resp.status.as_u16(), 400, "{label}: {}", resp.body);
    }
    let resp = app
        .send(
            Method::POST,
            &issues_path(OWNER, REPO),
            Auth::Token(&world.bot),
            Body::Raw(
                Some("application/json"),
                br#"{"title":"a\u0000b","body":""}"#.to_vec(),
            ),
        )
        .await;
    resp.assert_error(400, "invalid_input");
    // Read access is not enough; nor is a token without write:issue.
    open(&app, &carol, "Reader's", "")
        .await
        .assert_error(403, "forbidden");
    open(&app, &bob_read_only, "No scope", "")
        .await
        .assert_error(403, "insufficient_scope");
    open(&app, &bob, "Bob again", "").await.assert_status(201);
    app.post_json(
        &issues_path(OWNER, "nope"),
        Auth::Token(&bob),
        json!({"title": "x", "body": ""}),
    )
    .await
    .assert_error(404, "not_found");

    // The list: index order, only the submission attributed.
    let issues = world.all_issues().await;
    let indexes: Vec<i64> = issues
        .iter()
        .map(|i| i["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, (1..=7).collect::<Vec<_>>());
    for issue in &issues {
        if issue["index"] == 4 {
            assert_eq!(
                issue["agent_work_grant"],
                json!({"grant_id": id, "request_key": key})
            );
            assert_eq!(issue["poster"]["login"], BOT);
        } else {
            assert!(issue["agent_work_grant"].is_null(), "{issue}");
        }
        let one = world
            .issue_at(OWNER, REPO, issue["index"].as_i64().unwrap())
            .await;
        one.assert_status(200);
        assert_eq!(&one.json(), issue);
    }
    assert_eq!(world.grant(id).await["submission_count"], 1);
}

/// Three issues: on acme/widgets the one builder-bot's grant submitted,
/// then an ordinary one of alice's; on the public acme/public (alice an
/// admin) one of alice's. The grant and the submission's key.
async fn readable_issues(world: &World<'_>) -> (i64, String) {
    let app = world.app;
    app.create_repo(OWNER, "public", false).await;
    app.set_collaborator(OWNER, "public", ALICE, "admin").await;
    let id = world.active("Readable issues").await;
    let key = new_key();
    world.submitted(id, &key, "Submitted", "").await;
    open(app, &world.alice_token, "Ordinary", "")
        .await
        .assert_status(201);
    app.post_json(
        &issues_path(OWNER, "public"),
        Auth::Token(&world.alice_token),
        json!({"title": "Public issue", "body": ""}),
    )
    .await
    .assert_status(201);
    (id, key)
}

both_backends!(issue_reads_need_access_scopes_and_visibility);
async fn issue_reads_need_access_scopes_and_visibility(app: TestApp) {
    let world = World::new(&app).await;
    let (id, key) = readable_issues(&world).await;

    app.create_user("carol", "human", Some("carol-password-1"))
        .await;
    let carol = app.create_token("carol", &["read:issue"]).await.token;
    let no_issue_scope = app.create_token(BOT, &["read:repository"]).await.token;
    let write_issue = app.create_token(BOT, &["write:issue"]).await.token;
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
    let bad = format!("writ_{}", "0".repeat(64));

    let widgets_one = issue_path(OWNER, REPO, 1);
    let widgets_list = issues_path(OWNER, REPO);
    let public_one = issue_path(OWNER, "public", 1);
    let public_list = issues_path(OWNER, "public");
    #[rustfmt::skip]
    let cases: Vec<(&str, Auth, &str, u16, &str)> = vec![
        ("anonymous", Auth::None, &widgets_one, 401, "unauthenticated"),
        ("anonymous", Auth::None, &widgets_list, 401, "unauthenticated"),
        ("unknown token", Auth::Token(&bad), &widgets_one, 401, "unauthenticated"),
        ("bot", Auth::Token(&world.bot), &widgets_one, 200, ""),
        ("rival bot (write collaborator)", Auth::Token(&world.rival), &widgets_one, 200, ""),
        ("human admin", Auth::Token(&world.alice_token), &widgets_list, 200, ""),
        ("no issue scope", Auth::Token(&no_issue_scope), &widgets_one, 403, "insufficient_scope"),
        ("no issue scope", Auth::Token(&no_issue_scope), &widgets_list, 403, "insufficient_scope"),
        ("write:issue implies read", Auth::Token(&write_issue), &widgets_one, 200, ""),
        ("no access to private", Auth::Token(&carol), &widgets_one, 404, "not_found"),
        ("no access to private", Auth::Token(&carol), &widgets_list, 404, "not_found"),
        ("public readable by all", Auth::Token(&carol), &public_one, 200, ""),
        ("public readable by all", Auth::Token(&carol), &public_list, 200, ""),
        ("reducer elsewhere", Auth::Token(&limited), &widgets_one, 403, "insufficient_scope"),
        ("reducer elsewhere", Auth::Token(&limited), &widgets_list, 403, "insufficient_scope"),
        ("reducer reaches", Auth::Token(&limited), &public_one, 200, ""),
        ("public_only on private", Auth::Token(&public_only), &widgets_one, 403, "insufficient_scope"),
        ("public_only on private", Auth::Token(&public_only), &widgets_list, 403, "insufficient_scope"),
        ("public_only on public", Auth::Token(&public_only), &public_list, 200, ""),
    ];
    for (who, auth, path, status, code) in cases {
        let resp = app.get(path, auth).await;
        assert_eq!(resp.status.as_u16(), status, "{who} {path}: {}", resp.body);
        if status == 200 {
            let json = resp.json();
            let issue = if json.is_array() {
                json[0].clone()
            } else {
                json
            };
            assert_eq!(keys_of(&issue), ISSUE_KEYS);
        } else {
            assert_eq!(resp.code(), code, "{who} {path}: {}", resp.body);
        }
    }
    // The attribution is visible to every reader.
    let resp = app.get(&widgets_one, Auth::Token(&world.rival)).await;
    assert_eq!(
        resp.json()["agent_work_grant"],
        json!({"grant_id": id, "request_key": key})
    );
}

both_backends!(unknown_issues_bad_indexes_and_unknown_repositories_are_refused);
async fn unknown_issues_bad_indexes_and_unknown_repositories_are_refused(app: TestApp) {
    let world = World::new(&app).await;
    readable_issues(&world).await;

    // Unknown issues, bad indexes, unknown repositories.
    let bot = Auth::Token(&world.bot);
    app.get(&issue_path(OWNER, REPO, 3), bot)
        .await
        .assert_error(404, "not_found");
    app.get(&issue_path(OWNER, REPO, i64::MAX), bot)
        .await
        .assert_error(404, "not_found");
    for bad in [
        "0",
        "abc",
        "-1",
        "01",
        "1.0",
        "+1",
        "99999999999999999999",
        "%20",
    ] {
        let resp = app.get(&issue_path(OWNER, REPO, bad), bot).await;
        assert_eq!(resp.status.as_u16(), 400, "index {bad:?}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "index {bad:?}");
    }
    app.get(&issue_path(OWNER, "nope", 1), bot)
        .await
        .assert_error(404, "not_found");
    app.get(&issue_path("nobody", REPO, 1), bot)
        .await
        .assert_error(404, "not_found");
    app.get(&issues_path(OWNER, "nope"), bot)
        .await
        .assert_error(404, "not_found");
}

both_backends!(issue_lists_page_and_refuse_unknown_queries);
async fn issue_lists_page_and_refuse_unknown_queries(app: TestApp) {
    let world = World::new(&app).await;
    readable_issues(&world).await;
    let bot = Auth::Token(&world.bot);
    let widgets_list = issues_path(OWNER, REPO);

    // List pages and query rules.
    let app_ref = &app;
    let page = |query: &str| {
        let path = format!("{widgets_list}?{query}");
        let app = app_ref;
        async move { app.get(&path, bot).await }
    };
    let resp = page("limit=1&page=2").await;
    resp.assert_status(200);
    assert_eq!(resp.header("x-total-count").as_deref(), Some("2"));
    let items = resp.json();
    assert_eq!(items.as_array().unwrap().len(), 1);
    assert_eq!(items[0]["index"], 2);
    assert!(resp.header("link").is_some());
    let resp = page("page=5").await;
    resp.assert_status(200);
    assert_eq!(resp.json(), json!([]));
    assert_eq!(resp.header("x-total-count").as_deref(), Some("2"));
    let resp = page("page=1000000000&limit=50").await;
    resp.assert_status(200);
    assert_eq!(resp.json(), json!([]));
    for query in [
        "page=0",
        "page=abc",
        "limit=abc",
        "foo=1",
        "state=open",
        "page=1&page=2",
    ] {
        let resp = page(query).await;
        assert_eq!(resp.status.as_u16(), 400, "{query}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{query}");
    }
}

both_backends!(only_the_setup_privilege_deletes_or_transfers);
async fn only_the_setup_privilege_deletes_or_transfers(app: TestApp) {
    let world = World::new(&app).await;
    app.create_repo(OWNER, "gadgets", true).await;
    app.set_collaborator(OWNER, "gadgets", ALICE, "admin").await;
    let id = world.active("Setup only").await;
    let key = new_key();
    let submission = world.submitted(id, &key, "Keep me", "").await;
    let issue = world.issue_at(OWNER, REPO, 1).await.json();

    let admin_read = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    let admin_repo = app
        .create_token(ADMIN_LOGIN, &["write:repository", "write:issue"])
        .await
        .token;
    #[rustfmt::skip]
    let refused: Vec<(&str, Auth, u16)> = vec![
        ("anonymous", Auth::None, 401),
        ("repo admin with every scope", Auth::Token(&world.alice_token), 403),
        ("the submitting bot", Auth::Token(&world.bot), 403),
        ("another bot", Auth::Token(&world.rival), 403),
        ("site admin with read:admin only", Auth::Token(&admin_read), 403),
        ("site admin without admin scopes", Auth::Token(&admin_repo), 403),
    ];
    let transfer = format!("{}/transfer", issue_path(OWNER, REPO, 1));
    for (who, auth, status) in refused {
        let resp = app
            .send(
                Method::DELETE,
                &issue_path(OWNER, REPO, 1),
                auth,
                Body::None,
            )
            .await;
        assert_eq!(resp.status.as_u16(), status, "{who} delete: {}", resp.body);
        let resp = app
            .post_json(&transfer, auth, json!({"to": "acme/gadgets"}))
            .await;
        assert_eq!(
            resp.status.as_u16(),
            status,
            "{who} transfer: {}",
            resp.body
        );
    }
    // Nothing moved.
    assert_eq!(world.issue_at(OWNER, REPO, 1).await.json(), issue);
    assert_eq!(world.receipt(id, &key).await, submission);
    assert!(world.all_issues_of(OWNER, "gadgets").await.is_empty());

    // The admin's malformed or impossible requests are 4xx and change nothing.
    assert_eq!(
        world.delete_issue(OWNER, REPO, 9).await.status.as_u16(),
        404
    );
    assert_eq!(
        world
            .transfer_issue(OWNER, REPO, 9, "acme/gadgets")
            .await
            .status
            .as_u16(),
        404
    );
    let admin = Auth::Token(&app.admin_token);
    for bad in ["0", "abc"] {
        let resp = app
            .send(
                Method::DELETE,
                &issue_path(OWNER, REPO, bad),
                admin,
                Body::None,
            )
            .await;
        assert_eq!(resp.status.as_u16(), 400, "delete {bad}: {}", resp.body);
    }
    for (label, body) in [
        ("no such repository", json!({"to": "acme/nope"})),
        ("not owner/name", json!({"to": "gadgets"})),
        ("the same repository", json!({"to": "acme/widgets"})),
        ("unknown field", json!({"to": "acme/gadgets", "index": 1})),
        ("missing to", json!({})),
    ] {
        let resp = app.post_json(&transfer, admin, body).await;
        let status = resp.status.as_u16();
        assert!(
            (400..500).contains(&status),
            "{label}: {status} {}",
            resp.body
        );
    }
    assert_eq!(world.issue_at(OWNER, REPO, 1).await.json(), issue);
    assert_eq!(world.receipt(id, &key).await, submission);

    // The setup privilege can.
    let moved = world.transfer_issue(OWNER, REPO, 1, "acme/gadgets").await;
    moved.assert_status(200);
    assert_eq!(moved.json()["repository"]["full_name"], "acme/gadgets");
    world
        .delete_issue(OWNER, "gadgets", 1)
        .await
        .assert_status(204);
    assert_eq!(world.receipt(id, &key).await["status"], "issue_deleted");
}
