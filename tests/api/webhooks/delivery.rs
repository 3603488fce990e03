//! Deliveries to real receivers, checked by the reference library.

use reqwest::Method;
use serde_json::{Value, json};

use super::{
    Receiver, TestCa, deliveries, first_attempted, insert_unchecked, loopback, python,
    settled_deliveries, subscribe, subscribed,
};
use crate::events::all;
use crate::helpers::{Auth, Body, TestApp};
use crate::world::{BOT, World, new_key};

both_backends!(
    each_matching_event_is_delivered_signed,
    crate::webhooks::loopback(60)
);
async fn each_matching_event_is_delivered_signed(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 0).await;
    let created = subscribe(
        &app,
        json!({"url": receiver.url(), "types": ["grant.*", "submission.created"],
               "repos": ["acme/*"], "description": "review queue"}),
    )
    .await;
    created.assert_status(201);
    let hook = created.json();
    let secret = hook["secret"]
        .as_str()
        .expect("the secret, once")
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    receiver.trust(&[&secret]);
    let elsewhere = subscribe(&app, json!({"url": receiver.url(), "repos": ["other/*"]})).await;
    elsewhere.assert_status(201);

    let id = world.active("Delivered").await;
    world.submitted(id, &new_key(), "Delivered work", "").await;
    let feed: Vec<Value> = all(&app, Auth::Token(&app.admin_token))
        .await
        .into_iter()
        .filter(|e| e["grant"]["id"] == id)
        .collect();
    assert_eq!(feed.len(), 4, "prepared, confirmed, approved, created");
    let got = receiver.wait_for(4).await;
    let hook_id = hook["id"].as_i64().unwrap();
    let delivered = settled_deliveries(&app, hook_id, 4).await;

    let mut bodies: Vec<Value> = got.iter().map(|r| r["body"].clone()).collect();
    bodies.sort_by_key(|b| b["id"].as_i64());
    assert_eq!(bodies, feed, "the body is the event as the feed shows it");
    let mut ids = Vec::new();
    for r in &got {
        assert_eq!(
            r["verified_by"],
            json!([0]),
            "standardwebhooks verified it: {r}"
        );
        assert_eq!(r["content_type"], "application/json");
        assert_eq!(r["path"], "/hook");
        let sig = r["webhook_signature"].as_str().unwrap();
        assert!(sig.starts_with("v1,") && !sig.contains(' '), "{sig}");
        ids.push(r["webhook_id"].as_str().unwrap().to_owned());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "one webhook-id per delivery");
    for d in &delivered {
        assert_eq!(d["status"], "delivered", "{d}");
        assert_eq!(d["attempts"], 1, "{d}");
        assert_eq!(d["last_status_code"], 204, "{d}");
    }
    let other = elsewhere.json()["id"].as_i64().unwrap();
    assert_eq!(
        deliveries(&app, other).await,
        Vec::<Value>::new(),
        "repos: other/* only"
    );

    // The report view, for auditors.
    let report = app
        .get(
            "/api/v1/admin/reports/webhook-deliveries?format=json",
            Auth::Token(&app.admin_token),
        )
        .await;
    report.assert_status(200);
    let rows = report.json();
    assert_eq!(rows.as_array().unwrap().len(), 4, "{rows}");
    assert_eq!(rows[0]["event_type"], "grant.prepared");
    assert_eq!(rows[0]["status"], "delivered");
    eprintln!(
        "a delivery as received: webhook-id {} webhook-timestamp {} webhook-signature {} user-agent {} body {}",
        got[0]["webhook_id"],
        got[0]["webhook_timestamp"],
        got[0]["webhook_signature"],
        got[0]["user_agent"],
        got[0]["body"]
    );
}

both_backends!(
    a_failed_attempt_is_retried_with_the_same_id_and_a_fresh_signature,
    crate::webhooks::loopback(60)
);
async fn a_failed_attempt_is_retried_with_the_same_id_and_a_fresh_signature(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 2).await;
    let hook = subscribed(&app, &receiver, json!({"types": ["grant.prepared"]})).await;
    world.prepare("Retried").await;
    let got = receiver.wait_for(3).await;
    assert_eq!(
        got.iter()
            .map(|r| r["answered"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [500, 500, 204]
    );
    for r in &got {
        assert_eq!(
            r["webhook_id"], got[0]["webhook_id"],
            "stable across retries"
        );
        assert_eq!(r["verified_by"], json!([0]), "{r}");
    }
    let delivered = settled_deliveries(&app, hook["id"].as_i64().unwrap(), 1).await;
    assert_eq!(delivered[0]["status"], "delivered");
    assert_eq!(delivered[0]["attempts"], 3);
}

both_backends!(
    during_a_rotation_both_secrets_sign,
    crate::webhooks::loopback(60)
);
async fn during_a_rotation_both_secrets_sign(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 0).await;
    let hook = subscribed(&app, &receiver, json!({"types": ["grant.prepared"]})).await;
    let old = hook["secret"].as_str().unwrap().to_owned();
    let id = hook["id"].as_i64().unwrap();
    let rotated = app
        .send(
            Method::POST,
            &format!("/api/v1/admin/webhooks/{id}/rotate-secret"),
            Auth::Token(&app.admin_token),
            Body::None,
        )
        .await;
    rotated.assert_status(200);
    let new = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    receiver.trust(&[&new, &old]);
    world.prepare("Rotated").await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0]["verified_by"], json!([0, 1]), "{}", got[0]);
    assert_eq!(
        got[0]["webhook_signature"]
            .as_str()
            .unwrap()
            .split(' ')
            .count(),
        2
    );
}

