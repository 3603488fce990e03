//! SQLite database files as a whole: a consistent copy of a live database
//! and SQLite's own integrity checks. Everything here works on files,
//! through rusqlite, without the store's pools (a backup or a check must
//! not create, migrate or lock the database it reads).

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::sqlite::error;
use super::{StoreError, StoreResult};

/// How long a copy waits for a lock another process holds (a reader in WAL
/// mode waits only in rare moments, e.g. while the WAL index is rebuilt).
const BUSY: Duration = Duration::from_secs(10);

/// Opens `path` read-only; it must exist.
fn open_existing(path: &Path) -> StoreResult<Connection> {
    if !path.is_file() {
        return Err(StoreError::other(format!(
            "{} is not a database file",
            path.display()
        )));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(error)?;
    conn.busy_timeout(BUSY).map_err(error)?;
    Ok(conn)
}

/// Writes a consistent copy of the database at `source` to `out` (which
/// must not exist) with `VACUUM INTO`: one read transaction, so the copy is
/// the database as of one commit, and writers go on meanwhile (WAL mode).
/// The copy is compact and in rollback-journal mode; Writ switches it to
/// WAL when it opens it.
pub fn snapshot(source: &Path, out: &Path) -> StoreResult<()> {
    let conn = open_existing(source)?;
    let out = out
        .to_str()
        .ok_or_else(|| StoreError::other("the backup path is not UTF-8"))?;
    conn.execute("VACUUM INTO ?1", [out]).map_err(error)?;
    Ok(())
}

/// SQLite's `integrity_check` and `foreign_key_check` of the database at
/// `path`: the problems found, none when the file is sound.
pub fn integrity(path: &Path) -> StoreResult<Vec<String>> {
    let conn = open_existing(path)?;
    let mut problems = Vec::new();
    let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(error)?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(error)?;
    for row in rows {
        let row = row.map_err(error)?;
        if row != "ok" {
            problems.push(row);
        }
    }
    let mut stmt = conn.prepare("PRAGMA foreign_key_check").map_err(error)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(format!(
                "{} row {} refers to a missing {} row",
                r.get::<_, String>(0)?,
                r.get::<_, Option<i64>>(1)?.unwrap_or_default(),
                r.get::<_, String>(2)?,
            ))
        })
        .map_err(error)?;
    for row in rows {
        problems.push(row.map_err(error)?);
    }
    Ok(problems)
}

/// The receipts of the database file at `path`: how many, and the highest
/// id (what a restore drill compares).
pub fn receipts(path: &Path) -> StoreResult<(i64, Option<i64>)> {
    let conn = open_existing(path)?;
    conn.query_row("SELECT count(*), max(id) FROM submissions", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .map_err(error)
}
