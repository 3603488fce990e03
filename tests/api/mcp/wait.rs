//! `get_agent_work_grant` with `wait_for_change`: the answer comes once the
//! grant's revision differs from the one held, or at the end unchanged;
//! the schema bounds the wait below the stdio adapter's timeout.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{GET, Mcp, put_grants};
use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, REPO, World};

both_backends!(a_tool_read_waits_for_the_grant_to_change);
async fn a_tool_read_waits_for_the_grant_to_change(app: TestApp) {
    let world = World::new(&app).await;
    put_grants(
        &app,
        BOT,
        json!([{"id": "all", "repos": [], "tools": [GET]}]),
    )
    .await;
    let id = world.prepare("Wait over MCP").await;
    let mcp = Mcp::new(&app, &world.bot);
    let revision = world.grant(id).await["state_revision"].clone();
    let args = json!({"owner": OWNER, "repo": REPO, "grant_id": id,
                      "wait_for_change": 25, "state_revision": revision});

    let started = Instant::now();
    let (read, _) = tokio::join!(mcp.call(GET, args.clone()), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        world.confirm(id).await.assert_status(200);
    });
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "it answered on the change"
    );
    let grant = &read.ok(200)["grant"];
    assert_eq!(grant["state"], "awaiting_human");
    assert_ne!(grant["state_revision"], revision);

    // Held revision already stale: at once. Unchanged: at the end.
    let started = Instant::now();
    mcp.call(GET, args.clone()).await.ok(200);
    assert!(started.elapsed() < Duration::from_secs(20));
    let mut current = args.clone();
    current["state_revision"] = grant["state_revision"].clone();
    current["wait_for_change"] = json!(1);
    let started = Instant::now();
    let same = mcp.call(GET, current).await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(&same.ok(200)["grant"], grant);

    // Out of range, or one without the other: invalid arguments.
    for bad in [
        json!({"owner": OWNER, "repo": REPO, "grant_id": id, "wait_for_change": 26, "state_revision": 1}),
        json!({"owner": OWNER, "repo": REPO, "grant_id": id, "wait_for_change": 5}),
        json!({"owner": OWNER, "repo": REPO, "grant_id": id, "state_revision": 1}),
        json!({"owner": OWNER, "repo": REPO, "grant_id": id, "wait_for_change": 1, "state_revision": -1}),
    ] {
        mcp.call(GET, bad.clone()).await.error(400, "invalid_input");
    }
    let tool = mcp
        .tools()
        .await
        .into_iter()
        .find(|t| t["name"] == GET)
        .expect("the tool is listed");
    assert_eq!(
        tool["inputSchema"]["properties"]["wait_for_change"]["maximum"],
        25
    );
    assert_eq!(
        tool["inputSchema"]["required"],
        json!(["owner", "repo", "grant_id"])
    );
}
