//! Native grant reads beside submissions to the same grant.

use std::sync::atomic::{AtomicI64, Ordering};

use super::{GET, Row, audit_rows, col};
use crate::helpers::TestApp;
use crate::world::{World, new_key, submit_body};

both_backends!(grant_reads_beside_submissions_see_what_was_acknowledged);
async fn grant_reads_beside_submissions_see_what_was_acknowledged(app: TestApp) {
    // Native grant reads run beside submissions to the same grant (on
    // SQLite on the group-commit writer, in the commits that hold the
    // submissions): a read sent after a submission was acknowledged sees
    // it, no reader sees the count go back or past what was submitted, and
    // every read, found or not, leaves exactly one record with its outcome.
    const SUBMITS: i64 = 8;
    const READERS: usize = 6;
    const READS_EACH: usize = 12;
    let world = World::new(&app).await;
    let active = world.active("Reads beside submissions").await;
    let digest = world.digest(active).await;
    let rows_before = audit_rows(&app).await.len();
    let acked = AtomicI64::new(0);
    let submitter = async {
        for n in 1..=SUBMITS {
            let body = submit_body(&digest, &new_key(), &format!("Beside reads {n}"), "b");
            world.submit_with(active, body).await.assert_status(201);
            acked.store(n, Ordering::SeqCst);
        }
    };
    let reader = |_| async {
        let (mut found, mut missing, mut last) = (0, 0, 0);
        for i in 0..READS_EACH {
            if i % 4 == 3 {
                world
                    .read(active + 1000)
                    .await
                    .assert_error(404, "not_found");
                missing += 1;
                continue;
            }
            let floor = acked.load(Ordering::SeqCst);
            let count = world.grant(active).await["submission_count"]
                .as_i64()
                .expect("submission_count");
            assert!(
                (floor..=SUBMITS).contains(&count) && count >= last,
                "read {count} after {floor} acknowledged and {last} read before"
            );
            last = count;
            found += 1;
        }
        (found, missing)
    };
    let ((), tallies) = futures_util::join!(
        submitter,
        futures_util::future::join_all((0..READERS).map(reader))
    );
    assert_eq!(world.grant(active).await["submission_count"], SUBMITS);

    let rows = audit_rows(&app).await;
    let reads: Vec<&Row> = rows[rows_before..]
        .iter()
        .filter(|r| col(r, "via") == Some("api") && col(r, "tool") == Some(GET))
        .collect();
    let found: usize = tallies.iter().map(|(f, _)| f).sum();
    let missing: usize = tallies.iter().map(|(_, m)| m).sum();
    // The last read above is one more found read.
    assert_eq!(reads.len(), found + missing + 1, "{reads:?}");
    for row in &reads {
        assert!(col(row, "completed_at").is_some(), "{row:?}");
        match col(row, "native_status") {
            Some("200") => assert_eq!(col(row, "error_code"), None, "{row:?}"),
            Some("404") => assert_eq!(col(row, "error_code"), Some("not_found"), "{row:?}"),
            other => panic!("status {other:?} in {row:?}"),
        }
    }
    let statuses = |status| {
        reads
            .iter()
            .filter(|r| col(r, "native_status") == Some(status))
            .count()
    };
    assert_eq!(statuses("200"), found + 1);
    assert_eq!(statuses("404"), missing);
}
