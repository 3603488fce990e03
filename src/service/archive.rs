//! Archives of sealed audit records (docs/audit.md, spec `audit-proof.md`):
//! [`archive`] writes the records of whole seals to a file, checks the file
//! it wrote, and only then deletes those records in one transaction with
//! the `audit_archives` row; [`check_file`] verifies an archive offline;
//! [`compare`] says whether its seals are a database's; [`retain`] archives
//! on the sealer's schedule (`audit.retain_days`).

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{Ctx, Error, Result};
use crate::domain::archive::{self as format, Checked, Checker, Finding, Line};
use crate::store::archive::{self as store, ArchiveRow};
use crate::store::seal::{self as seals, Cursor, KeyRow, SealRow};
use crate::store::{Backend, Store};

/// What an archive wrote and deleted.
#[derive(Debug, Clone)]
pub struct Archived {
    /// The `audit_archives` row.
    pub row: ArchiveRow,
    pub path: PathBuf,
}

/// How long a writer waits for the sealer's lease before giving up.
const LEASE_TRIES: u32 = 50;

/// The compression level of archives (zstd's default).
const ZSTD_LEVEL: i32 = 3;

/// Writes the records of every seal after the last archived one through
/// `through_seal` to `out` (which must not exist), checks the file against
/// the database's seals, then deletes those records in one transaction that
/// also records the archive (`by`: who). Refused when those seals are
/// archived already, or (SQLite) when `through_seal` holds the newest
/// record, which stays so that no id is given twice.
pub async fn archive(ctx: &Ctx, through_seal: i64, out: &Path, by: &str) -> Result<Archived> {
    let plan = plan(&ctx.store, through_seal).await?;
    if out.exists() {
        return Err(Error::Invalid(format!("{} exists already", out.display())));
    }
    let partial = partial_of(out);
    let archived_at = ctx.now().to_text();
    let written = write(&ctx.store, &plan, &partial, &archived_at).await;
    let checked = match written {
        Ok(written) => check_written(&partial, written).await,
        Err(e) => Err(e),
    };
    let (checked, digest) = match checked {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    // No-clobber rename: the link fails if `out` appeared meanwhile. The
    // directory is flushed so the name is on disk before any record goes.
    let placed = std::fs::hard_link(&partial, out).and_then(|()| sync_dir(out));
    let _ = std::fs::remove_file(&partial);
    placed.map_err(|e| Error::Invalid(format!("cannot write {}: {e}", out.display())))?;
    let row = ArchiveRow {
        seq: plan.seq,
        first_seal: plan.first_seal,
        through_seal,
        record_count: checked.records as i64,
        file_name: out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file_sha256: digest.sha256,
        file_bytes: digest.bytes as i64,
        archived_by: by.to_owned(),
        archived_at,
    };
    match delete(&ctx.store, &plan, &row).await {
        Ok(()) => {
            metrics::counter!("writ_audit_records_archived_total").increment(checked.records);
            Ok(Archived {
                row,
                path: out.to_owned(),
            })
        }
        Err(e) => {
            // The commit may have happened though its answer was lost: the
            // file goes only when the database surely has no row for it.
            let mut tx = ctx.store.read().await?;
            let recorded = store::covering(&mut tx, row.first_seal).await?;
            tx.commit().await?;
            match recorded {
                Some(r) if r.file_sha256 == row.file_sha256 => Ok(Archived {
                    row,
                    path: out.to_owned(),
                }),
                _ => {
                    let _ = std::fs::remove_file(out);
                    Err(e)
                }
            }
        }
    }
}

/// Flushes the directory holding `path`, so a new name in it is durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// `FILE.partial`: where an archive is written until it is checked.
fn partial_of(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// The seals an archive takes, read before it writes.
struct Plan {
    /// The archive's number.
    seq: i64,
    first_seal: i64,
    /// The seal before the first (its cursor starts the records).
    before: Option<SealRow>,
    through: SealRow,
    keys: Vec<KeyRow>,
}

async fn plan(store: &Store, through_seal: i64) -> Result<Plan> {
    let mut tx = store.read().await?;
    let latest = store::latest(&mut tx).await?;
    let first_seal = latest.as_ref().map_or(1, |a| a.through_seal + 1);
    if through_seal < first_seal {
        return Err(Error::Invalid(format!(
            "seals 1..={} are archived already",
            first_seal - 1
        )));
    }
    let through = seals::seal(&mut tx, through_seal)
        .await?
        .ok_or_else(|| Error::Invalid(format!("there is no seal {through_seal}")))?;
    let before = match first_seal {
        1 => None,
        seq => Some(seals::seal(&mut tx, seq - 1).await?.ok_or_else(|| {
            Error::Invalid(format!(
                "seal {} is missing: run writ audit verify",
                seq - 1
            ))
        })?),
    };
    if let Some(newest) = store::newest_record(&mut tx).await?
        && holds_newest(tx.backend(), newest, &through)
    {
        return Err(Error::Conflict(format!(
            "seal {through_seal} holds the newest record ({newest}), which stays so that \
             no record id is given twice: archive through seal {} now, or through seal \
             {through_seal} once a newer record is written",
            through_seal - 1
        )));
    }
    let keys = seals::keys(&mut tx).await?;
    tx.commit().await?;
    Ok(Plan {
        seq: latest.map_or(1, |a| a.seq + 1),
        first_seal,
        before,
        through,
        keys,
    })
}

/// Whether `seal` holds the newest record (`newest`) where that record
/// must stay: on SQLite a new record takes the largest id plus one, so the
/// record holding it is never deleted and ids are never given twice.
fn holds_newest(backend: Backend, newest: i64, seal: &SealRow) -> bool {
    backend == Backend::Sqlite && newest <= seal.last_call_id
}

/// What the writer put in the file: its seals' numbers and hashes, as the
/// database holds them.
struct Written {
    seals: Vec<(i64, String)>,
}

/// Writes the archive of `plan` to `path` (created, must not exist): each
/// seal with its records as the database holds them, each record checked
/// against its seal's stored leaf hash on the way.
async fn write(store: &Store, plan: &Plan, path: &Path, archived_at: &str) -> Result<Written> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::Invalid(format!("cannot create {}: {e}", path.display())))?;
    let (send, mut recv) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let writer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut out = zstd::Encoder::new(std::io::BufWriter::new(file), ZSTD_LEVEL)?;
        while let Some(chunk) = recv.blocking_recv() {
            out.write_all(&chunk)?;
        }
        let file = out.finish()?.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    });
    let written = write_lines(store, plan, archived_at, &send).await;
    drop(send);
    let flushed = writer
        .await
        .map_err(|e| Error::Invalid(format!("the archive writer stopped: {e}")))?;
    let written = written?;
    flushed.map_err(|e| Error::Invalid(format!("cannot write {}: {e}", path.display())))?;
    Ok(written)
}

