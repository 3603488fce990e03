//! Sealed audit records (docs/audit.md): seals cover every record once, in
//! order, chained and signed; each record's inclusion proof verifies;
//! `writ audit verify` names the seal and record of each tampering; an
//! outcome arriving after its record was sealed is refused; sealing under
//! load from two processes seals every record exactly once.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, TestApp};
use crate::world::{World, new_key};
use writ::domain::seal::{self, Hash};

/// A fresh signing key file for this test.
pub(crate) fn key_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("writ-audit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join("seal.key");
    writ::service::seal::new_key(&path).expect("new key");
    path
}

/// No background sealing (the test seals when it means to), seals signed.
pub(crate) fn manual_signed(config: &mut writ::Config) {
    config.audit.seal = false;
    config.audit.signing_key_file = Some(key_file().display().to_string());
}

/// Seals everything final now, as the sealer of `writ serve` does.
pub(crate) async fn seal_now(app: &TestApp) -> Vec<writ::service::seal::Sealed> {
    let ctx = app.writ().ctx();
    let signer = writ::service::seal::signer(&ctx.config).expect("signer");
    writ::service::seal::seal_all(ctx, signer.as_ref())
        .await
        .expect("seal")
}

/// Records sealed, and records in all.
pub(crate) async fn sealed_of_all(db: &mut SqlConn) -> (i64, i64) {
    let row = db
        .text_rows(
            "SELECT CAST((SELECT coalesce(sum(record_count), 0) FROM audit_seals) AS TEXT), \
             CAST((SELECT count(*) FROM tool_calls) AS TEXT)",
        )
        .await
        .remove(0);
    let n = |i: usize| row[i].as_deref().expect("count").parse().expect("number");
    (n(0), n(1))
}