both_backends!(
    twenty_failed_deliveries_disable_a_subscription,
    crate::webhooks::loopback(0)
);
async fn twenty_failed_deliveries_disable_a_subscription(app: TestApp) {
    let Some(python) = python() else { return };
    app.create_user(BOT, "bot", None).await;
    let receiver = Receiver::start(&python, 1000).await;
    let hook = subscribe(
        &app,
        json!({"url": receiver.url(), "types": ["tool_grants.changed"]}),
    )
    .await;
    let hook = hook.json();
    let id = hook["id"].as_i64().unwrap();
    let path = format!("/api/v1/admin/agents/{BOT}/tool-grants");
    for n in 0..21 {
        let grants = json!({"grants": [{"id": format!("g{n}"), "repos": [], "tools": ["get_agent_work_grant"]}]});
        app.send(
            Method::PUT,
            &path,
            Auth::Token(&app.admin_token),
            Body::Json(grants),
        )
        .await
        .assert_status(200);
        if n == 19 {
            // Each delivery fails for good at its first attempt (give up
            // after 0 s): the twentieth disables the subscription.
            settled_deliveries(&app, id, 20).await;
        }
    }
    let all_deliveries = deliveries(&app, id).await;
    assert_eq!(
        all_deliveries.len(),
        20,
        "none for the event after the disabling"
    );
    assert!(
        all_deliveries
            .iter()
            .all(|d| d["status"] == "failed" && d["last_status_code"] == 500)
    );
    let view = app
        .get(
            &format!("/api/v1/admin/webhooks/{id}"),
            Auth::Token(&app.admin_token),
        )
        .await
        .json();
    assert_eq!(view["enabled"], false, "{view}");
    assert!(view["disabled_at"].is_string(), "{view}");
    let disabled: Vec<Value> = all(&app, Auth::Token(&app.admin_token))
        .await
        .into_iter()
        .filter(|e| e["type"] == "webhook.disabled")
        .collect();
    assert_eq!(disabled.len(), 1);
    assert_eq!(
        disabled[0]["data"],
        json!({"subscription_id": id, "failed_deliveries": 20})
    );
    assert_eq!(disabled[0]["actor"], Value::Null);

    // Enabled again, a manual retry attempts a failed delivery once more.
    app.send(
        Method::PATCH,
        &format!("/api/v1/admin/webhooks/{id}"),
        Auth::Token(&app.admin_token),
        Body::Json(json!({"enabled": true})),
    )
    .await
    .assert_status(200);
    let before = receiver.requests().len();
    let delivery = all_deliveries[0]["id"].as_i64().unwrap();
    app.send(
        Method::POST,
        &format!("/api/v1/admin/webhooks/{id}/deliveries/{delivery}/retry"),
        Auth::Token(&app.admin_token),
        Body::None,
    )
    .await
    .assert_status(200);
    receiver.wait_for(before + 1).await;
    let after = settled_deliveries(&app, id, 20).await;
    let retried = after.iter().find(|d| d["id"] == delivery).unwrap();
    assert_eq!(retried["attempts"], 2, "{retried}");
}

both_backends!(a_target_refused_at_delivery_gets_no_traffic);
async fn a_target_refused_at_delivery_gets_no_traffic(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 0).await;
    // Private targets are not allowed here, so the API refuses this URL;
    // written directly, it stands for a target that became private after
    // it was checked (a name that now resolves to loopback).
    subscribe(&app, json!({"url": receiver.url()}))
        .await
        .assert_error(400, "invalid_input");
    insert_unchecked(&app, &format!("https://127.0.0.1:{}/hook", receiver.port)).await;
    world.prepare("Refused at delivery").await;
    let tried = first_attempted(&app, 1).await;
    let error = tried[0]["last_error"].as_str().unwrap();
    assert!(error.contains("loopback"), "{error}");
    assert_eq!(tried[0]["last_status_code"], Value::Null);
    assert_eq!(
        receiver.requests().len(),
        0,
        "no request reached the receiver"
    );
}

