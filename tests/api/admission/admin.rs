//! The admin MCP routes, the preview route's access, and the admissions
//! report's order.

use serde_json::{Value, json};

use super::{
    admissions, approve, confirmed_with, preview, preview_path, put_health, put_health_as,
};
use crate::helpers::{ADMIN_LOGIN, Auth, Body, TestApp};
use crate::world::{BOT, World, is_hex64};

both_backends!(admin_mcp_routes);
async fn admin_mcp_routes(app: TestApp) {
    let world = World::new(&app).await;
    let admin = Auth::Token(&app.admin_token);
    let good = || Body::Json(json!({"installed": true, "healthy": true, "detail": "ok"}));

    // Not the setup privilege: 403; no credential: 401.
    let read_only = app.create_token(ADMIN_LOGIN, &["read:admin"]).await.token;
    for (label, auth) in [
        (
            "alice, every scope, no site admin",
            Auth::Token(&world.alice_token),
        ),
        ("a bot", Auth::Token(&world.bot)),
        ("admin with read:admin only", Auth::Token(&read_only)),
    ] {
        let resp = put_health_as(&app, auth, "filesystem", good()).await;
        assert_eq!(resp.status.as_u16(), 403, "{label}: {}", resp.body);
    }
    put_health_as(&app, Auth::None, "filesystem", good())
        .await
        .assert_error(401, "unauthenticated");
    app.get("/api/v1/admin/mcp", Auth::Token(&world.alice_token))
        .await
        .assert_status(403);
    app.get("/api/v1/admin/mcp", Auth::None)
        .await
        .assert_status(401);

    // Invalid bodies and ids: 400, nothing stored.
    let long_detail = "x".repeat(1001);
    let long_id = "m".repeat(65);
    let bad: Vec<(&str, &str, Body)> = vec![
        (
            "unknown field",
            "filesystem",
            Body::Json(json!({"installed": true, "healthy": true, "detail": "", "since": "now"})),
        ),
        (
            "missing healthy",
            "filesystem",
            Body::Json(json!({"installed": true})),
        ),
        (
            "string for a boolean",
            "filesystem",
            Body::Json(json!({"installed": "yes", "healthy": true})),
        ),
        (
            "not JSON",
            "filesystem",
            Body::Raw(Some("application/json"), b"{installed".to_vec()),
        ),
        (
            "detail over 1000 bytes",
            "filesystem",
            Body::Json(json!({"installed": true, "healthy": true, "detail": long_detail})),
        ),
        ("id with a punctuation mark", "bad%21id", good()),
        ("id over 64 characters", long_id.as_str(), good()),
    ];
    for (label, mcp_id, body) in bad {
        let resp = put_health_as(&app, admin, mcp_id, body).await;
        assert_eq!(resp.status.as_u16(), 400, "{label}: {}", resp.body);
        assert_eq!(resp.code(), "invalid_input", "{label}: {}", resp.body);
    }
    let report = app.get("/api/v1/admin/mcp", admin).await;
    report.assert_status(200);
    assert_eq!(report.json()["health"], json!([]), "{}", report.body);

    // Valid: stored, normalized id, listed with the catalog in use.
    put_health(&app, "filesystem", true, false, "probe answered 503").await;
    let github = put_health(&app, " GitHub ", true, true, "").await;
    assert_eq!(github["mcp_id"], "github", "ids are normalized");
    let report = app.get("/api/v1/admin/mcp", Auth::Token(&read_only)).await;
    report.assert_status(200);
    let report = report.json();
    assert!(is_hex64(&report["catalog_version"]), "{report}");
    assert_eq!(report["catalog_mcps"], json!(["filesystem", "github"]));
    let mut listed: Vec<Value> = report["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            json!([
                h["mcp_id"],
                h["installed"],
                h["healthy"],
                h["detail"],
                h["updated_by"]
            ])
        })
        .collect();
    listed.sort_by_key(|h| h[0].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        listed,
        vec![
            json!(["filesystem", true, false, "probe answered 503", ADMIN_LOGIN]),
            json!(["github", true, true, "", ADMIN_LOGIN]),
        ]
    );

    // The preview: bots only, their own grants, read:repository; zero
    // requirements are allowed; its catalog_version is the admin's.
    let id = world.confirmed("No MCP at all").await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed");
    assert_eq!(p["decisions"], json!([]));
    assert_eq!(p["catalog_version"], report["catalog_version"]);
    app.get(&preview_path(id), Auth::Token(&world.rival))
        .await
        .assert_error(404, "not_found");
    app.get(&preview_path(id), Auth::Token(&world.alice_token))
        .await
        .assert_status(403);
    let no_read = app.create_token(BOT, &["write:issue"]).await.token;
    app.get(&preview_path(id), Auth::Token(&no_read))
        .await
        .assert_error(403, "insufficient_scope");
    app.get(&preview_path(id), Auth::None)
        .await
        .assert_error(401, "unauthenticated");
    app.get(&preview_path(999_999), Auth::Token(&world.bot))
        .await
        .assert_error(404, "not_found");
    // A preview stores nothing.
    assert!(admissions(&app).await.is_empty());
}

both_backends!(admissions_report_is_in_evaluation_order);
async fn admissions_report_is_in_evaluation_order(app: TestApp) {
    let world = World::new(&app).await;
    let id = confirmed_with(
        &world,
        "Refused a dozen times",
        r#"[{"mcp_id":"gitlab","agent":"qa","requirement":"required","capabilities":[],"fallback":"block"}]"#,
    )
    .await;
    for _ in 0..12 {
        approve(&world, id, true).await.assert_status(409);
    }
    let ids: Vec<i64> = admissions(&app)
        .await
        .iter()
        .map(|r| r["evaluation_id"].as_i64().expect("numeric evaluation_id"))
        .collect();
    assert_eq!(ids.len(), 12);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(
        ids, sorted,
        "the report is ordered by evaluation_id as a number"
    );
}
