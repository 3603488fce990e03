//! Receipts of deleted and transferred issues.

use serde_json::{Value, json};

use super::ISSUE_KEYS;
use crate::helpers::{Auth, TestApp};
use crate::world::{ALICE, OWNER, REPO, World, keys_of, new_key, submission_of, submit_body};

both_backends!(deleted_and_transferred_issues_keep_their_receipts);
async fn deleted_and_transferred_issues_keep_their_receipts(app: TestApp) {
    let world = World::new(&app).await;
    app.create_repo(OWNER, "gadgets", true).await;
    app.set_collaborator(OWNER, "gadgets", ALICE, "admin").await;
    let id = world.active("Tombstones").await;
    let digest = world.digest(id).await;
    let (k1, k2, k3, k4) = (new_key(), new_key(), new_key(), new_key());
    let s1 = world.submitted(id, &k1, "First", "1").await;
    let s2 = world.submitted(id, &k2, "Second", "2").await;
    assert_eq!(s1["issue"]["index"], 1);
    assert_eq!(s2["issue"]["index"], 2);

    // Deleted: the receipt shows issue_deleted with its historical issue.
    world.delete_issue(OWNER, REPO, 1).await.assert_status(204);
    world
        .issue_at(OWNER, REPO, 1)
        .await
        .assert_error(404, "not_found");
    let deleted = world.receipt(id, &k1).await;
    let mut expected = s1.clone();
    expected["status"] = json!("issue_deleted");
    assert_eq!(deleted, expected);
    // A replay answers the tombstone and creates nothing.
    let replay = world
        .submit_with(id, submit_body(&digest, &k1, "First", "1"))
        .await;
    replay.assert_status(200);
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(submission_of(&replay), expected);
    // The key is not freed.
    world
        .submit_with(id, submit_body(&digest, &k1, "First again", "1"))
        .await
        .assert_error(409, "request_key_conflict");
    assert_eq!(world.grant(id).await["submission_count"], 2);
    assert_eq!(world.all_issues().await.len(), 1);
    world
        .delete_issue(OWNER, REPO, 1)
        .await
        .assert_error(404, "not_found");

    // Indexes are never reused, not even the highest one.
    // The newest issue (highest id and index) is deleted: neither its id nor
    // its index comes back, and its receipt never points at a new issue.
    let s3 = world.submitted(id, &k3, "Third", "3").await;
    assert_eq!(s3["issue"]["index"], 3);
    world.delete_issue(OWNER, REPO, 3).await.assert_status(204);
    let ordinary = app
        .post_json(
            &crate::world::issues_path(OWNER, REPO),
            Auth::Token(&world.alice_token),
            json!({"title": "Ordinary", "body": ""}),
        )
        .await;
    ordinary.assert_status(201);
    let ordinary = ordinary.json();
    assert_eq!(ordinary["index"], 4);
    assert_ne!(ordinary["id"], s3["issue"]["id"]);
    assert!(ordinary["agent_work_grant"].is_null(), "{ordinary}");
    let mut expected3 = s3.clone();
    expected3["status"] = json!("issue_deleted");
    assert_eq!(world.receipt(id, &k3).await, expected3);
    let s4 = world.submitted(id, &k4, "Fourth", "4").await;
    assert_eq!(s4["issue"]["index"], 5);
    assert_ne!(s4["issue"]["id"], s3["issue"]["id"]);

    // Transferred: issue_binding_changed, history kept, attribution moves.
    let moved = world.transfer_issue(OWNER, REPO, 2, "acme/gadgets").await;
    moved.assert_status(200);
    let moved = moved.json();
    assert_eq!(keys_of(&moved), ISSUE_KEYS);
    assert_eq!(moved["id"], s2["issue"]["id"]);
    assert_eq!(moved["index"], 1);
    assert_eq!(moved["repository"]["full_name"], "acme/gadgets");
    assert_eq!(moved["title"], "Second");
    assert_eq!(
        moved["agent_work_grant"],
        json!({"grant_id": id, "request_key": k2})
    );
    let at_new = world.issue_at(OWNER, "gadgets", 1).await;
    at_new.assert_status(200);
    assert_eq!(at_new.json(), moved);
    world
        .issue_at(OWNER, REPO, 2)
        .await
        .assert_error(404, "not_found");
    let mut expected = s2.clone();
    expected["status"] = json!("issue_binding_changed");
    assert_eq!(world.receipt(id, &k2).await, expected);
    let replay = world
        .submit_with(id, submit_body(&digest, &k2, "Second", "2"))
        .await;
    replay.assert_status(200);
    assert_eq!(submission_of(&replay), expected);

    // Moved back it gets a new index: still not where it was committed.
    let back = world
        .transfer_issue(OWNER, "gadgets", 1, "acme/widgets")
        .await;
    back.assert_status(200);
    assert_eq!(back.json()["index"], 6);
    assert_eq!(world.receipt(id, &k2).await, expected);
    let at_six = world.issue_at(OWNER, REPO, 6).await;
    assert_eq!(
        at_six.json()["agent_work_grant"],
        json!({"grant_id": id, "request_key": k2})
    );
    // And a moved issue that is then deleted reads issue_deleted.
    world.delete_issue(OWNER, REPO, 6).await.assert_status(204);
    expected["status"] = json!("issue_deleted");
    assert_eq!(world.receipt(id, &k2).await, expected);

    // The untouched receipt still reads submitted.
    assert_eq!(world.receipt(id, &k4).await, s4);
    assert_eq!(world.grant(id).await["submission_count"], 4);
    let remaining: Vec<Value> = world
        .all_issues()
        .await
        .iter()
        .map(|i| i["index"].clone())
        .collect();
    assert_eq!(remaining, vec![json!(4), json!(5)]);
    assert_eq!(world.receipt(id, &k3).await, expected3);
    assert!(world.all_issues_of(OWNER, "gadgets").await.is_empty());
}