/// The HTTPS path: a loopback receiver with a certificate of a test CA
/// that Writ trusts through `webhooks.extra_ca_file`, reached by a name
/// the static host map resolves.
async fn https_app(backend: crate::helpers::Backend) -> (TestApp, TestCa) {
    let ca = TestCa::new();
    let file = ca.ca_file();
    let app = TestApp::spawn_with(backend, move |config| {
        loopback(60)(config);
        config.webhooks.extra_ca_file = Some(file);
        config
            .webhooks
            .hosts
            .insert("hooks.writ.test".into(), vec!["127.0.0.1".parse().unwrap()]);
    })
    .await;
    (app, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_deliveries_trust_the_extra_ca_sqlite() {
    https_delivery(crate::helpers::Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_deliveries_trust_the_extra_ca_postgres() {
    if crate::helpers::postgres_admin_url().is_none() {
        crate::helpers::skip_postgres();
        return;
    }
    https_delivery(crate::helpers::Backend::Postgres).await;
}

async fn https_delivery(backend: crate::helpers::Backend) {
    let Some(python) = python() else { return };
    let (app, ca) = https_app(backend).await;
    let world = World::new(&app).await;
    let receiver = Receiver::start_tls(&python, &ca).await;
    let url = format!("https://hooks.writ.test:{}/hook", receiver.port);
    let hook = subscribe(&app, json!({"url": url, "types": ["grant.prepared"]})).await;
    hook.assert_status(201);
    let hook = hook.json();
    receiver.trust(&[hook["secret"].as_str().unwrap()]);
    world.prepare("Over HTTPS").await;
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0]["verified_by"], json!([0]), "{}", got[0]);
    assert_eq!(got[0]["body"]["type"], "grant.prepared");
    let delivered = settled_deliveries(&app, hook["id"].as_i64().unwrap(), 1).await;
    assert_eq!(delivered[0]["status"], "delivered");
}

both_backends!(
    the_slack_format_posts_one_unsigned_line,
    crate::webhooks::loopback(60)
);
async fn the_slack_format_posts_one_unsigned_line(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 0).await;
    let hook = subscribe(
        &app,
        json!({"url": receiver.url(), "format": "slack", "types": ["grant.prepared"]}),
    )
    .await;
    hook.assert_status(201);
    let id = world.prepare("Told on Slack").await;
    let got = receiver.wait_for(1).await;
    assert_eq!(
        got[0]["body"],
        json!({"text": format!(
            "Writ: grant.prepared on acme/widgets, grant #{id} (awaiting_agent) by alice <{}/acme/widgets/agent-work-grants/{id}>",
            app.base
        )})
    );
    assert_eq!(got[0]["webhook_signature"], Value::Null, "not signed");
}

both_backends!(
    a_name_that_resolves_privately_is_refused_at_delivery,
    |config| {
        config
            .webhooks
            .hosts
            .insert("hooks.writ.test".into(), vec!["127.0.0.1".parse().unwrap()]);
    }
);
async fn a_name_that_resolves_privately_is_refused_at_delivery(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let receiver = Receiver::start(&python, 0).await;
    let url = format!("https://hooks.writ.test:{}/hook", receiver.port);
    subscribe(&app, json!({"url": url}))
        .await
        .assert_error(400, "invalid_input");
    // Written directly: a name checked when it resolved publicly, now
    // pointing at loopback (DNS rebinding).
    insert_unchecked(&app, &url).await;
    world.prepare("Rebound").await;
    let tried = first_attempted(&app, 1).await;
    let error = tried[0]["last_error"].as_str().unwrap();
    assert!(error.contains("loopback"), "{error}");
    assert_eq!(
        receiver.requests().len(),
        0,
        "no request reached the receiver"
    );
}

both_backends!(
    two_processes_share_the_deliveries_and_attempt_each_once,
    crate::webhooks::loopback(60)
);
async fn two_processes_share_the_deliveries_and_attempt_each_once(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let replica = app.spawn_replica().await;
    let receiver = Receiver::start(&python, 0).await;
    let hook = subscribe(
        &app,
        json!({"url": receiver.url(), "types": ["submission.created"]}),
    )
    .await;
    let hook = hook.json();
    receiver.trust(&[hook["secret"].as_str().unwrap()]);
    let mut form = crate::world::Prepare::new(BOT, "Two processes");
    form.max_submissions = "40".into();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let path = crate::world::submit_path(crate::world::OWNER, crate::world::REPO, id);
    let servers = [app.base.clone(), replica.base.clone()];
    futures_util::future::join_all((0..40).map(|n| {
        let body = crate::world::submit_body(&digest, &new_key(), &format!("Work {n}"), "");
        let url = format!("{}{path}", servers[n % 2]);
        let (client, token) = (&app.client, &world.bot);
        async move {
            let resp = client
                .post(url)
                .header("authorization", format!("token {token}"))
                .json(&body)
                .send()
                .await
                .expect("submit");
            assert_eq!(resp.status().as_u16(), 201);
        }
    }))
    .await;
    let got = receiver.wait_for(40).await;
    let delivered = settled_deliveries(&app, hook["id"].as_i64().unwrap(), 40).await;
    assert!(
        delivered
            .iter()
            .all(|d| d["status"] == "delivered" && d["attempts"] == 1)
    );
    let mut ids: Vec<&str> = got
        .iter()
        .map(|r| r["webhook_id"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        (got.len(), ids.len()),
        (40, 40),
        "each delivery attempted once"
    );
    assert!(got.iter().all(|r| r["verified_by"] == json!([0])));
}
