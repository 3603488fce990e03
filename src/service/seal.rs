//! Sealing the audit records, and proving it (docs/audit.md, spec
//! `audit-proof.md`): the sealer ([`run`], [`seal_once`]), the verifier
//! ([`verify`]), a record's inclusion proof ([`proof`]) and the signing
//! keys ([`keys`]).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{Ctx, Error, Result};
use crate::domain::seal::{self, Hash, Leaf, SealFields};
use crate::domain::time::Timestamp;
use crate::store::seal::{self as store, Cursor, KeyRow, RecordRow, SealRow};
use crate::store::{Store, Tx};

/// The most records one seal covers.
pub const SEGMENT: u64 = 1000;

/// The key that signs seals: an Ed25519 secret seed and its key's id.
pub struct Signer {
    seed: [u8; 32],
    public: [u8; 32],
    key_id: String,
}

impl Signer {
    /// Reads a key written by [`new_key`]: 64 hex digits (surrounding
    /// white space ignored). The error never shows the file's content.
    pub fn from_file(path: &Path) -> anyhow::Result<Signer> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read audit.signing_key_file {}: {e}", path.display())
        })?;
        let seed: [u8; 32] = seal::from_hex(text.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "audit.signing_key_file {} does not hold 64 hex digits (an Ed25519 secret key)",
                path.display()
            )
        })?;
        let public = seal::public_key(&seed);
        Ok(Signer {
            seed,
            public,
            key_id: seal::key_id(&public),
        })
    }

    /// The key's id, as seals name it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn listed(&self, now: &str) -> KeyRow {
        KeyRow {
            key_id: self.key_id.clone(),
            algorithm: "ed25519".to_owned(),
            public_key: hex::encode(self.public),
            first_used: now.to_owned(),
        }
    }
}

/// Writes a new Ed25519 secret key to `path` (which must not exist),
/// readable by its owner only; returns its id.
pub fn new_key(path: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    let seed: [u8; 32] = rand::random();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
    writeln!(file, "{}", hex::encode(seed))?;
    file.sync_all()?;
    Ok(seal::key_id(&seal::public_key(&seed)))
}

/// The signer of `ctx`'s configuration, if a key file is set.
pub fn signer(config: &crate::config::Config) -> anyhow::Result<Option<Signer>> {
    config
        .audit
        .signing_key_file
        .as_deref()
        .map(|path| Signer::from_file(Path::new(path)))
        .transpose()
}

/// A record's leaf object `L`.
pub fn leaf(r: &RecordRow) -> Leaf {
    Leaf {
        v: seal::LEAF_VERSION,
        call_id: r.id,
        called_at: r.called_at.clone(),
        via: r.via.clone(),
        agent_login: r.agent_login.clone(),
        token_id: Some(r.token_id),
        tool: r.tool.clone(),
        repository: r.repository.clone(),
        decision: r.decision.clone(),
        grant_rule_id: r.matched_grant.clone(),
        reason: r.reason.clone(),
        rpc_id: r.rpc_id.clone(),
        request_id: r.request_id.clone(),
        // Writ writes a JSON array of strings; anything else (a changed
        // row) is kept as the one name it reads as.
        arg_names: serde_json::from_str(&r.arg_names).unwrap_or_else(|_| vec![r.arg_names.clone()]),
        native_status: r.native_status,
        error_code: r.error_code.clone(),
        completed_at: r.completed_at.clone(),
    }
}

/// What one sealing round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// The new seal's number.
    pub seq: i64,
    /// Records it covers.
    pub count: i64,
}

