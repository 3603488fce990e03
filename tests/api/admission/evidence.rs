//! Admission evidence is history, and each grant shows its own latest
//! evaluation.

use serde_json::{Value, json};

use crate::db::SqlConn;
use crate::helpers::{Auth, TestApp};
use crate::world::{World, new_key};

both_backends!(admission_evidence_is_never_changed);
/// The catalog, the health snapshot and the filesystem-context change an
/// evaluation cites are history: the schema refuses to change or delete
/// them (PostgreSQL relies on this instead of foreign keys that lock rows
/// every submission shares).
async fn admission_evidence_is_never_changed(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Evidence").await;
    world
        .submit(id, &new_key(), "Evidence", "")
        .await
        .assert_status(201);
    let mut conn = SqlConn::connect(&app.database_url()).await;
    let cited = conn
        .text_rows(&format!(
            "SELECT CAST(snapshot_id AS TEXT), catalog_version, \
             CAST(e.actor_id AS TEXT), CAST(g.repository_id AS TEXT) \
             FROM admission_evaluations e JOIN grants g ON g.id = e.grant_id \
             WHERE e.grant_id = {id} AND e.phase = 'handoff'"
        ))
        .await;
    let [snapshot, catalog, actor, repository] = &cited[0][..] else {
        panic!("one handoff evaluation: {cited:?}");
    };
    let (snapshot, catalog) = (snapshot.clone().unwrap(), catalog.clone().unwrap());
    let (actor, repository) = (actor.clone().unwrap(), repository.clone().unwrap());
    conn.execute(&format!(
        "INSERT INTO fs_context_changes (repository_id, action, capabilities, actor_id, at) \
         VALUES ({repository}, 'approved', '[]', {actor}, '2026-01-01T00:00:00.000000Z')"
    ))
    .await
    .expect("a change is appended");
    let statements = [
        format!("UPDATE catalogs SET content = '{{}}' WHERE version = '{catalog}'"),
        format!("DELETE FROM catalogs WHERE version = '{catalog}'"),
        format!("UPDATE health_snapshots SET content = '[]' WHERE id = {snapshot}"),
        format!("DELETE FROM health_snapshots WHERE id = {snapshot}"),
        "UPDATE fs_context_changes SET action = 'denied'".to_owned(),
        "DELETE FROM fs_context_changes".to_owned(),
    ];
    for sql in &statements {
        let result = conn.execute(sql).await;
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("admission evidence")),
            "{sql}: {result:?}"
        );
    }
    let kept = conn
        .text_rows(&format!(
            "SELECT (SELECT content FROM catalogs WHERE version = '{catalog}'), \
             (SELECT CAST(COUNT(*) AS TEXT) FROM health_snapshots WHERE id = {snapshot}), \
             (SELECT action FROM fs_context_changes)"
        ))
        .await;
    assert_ne!(kept[0][0].as_deref(), Some("{}"));
    assert_eq!(kept[0][1].as_deref(), Some("1"));
    assert_eq!(kept[0][2].as_deref(), Some("approved"));

    // An evaluation's grant and actor are never deleted either (on
    // PostgreSQL no foreign key guards those references any more). The
    // grant has receipts, so try the bare grant rows' triggers directly on
    // a grant nothing refers to as well.
    let fresh = world.prepare("Nothing refers to me").await;
    for sql in [
        format!("DELETE FROM grants WHERE id = {fresh}"),
        format!("DELETE FROM grants WHERE id = {id}"),
        format!("DELETE FROM users WHERE id = {actor}"),
    ] {
        let result = conn.execute(&sql).await;
        assert!(
            result.as_ref().is_err_and(|e| e.contains("never deleted")),
            "{sql}: {result:?}"
        );
    }
    let left = conn
        .text_rows(&format!(
            "SELECT CAST(COUNT(*) AS TEXT) FROM grants WHERE id IN ({fresh}, {id})"
        ))
        .await;
    assert_eq!(left[0][0].as_deref(), Some("2"));
    conn.close().await;
}

both_backends!(each_grant_shows_its_own_latest_evaluation);
async fn each_grant_shows_its_own_latest_evaluation(app: TestApp) {
    let world = World::new(&app).await;
    let older = world.active("Older grant").await;
    let newer = world.active("Newer grant").await;
    let prepared = world.prepare("Prepared, never evaluated").await;
    // The older grant's newest evaluation now comes after every evaluation
    // of the newer grant, and the prepared grant (made last) has none.
    for n in 0..3 {
        world
            .submitted(older, &new_key(), &format!("Handoff {n}"), "body")
            .await;
    }
    let mut sql = SqlConn::connect(&app.database_url()).await;
    let rows = sql
        .text_rows(
            "SELECT CAST(grant_id AS TEXT), CAST(MAX(id) AS TEXT) \
             FROM admission_evaluations GROUP BY grant_id",
        )
        .await;
    sql.close().await;
    let latest = |id: i64| -> Value {
        rows.iter()
            .find(|row| row[0].as_deref() == Some(id.to_string().as_str()))
            .and_then(|row| row[1].as_deref())
            .map_or(Value::Null, |max| json!(max.parse::<i64>().unwrap()))
    };
    assert_ne!(latest(older), Value::Null);
    assert_ne!(latest(newer), Value::Null);
    assert!(latest(older).as_i64() > latest(newer).as_i64());
    assert_eq!(latest(prepared), Value::Null, "{rows:?}");

    // One grant read at a time, and all of them in one list page.
    for id in [older, newer, prepared] {
        let grant = world.grant(id).await;
        assert_eq!(grant["admission"]["evaluation_id"], latest(id), "{grant}");
        if latest(id).is_null() {
            assert_eq!(grant["admission"], Value::Null, "{grant}");
        }
    }
    let list = app
        .get(
            "/api/v1/agent-work-grants?state=all",
            Auth::Token(&world.bot),
        )
        .await;
    list.assert_status(200);
    let grants = list.json();
    let listed = grants.as_array().expect("a list");
    assert_eq!(listed.len(), 3, "{grants}");
    for grant in listed {
        let id = grant["id"].as_i64().expect("id");
        assert_eq!(grant["admission"]["evaluation_id"], latest(id), "{grant}");
    }
}
