//! `writ backup` and `writ restore`: a consistent, checked copy of an
//! SQLite database taken while Writ serves, and putting one back. A file
//! named as the result is always whole and checked: the copy is written
//! beside it under a temporary name, checked, flushed to disk, and only
//! then renamed. PostgreSQL has its own tools for both (docs/runbook.md).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::store::{self, backup};

/// Why a backup or a restore did not happen.
#[derive(Debug)]
pub enum Refusal {
    /// The database is PostgreSQL: its own tools do this (the operation).
    Postgres(&'static str),
    /// A file the operation would write exists already.
    Exists(PathBuf),
    /// The copy (or the backup to restore) failed SQLite's checks.
    Damaged { path: PathBuf, problems: String },
    /// Anything else: an unreadable file, a full disk.
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Postgres(operation) => write!(
                f,
                "writ {operation} works on SQLite databases; back up PostgreSQL with its \
                 own tools: pg_dump for a logical copy, or a base backup with WAL \
                 archiving for point-in-time recovery (docs/runbook.md, \"Backup and \
                 restore\")"
            ),
            Refusal::Exists(path) => write!(
                f,
                "{} exists; writ never overwrites a database or a backup",
                path.display()
            ),
            Refusal::Damaged { path, problems } => write!(
                f,
                "{} failed SQLite's integrity check: {problems}",
                path.display()
            ),
            Refusal::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Refusal {}

impl From<std::io::Error> for Refusal {
    fn from(e: std::io::Error) -> Self {
        Refusal::Failed(e.to_string())
    }
}

impl From<store::StoreError> for Refusal {
    fn from(e: store::StoreError) -> Self {
        Refusal::Failed(e.to_string())
    }
}

/// A backup written, or a database restored.
#[derive(Debug)]
pub struct Copied {
    /// The file written.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The receipts it holds and the highest receipt id.
    pub receipts: (i64, Option<i64>),
    /// How long it took.
    pub took: Duration,
}

impl Copied {
    /// What the file at `path` holds, written since `start`.
    fn at(path: &Path, start: Instant) -> Result<Copied, Refusal> {
        Ok(Copied {
            path: path.to_owned(),
            bytes: std::fs::metadata(path)?.len(),
            receipts: backup::receipts(path)?,
            took: start.elapsed(),
        })
    }
}

/// The SQLite file of `database_url`, or the refusal of `operation` on
/// PostgreSQL.
fn sqlite_file(database_url: &str, operation: &'static str) -> Result<PathBuf, Refusal> {
    match store::sqlite_file(database_url) {
        Ok(Some(path)) => Ok(path),
        Ok(None) => Err(Refusal::Postgres(operation)),
        Err(e) => Err(Refusal::Failed(e.to_string())),
    }
}

/// Refuses when `path` (or, for a database, its WAL and shared-memory
/// files, which SQLite would read into a new file of the same name) exists.
fn refuse_existing(path: &Path) -> Result<(), Refusal> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(Refusal::Failed(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let candidate = PathBuf::from(name);
        if candidate.exists() {
            return Err(Refusal::Exists(candidate));
        }
    }
    Ok(())
}

/// `path` with `.partial` appended: where a copy is written before it is
/// checked and renamed.
fn partial(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Checks the copy at `tmp`, makes it durable, and renames it to `path`;
/// on any failure the copy is removed.
fn finish(tmp: &Path, path: &Path) -> Result<(), Refusal> {
    let done = (|| {
        let problems = backup::integrity(tmp)?;
        if !problems.is_empty() {
            return Err(Refusal::Damaged {
                path: path.to_owned(),
                problems: problems.join("; "),
            });
        }
        File::open(tmp)?.sync_all()?;
        std::fs::rename(tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    done
}

/// Writes a consistent copy of the SQLite database of `database_url` to
/// `out` while Writ may be serving from it (`VACUUM INTO`: one read
/// transaction, writers go on), checks the copy (`integrity_check`,
/// `foreign_key_check`), and names it `out` only then.
pub fn backup(database_url: &str, out: &Path) -> Result<Copied, Refusal> {
    let start = Instant::now();
    let source = sqlite_file(database_url, "backup")?;
    refuse_existing(out)?;
    let tmp = partial(out);
    refuse_existing(&tmp)?;
    if let Err(e) = backup::snapshot(&source, &tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    finish(&tmp, out)?;
    Copied::at(out, start)
}

/// Puts the backup `from` in place as the SQLite database of
/// `database_url`, which must not exist: the backup is checked first, then
/// copied under a temporary name, flushed and renamed.
pub fn restore(from: &Path, database_url: &str) -> Result<Copied, Refusal> {
    let start = Instant::now();
    let target = sqlite_file(database_url, "restore")?;
    refuse_existing(&target)?;
    let problems = backup::integrity(from)?;
    if !problems.is_empty() {
        return Err(Refusal::Damaged {
            path: from.to_owned(),
            problems: problems.join("; "),
        });
    }
    let tmp = partial(&target);
    refuse_existing(&tmp)?;
    if let Err(e) = std::fs::copy(from, &tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    finish(&tmp, &target)?;
    Copied::at(&target, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_is_pointed_to_its_own_tools() {
        let refused = backup(
            "postgres://postgres@127.0.0.1/x",
            Path::new("/nonexistent/b.db"),
        )
        .unwrap_err();
        assert!(matches!(refused, Refusal::Postgres("backup")));
        assert!(refused.to_string().contains("pg_dump"), "{refused}");
    }

    #[test]
    fn a_partial_copy_is_named_beside_its_target() {
        assert_eq!(
            partial(Path::new("/var/backups/writ.db")),
            PathBuf::from("/var/backups/writ.db.partial")
        );
    }
}