/// Seals the longest prefix of final, unsealed records (at most
/// [`SEGMENT`]) in one transaction; `None` when there is nothing final to
/// seal, or another process sealed or holds the lease meanwhile.
///
/// The records are read and hashed before the write transaction, so the
/// writer (SQLite's only one) waits for the seal's insert only; inside it,
/// the latest seal is checked to be the one read, and the records still
/// without an outcome are held and read again (an outcome may have arrived).
pub async fn seal_once(ctx: &Ctx, signer: Option<&Signer>) -> Result<Option<Sealed>> {
    let now = ctx.now();
    let grace = i64::try_from(ctx.config.audit.seal_grace_seconds).unwrap_or(i64::MAX);
    let (head, mut rows) = {
        let mut tx = ctx.store.read().await?;
        let head = store::latest(&mut tx).await?;
        let after = head.as_ref().map_or(Cursor::START, SealRow::cursor);
        let rows = store::unsealed(&mut tx, after, SEGMENT).await?;
        tx.commit().await?;
        (head, rows)
    };
    let take = rows
        .iter()
        .take_while(|r| seal::is_final(r.completed_at.is_some(), &r.called_at, now, grace))
        .count();
    export_lag(&rows[take..], now, grace);
    if take == 0 {
        return Ok(None);
    }
    rows.truncate(take);
    let mut leaves: Vec<Hash> = rows.iter().map(|r| leaf(r).hash()).collect();

    let mut tx = ctx.store.write().await?;
    if !store::take_lease(&mut tx).await?
        || store::latest(&mut tx).await?.map(|s| s.seq) != head.as_ref().map(|s| s.seq)
    {
        tx.rollback().await?;
        return Ok(None);
    }
    let unfinished: Vec<i64> = rows
        .iter()
        .filter(|r| r.completed_at.is_none())
        .map(|r| r.id)
        .collect();
    if !unfinished.is_empty() {
        store::hold_unfinished(&mut tx, &unfinished).await?;
        for now_row in store::records(&mut tx, &unfinished).await? {
            if let Some(i) = rows.iter().position(|r| r.id == now_row.id) {
                leaves[i] = leaf(&now_row).hash();
                rows[i] = now_row;
            }
        }
    }
    let sealed_at = now.to_text();
    let prev = head
        .as_ref()
        .map(|h| Ok::<_, Error>((h.seq, h.last_position, decode_hash(&h.seal_hash)?)))
        .transpose()?;
    let fields = SealFields::next(
        prev.as_ref().map(|(seq, last, hash)| (*seq, *last, hash)),
        &leaves,
        &sealed_at,
        signer.map(Signer::key_id),
    );
    let seal_hash = fields.hash();
    let last = rows.last().expect("at least one record").cursor();
    let row = SealRow {
        seq: fields.seq,
        first_position: fields.first,
        last_position: fields.last,
        record_count: fields.count,
        merkle_root: fields.merkle_root,
        prev_seal_hash: fields.prev_seal_hash,
        sealed_at: fields.sealed_at,
        key_id: fields.key_id,
        seal_hash: hex::encode(seal_hash),
        signature: signer.map(|s| hex::encode(seal::sign(&s.seed, &seal_hash))),
        last_xact: last.xact,
        last_call_id: last.id,
        call_ids: serde_json::to_string(&rows.iter().map(|r| r.id).collect::<Vec<_>>())
            .expect("ids serialize"),
        leaf_hashes: serde_json::to_string(&leaves.iter().map(hex::encode).collect::<Vec<_>>())
            .expect("hashes serialize"),
    };
    if let Some(signer) = signer {
        store::list_key(&mut tx, &signer.listed(&sealed_at)).await?;
    }
    store::insert(&mut tx, &row).await?;
    tx.commit().await?;
    metrics::counter!("writ_audit_records_sealed_total").increment(take as u64);
    Ok(Some(Sealed {
        seq: row.seq,
        count: row.record_count,
    }))
}

/// Sets the seal lag gauge from the records left unsealed after a round:
/// the age of the oldest final one (0 when none is).
fn export_lag(left: &[RecordRow], now: Timestamp, grace: i64) {
    let oldest = left
        .iter()
        .filter(|r| seal::is_final(r.completed_at.is_some(), &r.called_at, now, grace))
        .filter_map(|r| Timestamp::parse_text(&r.called_at))
        .min();
    let lag = oldest.map_or(0.0, |at| {
        (now.datetime() - at.datetime()).as_seconds_f64().max(0.0)
    });
    metrics::gauge!("writ_audit_seal_lag_seconds").set(lag);
}

