//! `writ admin webhook …` against the app's database: the same use cases as
//! the admin API.

use serde_json::Value;

use crate::helpers::{Auth, TestApp};

async fn writ(app: &TestApp, args: &[&str]) -> Vec<Value> {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"))
        .arg("--database-url")
        .arg(app.database_url())
        .args(["admin", "webhook"])
        .args(args)
        .env("WRIT_LOG", "warn")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run writ");
    assert!(
        out.status.success(),
        "writ admin webhook {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

both_backends!(the_cli_creates_lists_disables_rotates_and_deletes);
async fn the_cli_creates_lists_disables_rotates_and_deletes(app: TestApp) {
    let created = writ(
        &app,
        &[
            "create",
            "--url",
            "https://hooks.example.invalid/cli",
            "--type",
            "grant.*",
            "--repo",
            "acme/*",
            "--description",
            "from the CLI",
            "--disabled",
        ],
    )
    .await;
    let id = created[0]["id"].as_i64().expect("an id");
    assert!(created[0]["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(created[0]["enabled"], false);
    let listed = writ(&app, &["list"]).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["description"], "from the CLI");
    let api = app
        .get(
            &format!("/api/v1/admin/webhooks/{id}"),
            Auth::Token(&app.admin_token),
        )
        .await;
    api.assert_status(200);
    assert_eq!(api.json(), listed[0], "the API shows what the CLI made");
    let rotated = writ(&app, &["rotate-secret", "--id", &id.to_string()]).await;
    assert_ne!(rotated[0]["secret"], created[0]["secret"]);
    assert_eq!(
        writ(&app, &["deliveries", "--id", &id.to_string()])
            .await
            .len(),
        0
    );
    writ(&app, &["delete", "--id", &id.to_string()]).await;
    assert_eq!(writ(&app, &["list"]).await.len(), 0);
}
