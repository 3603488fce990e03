//! Each event type from its real trigger, and none from a change that
//! rolled back.

use reqwest::Method;
use serde_json::{Value, json};

use super::{all, of_grant, types};
use crate::db::SqlConn;
use crate::helpers::{ADMIN_LOGIN, Auth, Body, TestApp};
use crate::world::{ALICE, BOT, OWNER, Prepare, REPO, World, issue_path, new_key};

both_backends!(each_change_of_a_grant_writes_its_event);
async fn each_change_of_a_grant_writes_its_event(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.prepare("Events").await;
    let mut revisions = vec![world.grant(id).await];
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let edited = Prepare::new(BOT, "Events, edited");
    world
        .alice
        .submit_from(&page, OWNER, REPO, id, "edit", &edited.fields())
        .await
        .assert_status(303);
    revisions.push(world.grant(id).await);
    world.confirm(id).await.assert_status(200);
    revisions.push(world.grant(id).await);
    world.approve(id).await.assert_status(303);
    revisions.push(world.grant(id).await);
    let key = new_key();
    let receipt = world
        .submitted(id, &key, "Title 7f3a only the bot wrote", "Body 9c1e")
        .await;
    revisions.push(world.grant(id).await);
    world.withdraw(id).await.assert_status(303);
    revisions.push(world.grant(id).await);

    let events = of_grant(&all(&app, Auth::Token(&world.alice_token)).await, id);
    assert_eq!(
        types(&events),
        [
            "grant.prepared",
            "grant.edited",
            "grant.confirmed",
            "grant.approved",
            "submission.created",
            "grant.withdrawn",
        ]
    );
    let actors = [ALICE, ALICE, BOT, ALICE, BOT, ALICE];
    let kinds = ["human", "human", "bot", "human", "bot", "human"];
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["schema_version"], 1, "{event}");
        assert_eq!(
            event["actor"],
            json!({"login": actors[i], "kind": kinds[i]})
        );
        assert_eq!(event["repository"]["full_name"], format!("{OWNER}/{REPO}"));
        let grant = &revisions[i];
        assert_eq!(
            event["grant"],
            json!({
                "id": id,
                "agent": BOT,
                "state": grant["state"],
                "state_revision": grant["state_revision"],
                "proposal_digest": grant["proposal_digest"],
            }),
            "event {i} shows the grant as its change left it"
        );
        let at = event["occurred_at"].as_str().expect("occurred_at");
        assert!(at.len() == 27 && at.ends_with('Z'), "{at}");
        if i > 0 {
            assert!(event["id"].as_i64() > events[i - 1]["id"].as_i64());
        }
    }
    assert_eq!(events[0]["data"], json!({}));
    assert_eq!(events[3]["data"], json!({"admission_status": "allowed"}));
    assert_eq!(
        events[4]["data"],
        json!({
            "request_key": key,
            "issue_index": receipt["issue"]["index"],
            "receipt_status": "submitted",
        })
    );
    assert_eq!(events[5]["data"], json!({"reason": "no longer needed"}));
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains("7f3a") && !text.contains("9c1e"),
        "no text a bot wrote is in an event: {text}"
    );

    // The grant timeline reads the same rows.
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let timeline = conn
        .text_rows(&format!(
            "SELECT event, to_state, detail FROM grant_events WHERE grant_id = {id} ORDER BY id"
        ))
        .await;
    conn.close().await;
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        timeline,
        vec![
            vec![s("prepared"), s("awaiting_agent"), None],
            vec![s("edited"), s("awaiting_agent"), None],
            vec![s("confirmed"), s("awaiting_human"), None],
            vec![s("approved"), s("active"), None],
            vec![s("withdrawn"), s("revoked"), s("no longer needed")],
        ]
    );
}

both_backends!(a_change_that_rolls_back_writes_no_event);
async fn a_change_that_rolls_back_writes_no_event(app: TestApp) {
    let world = World::new(&app).await;
    let admin = Auth::Token(&app.admin_token);
    let id = world.active("Rollbacks").await;
    let key = new_key();
    world.submitted(id, &key, "Once", "").await;
    let other = world.prepare("Stale").await;
    let stale_page = world.alice.grant_page(OWNER, REPO, other).await;
    world.confirm(other).await.assert_status(200);
    let before = all(&app, admin).await;

    // A replay, a request-key conflict, a confirm that changes nothing, a
    // confirm of a digest that is not the grant's, a form posted from a
    // page older than the grant's revision, and a replayed form nonce.
    world.submit(id, &key, "Once", "").await.assert_status(200);
    world
        .submit(id, &key, "Other", "")
        .await
        .assert_error(409, "request_key_conflict");
    world.confirm(id).await.assert_status(200);
    let fresh = world.prepare("Wrong digest").await;
    let wrong = crate::helpers::confirm_body(&"0".repeat(64));
    world.confirm_with(fresh, wrong).await.assert_status(409);
    let after_prepare = all(&app, admin).await;
    assert_eq!(after_prepare.len(), before.len() + 1, "only the prepare");
    let stale = world
        .alice
        .submit_from(&stale_page, OWNER, REPO, other, "withdraw", &[])
        .await;
    assert_eq!(stale.status.as_u16(), 409, "{}", stale.body);
    let page = world.alice.grant_page(OWNER, REPO, other).await;
    world
        .alice
        .submit_from(&page, OWNER, REPO, other, "approve", &[])
        .await
        .assert_status(303);
    let replayed = world
        .alice
        .submit_from(&page, OWNER, REPO, other, "approve", &[])
        .await;
    assert!(
        (400..500).contains(&replayed.status.as_u16()),
        "{}",
        replayed.body
    );
    let after = all(&app, admin).await;
    assert_eq!(
        types(&after[after_prepare.len()..]),
        ["grant.approved"],
        "only the approval that committed has an event"
    );
}