async fn write_lines(
    store: &Store,
    plan: &Plan,
    archived_at: &str,
    send: &tokio::sync::mpsc::Sender<Vec<u8>>,
) -> Result<Written> {
    let push = |buf: &mut Vec<u8>, line: Line| {
        buf.extend_from_slice(line.to_text().as_bytes());
        buf.push(b'\n');
    };
    let records = plan.through.last_position - plan.before.as_ref().map_or(0, |b| b.last_position);
    let mut buf = Vec::new();
    push(
        &mut buf,
        Line::Header(format::Header {
            format: format::FORMAT.into(),
            v: format::VERSION,
            first_seal: plan.first_seal,
            through_seal: plan.through.seq,
            seals: plan.through.seq - plan.first_seal + 1,
            records,
            archived_at: archived_at.to_owned(),
        }),
    );
    for k in &plan.keys {
        push(
            &mut buf,
            Line::Key(format::Key {
                key_id: k.key_id.clone(),
                algorithm: k.algorithm.clone(),
                public_key: k.public_key.clone(),
            }),
        );
    }
    let mut done = Written { seals: Vec::new() };
    let mut prev = plan.before.clone();
    let mut next = plan.first_seal;
    while next <= plan.through.seq {
        let mut tx = store.read().await?;
        let page = seals::seals_from(&mut tx, next, 16).await?;
        tx.commit().await?;
        for seal in page.into_iter().take_while(|s| s.seq <= plan.through.seq) {
            if seal.seq != next {
                return Err(Error::Invalid(format!(
                    "seal {next} is missing: run writ audit verify"
                )));
            }
            next += 1;
            let ids: Vec<i64> = serde_json::from_str(&seal.call_ids).unwrap_or_default();
            let leaves: Vec<String> = serde_json::from_str(&seal.leaf_hashes).unwrap_or_default();
            let after = prev.as_ref().map_or(Cursor::START, SealRow::cursor);
            let mut tx = store.read().await?;
            let rows = seals::covered(&mut tx, after, seal.cursor(), ids.len() as u64 + 1).await?;
            tx.commit().await?;
            let objects: Vec<_> = rows.iter().map(super::seal::leaf).collect();
            let matches = rows.len() == ids.len()
                && leaves.len() == ids.len()
                && rows.iter().zip(&objects).zip(ids.iter().zip(&leaves)).all(
                    |((r, object), (id, stored))| {
                        r.id == *id && hex::encode(object.hash()) == *stored
                    },
                );
            if !matches {
                return Err(Error::Conflict(format!(
                    "the records of seal {} do not match it: run writ audit verify",
                    seal.seq
                )));
            }
            push(
                &mut buf,
                Line::Seal(format::Seal {
                    fields: super::seal::fields_of(&seal),
                    seal_hash: seal.seal_hash.clone(),
                    signature: seal.signature.clone(),
                    call_ids: ids,
                }),
            );
            for object in objects {
                let value = serde_json::to_value(object).expect("a leaf serializes");
                push(&mut buf, Line::Record(value));
            }
            send.send(std::mem::take(&mut buf))
                .await
                .map_err(|_| Error::Invalid("the archive writer stopped".into()))?;
            done.seals.push((seal.seq, seal.seal_hash.clone()));
            prev = Some(seal);
        }
    }
    push(
        &mut buf,
        Line::End(format::End {
            seals: plan.through.seq - plan.first_seal + 1,
            records,
        }),
    );
    send.send(buf)
        .await
        .map_err(|_| Error::Invalid("the archive writer stopped".into()))?;
    Ok(done)
}

