//! The events of admission: a refused approval, a blocked handoff and the
//! project filesystem context's changes, each from its real trigger.

use serde_json::{Value, json};

use super::{TINY_TASK_TRACKER, admissions_of, approve, confirmed_with, fs_change_ok, put_health};
use crate::events::all;
use crate::helpers::{Auth, TestApp};
use crate::world::{ALICE, World, new_key};

both_backends!(admission_refusals_and_context_changes_are_events);
async fn admission_refusals_and_context_changes_are_events(app: TestApp) {
    let world = World::new(&app).await;
    put_health(&app, "filesystem", true, true, "").await;
    let id = confirmed_with(&world, "Admission events", TINY_TASK_TRACKER).await;
    approve(&world, id, true).await.assert_status(409);
    let refused = admissions_of(&app, id).await[0]["blocked_count"].clone();
    fs_change_ok(&world.alice, "approve", &["read", "search"]).await;
    approve(&world, id, true).await.assert_status(303);
    let approved = admissions_of(&app, id).await[1]["status"].clone();
    put_health(&app, "filesystem", false, false, "gone").await;
    world
        .submit(id, &new_key(), "Blocked", "")
        .await
        .assert_error(409, "admission_blocked");
    let blocked = admissions_of(&app, id).await[2]["blocked_count"].clone();
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    fs_change_ok(&world.alice, "deny", &[]).await;
    fs_change_ok(&world.alice, "remove", &[]).await;

    let watched = [
        "grant.approval_refused",
        "grant.approved",
        "submission.admission_blocked",
        "filesystem_context.changed",
    ];
    let seen: Vec<(Value, Value)> = all(&app, Auth::Token(&world.alice_token))
        .await
        .into_iter()
        .filter(|e| watched.contains(&e["type"].as_str().unwrap()))
        .map(|e| (e["type"].clone(), e["data"].clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                json!("grant.approval_refused"),
                json!({"admission_status": "blocked", "blocked_count": refused})
            ),
            (
                json!("filesystem_context.changed"),
                json!({"phase": "approved"})
            ),
            (
                json!("grant.approved"),
                json!({"admission_status": approved})
            ),
            (
                json!("submission.admission_blocked"),
                json!({"blocked_count": blocked})
            ),
            (
                json!("filesystem_context.changed"),
                json!({"phase": "narrowed"})
            ),
            (
                json!("filesystem_context.changed"),
                json!({"phase": "denied"})
            ),
            (
                json!("filesystem_context.changed"),
                json!({"phase": "removed"})
            ),
        ]
    );
    let refusal = all(&app, Auth::Token(&world.bot))
        .await
        .into_iter()
        .find(|e| e["type"] == "grant.approval_refused")
        .expect("the bot sees the refusal of its grant");
    assert_eq!(refusal["actor"]["login"], ALICE);
    assert_eq!(refusal["grant"]["state"], "awaiting_human");
}
