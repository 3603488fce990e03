//! Tool grants: default deny, the repository-less list, what `tools/list`
//! shows, and a policy that narrows native access but never widens it.

use serde_json::{Value, json};

use super::{
    ALL_TOOLS, CONFIRM, GET, LIST, Mcp, READBACK, Row, SUBMIT, audit_rows, col, confirm_args,
    gadgets, last_call, put_grants, submit_args, target,
};
use crate::helpers::{OTHER_DIGEST, TestApp};
use crate::world::{BOT, BOT_SCOPES, OWNER, REPO, RIVAL, World, keys_of, new_key};

both_backends!(default_deny_without_grants);
async fn default_deny_without_grants(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Default deny").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let mcp = Mcp::new(&app, &world.bot);
    let key = new_key();
    let calls = [
        (LIST, json!({})),
        (GET, target(OWNER, REPO, id)),
        (CONFIRM, confirm_args(OWNER, REPO, id, &digest)),
        (SUBMIT, submit_args(id, &digest, &key, "t", "b")),
        (
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": key}),
        ),
    ];
    // Never given a set, then given the empty set: the same.
    for round in 0..2 {
        assert_eq!(mcp.tools().await, Vec::<Value>::new(), "round {round}");
        for (tool, args) in &calls {
            let result = mcp.call(tool, args.clone()).await;
            let denial = result.denied("no_grants");
            assert_eq!(denial["tool"], *tool);
            let repository = if *tool == LIST {
                Value::Null
            } else {
                json!("acme/widgets")
            };
            assert_eq!(denial["repository"], repository, "{denial}");
        }
        put_grants(&app, BOT, json!([])).await;
    }
    // A name that is not one of the five tools.
    mcp.call("create_issue", json!({"title": "x"}))
        .await
        .denied("unknown_tool");
    // Nothing ran: same grant, no issue, no receipt.
    world.assert_unchanged(id, &before).await;
    assert!(world.all_issues().await.is_empty());
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    // Every tools/call was audited as denied (the other rows are the REST
    // calls of the fixture: via = api).
    let rows = audit_rows(&app).await;
    let denied: Vec<&Row> = rows
        .iter()
        .filter(|r| col(r, "via") == Some("mcp"))
        .collect();
    assert_eq!(denied.len(), 11, "{rows:#?}");
    for row in denied {
        assert_eq!(col(row, "decision"), Some("deny"), "{row:?}");
        assert_eq!(col(row, "native_status"), None, "{row:?}");
    }
}

both_backends!(repo_less_list_needs_an_any_repository_grant);
async fn repo_less_list_needs_an_any_repository_grant(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    let id = world.prepare("Listing").await;
    let mcp = Mcp::new(&app, &world.bot);

    // A grant limited to repositories never allows the repo-less list.
    put_grants(
        &app,
        BOT,
        json!([{"id": "acme", "repos": ["acme/*", "acme/widgets"], "tools": [LIST, GET]}]),
    )
    .await;
    let denial = mcp.call(LIST, json!({})).await;
    assert_eq!(denial.denied("no_repository")["repository"], Value::Null);
    mcp.call(LIST, json!({"page": 2, "state": "all"}))
        .await
        .denied("no_repository");
    // owner/repo arguments on the list make the policy match, but the strict
    // input check then refuses the call before any listing.
    let result = mcp.call(LIST, json!({"owner": OWNER, "repo": REPO})).await;
    let refused = result.error(400, "invalid_input");
    assert!(refused.get("grants").is_none(), "{refused}");

    // repos = [] means any repository, and calls that name none.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "acme", "repos": ["acme/*"], "tools": [LIST]},
            {"id": "anywhere", "repos": [], "tools": [LIST, GET]},
        ]),
    )
    .await;
    let listed = mcp.call(LIST, json!({})).await;
    let page = listed.ok(200);
    assert_eq!(page["total_count"], 1, "{page}");
    assert_eq!(page["grants"][0]["id"], id, "{page}");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("anywhere")
    );
    mcp.call(GET, target(OWNER, REPO, id)).await.ok(200);
    mcp.call(GET, target("globex", "anything", 1))
        .await
        .error(404, "not_found");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("anywhere")
    );
    // A repo-less call of a tool that needs a repository is allowed by the
    // policy and refused by the input check.
    mcp.call(GET, json!({"grant_id": id}))
        .await
        .error(400, "invalid_input");
}