/// Seals until nothing final is left: the records sealed, in seals.
pub async fn seal_all(ctx: &Ctx, signer: Option<&Signer>) -> Result<Vec<Sealed>> {
    let mut done = Vec::new();
    while let Some(sealed) = seal_once(ctx, signer).await? {
        let full = sealed.count == SEGMENT as i64;
        done.push(sealed);
        if !full {
            break;
        }
    }
    Ok(done)
}

/// The sealer of `writ serve`: a round every `audit.seal_interval_seconds`.
pub async fn run(ctx: Ctx, signer: Option<std::sync::Arc<Signer>>) {
    if !ctx.config.audit.seal {
        return;
    }
    let interval = Duration::from_secs(ctx.config.audit.seal_interval_seconds.max(1));
    loop {
        if let Err(e) = seal_all(&ctx, signer.as_deref()).await {
            metrics::counter!("writ_audit_sealer_failures_total").increment(1);
            tracing::warn!(error = %e, "audit sealer: round failed");
        }
        match super::archive::retain(&ctx).await {
            Ok(Some(a)) => tracing::info!(
                first_seal = a.row.first_seal,
                through_seal = a.row.through_seal,
                records = a.row.record_count,
                file = %a.path.display(),
                "audit retention: archived"
            ),
            Ok(None) => {}
            Err(e) => {
                metrics::counter!("writ_audit_archive_failures_total").increment(1);
                tracing::warn!(error = %e, "audit retention: archive failed");
            }
        }
        tokio::time::sleep(interval).await;
    }
}

fn decode_hash(text: &str) -> Result<Hash> {
    seal::from_hex(text)
        .ok_or_else(|| Error::Invalid(format!("stored hash {text:?} is not 32 bytes of hex")))
}

/// The first thing that does not match, as `writ audit verify` names it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Mismatch {
    /// The seal it was found in.
    pub seal: i64,
    /// The record, when one is to blame.
    pub call_id: Option<i64>,
    /// What does not match.
    pub problem: String,
}

/// What `writ audit verify` found.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Verification {
    /// True when every seal and record checked matches.
    pub ok: bool,
    /// Seals checked.
    pub seals: u64,
    /// Records checked against their leaves.
    pub records: u64,
    /// Seals among them whose records are archived (their records are
    /// checked in the archive, `writ audit verify --archive`).
    pub archived_seals: u64,
    /// The first mismatch.
    pub mismatch: Option<Mismatch>,
}

/// Seals read per statement by the verifier.
const SEAL_PAGE: u64 = 64;

/// Recomputes every seal from `from` on (1: all) from the records in the
/// database: each record's leaf, each seal's root, hash, signature and link
/// to the one before; stops at the first mismatch. The records of archived
/// seals are in their archives, and none may be left in their range. One
/// read transaction.
/// [`Error::NotFound`] when there is no seal `from - 1` to start after.
pub async fn verify(store: &Store, from: i64) -> Result<Verification> {
    let mut tx = store.read().await?;
    let keys: std::collections::HashMap<String, String> = store::keys(&mut tx)
        .await?
        .into_iter()
        .map(|k| (k.key_id, k.public_key))
        .collect();
    let archived_through = crate::store::archive::archived_through(&mut tx).await?;
    let mut prev = match from {
        ..=1 => None,
        seq => Some(
            store::seal(&mut tx, seq - 1)
                .await?
                .ok_or(Error::NotFound)?,
        ),
    };
    let mut done = Verification {
        ok: true,
        seals: 0,
        records: 0,
        archived_seals: 0,
        mismatch: None,
    };
    let mut next = from.max(1);
    loop {
        let page = store::seals_from(&mut tx, next, SEAL_PAGE).await?;
        let Some(last) = page.last() else { break };
        next = last.seq + 1;
        for seal in page {
            let archived = seal.seq <= archived_through;
            if let Some(mismatch) =
                check_seal(&mut tx, prev.as_ref(), &seal, archived, &keys).await?
            {
                done.ok = false;
                done.mismatch = Some(mismatch);
                tx.commit().await?;
                return Ok(done);
            }
            done.seals += 1;
            if archived {
                done.archived_seals += 1;
            } else {
                done.records += seal.record_count as u64;
            }
            prev = Some(seal);
        }
    }
    tx.commit().await?;
    Ok(done)
}

