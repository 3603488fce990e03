//! The project filesystem context settings form.

use serde_json::{Value, json};

use super::{
    confirmed_with, fs_change, fs_change_ok, fs_fields, fs_nonce, fs_settings, preview, put_health,
    v, verdict,
};
use crate::browser::Browser;
use crate::helpers::TestApp;
use crate::world::{OWNER, REPO, World, is_timestamp};

/// The history table of the settings page, newest first:
/// `[at, action, capabilities, actor]` per row.
async fn fs_history(browser: &Browser) -> Vec<Vec<String>> {
    let page = browser.get_page(&fs_settings()).await;
    page.assert_status(200);
    let html = page.body;
    let Some(start) = html.find("<h2>History</h2>") else {
        panic!("no history on the settings page: {html}");
    };
    let rest = &html[start..];
    let Some(body_start) = rest.find("<tbody>") else {
        return Vec::new();
    };
    let body_end = rest.find("</tbody>").expect("</tbody>");
    rest[body_start + 7..body_end]
        .split("<tr>")
        .filter(|row| row.contains("<td"))
        .map(|row| {
            // Each cell is `<td data-label="…">text</td>`.
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let text = cell.split_once('>').map_or("", |(_, text)| text);
                    text.split("</td>").next().unwrap_or("").trim().to_owned()
                })
                .collect()
        })
        .collect()
}

/// The history without timestamps: `[action, capabilities, actor]`.
async fn fs_changes(browser: &Browser) -> Vec<[String; 3]> {
    let rows = fs_history(browser).await;
    for row in &rows {
        assert_eq!(row.len(), 4, "history row: {row:?}");
        assert!(is_timestamp(&json!(row[0])), "history time: {row:?}");
    }
    rows.into_iter()
        .map(|r| [r[1].clone(), r[2].clone(), r[3].clone()])
        .collect()
}

fn change(action: &str, caps: &str, actor: &str) -> [String; 3] {
    [action.to_owned(), caps.to_owned(), actor.to_owned()]
}

/// The filesystem MCP healthy, and builder-bot's confirmed grant that
/// requires the project filesystem context {read}; no change recorded yet.
async fn fs_grant(world: &World<'_>) -> i64 {
    put_health(world.app, "filesystem", true, true, "").await;
    let id = confirmed_with(
        world,
        "Reads the project",
        r#"[{"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read"],"fallback":"block"}]"#,
    )
    .await;
    assert_eq!(fs_changes(&world.alice).await, Vec::<[String; 3]>::new());
    id
}

/// The project filesystem context state of a preview's only decision.
fn grant_state(p: &Value) -> Value {
    p["decisions"][0]["grant_state"].clone()
}

both_backends!(only_a_repository_admin_sees_and_posts_the_filesystem_context_form);
async fn only_a_repository_admin_sees_and_posts_the_filesystem_context_form(app: TestApp) {
    let world = World::new(&app).await;
    let path = fs_settings();
    let origin = world.alice.origin();
    fs_grant(&world).await;

    // A write collaborator can neither see nor post the form.
    let carol = world.human("carol", Some("write")).await;
    carol.get_page(&path).await.assert_status(403);
    let resp = carol
        .post_form(
            &path,
            &fs_fields("made-up", "approve", &["read"]),
            Some(&origin),
        )
        .await;
    resp.assert_status(403);
    // Nor a reader; someone who cannot see the repository gets 404.
    let rita = world.human("rita", Some("read")).await;
    rita.get_page(&path).await.assert_status(403);
    let olivia = world.human("olivia", None).await;
    olivia.get_page(&path).await.assert_status(404);
    // An admin demoted after loading the form is refused with its nonce.
    let dave = world.human("dave", Some("admin")).await;
    let nonce = fs_nonce(&dave).await;
    app.set_collaborator(OWNER, REPO, "dave", "write").await;
    let resp = dave
        .post_form(
            &path,
            &fs_fields(&nonce, "approve", &["read"]),
            Some(&origin),
        )
        .await;
    resp.assert_status(403);
    assert!(
        fs_changes(&world.alice).await.is_empty(),
        "a refused change was recorded"
    );
}

both_backends!(invalid_filesystem_context_changes_are_422_and_never_recorded);
async fn invalid_filesystem_context_changes_are_422_and_never_recorded(app: TestApp) {
    let world = World::new(&app).await;
    let id = fs_grant(&world).await;

    // Invalid fields: 422, nothing recorded.
    for (label, action, caps) in [
        ("no capability", "approve", vec![]),
        ("write", "approve", vec!["write"]),
        ("read and write", "approve", vec!["read", "write"]),
        ("unknown action", "grant", vec!["read"]),
        ("no action", "", vec!["read"]),
    ] {
        let resp = fs_change(&world.alice, action, &caps).await;
        assert_eq!(resp.status.as_u16(), 422, "{label}: {}", resp.body);
        assert!(fs_changes(&world.alice).await.is_empty(), "{label}");
    }
    assert_eq!(grant_state(&preview(&world, id).await)["phase"], "none");
}

