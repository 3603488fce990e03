//! Archives of sealed audit records (docs/audit.md): `writ audit archive`
//! writes whole seals to a file, checks it, and only then deletes those
//! records with its `audit_archives` row in one transaction; the database
//! lets a record go only that way; the database still verifies after, and
//! the archive verifies offline (by Writ and by the independent verifier),
//! against the database, and not once it is cut short or changed;
//! retention archives on the sealer's schedule.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::audit::{
    finished, independent, manual_signed, python, seal_everything, some_calls, verify, writ,
};
use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, TestApp};
use crate::world::World;

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("writ-archive-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Each seal's number, record count and call ids, in order.
async fn seals(db: &mut SqlConn) -> Vec<(i64, i64, Vec<i64>)> {
    db.text_rows(
        "SELECT CAST(seq AS TEXT), CAST(record_count AS TEXT), call_ids FROM audit_seals ORDER BY seq",
    )
    .await
    .into_iter()
    .map(|r| {
        let n = |i: usize| r[i].as_deref().expect("value").parse::<i64>().expect("number");
        let ids = serde_json::from_str(r[2].as_deref().expect("ids")).expect("ids parse");
        (n(0), n(1), ids)
    })
    .collect()
}

/// Runs `writ ARGS` without a database.
async fn offline(args: &[&str]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.args(args)
        .env("RUST_BACKTRACE", "0")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    finished(cmd).await
}

/// `writ audit archive --through-seal SEAL --out FILE` on `url`.
async fn archive_through(url: &str, seal: i64, out: &Path) -> (bool, String) {
    let seal = seal.to_string();
    let out = out.to_str().expect("utf-8 path");
    writ(
        url,
        &["audit", "archive", "--through-seal", &seal, "--out", out],
    )
    .await
}

/// `writ audit verify --archive FILE`, offline.
async fn verify_archive(file: &Path) -> (bool, String) {
    offline(&[
        "audit",
        "verify",
        "--archive",
        file.to_str().expect("utf-8 path"),
    ])
    .await
}

/// `writ audit verify --archive FILE --database-url URL`.
async fn verify_archive_against(url: &str, file: &Path) -> (bool, String) {
    writ(
        url,
        &[
            "audit",
            "verify",
            "--archive",
            file.to_str().expect("utf-8 path"),
        ],
    )
    .await
}

fn archive_row(seq: i64, first: i64, through: i64, records: i64) -> String {
    format!(
        "INSERT INTO audit_archives (seq, first_seal, through_seal, record_count, file_name, \
         file_sha256, file_bytes, archived_by, archived_at) \
         VALUES ({seq}, {first}, {through}, {records}, 'f', 'x', 1, 'test', 'now')"
    )
}

fn ids_sql(ids: &[i64]) -> String {
    ids.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The archive's JSON lines, decompressed.
fn lines_of(path: &Path) -> Vec<String> {
    let mut text = String::new();
    zstd::Decoder::new(std::fs::File::open(path).expect("open the archive"))
        .expect("zstd")
        .read_to_string(&mut text)
        .expect("decompress");
    text.lines().map(str::to_owned).collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    write_lines_at(path, lines, 3);
}

fn write_lines_at(path: &Path, lines: &[String], level: i32) {
    let mut out = zstd::Encoder::new(std::fs::File::create(path).expect("create"), level)
        .expect("zstd")
        .auto_finish();
    for line in lines {
        writeln!(out, "{line}").expect("write");
    }
}

both_backends!(
    an_archive_deletes_only_what_it_verified_and_verifies_offline,
    super::manual_signed
);
async fn an_archive_deletes_only_what_it_verified_and_verifies_offline(app: TestApp) {
    let world = World::new(&app).await;
    let url = app.database_url();
    let mut db = SqlConn::connect(&url).await;
    for n in [3, 2, 2, 1] {
        some_calls(&world, n).await;
        seal_everything(&app, &mut db).await;
    }
    let sealed = seals(&mut db).await;
    assert!(sealed.len() >= 4, "{sealed:?}");
    let all = db.integer("SELECT count(*) FROM tool_calls").await;

    // The database lets no record go but through an archive of its seal.
    let first = sealed[0].2[0];
    let refused = db
        .execute(&format!("DELETE FROM tool_calls WHERE id = {first}"))
        .await
        .expect_err("a sealed record deleted without an archive");
    assert!(refused.contains("deleted only by the archive"), "{refused}");
    // An archive row cannot commit while its records are there.
    let refused = db
        .execute(&archive_row(1, 1, 1, sealed[0].1))
        .await
        .expect_err("an archive row committed without its deletes");
    assert!(
        refused.contains("FOREIGN KEY constraint failed")
            || refused.contains("an archive commits only without the records it holds"),
        "{refused}"
    );
    // Inside the archive's transaction, its seals' records may go; a
    // record of a later seal may not.
    let begin = "BEGIN";
    db.execute(&format!(
        "{begin}; {}; DELETE FROM tool_calls WHERE id IN ({})",
        archive_row(1, 1, 1, sealed[0].1),
        ids_sql(&sealed[0].2)
    ))
    .await
    .expect("the archive's own records go");
    let refused = db
        .execute(&format!(
            "DELETE FROM tool_calls WHERE id = {}",
            sealed[1].2[0]
        ))
        .await
        .expect_err("a record of a seal the archive does not hold");
    assert!(refused.contains("deleted only by the archive"), "{refused}");
    db.execute("ROLLBACK").await.expect("rollback");
    assert_eq!(db.integer("SELECT count(*) FROM tool_calls").await, all);
    assert_eq!(db.integer("SELECT count(*) FROM audit_archives").await, 0);
    if app.backend == Backend::Postgres {
        let refused = db
            .execute("TRUNCATE tool_calls")
            .await
            .expect_err("truncated");
        assert!(refused.contains("never changed or deleted"), "{refused}");
    }

    // writ audit archive: seals 1..=2.
    let dir = scratch();
    let file = dir.join("audit-1-2.jsonl.zst");
    let file_arg = file.to_str().expect("utf-8 path");
    let (ok, text) = archive_through(&url, 2, &file).await;
    assert!(ok, "{text}");
    let archived = sealed[0].1 + sealed[1].1;
    assert!(
        text.contains(&format!("archived seals 1..=2 ({archived} records)")),
        "{text}"
    );
    assert!(!dir.join("audit-1-2.jsonl.zst.partial").exists());
    let bytes = std::fs::read(&file).expect("the archive");
    let sha = hex::encode(Sha256::digest(&bytes));
    let row = db
        .text_rows(
            "SELECT CAST(first_seal AS TEXT), CAST(through_seal AS TEXT), \
             CAST(record_count AS TEXT), file_name, file_sha256, CAST(file_bytes AS TEXT), \
             archived_by FROM audit_archives",
        )
        .await;
    let row: Vec<String> = row[0].iter().map(|v| v.clone().expect("value")).collect();
    assert_eq!(
        row,
        [
            "1".to_owned(),
            "2".into(),
            archived.to_string(),
            "audit-1-2.jsonl.zst".into(),
            sha.clone(),
            bytes.len().to_string(),
            "cli".into()
        ]
    );
    let gone: Vec<i64> = sealed[0].2.iter().chain(&sealed[1].2).copied().collect();
    assert_eq!(
        db.integer(&format!(
            "SELECT count(*) FROM tool_calls WHERE id IN ({})",
            ids_sql(&gone)
        ))
        .await,
        0
    );
    assert_eq!(
        db.integer("SELECT count(*) FROM tool_calls").await,
        all - archived
    );
    // The seals stay; their lists of record ids and leaf hashes went with
    // the records, and nothing else may change them.
    let lists = db
        .text_rows("SELECT call_ids, leaf_hashes FROM audit_seals ORDER BY seq")
        .await;
    assert_eq!(lists.len(), sealed.len());
    for (i, row) in lists.iter().enumerate() {
        let emptied = row.iter().all(|v| v.as_deref() == Some("[]"));
        assert_eq!(emptied, i < 2, "seal {}: {row:?}", i + 1);
    }
    for change in [
        "UPDATE audit_seals SET call_ids = '[]', leaf_hashes = '[]' WHERE seq = 3",
        "UPDATE audit_seals SET sealed_at = 'x' WHERE seq = 1",
        "DELETE FROM audit_seals WHERE seq = 1",
    ] {
        let refused = db.execute(change).await.expect_err(change);
        assert!(
            refused.contains("audit_seals rows are never"),
            "{change}: {refused}"
        );
    }

    // The database verifies without them; an archived record has no proof.
    let (ok, text) = verify(&url).await;
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("ok: {} seals (2 archived)", sealed.len())),
        "{text}"
    );
    app.get(
        &format!("/api/v1/admin/audit/calls/{first}/proof"),
        Auth::Token(&app.admin_token),
    )
    .await
    .assert_status(404);
    let (ok, text) = writ(&url, &["check"]).await;
    assert!(ok, "{text}");

    // The archive verifies offline, and against the database.
    let (ok, text) = verify_archive(&file).await;
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!(
            "holds seals 1..=2 ({archived} records), sha256 {sha}"
        )),
        "{text}"
    );
    assert!(!text.contains("database"), "{text}");
    let (ok, text) = verify_archive_against(&url, &file).await;
    assert!(
        ok && text.contains("its seals are the database's"),
        "{text}"
    );
    if let Some(python) = python() {
        let (ok, text) = independent(&python, &["--archive", file_arg]).await;
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!(
                "ok: archive of {archived} records in 2 seals (1..=2)"
            )),
            "{text}"
        );
    }

    // Archived seals are not archived twice; the next archive follows.
    let again = dir.join("again.jsonl.zst");
    let (ok, text) = archive_through(&url, 2, &again).await;
    assert!(
        !ok && text.contains("seals 1..=2 are archived already"),
        "{text}"
    );
    assert!(!again.exists());
    let next = dir.join("audit-3-3.jsonl.zst");
    let (ok, text) = archive_through(&url, 3, &next).await;
    assert!(ok && text.contains("archived seals 3..=3"), "{text}");
    let (ok, text) = verify(&url).await;
    assert!(ok && text.contains("(3 archived)"), "{text}");
    // SQLite keeps its newest record (ids are never given twice).
    let last = sealed.last().expect("a seal").0;
    let newest = db.integer("SELECT max(id) FROM tool_calls").await;
    let newest_sealed = *sealed.last().unwrap().2.last().unwrap();
    if app.backend == Backend::Sqlite && newest == newest_sealed {
        let (ok, text) = archive_through(&url, last, &dir.join("newest.jsonl.zst")).await;
        assert!(!ok && text.contains("holds the newest record"), "{text}");
    }

    // A file cut short, or changed, does not verify, and names where.
    let cut = dir.join("cut.jsonl.zst");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let (ok, text) = verify_archive(&cut).await;
    assert!(
        !ok && text.contains("FAIL ") && text.contains("truncated"),
        "{text}"
    );
    let lines = lines_of(&file);
    // Cut inside seal 2's records: named by the first record it lacks.
    let seal_2 = lines
        .iter()
        .position(|l| l.starts_with("{\"seal\":{\"seq\":2,"))
        .expect("seal 2's line");
    let cut_records = dir.join("cut-records.jsonl.zst");
    write_lines(&cut_records, &lines[..seal_2 + 2]);
    let (ok, text) = verify_archive(&cut_records).await;
    let expected = match sealed[1].2.get(1) {
        Some(lacking) => {
            format!(
                "FAIL seal 2 record {lacking}: the archive ends before this record (it is truncated)"
            )
        }
        None => "FAIL seal 2: the archive ends before its end line (it is truncated)".to_owned(),
    };
    assert!(!ok && text.contains(&expected), "{text}");
    let short = dir.join("short.jsonl.zst");
    write_lines(&short, &lines[..lines.len() - 1]);
    let (ok, text) = verify_archive(&short).await;
    assert!(
        !ok && text.contains("FAIL seal 2: the archive ends before its end line (it is truncated)"),
        "{text}"
    );
    let changed_file = dir.join("changed.jsonl.zst");
    let changed: Vec<String> = lines
        .iter()
        .map(|l| {
            if l.contains(&format!("\"call_id\":{first},")) {
                l.replacen("\"reason\":\"", "\"reason\":\"tampered ", 1)
            } else {
                l.clone()
            }
        })
        .collect();
    assert_ne!(changed, lines);
    write_lines(&changed_file, &changed);
    let (ok, text) = verify_archive(&changed_file).await;
    assert!(
        !ok && text.contains("FAIL seal 1: its records do not make its merkle_root"),
        "{text}"
    );
    if let Some(python) = python() {
        for (what, path) in [
            ("cut", &cut),
            ("cut in its records", &cut_records),
            ("short", &short),
            ("changed", &changed_file),
        ] {
            let (ok, text) = independent(&python, &["--archive", path.to_str().unwrap()]).await;
            assert!(!ok && text.contains("FAIL"), "{what}: {text}");
        }
    }
    let trailing = dir.join("trailing.jsonl.zst");
    let mut with_tail = bytes.clone();
    with_tail.extend_from_slice(b"not zstd");
    std::fs::write(&trailing, &with_tail).expect("write");
    let (ok, text) = verify_archive(&trailing).await;
    assert!(
        !ok && text.contains("FAIL archive: the file goes on after its end line"),
        "{text}"
    );
    // The same lines compressed otherwise hold offline, but not against
    // the database: the file is not the one it archived.
    let rewritten = dir.join("rewritten.jsonl.zst");
    write_lines_at(&rewritten, &lines, 19);
    let (ok, text) = verify_archive(&rewritten).await;
    assert!(ok, "{text}");
    let (ok, text) = verify_archive_against(&url, &rewritten).await;
    assert!(!ok && text.contains("has SHA-256"), "{text}");
    db.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn retaining(dir: &Path) -> impl Fn(&mut writ::Config) + use<> {
    let dir = dir.display().to_string();
    move |config: &mut writ::Config| {
        config.audit.seal = true;
        config.audit.seal_interval_seconds = 1;
        config.audit.retain_days = Some(0);
        config.audit.archive_dir = Some(dir.clone());
    }
}