/// Seals until at least `records` records are sealed. On PostgreSQL a
/// record is sealed only once every transaction older than its own has
/// ended, in any database of the server (other tests run beside this
/// one), so a round may leave the newest for the next.
pub(crate) async fn seal_through(app: &TestApp, db: &mut SqlConn, records: i64) {
    for _ in 0..200 {
        seal_now(app).await;
        if sealed_of_all(db).await.0 >= records {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("not sealed within 10 s: {:?}", sealed_of_all(db).await);
}

/// Seals every record written so far.
pub(crate) async fn seal_everything(app: &TestApp, db: &mut SqlConn) {
    let all = sealed_of_all(db).await.1;
    seal_through(app, db, all).await;
}

/// Records of calls: bot reads and submissions, a refused one among them.
pub(crate) async fn some_calls(world: &World<'_>, n: usize) {
    let id = world
        .active(&format!("sealed work {}", uuid::Uuid::new_v4()))
        .await;
    for i in 0..n {
        world
            .submitted(id, &new_key(), &format!("issue {i}"), "body")
            .await;
        world.read(id).await.assert_status(200);
    }
    world.read(999_999).await.assert_status(404);
}

pub(crate) async fn call_ids(db: &mut SqlConn) -> Vec<i64> {
    db.text_rows("SELECT CAST(id AS TEXT) AS id_text FROM tool_calls ORDER BY tool_calls.id")
        .await
        .into_iter()
        .map(|r| r[0].as_deref().expect("id").parse().expect("number"))
        .collect()
}

fn hash(v: &Value) -> Hash {
    hex::decode(v.as_str().expect("hex text"))
        .expect("hex")
        .try_into()
        .expect("32 bytes")
}

both_backends!(every_record_is_sealed_once_and_proves, super::manual_signed);
async fn every_record_is_sealed_once_and_proves(app: TestApp) {
    let world = World::new(&app).await;
    some_calls(&world, 3).await;
    let admin = Auth::Token(&app.admin_token);
    let mut db = SqlConn::connect(&app.database_url()).await;

    let unsealed = call_ids(&mut db).await[0];
    app.get(
        &format!("/api/v1/admin/audit/calls/{unsealed}/proof"),
        admin,
    )
    .await
    .assert_error(409, "conflict");

    seal_everything(&app, &mut db).await;
    let first_round = sealed_of_all(&mut db).await.0;
    some_calls(&world, 2).await;
    seal_everything(&app, &mut db).await;
    assert!(seal_now(&app).await.is_empty(), "nothing is left to seal");

    let ids = call_ids(&mut db).await;
    let (sealed, all) = sealed_of_all(&mut db).await;
    assert_eq!(
        (sealed, all),
        (ids.len() as i64, ids.len() as i64),
        "every record sealed once"
    );
    assert!(first_round < sealed);
    let seal_count: i64 = db
        .text_rows("SELECT CAST(count(*) AS TEXT) FROM audit_seals")
        .await[0][0]
        .as_deref()
        .expect("count")
        .parse()
        .expect("number");
    assert!(seal_count >= 2);

    let verified = app.get("/api/v1/admin/audit/verify", admin).await;
    verified.assert_status(200);
    let v = verified.json();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["seals"], seal_count);
    assert_eq!(v["records"], ids.len());
    let from2 = app
        .get("/api/v1/admin/audit/verify?from=2", admin)
        .await
        .json();
    assert_eq!(
        (&from2["ok"], &from2["seals"]),
        (&Value::Bool(true), &Value::from(seal_count - 1))
    );

    let keys = app.get("/api/v1/audit/keys", Auth::None).await;
    keys.assert_status(200);
    let keys = keys.json();
    let key = &keys[0];
    assert_eq!(keys.as_array().map(Vec::len), Some(1), "{keys}");
    let public: [u8; 32] = hash(&key["public_key"]);

    let mut seals = Vec::new();
    for id in &ids {
        let proof = app
            .get(&format!("/api/v1/admin/audit/calls/{id}/proof"), admin)
            .await;
        proof.assert_status(200);
        let p = proof.json();
        let leaf = seal::leaf_hash(serde_jcs::to_string(&p["leaf"]).expect("jcs").as_bytes());
        assert_eq!(hex::encode(leaf), p["leaf_hash"], "{p}");
        assert_eq!(p["leaf"]["call_id"], *id);
        let path: Vec<Hash> = p["audit_path"]
            .as_array()
            .expect("path")
            .iter()
            .map(hash)
            .collect();
        let s = &p["seal"];
        assert!(
            seal::verify_inclusion(
                &leaf,
                p["index"].as_u64().expect("index"),
                s["count"].as_u64().expect("count"),
                &path,
                &hash(&s["merkle_root"]),
            ),
            "record {id} proves into seal {}",
            s["seq"]
        );
        assert_eq!(s["key_id"], key["key_id"]);
        let signature: [u8; 64] = hex::decode(s["signature"].as_str().expect("signed"))
            .expect("hex")
            .try_into()
            .expect("64 bytes");
        assert!(seal::verify_signature(
            &public,
            &hash(&s["seal_hash"]),
            &signature
        ));
        seals.push(s.clone());
    }
    // Every seal met, each chained to the one before.
    seals.sort_by_key(|s| s["seq"].as_i64());
    seals.dedup();
    assert_eq!(seals.len() as i64, seal_count);
    for pair in seals.windows(2) {
        assert_eq!(pair[1]["prev_seal_hash"], pair[0]["seal_hash"]);
        assert_eq!(
            pair[1]["first"],
            pair[0]["last"].as_i64().expect("last") + 1
        );
    }

    app.get("/api/v1/admin/audit/calls/999999/proof", admin)
        .await
        .assert_error(404, "not_found");
    app.get("/api/v1/admin/audit/calls/0x1/proof", admin)
        .await
        .assert_error(400, "invalid_input");
    app.get("/api/v1/admin/audit/verify?from=a", admin)
        .await
        .assert_error(400, "invalid_input");
    // Past the last seal: nothing to verify; further: no seal to start after.
    let past = app
        .get(
            &format!("/api/v1/admin/audit/verify?from={}", seal_count + 1),
            admin,
        )
        .await
        .json();
    assert_eq!(
        (&past["ok"], &past["seals"]),
        (&Value::Bool(true), &Value::from(0))
    );
    app.get(
        &format!("/api/v1/admin/audit/verify?from={}", seal_count + 2),
        admin,
    )
    .await
    .assert_error(404, "not_found");
    app.get("/api/v1/admin/audit/verify?from=9223372036854775806", admin)
        .await
        .assert_error(404, "not_found");
    app.get("/api/v1/admin/audit/verify", Auth::Token(&world.bot))
        .await
        .assert_status(403);
    db.close().await;
}

/// Runs `cmd` to its end: whether it succeeded, and what it printed.
pub(crate) async fn finished(mut cmd: tokio::process::Command) -> (bool, String) {
    let out: Output = cmd.output().await.expect("run the command");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `writ ARGS` on the database `url`.
pub(crate) async fn writ(url: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = crate::helpers::writ_command(url, args);
    cmd.env("RUST_BACKTRACE", "0");
    finished(cmd).await
}

/// Runs `writ audit verify` on the app's database.
pub(crate) async fn verify(url: &str) -> (bool, String) {
    writ(url, &["audit", "verify"]).await
}

both_backends!(
    verify_names_the_seal_and_record_of_each_tampering,
    super::manual_signed
);
async fn verify_names_the_seal_and_record_of_each_tampering(app: TestApp) {
    let world = World::new(&app).await;
    let url = app.database_url();
    let mut db = SqlConn::connect(&url).await;
    some_calls(&world, 3).await;
    seal_everything(&app, &mut db).await;
    some_calls(&world, 2).await;
    seal_everything(&app, &mut db).await;
    let (ok, text) = verify(&url).await;
    assert!(ok, "{text}");
    let seals = db
        .text_rows("SELECT CAST(seq AS TEXT), call_ids FROM audit_seals ORDER BY seq")
        .await;
    assert!(seals.len() >= 2, "{seals:?}");
    assert!(
        text.contains(&format!("ok: {} seals", seals.len())),
        "{text}"
    );
    let last_seq = seals.len();
    // Two records next to each other in one seal.
    let (seq, pair) = seals
        .iter()
        .find_map(|row| {
            let ids: Vec<i64> = serde_json::from_str(row[1].as_deref()?).ok()?;
            (ids.len() >= 2).then(|| (row[0].clone().expect("seq"), (ids[0], ids[1])))
        })
        .expect("a seal of two records");
    let (a, b) = pair;
    let (untrigger, retrigger) = match app.backend {
        Backend::Sqlite => (
            "CREATE TABLE saved_calls AS SELECT * FROM tool_calls; \
             CREATE TABLE saved_seals AS SELECT * FROM audit_seals; \
             CREATE TABLE saved_triggers AS SELECT sql FROM sqlite_master \
               WHERE type = 'trigger' AND tbl_name IN ('tool_calls', 'audit_seals'); \
             DROP TRIGGER tool_calls_no_update; DROP TRIGGER tool_calls_no_delete; \
             DROP TRIGGER tool_calls_newest_stays; \
             DROP TRIGGER tool_calls_sealed; DROP TRIGGER audit_seals_no_update; \
             DROP TRIGGER audit_seals_no_delete;",
            "",
        ),
        Backend::Postgres => (
            "CREATE TABLE saved_calls AS SELECT * FROM tool_calls; \
             CREATE TABLE saved_seals AS SELECT * FROM audit_seals; \
             ALTER TABLE tool_calls DISABLE TRIGGER USER; \
             ALTER TABLE audit_seals DISABLE TRIGGER USER;",
            "ALTER TABLE tool_calls ENABLE TRIGGER USER; \
             ALTER TABLE audit_seals ENABLE TRIGGER USER;",
        ),
    };
    db.execute(untrigger).await.expect("drop the triggers");
    let inserted_columns = "called_at, via, agent_id, agent_login, token_id, tool, decision, \
                            reason, arg_names, native_status, completed_at";
    let cases: Vec<(&str, String, String)> = vec![
        (
            "a changed column",
            format!("UPDATE tool_calls SET reason = 'tampered' WHERE id = {a}"),
            format!("FAIL seal {seq} record {a}: the record does not match its sealed leaf hash"),
        ),
        (
            "a deleted record",
            format!("DELETE FROM tool_calls WHERE id = {a}"),
            format!("FAIL seal {seq} record {a}: the sealed record is missing"),
        ),
        (
            "an inserted record",
            match app.backend {
                Backend::Sqlite => format!(
                    "INSERT INTO tool_calls (id, {inserted_columns}) SELECT -7, {inserted_columns} \
                     FROM tool_calls WHERE id = {a}"
                ),
                Backend::Postgres => format!(
                    "INSERT INTO tool_calls (id, xact_id, {inserted_columns}) SELECT -7, '1', \
                     {inserted_columns} FROM tool_calls WHERE id = {a}"
                ),
            },
            "FAIL seal 1 record -7: a record that was not sealed is inside the seal's range"
                .to_owned(),
        ),
        (
            // Each takes the other's place: on SQLite the record found at
            // a's place is b's; on PostgreSQL, whose order also goes by
            // transaction, a is found out of its place.
            "two records swapped",
            format!(
                "UPDATE tool_calls SET id = -1 WHERE id = {a}; \
                 UPDATE tool_calls SET id = {a} WHERE id = {b}; \
                 UPDATE tool_calls SET id = {b} WHERE id = -1;"
            ),
            format!("FAIL seal {seq} record {a}: the "),
        ),
        (
            "a changed seal",
            format!(
                "UPDATE audit_seals SET sealed_at = '2000-01-01T00:00:00.000000Z' \
                 WHERE seq = {last_seq}"
            ),
            format!("FAIL seal {last_seq}: its seal_hash is not the hash of its fields"),
        ),
        (
            "a broken signature",
            "UPDATE audit_seals SET signature = \
             CASE WHEN substr(signature, 1, 1) = 'a' THEN 'b' ELSE 'a' END || substr(signature, 2) \
             WHERE seq = 1"
                .to_owned(),
            "FAIL seal 1: its signature does not verify with key".to_owned(),
        ),
        (
            "a deleted seal",
            "DELETE FROM audit_seals WHERE seq = 1".to_owned(),
            "FAIL seal 2: seal 1 is missing".to_owned(),
        ),
    ];
    for (what, tamper, expected) in &cases {
        db.execute(tamper)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (ok, text) = verify(&url).await;
        assert!(!ok, "{what} was not caught: {text}");
        assert!(
            text.contains(expected.as_str()),
            "{what}: expected {expected:?} in {text}"
        );
        let (_, check) = writ(&url, &["check"]).await;
        assert!(
            check.contains("FAIL  the sealed audit records match their seals"),
            "{what}: writ check: {check}"
        );
        db.execute(
            "DELETE FROM tool_calls; INSERT INTO tool_calls SELECT * FROM saved_calls; \
             DELETE FROM audit_seals; INSERT INTO audit_seals SELECT * FROM saved_seals;",
        )
        .await
        .unwrap_or_else(|e| panic!("undo {what}: {e}"));
        let (ok, text) = verify(&url).await;
        assert!(ok, "after undoing {what}: {text}");
    }
    if !retrigger.is_empty() {
        db.execute(retrigger).await.expect("triggers back");
    }
    db.close().await;
}

/// Manual sealing with a short grace.
fn manual_short_grace(config: &mut writ::Config) {
    config.audit.seal = false;
    config.audit.seal_grace_seconds = 2;
}

both_backends!(
    a_record_without_outcome_waits_its_grace_then_is_final,
    super::manual_short_grace
);
async fn a_record_without_outcome_waits_its_grace_then_is_final(app: TestApp) {
    let world = World::new(&app).await;
    some_calls(&world, 1).await;
    let mut db = SqlConn::connect(&app.database_url()).await;
    // A call whose process died before its outcome: a record without one,
    // called just now.
    let now = writ::domain::time::Timestamp::from_datetime(time::OffsetDateTime::now_utc());
    let fresh = now.to_text();
    db.execute(&format!(
        "INSERT INTO tool_calls (called_at, via, agent_id, agent_login, token_id, tool, \
         decision, reason, arg_names) SELECT '{fresh}', via, agent_id, agent_login, token_id, \
         tool, decision, reason, arg_names FROM tool_calls \
         WHERE id = (SELECT max(id) FROM tool_calls)"
    ))
    .await
    .expect("a record without outcome");
    let dead: i64 = call_ids(&mut db).await.pop().expect("the dead call");
    some_calls(&world, 1).await;
    let before = call_ids(&mut db).await.len();

    // Within its grace the record stops the seal: everything before it is
    // sealed, nothing after.
    let positions = call_ids(&mut db).await;
    let place = positions
        .iter()
        .position(|id| *id == dead)
        .expect("dead call") as i64;
    seal_through(&app, &mut db, place).await;
    seal_now(&app).await;
    let admin = Auth::Token(&app.admin_token);
    assert_eq!(
        sealed_of_all(&mut db).await.0,
        place,
        "sealed up to the record without outcome"
    );
    app.get(&format!("/api/v1/admin/audit/calls/{dead}/proof"), admin)
        .await
        .assert_error(409, "conflict");

    // After the grace it is final, sealed as it is; the rest follow.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    seal_everything(&app, &mut db).await;
    assert_eq!(sealed_of_all(&mut db).await, (before as i64, before as i64));
    let proof = app
        .get(&format!("/api/v1/admin/audit/calls/{dead}/proof"), admin)
        .await;
    proof.assert_status(200);
    assert_eq!(proof.json()["leaf"]["completed_at"], Value::Null);

    // Its outcome arriving now is refused by the database.
    let late = db
        .execute(&format!(
            "UPDATE tool_calls SET native_status = 200, completed_at = '{fresh}' WHERE id = {dead}"
        ))
        .await
        .expect_err("an outcome after the seal");
    assert!(late.contains("sealed"), "{late}");
    let (ok, text) = verify(&app.database_url()).await;
    assert!(ok, "{text}");
    db.close().await;
}

/// Background sealing every second, by every process.
fn sealing_every_second(config: &mut writ::Config) {
    config.audit.seal_interval_seconds = 1;
    config.audit.seal_grace_seconds = 300;
}

both_backends!(
    sealing_under_load_seals_each_record_exactly_once,
    super::sealing_every_second
);
async fn sealing_under_load_seals_each_record_exactly_once(app: TestApp) {
    let world = World::new(&app).await;
    // On PostgreSQL a second process seals the same database too.
    let replica = match app.backend {
        Backend::Postgres => Some(app.spawn_replica_with(sealing_every_second).await),
        Backend::Sqlite => None,
    };
    // The writers go on until background sealing has run at least twice
    // while they write: a fast machine may write four rounds within one
    // seal interval.
    let sealed_twice = AtomicBool::new(false);
    let writers = (0..4).map(|_| async {
        for round in 0.. {
            some_calls(&world, 8).await;
            if round >= 3 && sealed_twice.load(Ordering::Acquire) {
                break;
            }
        }
    });
    let mut db = SqlConn::connect(&app.database_url()).await;
    let watcher = async {
        loop {
            let seals = db
                .text_rows("SELECT CAST(count(*) AS TEXT) FROM audit_seals")
                .await;
            let seals: i64 = seals[0][0].as_deref().expect("count").parse().expect("n");
            if seals >= 2 {
                sealed_twice.store(true, Ordering::Release);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    futures_util::future::join(futures_util::future::join_all(writers), watcher).await;
    seal_everything(&app, &mut db).await;
    drop(replica);

    let ids: BTreeSet<i64> = call_ids(&mut db).await.into_iter().collect();
    let rows = db
        .text_rows("SELECT CAST(seq AS TEXT), call_ids, CAST(first_position AS TEXT), CAST(record_count AS TEXT) FROM audit_seals ORDER BY seq")
        .await;
    assert!(rows.len() >= 2, "sealed in several rounds: {}", rows.len());
    let mut seen = Vec::new();
    let mut next = 1;
    for row in &rows {
        let listed: Vec<i64> = serde_json::from_str(row[1].as_deref().expect("ids")).expect("json");
        let first: i64 = row[2].as_deref().expect("first").parse().expect("n");
        assert_eq!(first, next, "seals neither overlap nor leave gaps");
        next += listed.len() as i64;
        seen.extend(listed);
    }
    let unique: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no record sealed twice");
    assert_eq!(unique, ids, "every record sealed");
    let (ok, text) = verify(&app.database_url()).await;
    assert!(ok, "{text}");
    db.close().await;
}

/// The interpreter of the venv with `cryptography`, from
/// `WRIT_TEST_AUDIT_PYTHON`; `None` (the test is skipped) when unset,
/// unless `WRIT_TEST_REQUIRE_AUDIT_PYTHON` is set.
pub(crate) fn python() -> Option<String> {
    match std::env::var("WRIT_TEST_AUDIT_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var_os("WRIT_TEST_REQUIRE_AUDIT_PYTHON").is_none_or(|v| v.is_empty()),
                "WRIT_TEST_REQUIRE_AUDIT_PYTHON is set but WRIT_TEST_AUDIT_PYTHON is unset"
            );
            eprintln!("skipped: WRIT_TEST_AUDIT_PYTHON unset");
            None
        }
    }
}

/// Runs tests/audit_python/verify_seals.py with `args`: whether it passed,
/// and what it printed.
pub(crate) async fn independent(python: &str, args: &[&str]) -> (bool, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/audit_python/verify_seals.py"
    );
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(script).args(args);
    finished(cmd).await
}

both_backends!(
    an_independent_verifier_checks_proofs_and_signatures,
    super::manual_signed
);
async fn an_independent_verifier_checks_proofs_and_signatures(app: TestApp) {
    let Some(python) = python() else { return };
    let world = World::new(&app).await;
    let mut db = SqlConn::connect(&app.database_url()).await;
    some_calls(&world, 2).await;
    seal_everything(&app, &mut db).await;
    some_calls(&world, 1).await;
    seal_everything(&app, &mut db).await;
    let seals = db
        .text_rows("SELECT seal_hash FROM audit_seals")
        .await
        .len();
    let ids: Vec<String> = call_ids(&mut db).await.iter().map(i64::to_string).collect();
    db.close().await;
    let mut args = vec![app.base.as_str(), app.admin_token.as_str()];
    args.extend(ids.iter().map(String::as_str));
    let (ok, text) = independent(&python, &args).await;
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("ok: {} proofs in {seals} seals", ids.len())),
        "{text}"
    );

    // The same verifier refuses a proof changed anywhere.
    let admin = Auth::Token(&app.admin_token);
    let mut proof = app
        .get(
            &format!("/api/v1/admin/audit/calls/{}/proof", ids[1]),
            admin,
        )
        .await
        .json();
    proof["keys"] = app.get("/api/v1/audit/keys", Auth::None).await.json();
    let file = std::env::temp_dir().join(format!("writ-proof-{}.json", uuid::Uuid::new_v4()));
    let flip = |hex: &Value| {
        let mut s = hex.as_str().expect("hex").to_owned();
        let first = if s.starts_with('0') { "1" } else { "0" };
        s.replace_range(0..1, first);
        Value::from(s)
    };
    let mut cases: Vec<(&str, Value, &str)> = Vec::new();
    let mut changed = proof.clone();
    changed["leaf"]["reason"] = "tampered".into();
    cases.push(("a changed leaf", changed, "leaf_hash is not"));
    let mut changed = proof.clone();
    changed["audit_path"][0] = flip(&proof["audit_path"][0]);
    cases.push(("a changed path", changed, "audit path does not lead"));
    let mut changed = proof.clone();
    changed["seal"]["sealed_at"] = "2000-01-01T00:00:00.000000Z".into();
    cases.push(("a changed seal", changed, "seal_hash is not"));
    let mut changed = proof.clone();
    changed["seal"]["signature"] = flip(&proof["seal"]["signature"]);
    cases.push(("a broken signature", changed, "signature does not verify"));
    let path = file.display().to_string();
    std::fs::write(&file, proof.to_string()).expect("write the proof");
    let (ok, text) = independent(&python, &["--proof-file", &path]).await;
    assert!(ok, "the proof as served: {text}");
    for (what, changed, expected) in cases {
        std::fs::write(&file, changed.to_string()).expect("write the proof");
        let (ok, text) = independent(&python, &["--proof-file", &path]).await;
        assert!(!ok && text.contains(expected), "{what}: {text}");
    }
    let _ = std::fs::remove_file(&file);
}