both_backends!(tools_list_shows_exactly_the_granted_tools);
async fn tools_list_shows_exactly_the_granted_tools(app: TestApp) {
    let world = World::new(&app).await;
    let mcp = Mcp::new(&app, &world.bot);
    assert!(mcp.tools().await.is_empty());

    put_grants(
        &app,
        BOT,
        json!([
            {"id": "a", "repos": ["acme/widgets"], "tools": [GET]},
            // Malformed patterns only: still listed (listing is by tool).
            {"id": "b", "repos": ["acme/wid*"], "tools": ["GET_AGENT_WORK_SUBMISSION", "Get_Agent_Work_Grant"]},
        ]),
    )
    .await;
    let mut names = mcp.tool_names().await;
    names.sort();
    assert_eq!(names, [GET, READBACK]);
    // Per agent: rival-bot holds nothing.
    assert!(Mcp::new(&app, &world.rival).tools().await.is_empty());

    put_grants(
        &app,
        BOT,
        json!([
            {"id": "read", "repos": [], "tools": [LIST, GET, READBACK]},
            {"id": "write", "repos": ["acme/*"], "tools": [CONFIRM, SUBMIT, GET]},
        ]),
    )
    .await;
    let tools = mcp.tools().await;
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    let mut all = ALL_TOOLS.to_vec();
    all.sort_unstable();
    assert_eq!(names, all);
    let required = |tool: &str| -> Vec<&str> {
        match tool {
            LIST => vec![],
            GET => vec!["owner", "repo", "grant_id"],
            CONFIRM => vec![
                "owner",
                "repo",
                "grant_id",
                "proposal_schema",
                "proposal_version",
                "proposal_digest",
            ],
            SUBMIT => vec![
                "owner",
                "repo",
                "grant_id",
                "proposal_schema",
                "proposal_version",
                "proposal_digest",
                "request_key",
                "title",
                "body",
            ],
            _ => vec!["owner", "repo", "grant_id", "request_key"],
        }
    };
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{name}: {schema}");
        assert_eq!(schema["additionalProperties"], false, "{name}: {schema}");
        assert!(
            tool["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{tool}"
        );
        let mut expected = required(name);
        expected.sort_unstable();
        let mut got: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        got.sort_unstable();
        assert_eq!(got, expected, "{name}");
        // Every property is declared; nothing required is undeclared.
        let properties = keys_of(&schema["properties"]);
        for member in &expected {
            assert!(properties.iter().any(|p| p == member), "{name}: {member}");
        }
        if let Some(id) = schema["properties"].get("grant_id") {
            assert_eq!(id["type"], "integer", "{name}: {id}");
            assert_eq!(id["minimum"], 1, "{name}: {id}");
            assert_eq!(id["maximum"], i64::MAX, "{name}: {id}");
        }
        if let Some(version) = schema["properties"].get("proposal_version") {
            assert_eq!(version["type"], "integer", "{name}: {version}");
        }
    }
    let list = tools
        .iter()
        .find(|t| t["name"] == LIST)
        .expect("the list tool");
    assert_eq!(
        keys_of(&list["inputSchema"]["properties"]),
        ["page", "state"]
    );
}

both_backends!(the_policy_narrows_and_never_widens);
async fn the_policy_narrows_and_never_widens(app: TestApp) {
    let world = World::new(&app).await;
    gadgets(&app).await;
    let id = world.prepare("Narrowing").await;
    let before = world.grant(id).await;
    let digest = world.digest(id).await;
    let every = json!([{"id": "all", "repos": [], "tools": ALL_TOOLS}]);
    put_grants(&app, BOT, every.clone()).await;
    put_grants(&app, RIVAL, every).await;

    // A repository the bot cannot read: the native 404.
    app.remove_collaborator(OWNER, REPO, BOT).await;
    let mcp = Mcp::new(&app, &world.bot);
    mcp.call(GET, target(OWNER, REPO, id))
        .await
        .error(404, "not_found");
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(404, "not_found");
    let listed = mcp.call(LIST, json!({})).await;
    assert_eq!(listed.ok(200)["total_count"], 0);
    world.read(id).await.assert_error(404, "not_found");
    app.set_collaborator(OWNER, REPO, BOT, "write").await;

    // Another bot's grant is not there at all.
    let rival = Mcp::new(&app, &world.rival);
    rival
        .call(GET, target(OWNER, REPO, id))
        .await
        .error(404, "not_found");
    rival
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(404, "not_found");

    // A token without write:issue cannot confirm or submit; without
    // read:issue it cannot read receipts back.
    let reader = app.create_token(BOT, &["read:repository"]).await.token;
    let reader = Mcp::new(&app, &reader);
    reader.call(GET, target(OWNER, REPO, id)).await.ok(200);
    reader
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(403, "insufficient_scope");
    reader
        .call(SUBMIT, submit_args(id, &digest, &new_key(), "t", "b"))
        .await
        .error(403, "insufficient_scope");
    reader
        .call(
            READBACK,
            json!({"owner": OWNER, "repo": REPO, "grant_id": id, "request_key": new_key()}),
        )
        .await
        .error(403, "insufficient_scope");
    // No read:repository: not even a read.
    let issues_only = app.create_token(BOT, &["write:issue"]).await.token;
    let issues_only = Mcp::new(&app, &issues_only);
    issues_only
        .call(GET, target(OWNER, REPO, id))
        .await
        .error(403, "insufficient_scope");
    issues_only
        .call(LIST, json!({}))
        .await
        .error(403, "insufficient_scope");
    // A token reduced to another repository.
    let reduced = app
        .create_token_with(
            BOT,
            json!({"name": "gadgets-only", "scopes": BOT_SCOPES, "repositories": ["acme/gadgets"]}),
        )
        .await
        .token;
    Mcp::new(&app, &reduced)
        .call(CONFIRM, confirm_args(OWNER, REPO, id, &digest))
        .await
        .error(403, "insufficient_scope");
    world.assert_unchanged(id, &before).await;

    // Grant state still rules: no submission before approval.
    mcp.call(SUBMIT, submit_args(id, &digest, &new_key(), "t", "b"))
        .await
        .error(409, "state_conflict");
    // A stale digest is the native 409 with the grant.
    let stale = mcp
        .call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await;
    let body = stale.error(409, "proposal_mismatch");
    assert_eq!(body["grant"], before, "{body}");
    world.assert_unchanged(id, &before).await;
    assert!(world.all_issues().await.is_empty());
}