both_backends!(
    retention_archives_on_the_sealers_schedule,
    spawn = |backend| async move {
        let dir = super::scratch();
        crate::helpers::TestApp::spawn_with(backend, super::retaining(&dir)).await
    }
);
async fn retention_archives_on_the_sealers_schedule(app: TestApp) {
    let world = World::new(&app).await;
    let url = app.database_url();
    let mut db = SqlConn::connect(&url).await;
    let dir = PathBuf::from(
        app.writ()
            .ctx()
            .config
            .audit
            .archive_dir
            .clone()
            .expect("archive_dir"),
    );
    for _ in 0..3 {
        some_calls(&world, 2).await;
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    // Every seal but (on SQLite) the one holding the newest record is
    // archived within a few rounds.
    let mut archived = 0;
    for _ in 0..100 {
        archived = db
            .integer("SELECT coalesce(max(through_seal), 0) FROM audit_archives")
            .await;
        if archived >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(archived >= 2, "retention archived through seal {archived}");
    let rows = db
        .text_rows("SELECT file_name, file_sha256, archived_by FROM audit_archives ORDER BY seq")
        .await;
    for row in &rows {
        let name = row[0].as_deref().expect("name");
        assert!(
            name.starts_with("writ-audit-") && name.ends_with(".jsonl.zst"),
            "{name}"
        );
        assert_eq!(row[2].as_deref(), Some("retention"));
        let file = dir.join(name);
        let (ok, text) = verify_archive_against(&url, &file).await;
        assert!(ok, "{name}: {text}");
        let sha = hex::encode(Sha256::digest(std::fs::read(&file).expect("the file")));
        assert_eq!(row[1].as_deref(), Some(sha.as_str()));
    }
    let files = std::fs::read_dir(&dir).expect("archive_dir").count();
    assert_eq!(files, rows.len(), "only the archives' files are left");
    let (ok, text) = verify(&url).await;
    assert!(ok, "{text}");
    if app.backend == Backend::Sqlite {
        assert!(db.integer("SELECT count(*) FROM tool_calls").await >= 1);
    }
    db.close().await;
}