/// Checks the file just written: it holds, and its seals are the ones
/// written from the database.
async fn check_written(path: &Path, written: Written) -> Result<(Checked, FileDigest)> {
    let owned = path.to_owned();
    let (checked, digest) = tokio::task::spawn_blocking(move || check_file(&owned))
        .await
        .map_err(|e| Error::Invalid(format!("the archive check stopped: {e}")))?
        .map_err(|e| Error::Invalid(format!("cannot read {}: {e}", path.display())))?;
    let checked = checked
        .map_err(|f| Error::Invalid(format!("the archive just written does not hold: {f}")))?;
    if checked.seals != written.seals {
        return Err(Error::Invalid(
            "the archive just written does not hold the seals it was written from".into(),
        ));
    }
    Ok((checked, digest))
}

/// Records the archive, deletes its records and empties its seals' lists
/// of record ids and leaf hashes (the archive holds them), in one
/// transaction: the records in the seals' range must be exactly as many as
/// were archived.
async fn delete(store: &Store, plan: &Plan, row: &ArchiveRow) -> Result<()> {
    for _ in 0..LEASE_TRIES {
        let mut tx = store.write().await?;
        if !seals::take_lease(&mut tx).await? {
            tx.rollback().await?;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        if store::archived_through(&mut tx).await? != plan.first_seal - 1 {
            tx.rollback().await?;
            return Err(Error::Conflict(
                "another archive was made meanwhile: nothing was deleted".into(),
            ));
        }
        store::insert(&mut tx, row).await?;
        let after = plan.before.as_ref().map_or(Cursor::START, SealRow::cursor);
        let deleted = store::delete_records(&mut tx, after, plan.through.cursor()).await?;
        if deleted != row.record_count as u64 {
            tx.rollback().await?;
            return Err(Error::Conflict(format!(
                "{deleted} records are in the range of seals {}..={}, not the {} archived: \
                 nothing was deleted, run writ audit verify",
                row.first_seal, row.through_seal, row.record_count
            )));
        }
        seals::drop_lists(&mut tx, row.first_seal, row.through_seal).await?;
        store::close(&mut tx, row.seq).await?;
        tx.commit().await?;
        return Ok(());
    }
    Err(Error::Conflict(
        "the sealer's lease stayed taken: nothing was deleted, try again".into(),
    ))
}

/// A file's SHA-256 (hex) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub sha256: String,
    pub bytes: u64,
}

