//! `writ check`: is this database sound? SQLite's own integrity checks (on
//! SQLite), then the receipt invariants of the crash harness that the
//! database alone decides (`store::check`), among them that every
//! receipt's issue still has the content its digest covers. Read-only: it
//! runs in one read transaction and changes nothing.

use crate::domain::submission::content_digest;
use crate::store::{Store, backup, check};

/// One check and what it found.
#[derive(Debug)]
pub struct Finding {
    /// What holds when nothing is found.
    pub name: String,
    /// What breaks it (empty: it holds); at most [`check::SHOWN`] items.
    pub problems: Vec<String>,
}

impl Finding {
    /// True when the check holds.
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Receipts read per statement by the content check.
const PAGE: u64 = 1000;

/// Runs every check on `store`.
pub async fn check(store: &Store) -> anyhow::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    if let Some(path) = store.sqlite_path() {
        findings.push(Finding {
            name: "SQLite integrity_check and foreign_key_check".to_owned(),
            problems: backup::integrity(&path)?,
        });
    }
    let sealed = super::seal::verify(store, 1).await?;
    findings.push(Finding {
        name: "the sealed audit records match their seals (writ audit verify)".to_owned(),
        problems: sealed
            .mismatch
            .iter()
            .map(|m| match m.call_id {
                Some(id) => format!("seal {} record {id}: {}", m.seal, m.problem),
                None => format!("seal {}: {}", m.seal, m.problem),
            })
            .collect(),
    });
    let mut tx = store.read().await?;
    for invariant in &check::INVARIANTS {
        let ids = check::offenders(&mut tx, invariant).await?;
        findings.push(Finding {
            name: invariant.name.to_owned(),
            problems: ids
                .iter()
                .map(|id| format!("{} {id}", invariant.of))
                .collect(),
        });
    }
    let mut problems = Vec::new();
    let mut after = 0;
    loop {
        let page = check::receipt_contents(&mut tx, after, PAGE).await?;
        let Some(last) = page.last() else {
            break;
        };
        after = last.id;
        for r in &page {
            if content_digest(&r.proposal_digest, &r.title, &r.body) != r.content_digest
                && (problems.len() as u64) < check::SHOWN
            {
                problems.push(format!("receipt {}", r.id));
            }
        }
    }
    findings.push(Finding {
        name: "every receipt's issue has the title and body its content digest covers".to_owned(),
        problems,
    });
    tx.commit().await?;
    Ok(findings)
}
