//! The subscription API: who may use it, what it refuses, and the
//! safe-target rule at creation. No connection is ever attempted: the
//! names resolve through the configured static map, the addresses are
//! classified without connecting, and these apps run no delivery worker
//! (`webhooks.deliver = false`), so a public target is never called.

use reqwest::Method;
use serde_json::json;

use super::subscribe;
use crate::helpers::{Auth, Body, TestApp};
use crate::world::World;

both_backends!(
    subscriptions_are_created_read_changed_and_deleted,
    |config| {
        config.webhooks.deliver = false;
        config.webhooks.hosts.insert(
            "hooks.example.test".into(),
            vec!["93.184.216.34".parse().unwrap()],
        );
    }
);
async fn subscriptions_are_created_read_changed_and_deleted(app: TestApp) {
    let admin = Auth::Token(&app.admin_token);
    let created = subscribe(
        &app,
        json!({"url": "https://hooks.example.test/writ", "types": ["grant.*"], "repos": ["alice/*"],
               "format": "slack", "description": "review queue"}),
    )
    .await;
    created.assert_status(201);
    assert_eq!(created.header("cache-control").as_deref(), Some("no-store"));
    let body = created.json();
    let id = body["id"].as_i64().unwrap();
    assert_eq!(body["enabled"], true);
    assert_eq!(body["types"], json!(["grant.*"]));
    assert_eq!(body["format"], "slack");
    let listed = app.get("/api/v1/admin/webhooks", admin).await;
    listed.assert_status(200);
    let listed = listed.json();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert!(
        listed[0].get("secret").is_none(),
        "the secret is shown once: {listed}"
    );

    let path = format!("/api/v1/admin/webhooks/{id}");
    let patched = app
        .send(
            Method::PATCH,
            &path,
            admin,
            Body::Json(json!({"enabled": false, "types": []})),
        )
        .await;
    patched.assert_status(200);
    assert_eq!(patched.json()["enabled"], false);
    assert_eq!(patched.json()["types"], json!([]));
    assert_eq!(patched.json()["description"], "review queue");
    app.send(Method::DELETE, &path, admin, Body::None)
        .await
        .assert_status(204);
    app.get(&path, admin).await.assert_error(404, "not_found");
    app.send(Method::DELETE, &path, admin, Body::None)
        .await
        .assert_error(404, "not_found");
}

both_backends!(
    bad_subscriptions_are_400_and_targets_that_resolve_privately_are_refused,
    |config| {
        config.webhooks.deliver = false;
        config
            .webhooks
            .hosts
            .insert("inside.test".into(), vec!["127.0.0.1".parse().unwrap()]);
        config.webhooks.hosts.insert(
            "mixed.test".into(),
            vec![
                "93.184.216.34".parse().unwrap(),
                "10.0.0.7".parse().unwrap(),
            ],
        );
    }
);
async fn bad_subscriptions_are_400_and_targets_that_resolve_privately_are_refused(app: TestApp) {
    for body in [
        json!({"url": "http://hooks.example.com/"}),
        json!({"url": "https://127.0.0.1/"}),
        json!({"url": "https://[::1]/"}),
        json!({"url": "https://[::ffff:127.0.0.1]/"}),
        json!({"url": "https://169.254.169.254/latest"}),
        json!({"url": "https://10.1.2.3/"}),
        json!({"url": "https://0.0.0.0/"}),
        json!({"url": "https://inside.test/"}),
        json!({"url": "https://mixed.test/"}),
        json!({"url": "ftp://x/"}),
        json!({"url": "not a url"}),
        json!({"url": "https://user:pw@93.184.216.34/"}),
        json!({"url": "https://93.184.216.34/", "types": ["nope"]}),
        json!({"url": "https://93.184.216.34/", "types": ["grant.*,x"]}),
        json!({"url": "https://93.184.216.34/", "repos": ["alice"]}),
        json!({"url": "https://93.184.216.34/", "format": "teams"}),
        json!({"url": "https://93.184.216.34/", "unknown": 1}),
        json!({"types": []}),
    ] {
        let resp = subscribe(&app, body.clone()).await;
        assert_eq!(resp.status.as_u16(), 400, "{body}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{body}");
    }
    // A disabled subscription is not resolved (the demo's `.invalid` host).
    subscribe(
        &app,
        json!({"url": "https://hooks.example.invalid/", "enabled": false}),
    )
    .await
    .assert_status(201);
    let listed = app
        .get("/api/v1/admin/webhooks", Auth::Token(&app.admin_token))
        .await
        .json();
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "only the disabled one: {listed}"
    );

    // Only an administrator's token: write:admin to change, read:admin to read.
    let world = World::new(&app).await;
    let reader = app.create_token("root", &["read:admin"]).await.token;
    for (token, method, status) in [
        (world.alice_token.as_str(), Method::GET, 403),
        (world.alice_token.as_str(), Method::POST, 403),
        (world.bot.as_str(), Method::GET, 403),
        (reader.as_str(), Method::GET, 200),
        (reader.as_str(), Method::POST, 403),
    ] {
        let resp = app
            .send(
                method.clone(),
                "/api/v1/admin/webhooks",
                Auth::Token(token),
                Body::Json(json!({"url": "https://93.184.216.34/"})),
            )
            .await;
        assert_eq!(resp.status.as_u16(), status, "{method}: {}", resp.body);
    }
}

both_backends!(
    with_the_static_resolver_a_name_outside_the_hosts_map_is_refused,
    |config| config.webhooks.deliver = false
);
async fn with_the_static_resolver_a_name_outside_the_hosts_map_is_refused(app: TestApp) {
    let resp = subscribe(&app, json!({"url": "https://hooks.example.com/"})).await;
    resp.assert_error(400, "invalid_input");
    assert!(
        resp.body.contains("webhooks.hosts"),
        "the message says where names resolve: {}",
        resp.body
    );
    let listed = app
        .get("/api/v1/admin/webhooks", Auth::Token(&app.admin_token))
        .await
        .json();
    assert_eq!(listed, json!([]), "nothing was created");
}