both_backends!(each_receipt_keeps_the_record_of_its_call);
async fn each_receipt_keeps_the_record_of_its_call(app: TestApp) {
    let world = World::new(&app).await;
    some_calls(&world, 3).await;
    some_calls(&world, 2).await;
    let mut db = SqlConn::connect(&app.database_url()).await;
    let linked = "SELECT CAST(s.id AS TEXT), CAST(s.call_id AS TEXT), c.tool, \
                  CAST(c.native_status AS TEXT), CAST(c.agent_id = s.agent_id AS TEXT) \
                  FROM submissions s LEFT JOIN tool_calls c ON c.id = s.call_id ORDER BY s.id";
    let rows = db.text_rows(linked).await;
    assert_eq!(rows.len(), 5);
    for row in &rows {
        assert_eq!(
            row[2].as_deref(),
            Some("submit_agent_work_proposal"),
            "{row:?}"
        );
        assert_eq!(row[3].as_deref(), Some("201"), "{row:?}");
        assert!(matches!(row[4].as_deref(), Some("1" | "true")), "{row:?}");
    }

    // The migration's pairing links receipts written before it the same
    // way: unlink them all, run its update again, compare.
    let migration = include_str!("../../migrations/sqlite/0016_receipt_calls.sql");
    let update = &migration[migration.find("UPDATE submissions").expect("the update")..];
    db.execute("UPDATE submissions SET call_id = NULL")
        .await
        .expect("unlink");
    db.execute(update).await.expect("the migration's update");
    assert_eq!(db.text_rows(linked).await, rows);
    db.close().await;
}