both_backends!(issue_changes_write_an_event_per_receipt);
async fn issue_changes_write_an_event_per_receipt(app: TestApp) {
    let world = World::new(&app).await;
    app.create_repo(OWNER, "gadgets", true).await;
    let id = world.active("Receipts").await;
    let (deleted, moved) = (new_key(), new_key());
    let first = world.submitted(id, &deleted, "One", "").await;
    let second = world.submitted(id, &moved, "Two", "").await;
    let admin = Auth::Token(&app.admin_token);
    let index = |r: &Value| r["issue"]["index"].as_i64().unwrap();
    app.send(
        Method::DELETE,
        &issue_path(OWNER, REPO, index(&first)),
        admin,
        Body::None,
    )
    .await
    .assert_status(204);
    let transfer = format!("{}/transfer", issue_path(OWNER, REPO, index(&second)));
    app.post_json(&transfer, admin, json!({"to": "acme/gadgets"}))
        .await
        .assert_status(200);

    let events = all(&app, admin).await;
    let changed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "receipt.changed")
        .collect();
    assert_eq!(changed.len(), 2, "{events:?}");
    assert_eq!(
        changed[0]["data"],
        json!({"request_key": deleted, "receipt_status": "issue_deleted"})
    );
    assert_eq!(
        changed[1]["data"],
        json!({"request_key": moved, "receipt_status": "issue_binding_changed"})
    );
    for e in changed {
        assert_eq!(e["actor"]["login"], ADMIN_LOGIN);
        assert_eq!(e["grant"]["id"], id);
        assert_eq!(e["grant"]["state"], "active");
        assert_eq!(e["repository"]["full_name"], format!("{OWNER}/{REPO}"));
    }
}

both_backends!(setup_changes_are_events_only_an_admin_token_with_read_admin_sees);
async fn setup_changes_are_events_only_an_admin_token_with_read_admin_sees(app: TestApp) {
    let world = World::new(&app).await;
    let admin = Auth::Token(&app.admin_token);
    let grants = json!({"grants": [{"id": "all", "repos": [], "tools": ["get_agent_work_grant"]}]});
    let path = format!("/api/v1/admin/agents/{BOT}/tool-grants");
    app.send(Method::PUT, &path, admin, Body::Json(grants))
        .await
        .assert_status(200);
    let health = json!({"installed": true, "healthy": false, "detail": "down"});
    let path = "/api/v1/admin/mcp/filesystem/health";
    for _ in 0..2 {
        app.send(Method::PUT, path, admin, Body::Json(health.clone()))
            .await
            .assert_status(200);
    }

    let events = all(&app, admin).await;
    let setup: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_grants.changed" || e["type"] == "mcp_health.changed")
        .collect();
    assert_eq!(
        setup.len(),
        2,
        "setting the same health twice is one change: {events:?}"
    );
    assert_eq!(setup[0]["data"], json!({"agent": BOT}));
    assert_eq!(
        setup[1]["data"],
        json!({"mcp_id": "filesystem", "installed": true, "healthy": false})
    );
    for e in &setup {
        assert_eq!(e["actor"]["login"], ADMIN_LOGIN);
        assert_eq!(e["repository"], Value::Null);
        assert_eq!(e["grant"], Value::Null);
    }

    // alice holds every scope but is no site administrator; root's token
    // without read:admin is no administrative reader either.
    let plain_admin = app
        .create_token(ADMIN_LOGIN, &["read:repository"])
        .await
        .token;
    for (who, auth) in [
        ("alice", Auth::Token(&world.alice_token)),
        ("root without read:admin", Auth::Token(&plain_admin)),
        ("the bot", Auth::Token(&world.bot)),
    ] {
        let seen = types(&all(&app, auth).await);
        assert!(
            !seen
                .iter()
                .any(|t| t.starts_with("tool_grants") || t.starts_with("mcp_health")),
            "{who} sees {seen:?}"
        );
    }
}