/// The first mismatch of `seal` after `prev` (its records as the database
/// holds them now; none at all when the seal is `archived`), if any.
async fn check_seal(
    tx: &mut Tx,
    prev: Option<&SealRow>,
    seal: &SealRow,
    archived: bool,
    keys: &std::collections::HashMap<String, String>,
) -> Result<Option<Mismatch>> {
    let at = |call_id: Option<i64>, problem: String| {
        Ok(Some(Mismatch {
            seal: seal.seq,
            call_id,
            problem,
        }))
    };
    let link = prev.map(|p| seal::Prev {
        seq: p.seq,
        last: p.last_position,
        seal_hash: &p.seal_hash,
    });
    let problem = seal::seal_problem(
        link,
        &fields_of(seal),
        &seal.seal_hash,
        seal.signature.as_deref(),
        |key_id| keys.get(key_id).cloned(),
    );
    if let Some(problem) = problem {
        return at(None, problem);
    }
    let (Ok(ids), Ok(stored)) = (
        serde_json::from_str::<Vec<i64>>(&seal.call_ids),
        serde_json::from_str::<Vec<String>>(&seal.leaf_hashes),
    ) else {
        return at(None, "its call ids or leaf hashes do not parse".into());
    };
    let after = prev.map_or(Cursor::START, SealRow::cursor);
    if archived {
        // Its records, their ids and leaves are in an archive (`writ audit
        // verify --archive`); none may be left in its range.
        if !ids.is_empty() || !stored.is_empty() {
            return at(None, "it is archived but still lists its records".into());
        }
        return Ok(store::covered(tx, after, seal.cursor(), 1)
            .await?
            .first()
            .map(|extra| Mismatch {
                seal: seal.seq,
                call_id: Some(extra.id),
                problem: "a record is inside the range of an archived seal".into(),
            }));
    }
    let stored: Option<Vec<Hash>> = stored.iter().map(|h| decode_hash(h).ok()).collect();
    let Some(stored) = stored else {
        return at(None, "a stored leaf hash is not 32 bytes of hex".into());
    };
    if ids.len() as i64 != seal.record_count || stored.len() as i64 != seal.record_count {
        return at(
            None,
            "its positions or counts do not follow the previous seal".into(),
        );
    }
    if hex::encode(seal::merkle_root(&stored)) != seal.merkle_root {
        return at(
            None,
            "its stored leaf hashes do not make its merkle_root".into(),
        );
    }
    let records =
        store::covered(tx, after, seal.cursor(), SEGMENT.max(ids.len() as u64) + 1).await?;
    for (i, id) in ids.iter().enumerate() {
        let Some(record) = records.get(i) else {
            return at(Some(*id), "the sealed record is missing".into());
        };
        if record.id != *id {
            return if ids[i..].contains(&record.id) {
                at(
                    Some(*id),
                    "the sealed record is missing, or out of its place".into(),
                )
            } else {
                at(
                    Some(record.id),
                    "a record that was not sealed is inside the seal's range".into(),
                )
            };
        }
        if leaf(record).hash() != stored[i] {
            return at(
                Some(*id),
                "the record does not match its sealed leaf hash".into(),
            );
        }
    }
    if let Some(extra) = records.get(ids.len()) {
        return at(
            Some(extra.id),
            "a record that was not sealed is inside the seal's range".into(),
        );
    }
    Ok(None)
}

/// A seal as the API shows it, with the spec's field names.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SealView {
    pub seq: i64,
    pub first: i64,
    pub last: i64,
    pub count: i64,
    pub merkle_root: String,
    pub prev_seal_hash: Option<String>,
    pub sealed_at: String,
    pub key_id: Option<String>,
    pub seal_hash: String,
    pub signature: Option<String>,
}

