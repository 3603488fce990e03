//! `writ backup`, `writ restore` and `writ check`, run as the binary against
//! the app's database: a backup taken while bots submit holds every receipt
//! acknowledged before it began, restores, passes the check, and serves;
//! the check names what a changed row breaks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::time::Duration;

use crate::db::SqlConn;
use crate::helpers::{Backend, TestApp};
use crate::world::{OWNER, REPO, World, new_key, readback_path};

/// Runs the `writ` binary with `args` against `database_url`, to its end.
async fn writ(database_url: &str, args: &[&str]) -> Output {
    crate::helpers::writ_command(database_url, args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .expect("run writ")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh directory for this test's files.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("writ-backup-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

both_backends!(check_names_the_rows_that_break_an_invariant);
async fn check_names_the_rows_that_break_an_invariant(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("checked work").await;
    for n in 0..3 {
        world
            .submitted(id, &new_key(), &format!("issue {n}"), "body")
            .await;
    }
    let url = app.database_url();
    let out = writ(&url, &["check"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("all checks hold"), "{}", text(&out));
    assert_eq!(
        text(&out).contains("SQLite integrity_check"),
        app.backend == Backend::Sqlite
    );

    let mut db = SqlConn::connect(&url).await;
    let receipt = db
        .text_rows("SELECT CAST(min(id) AS TEXT), CAST(min(issue_id) AS TEXT) FROM submissions")
        .await
        .remove(0);
    let (receipt, issue) = (
        receipt[0].clone().expect("a receipt"),
        receipt[1].clone().expect("its issue"),
    );
    let repository = db
        .text_rows("SELECT CAST(id AS TEXT) FROM repositories WHERE lower_name = 'widgets'")
        .await
        .remove(0)[0]
        .clone()
        .expect("acme/widgets");
    // Each change breaks one invariant; check names the row, exits 1, and
    // the change is undone before the next.
    let cases = [
        (
            format!("UPDATE grants SET submission_count = submission_count + 1 WHERE id = {id}"),
            format!("UPDATE grants SET submission_count = submission_count - 1 WHERE id = {id}"),
            "FAIL  each grant's submission_count equals its receipts",
            format!("grant {id}"),
        ),
        (
            format!("UPDATE issues SET title = title || ' (edited)' WHERE id = {issue}"),
            format!("UPDATE issues SET title = 'issue 0' WHERE id = {issue}"),
            "FAIL  every receipt's issue has the title and body its content digest covers",
            format!("receipt {receipt}"),
        ),
        (
            format!("UPDATE repositories SET next_issue_index = 2 WHERE id = {repository}"),
            format!("UPDATE repositories SET next_issue_index = 4 WHERE id = {repository}"),
            "FAIL  each repository's next issue index is past all its issues",
            format!("repository {repository}"),
        ),
    ];
    for (change, undo, line, names) in cases {
        db.execute(&change).await.expect("the change");
        let out = writ(&url, &["check"]).await;
        let said = text(&out);
        assert!(!out.status.success(), "{change}: {said}");
        let failed: Vec<&str> = said.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert_eq!(failed.len(), 1, "{change}: {said}");
        assert!(failed[0].starts_with(line), "{change}: {said}");
        assert!(failed[0].ends_with(&names), "{change}: {said}");
        db.execute(&undo).await.expect("the undo");
    }
    let out = writ(&url, &["check"]).await;
    assert!(out.status.success(), "{}", text(&out));
    db.close().await;
}

both_backends!(a_backup_under_load_restores_every_acknowledged_receipt);
async fn a_backup_under_load_restores_every_acknowledged_receipt(app: TestApp) {
    let world = World::new(&app).await;
    let dir = scratch();
    let out_file = dir.join("writ-backup.db");
    if app.backend == Backend::Postgres {
        // PostgreSQL is pointed to its own tools, and nothing is written.
        for args in [
            vec!["backup", "--out", out_file.to_str().unwrap()],
            vec!["restore", "--from", out_file.to_str().unwrap()],
        ] {
            let out = writ(&app.database_url(), &args).await;
            assert!(!out.status.success(), "{args:?}");
            assert!(text(&out).contains("pg_dump"), "{}", text(&out));
        }
        assert!(!out_file.exists());
        let _ = std::fs::remove_dir_all(dir);
        return;
    }

    let grants = [
        world.active("load one").await,
        world.active("load two").await,
    ];
    // Submissions to two grants run while the backup is taken; each
    // acknowledged key is noted as it is acknowledged.
    let acked: Mutex<Vec<(i64, String)>> = Mutex::default();
    let submitters = futures_util::future::join_all(grants.iter().map(|&id| {
        let (world, acked) = (&world, &acked);
        async move {
            let digest = world.digest(id).await;
            for n in 0..10 {
                let key = new_key();
                let body = crate::world::submit_body(&digest, &key, &format!("n{n}"), "b");
                world.submit_with(id, body).await.assert_status(201);
                acked.lock().unwrap().push((id, key));
            }
        }
    }));
    let backup = async {
        while acked.lock().unwrap().len() < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before: BTreeSet<(i64, String)> = acked.lock().unwrap().iter().cloned().collect();
        let out = writ(
            &app.database_url(),
            &["backup", "--out", out_file.to_str().unwrap()],
        )
        .await;
        (before, out)
    };
    let (_, (before, out)) = tokio::join!(submitters, backup);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("integrity_check ok"), "{}", text(&out));
    let all: BTreeSet<(i64, String)> = acked.lock().unwrap().iter().cloned().collect();
    assert_eq!(all.len(), 20);
    eprintln!(
        "{} receipts acknowledged before the backup began, 20 in all; {}",
        before.len(),
        text(&out).trim()
    );
    assert!(!dir.join("writ-backup.db.partial").exists());

    // A second backup to the same file is refused; the first stays.
    let again = writ(
        &app.database_url(),
        &["backup", "--out", out_file.to_str().unwrap()],
    )
    .await;
    assert!(!again.status.success());
    assert!(text(&again).contains("exists"), "{}", text(&again));

    // Restore to a new file, check it, and read what it holds.
    let restored = dir.join("restored.db");
    let url = sqlite_url(&restored);
    let out = writ(&url, &["restore", "--from", out_file.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = writ(&url, &["check"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let mut db = SqlConn::connect(&url).await;
    let held: BTreeSet<(i64, String)> = db
        .text_rows("SELECT CAST(grant_id AS TEXT), request_key FROM submissions")
        .await
        .into_iter()
        .map(|r| {
            (
                r[0].as_deref().unwrap().parse().unwrap(),
                r[1].clone().unwrap(),
            )
        })
        .filter(|(grant, _)| grants.contains(grant))
        .collect();
    db.close().await;
    assert!(
        held.is_superset(&before),
        "missing from the backup: {:?}",
        before.difference(&held).collect::<Vec<_>>()
    );
    assert!(
        held.is_subset(&all),
        "the backup holds receipts nobody was told of"
    );

    // Restoring over an existing database is refused.
    let out = writ(&url, &["restore", "--from", out_file.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("exists"), "{}", text(&out));

    // Writ serves the restored database: the bot reads back a receipt it
    // was told of before the backup began.
    let bind = crate::helpers::free_loopback_address();
    let mut child = crate::helpers::writ_command(&url, &["serve", "--bind", &bind])
        .spawn()
        .expect("spawn writ serve");
    crate::helpers::await_ready(&app.client, &bind, &mut child).await;
    let base = format!("http://{bind}");
    let (grant, key) = before.iter().next().expect("a receipt before the backup");
    let read = app
        .client
        .get(format!("{base}{}", readback_path(OWNER, REPO, grant, key)))
        .bearer_auth(&world.bot)
        .send()
        .await
        .expect("readback");
    assert_eq!(read.status(), 200);
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(dir);
}
