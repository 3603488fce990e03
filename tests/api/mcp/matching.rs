//! The matching rules of tool grants through real `tools/call`s.

use serde_json::json;

use super::{
    CONFIRM, GADGETS, GET, LIST, Mcp, col, confirm_args, gadgets, last_call, put_grants, target,
};
use crate::helpers::{Auth, OTHER_DIGEST, TestApp, grant_path};
use crate::world::{BOT, OWNER, REPO, World};

/// acme/gadgets beside acme/widgets, a grant prepared for builder-bot on
/// acme/widgets, and the bot's MCP client. Each test below replaces the
/// bot's tool grants and never confirms the grant.
async fn matching(app: &TestApp) -> (World<'_>, i64, Mcp<'_>) {
    let world = World::new(app).await;
    gadgets(app).await;
    let id = world.prepare("Matching rules").await;
    let mcp = Mcp::new(app, &world.bot);
    (world, id, mcp)
}

/// No denial ran anything: the grant was never confirmed.
async fn assert_never_confirmed(world: &World<'_>, id: i64) {
    assert_eq!(world.grant(id).await["state"], "awaiting_agent");
}

both_backends!(an_exact_pattern_matches_only_that_repository);
async fn an_exact_pattern_matches_only_that_repository(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // Exact repository.
    put_grants(
        &app,
        BOT,
        json!([{"id": "exact", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("exact"));
    for (owner, repo) in [
        (OWNER, GADGETS),
        (OWNER, "widget"),
        (OWNER, "widgets2"),
        ("acm", REPO),
        ("other", REPO),
    ] {
        mcp.call(GET, on(owner, repo))
            .await
            .denied("repository_not_in_grant");
    }
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await
        .denied("tool_not_in_any_grant");
    mcp.call(LIST, json!({}))
        .await
        .denied("tool_not_in_any_grant");

    assert_never_confirmed(&world, id).await;
}

both_backends!(an_owner_pattern_matches_every_repository_of_that_owner);
async fn an_owner_pattern_matches_every_repository_of_that_owner(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // owner/*
    put_grants(
        &app,
        BOT,
        json!([{"id": "owner", "repos": ["acme/*"], "tools": [GET]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    // Allowed on any acme repository; the native route then decides.
    mcp.call(GET, on(OWNER, GADGETS))
        .await
        .error(404, "not_found");
    mcp.call(GET, on(OWNER, "no-such-repo"))
        .await
        .error(404, "not_found");
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("owner"));
    mcp.call(GET, on("acme-corp", REPO))
        .await
        .denied("repository_not_in_grant");
    mcp.call(GET, on("other", "acme"))
        .await
        .denied("repository_not_in_grant");

    assert_never_confirmed(&world, id).await;
}

both_backends!(repositories_owners_and_tools_match_case_insensitively);
async fn repositories_owners_and_tools_match_case_insensitively(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // Case-insensitive repository, owner and tool names.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "caps", "repos": ["ACME/Widgets"], "tools": ["GET_Agent_Work_Grant"]},
            {"id": "caps-owner", "repos": ["Acme/*"], "tools": ["Confirm_Agent_Work_Grant"]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("caps"));
    for (owner, repo) in [("ACME", "WIDGETS"), ("aCmE", "wIdGeTs")] {
        let result = mcp.call(GET, on(owner, repo)).await;
        result.allowed();
        // The native route answers exactly as it does over REST.
        let rest = world
            .app
            .get(&grant_path(owner, repo, id), Auth::Token(&world.bot))
            .await;
        assert_eq!(result.native_status(), u64::from(rest.status.as_u16()));
    }
    mcp.call(
        "get_agent_work_grant".to_uppercase().as_str(),
        on(OWNER, REPO),
    )
    .await
    .ok(200);
    let row = last_call(&app).await;
    assert_eq!(col(&row, "decision"), Some("allow"));
    assert_eq!(col(&row, "matched_grant"), Some("caps"));
    let result = mcp
        .call(
            CONFIRM,
            confirm_args("ACME", GADGETS, 999_999, OTHER_DIGEST),
        )
        .await;
    result.error(404, "not_found");
    assert_eq!(
        col(&last_call(&app).await, "matched_grant"),
        Some("caps-owner")
    );

    assert_never_confirmed(&world, id).await;
}

both_backends!(owner_and_repo_are_trimmed_and_blank_ones_name_no_repository);
async fn owner_and_repo_are_trimmed_and_blank_ones_name_no_repository(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // owner and repo arguments are trimmed before matching.
    put_grants(
        &app,
        BOT,
        json!([{"id": "exact", "repos": ["acme/widgets"], "tools": [GET]}]),
    )
    .await;
    let result = mcp.call(GET, on(" acme ", "\twidgets\n")).await;
    result.allowed();
    // The native operation gets the arguments as given, like the REST path.
    let rest = world
        .app
        .get(
            &grant_path("%20acme%20", "%09widgets%0A", id),
            Auth::Token(&world.bot),
        )
        .await;
    assert_eq!(result.native_status(), u64::from(rest.status.as_u16()));
    let row = last_call(&app).await;
    assert_eq!(col(&row, "decision"), Some("allow"), "{row:?}");
    assert_eq!(col(&row, "repository"), Some("acme/widgets"), "{row:?}");
    // Blank or non-string owner/repo resolve no repository at all.
    for args in [
        on("   ", REPO),
        on(OWNER, ""),
        json!({"owner": 7, "repo": REPO, "grant_id": id}),
        json!({"owner": OWNER, "grant_id": id}),
        json!({"repository": "acme/widgets", "grant_id": id}),
        json!({"full_name": "acme/widgets", "owner": null, "repo": REPO, "grant_id": id}),
    ] {
        mcp.call(GET, args).await.denied("no_repository");
    }

    assert_never_confirmed(&world, id).await;
}

both_backends!(malformed_patterns_never_match);
async fn malformed_patterns_never_match(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // Malformed patterns never match (they are stored as given).
    put_grants(
        &app,
        BOT,
        json!([{"id": "odd", "tools": [GET], "repos": [
            "acme/wid*", " acme/widgets", "acme/widgets ", "acme /widgets", "*/widgets", "*",
            "acme/", "/widgets", "acme/widgets/x", "acme//widgets", "acme/*x", "acme",
        ]}]),
    )
    .await;
    for (owner, repo) in [
        (OWNER, REPO),
        (OWNER, "wid*"),
        (OWNER, GADGETS),
        ("*", REPO),
    ] {
        mcp.call(GET, on(owner, repo))
            .await
            .denied("repository_not_in_grant");
    }
    // ... while a well-formed pattern beside them still does.
    put_grants(
        &app,
        BOT,
        json!([{"id": "mixed", "tools": [GET], "repos": ["acme/wid*", "acme/widgets"]}]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);

    assert_never_confirmed(&world, id).await;
}

both_backends!(tool_and_repository_must_be_in_the_same_grant);
async fn tool_and_repository_must_be_in_the_same_grant(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // Tool and repository must be in the SAME grant.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "A", "repos": ["acme/widgets"], "tools": [GET]},
            {"id": "B", "repos": ["acme/gadgets"], "tools": [CONFIRM]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, GADGETS))
        .await
        .denied("repository_not_in_grant");
    mcp.call(CONFIRM, confirm_args(OWNER, REPO, id, OTHER_DIGEST))
        .await
        .denied("repository_not_in_grant");
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("A"));
    mcp.call(CONFIRM, confirm_args(OWNER, GADGETS, 999_999, OTHER_DIGEST))
        .await
        .error(404, "not_found");
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("B"));

    assert_never_confirmed(&world, id).await;
}

both_backends!(the_first_matching_grant_in_set_order_is_the_matched_one);
async fn the_first_matching_grant_in_set_order_is_the_matched_one(app: TestApp) {
    let (world, id, mcp) = matching(&app).await;
    let on = |owner: &str, repo: &str| target(owner, repo, id);

    // The first matching grant, in set order, is the matched one.
    put_grants(
        &app,
        BOT,
        json!([
            {"id": "narrow-first", "repos": ["acme/gadgets"], "tools": [GET]},
            {"id": "wide", "repos": ["acme/*"], "tools": [GET, CONFIRM]},
            {"id": "exact-last", "repos": ["acme/widgets"], "tools": [GET]},
        ]),
    )
    .await;
    mcp.call(GET, on(OWNER, REPO)).await.ok(200);
    assert_eq!(col(&last_call(&app).await, "matched_grant"), Some("wide"));

    assert_never_confirmed(&world, id).await;
}