impl SealView {
    fn of(s: &SealRow) -> SealView {
        let f = fields_of(s);
        SealView {
            seq: f.seq,
            first: f.first,
            last: f.last,
            count: f.count,
            merkle_root: f.merkle_root,
            prev_seal_hash: f.prev_seal_hash,
            sealed_at: f.sealed_at,
            key_id: f.key_id,
            seal_hash: s.seal_hash.clone(),
            signature: s.signature.clone(),
        }
    }
}

/// The fields of a stored seal that its hash covers.
pub fn fields_of(s: &SealRow) -> SealFields {
    SealFields {
        seq: s.seq,
        first: s.first_position,
        last: s.last_position,
        count: s.record_count,
        merkle_root: s.merkle_root.clone(),
        prev_seal_hash: s.prev_seal_hash.clone(),
        sealed_at: s.sealed_at.clone(),
        key_id: s.key_id.clone(),
    }
}

/// A record's inclusion proof: its leaf object, its seal, its index among
/// the seal's leaves and the RFC 9162 audit path from its leaf to the
/// seal's `merkle_root`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Proof {
    pub call_id: i64,
    /// The leaf object `L` as the record now reads.
    #[schema(value_type = Object)]
    pub leaf: Leaf,
    /// `SHA-256(0x00 ‖ JCS(leaf))`, hex.
    pub leaf_hash: String,
    pub seal: SealView,
    /// The leaf's index in the seal (0-based); its position in the sealing
    /// order is `seal.first + index`.
    pub index: u64,
    /// Sibling hashes (hex), from the leaf's up.
    pub audit_path: Vec<String>,
}

/// The inclusion proof of record `call_id`: 404 when there is no such
/// record, 409 `not_sealed` while it is not sealed yet.
pub async fn proof(ctx: &Ctx, call_id: i64) -> Result<Proof> {
    let mut tx = ctx.store.read().await?;
    let record = store::records(&mut tx, &[call_id])
        .await?
        .pop()
        .ok_or(Error::NotFound)?;
    let seal = store::covering(&mut tx, record.cursor())
        .await?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "call {call_id} is not sealed yet: a record is sealed within audit.seal_interval_seconds of being final"
            ))
        })?;
    tx.commit().await?;
    let ids: Vec<i64> = serde_json::from_str(&seal.call_ids).unwrap_or_default();
    let leaves: Vec<Hash> = serde_json::from_str::<Vec<String>>(&seal.leaf_hashes)
        .unwrap_or_default()
        .iter()
        .filter_map(|h| decode_hash(h).ok())
        .collect();
    let index = ids.iter().position(|id| *id == call_id).ok_or_else(|| {
        Error::Conflict(format!(
            "call {call_id} is inside seal {} but not among its records: run writ audit verify",
            seal.seq
        ))
    })?;
    let audit_path = seal::inclusion_path(&leaves, index)
        .unwrap_or_default()
        .iter()
        .map(hex::encode)
        .collect();
    let leaf = leaf(&record);
    Ok(Proof {
        call_id,
        leaf_hash: hex::encode(leaf.hash()),
        leaf,
        seal: SealView::of(&seal),
        index: index as u64,
        audit_path,
    })
}

/// A signing key as `GET /api/v1/audit/keys` lists it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub key_id: String,
    pub algorithm: String,
    /// The raw 32-byte Ed25519 public key, hex.
    pub public_key: String,
    /// When it first signed a seal.
    pub first_used: String,
}

/// Every key that has signed a seal, oldest first.
pub async fn keys(ctx: &Ctx) -> Result<Vec<KeyView>> {
    let mut tx = ctx.store.single().await?;
    Ok(store::keys(&mut tx)
        .await?
        .into_iter()
        .map(|k| KeyView {
            key_id: k.key_id,
            algorithm: k.algorithm,
            public_key: k.public_key,
            first_used: k.first_used,
        })
        .collect())
}