both_backends!(an_approval_takes_a_fresh_nonce_and_a_same_origin_post);
async fn an_approval_takes_a_fresh_nonce_and_a_same_origin_post(app: TestApp) {
    let world = World::new(&app).await;
    let path = fs_settings();
    let origin = world.alice.origin();
    let id = fs_grant(&world).await;

    // Approve {read}: 303; the nonce cannot be replayed.
    let nonce = fs_nonce(&world.alice).await;
    let fields = fs_fields(&nonce, "approve", &["read"]);
    world
        .alice
        .post_form(&path, &fields, Some(&origin))
        .await
        .assert_status(303);
    world
        .alice
        .post_form(&path, &fields, Some(&origin))
        .await
        .assert_status(403);
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed", "{p}");
    assert_eq!(
        grant_state(&p),
        json!({"phase": "approved", "revocation_reason": null})
    );

    // Foreign origin, missing origin, cross-site fetch: 403, nothing recorded.
    let refused: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("foreign Origin", vec![("Origin", "http://evil.example")]),
        ("no Origin or Referer", vec![]),
        (
            "cross-site fetch",
            vec![
                ("Origin", origin.as_str()),
                ("Sec-Fetch-Site", "cross-site"),
            ],
        ),
    ];
    for (label, headers) in refused {
        let nonce = fs_nonce(&world.alice).await;
        let resp = world
            .alice
            .post_form_with(&path, &fs_fields(&nonce, "deny", &[]), &headers)
            .await;
        assert_eq!(resp.status.as_u16(), 403, "{label}: {}", resp.body);
    }
    assert_eq!(fs_changes(&world.alice).await.len(), 1);
}

both_backends!(each_filesystem_context_change_shows_in_the_preview_and_the_history);
async fn each_filesystem_context_change_shows_in_the_preview_and_the_history(app: TestApp) {
    let world = World::new(&app).await;
    let path = fs_settings();
    let id = fs_grant(&world).await;
    fs_change_ok(&world.alice, "approve", &["read"]).await;

    // Deny, remove, another admin's narrower approval, and a re-approval.
    fs_change_ok(&world.alice, "deny", &[]).await;
    let p = preview(&world, id).await;
    assert_eq!(
        verdict(&p["decisions"][0]),
        v(
            "bounded_context_required",
            "blocked",
            "approve_project_filesystem_context"
        )
    );
    assert_eq!(
        grant_state(&p),
        json!({"phase": "denied", "revocation_reason": null})
    );
    fs_change_ok(&world.alice, "remove", &[]).await;
    assert_eq!(
        grant_state(&preview(&world, id).await),
        json!({"phase": "revoked", "revocation_reason": "project_grant_removed"})
    );
    let erin = world.human("erin", Some("admin")).await;
    fs_change_ok(&erin, "approve", &["search", "list"]).await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "blocked");
    assert_eq!(grant_state(&p)["phase"], "revoked");
    fs_change_ok(&world.alice, "approve", &["read", "list", "search"]).await;
    let p = preview(&world, id).await;
    assert_eq!(p["status"], "allowed");

    // The history shows each change with its actor, newest first.
    assert_eq!(
        fs_changes(&world.alice).await,
        vec![
            change("approved", "list read search", "alice"),
            change("approved", "list search", "erin"),
            change("removed", "", "alice"),
            change("denied", "", "alice"),
            change("approved", "read", "alice"),
        ]
    );
    let page = world.alice.get_page(&path).await;
    assert!(
        page.body.contains("id=\"fs-state\">approved<"),
        "{}",
        page.body
    );
}

both_backends!(narrowing_to_read_leaves_a_read_only_package_approved);
async fn narrowing_to_read_leaves_a_read_only_package_approved(app: TestApp) {
    let world = World::new(&app).await;
    let id = fs_grant(&world).await;

    // Narrowing {read, list} to {read} leaves a read-only package approved.
    fs_change_ok(&world.alice, "approve", &["read", "list"]).await;
    fs_change_ok(&world.alice, "approve", &["read"]).await;
    let p = preview(&world, id).await;
    assert_eq!(
        grant_state(&p),
        json!({"phase": "approved", "revocation_reason": null})
    );
}