/// Verifies the archive at `path` against its own seals: every line read,
/// each seal's records make its root, the seals chain, the signatures
/// verify with the keys it lists, and it ends with its end line. The
/// outer error is a file that cannot be opened; the inner one the first
/// thing that does not hold (a file cut short names the first record it
/// lacks).
pub fn check_file(
    path: &Path,
) -> std::io::Result<(std::result::Result<Checked, Finding>, FileDigest)> {
    let digest = digest_of(path)?;
    let decoder = zstd::Decoder::new(std::fs::File::open(path)?)?;
    let mut lines = std::io::BufReader::new(decoder);
    let mut checker = Checker::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line) {
            // A last line without its newline was cut short.
            Ok(n) if n == 0 || line.last() != Some(&b'\n') => break,
            Ok(_) => {}
            // Compressed data cut short, or not zstd.
            Err(_) if checker.ended() => {
                let finding = Finding {
                    seal: None,
                    call_id: None,
                    problem: "the file goes on after its end line with bytes that do not \
                              decompress"
                        .into(),
                };
                return Ok((Err(finding), digest));
            }
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(&line[..line.len() - 1]);
        if let Err(finding) = checker.line(&text) {
            return Ok((Err(finding), digest));
        }
    }
    Ok((checker.finish(), digest))
}

fn digest_of(path: &Path) -> std::io::Result<FileDigest> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(FileDigest {
        sha256: hex::encode(hash.finalize()),
        bytes,
    })
}

/// Whether an archive that holds is the database's: each of its seals is
/// the database's seal of that number, and the database's archive row of
/// those seals (if they are archived) names this file's SHA-256. The first
/// thing that differs, if any.
pub async fn compare(
    store: &Store,
    checked: &Checked,
    digest: &FileDigest,
) -> Result<Option<Finding>> {
    let mut tx = store.read().await?;
    let differs = |seal: Option<i64>, problem: String| Finding {
        seal,
        call_id: None,
        problem,
    };
    for (seq, hash) in &checked.seals {
        match seals::seal(&mut tx, *seq).await? {
            Some(db) if db.seal_hash == *hash => {}
            Some(_) => {
                return Ok(Some(differs(
                    Some(*seq),
                    "the archive's seal is not the database's".into(),
                )));
            }
            None => {
                return Ok(Some(differs(
                    Some(*seq),
                    "the database has no seal of this number".into(),
                )));
            }
        }
    }
    let row = store::covering(&mut tx, checked.header.first_seal).await?;
    tx.commit().await?;
    Ok(match row {
        Some(row)
            if row.first_seal != checked.header.first_seal
                || row.through_seal != checked.header.through_seal =>
        {
            Some(differs(
                None,
                format!(
                    "the database archived seals {}..={} in archive {}, not {}..={}",
                    row.first_seal,
                    row.through_seal,
                    row.seq,
                    checked.header.first_seal,
                    checked.header.through_seal
                ),
            ))
        }
        Some(row) if row.file_sha256 != digest.sha256 => Some(differs(
            None,
            format!(
                "the database's archive {} ({}) has SHA-256 {}, this file {}",
                row.seq, row.file_name, row.file_sha256, digest.sha256
            ),
        )),
        _ => None,
    })
}

/// Archives, on the sealer's schedule, the seals made more than
/// `audit.retain_days` ago (at most [`RETAIN_SEALS`] a round) into
/// `audit.archive_dir`. `None` when retention is off or nothing is due.
pub async fn retain(ctx: &Ctx) -> Result<Option<Archived>> {
    let (Some(days), Some(dir)) = (
        ctx.config.audit.retain_days,
        ctx.config.audit.archive_dir.as_deref(),
    ) else {
        return Ok(None);
    };
    let days = i64::try_from(days).unwrap_or(i64::MAX / 86_400);
    let cutoff = ctx
        .now()
        .plus_seconds(-days.saturating_mul(86_400))
        .to_text();
    let mut tx = ctx.store.read().await?;
    let first = store::archived_through(&mut tx).await? + 1;
    let due = seals::sealed_before(&mut tx, &cutoff, first + RETAIN_SEALS - 1).await?;
    let newest = store::newest_record(&mut tx).await?;
    tx.commit().await?;
    let Some(due) = due.filter(|s| s.seq >= first) else {
        return Ok(None);
    };
    let keeps_newest = newest.is_some_and(|n| holds_newest(ctx.store.backend(), n, &due));
    let through = due.seq - i64::from(keeps_newest);
    if through < first {
        return Ok(None);
    }
    // A name of its own: replicas sharing `dir` never touch each other's
    // file, and the loser of a race removes only its own.
    let out = Path::new(dir).join(format!(
        "writ-audit-{first:010}-{through:010}-{:08x}.jsonl.zst",
        rand::random::<u32>()
    ));
    archive(ctx, through, &out, "retention").await.map(Some)
}

/// The most seals one retention round archives.
pub const RETAIN_SEALS: i64 = 100;
