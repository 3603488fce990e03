//! The native grant read with `wait_for_change`: answered once the grant's
//! revision differs from `state_revision`, or at the end unchanged; bad
//! parameters are 400.

use std::time::{Duration, Instant};

use crate::helpers::{Auth, TestApp, grant_path};
use crate::world::{OWNER, REPO, World};

both_backends!(a_grant_read_waits_for_the_grant_to_change);
async fn a_grant_read_waits_for_the_grant_to_change(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Wait for approval").await;
    let held = world.grant(id).await["state_revision"].as_i64().unwrap();
    let path = grant_path(OWNER, REPO, id);
    let auth = Auth::Token(&world.bot);

    let started = Instant::now();
    let query = format!("{path}?wait_for_change=60&state_revision={held}");
    let (read, _) = tokio::join!(app.get(&query, auth), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        world.approve(id).await.assert_status(303);
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered on the change"
    );
    read.assert_status(200);
    let grant = read.json()["grant"].clone();
    assert_eq!(grant["state"], "active");
    assert!(grant["state_revision"].as_i64().unwrap() > held);

    let now = grant["state_revision"].as_i64().unwrap();
    let started = Instant::now();
    let same = app
        .get(
            &format!("{path}?wait_for_change=1&state_revision={now}"),
            auth,
        )
        .await;
    same.assert_status(200);
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited");
    assert_eq!(same.json()["grant"], grant);

    for bad in [
        "wait_for_change=61&state_revision=1",
        "wait_for_change=-1&state_revision=1",
        "wait_for_change=1&state_revision=x",
        "wait_for_change=1",
        "state_revision=1",
        "wait_for_change=1&wait_for_change=2&state_revision=1",
    ] {
        let resp = app.get(&format!("{path}?{bad}"), auth).await;
        assert_eq!(resp.status.as_u16(), 400, "{bad}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{bad}");
    }
    // Another bot's grant: 404 at once, as without a wait.
    let other = app
        .get(
            &format!("{path}?wait_for_change=60&state_revision={now}"),
            Auth::Token(&world.rival),
        )
        .await;
    other.assert_error(404, "not_found");
}
