//! Seals over the audit records (docs/audit.md): the sealing order, the
//! seals, and the records a seal covers.
//!
//! Sealing order: on SQLite by id (the single writer makes id order commit
//! order); on PostgreSQL by `(xact_id, id)`, taking only records whose
//! transaction id is below the oldest transaction still running, so no
//! record can later commit inside a range already sealed (the events feed's
//! technique, `store::events`). Seals take a prefix of that order at a
//! time, so a record is sealed exactly when its place in the order is at or
//! before the latest seal's [`Cursor`]; sealing writes no `tool_calls` row.

use sea_query::{Expr, ExprTrait, Iden, Order, Query, SelectStatement};

use super::audit::ToolCalls;
use super::{Backend, StoreResult, Tx};

/// `audit_seals`
#[derive(Iden, Clone, Copy)]
pub enum AuditSeals {
    Table,
    Seq,
    FirstPosition,
    LastPosition,
    RecordCount,
    MerkleRoot,
    PrevSealHash,
    SealedAt,
    KeyId,
    SealHash,
    Signature,
    LastXact,
    LastCallId,
    CallIds,
    LeafHashes,
}

/// `audit_keys`
#[derive(Iden, Clone, Copy)]
pub enum AuditKeys {
    Table,
    KeyId,
    Algorithm,
    PublicKey,
    FirstUsed,
}

/// A place in the sealing order: the record `(xact, id)` (`xact` is 0 on
/// SQLite). [`Cursor::START`] is before every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Cursor {
    /// The record's transaction id (PostgreSQL).
    pub xact: i64,
    /// The record's id.
    pub id: i64,
}

impl Cursor {
    /// Before every record.
    pub const START: Cursor = Cursor {
        xact: 0,
        id: i64::MIN,
    };
}

/// An audit record with the fields its leaf covers, and its place in the
/// sealing order.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct RecordRow {
    pub id: i64,
    /// The writing transaction's id (0 on SQLite).
    pub xact: i64,
    pub called_at: String,
    pub via: String,
    pub agent_login: String,
    pub token_id: i64,
    pub tool: String,
    pub repository: Option<String>,
    pub decision: String,
    pub matched_grant: Option<String>,
    pub reason: String,
    pub rpc_id: Option<String>,
    pub request_id: Option<String>,
    pub arg_names: String,
    pub native_status: Option<i64>,
    pub error_code: Option<String>,
    pub completed_at: Option<String>,
}

impl RecordRow {
    /// Its place in the sealing order.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            xact: self.xact,
            id: self.id,
        }
    }
}

/// A seal as stored.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize, serde::Serialize)]
pub struct SealRow {
    pub seq: i64,
    pub first_position: i64,
    pub last_position: i64,
    pub record_count: i64,
    pub merkle_root: String,
    pub prev_seal_hash: Option<String>,
    pub sealed_at: String,
    pub key_id: Option<String>,
    pub seal_hash: String,
    pub signature: Option<String>,
    /// The cursor's transaction id (0 on SQLite).
    pub last_xact: i64,
    pub last_call_id: i64,
    /// JSON array of the sealed records' ids, in sealing order.
    pub call_ids: String,
    /// JSON array of their leaf hashes (hex), in the same order.
    pub leaf_hashes: String,
}

impl SealRow {
    /// The place of its last record in the sealing order.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            xact: self.last_xact,
            id: self.last_call_id,
        }
    }
}

/// The transaction id of a record, as a number (0 on SQLite).
fn record_xact(backend: Backend) -> Expr {
    match backend {
        Backend::Sqlite => Expr::val(0i64),
        Backend::Postgres => Expr::cust("(tool_calls.xact_id::text)::bigint"),
    }
}

/// The transaction id of a seal's cursor, as a number (0 on SQLite).
fn seal_xact(backend: Backend) -> Expr {
    match backend {
        Backend::Sqlite => Expr::val(0i64),
        Backend::Postgres => Expr::cust("(audit_seals.last_xact::text)::bigint"),
    }
}

fn select_records(backend: Backend) -> SelectStatement {
    use ToolCalls as T;
    let mut s = Query::select();
    s.column((T::Table, T::Id))
        .expr_as(record_xact(backend), "xact")
        .columns(
            [
                T::CalledAt,
                T::Via,
                T::AgentLogin,
                T::TokenId,
                T::Tool,
                T::Repository,
                T::Decision,
                T::MatchedGrant,
                T::Reason,
                T::RpcId,
                T::RequestId,
                T::ArgNames,
            ]
            .map(|c| (T::Table, c)),
        )
        .expr_as(
            Expr::cust("CAST(tool_calls.native_status AS BIGINT)"),
            "native_status",
        )
        .columns([T::ErrorCode, T::CompletedAt].map(|c| (T::Table, c)))
        .from(T::Table);
    s
}

/// Records after `after` in sealing order (`after` excluded, `through`
/// included when given); without `through`, only records whose place can
/// no longer be taken by a commit (PostgreSQL: transaction ids below the
/// oldest one running). At most `limit`.
fn records_in(
    backend: Backend,
    after: Cursor,
    through: Option<Cursor>,
    limit: u64,
) -> SelectStatement {
    use ToolCalls as T;
    let mut s = select_records(backend);
    match backend {
        Backend::Sqlite => {
            s.and_where(Expr::col((T::Table, T::Id)).gt(after.id));
            if let Some(through) = through {
                s.and_where(Expr::col((T::Table, T::Id)).lte(through.id));
            }
            s.order_by((T::Table, T::Id), Order::Asc);
        }
        Backend::Postgres => {
            s.and_where(Expr::cust_with_values(
                "(tool_calls.xact_id, tool_calls.id) > ($1::text::xid8, $2)",
                [sea_query::Value::from(after.xact), after.id.into()],
            ));
            match through {
                Some(through) => s.and_where(Expr::cust_with_values(
                    "(tool_calls.xact_id, tool_calls.id) <= ($1::text::xid8, $2)",
                    [sea_query::Value::from(through.xact), through.id.into()],
                )),
                None => s.and_where(Expr::cust(
                    "tool_calls.xact_id < pg_snapshot_xmin(pg_current_snapshot())",
                )),
            };
            s.order_by((T::Table, T::XactId), Order::Asc)
                .order_by((T::Table, T::Id), Order::Asc);
        }
    }
    s.limit(limit);
    s
}

/// The records not sealed yet that may be sealed now (their place in the
/// order is settled), in sealing order, at most `limit`.
pub async fn unsealed(tx: &mut Tx, after: Cursor, limit: u64) -> StoreResult<Vec<RecordRow>> {
    let q = records_in(tx.backend(), after, None, limit);
    tx.fetch_all(&q).await
}

/// The records a seal that ends at `through` and follows `after` covers,
/// as the database holds them now, at most `limit`.
pub async fn covered(
    tx: &mut Tx,
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> StoreResult<Vec<RecordRow>> {
    let q = records_in(tx.backend(), after, Some(through), limit);
    tx.fetch_all(&q).await
}

/// These records as they are now (by id, any order).
pub async fn records(tx: &mut Tx, ids: &[i64]) -> StoreResult<Vec<RecordRow>> {
    use ToolCalls as T;
    let q = select_records(tx.backend())
        .and_where(Expr::col((T::Table, T::Id)).is_in(ids.iter().copied()))
        .to_owned();
    tx.fetch_all(&q).await
}

/// Holds the records among `ids` that have no outcome yet until this
/// transaction ends (PostgreSQL; an update that changes nothing): a call
/// writing an outcome to one waits, then sees the seal and is refused.
/// SQLite's single writer serializes the two already.
pub async fn hold_unfinished(tx: &mut Tx, ids: &[i64]) -> StoreResult<()> {
    use ToolCalls as T;
    if tx.backend() == Backend::Sqlite || ids.is_empty() {
        return Ok(());
    }
    let q = Query::update()
        .table(T::Table)
        .value(T::CompletedAt, Expr::col(T::CompletedAt))
        .and_where(Expr::col(T::Id).is_in(ids.iter().copied()))
        .and_where(Expr::col(T::CompletedAt).is_null())
        .to_owned();
    tx.execute(&q).await.map(drop)
}

/// Takes the sealer's lease for this transaction (PostgreSQL: an advisory
/// transaction lock); false when another process holds it. On SQLite the
/// write transaction is the lease.
pub async fn take_lease(tx: &mut Tx) -> StoreResult<bool> {
    if tx.backend() == Backend::Sqlite {
        return Ok(true);
    }
    let q = Query::select()
        .expr(Expr::cust("pg_try_advisory_xact_lock(7315500117)"))
        .to_owned();
    Ok(tx.fetch_one::<(bool,)>(&q).await?.0)
}

/// A seal's columns of the spec's fields, with its hash and signature.
const SEAL_COLUMNS: [AuditSeals; 10] = [
    AuditSeals::Seq,
    AuditSeals::FirstPosition,
    AuditSeals::LastPosition,
    AuditSeals::RecordCount,
    AuditSeals::MerkleRoot,
    AuditSeals::PrevSealHash,
    AuditSeals::SealedAt,
    AuditSeals::KeyId,
    AuditSeals::SealHash,
    AuditSeals::Signature,
];

fn select_seals(backend: Backend) -> SelectStatement {
    use AuditSeals as S;
    let mut s = Query::select();
    s.columns(SEAL_COLUMNS.map(|c| (S::Table, c)))
        .expr_as(seal_xact(backend), "last_xact")
        .columns([S::LastCallId, S::CallIds, S::LeafHashes].map(|c| (S::Table, c)))
        .from(S::Table);
    s
}

/// The latest seal.
pub async fn latest(tx: &mut Tx) -> StoreResult<Option<SealRow>> {
    let q = select_seals(tx.backend())
        .order_by(AuditSeals::Seq, Order::Desc)
        .limit(1)
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Seals from `seq` on, in order, at most `limit`.
pub async fn seals_from(tx: &mut Tx, seq: i64, limit: u64) -> StoreResult<Vec<SealRow>> {
    let q = select_seals(tx.backend())
        .and_where(Expr::col(AuditSeals::Seq).gte(seq))
        .order_by(AuditSeals::Seq, Order::Asc)
        .limit(limit)
        .to_owned();
    tx.fetch_all(&q).await
}

/// The seal `seq`.
pub async fn seal(tx: &mut Tx, seq: i64) -> StoreResult<Option<SealRow>> {
    let q = select_seals(tx.backend())
        .and_where(Expr::col(AuditSeals::Seq).eq(seq))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// The last seal made before `cutoff` (a timestamp's text) among seals
/// `..=max_seq`.
pub async fn sealed_before(
    tx: &mut Tx,
    cutoff: &str,
    max_seq: i64,
) -> StoreResult<Option<SealRow>> {
    let q = select_seals(tx.backend())
        .and_where(Expr::col(AuditSeals::Seq).lte(max_seq))
        .and_where(Expr::col(AuditSeals::SealedAt).lt(cutoff))
        .order_by(AuditSeals::Seq, Order::Desc)
        .limit(1)
        .to_owned();
    tx.fetch_optional(&q).await
}

/// The first seal whose cursor is at or after `at`: the seal that covers
/// the record at `at`, if it is sealed.
pub async fn covering(tx: &mut Tx, at: Cursor) -> StoreResult<Option<SealRow>> {
    use AuditSeals as S;
    let mut q = select_seals(tx.backend());
    match tx.backend() {
        Backend::Sqlite => {
            q.and_where(Expr::col((S::Table, S::LastCallId)).gte(at.id))
                .order_by((S::Table, S::LastCallId), Order::Asc);
        }
        Backend::Postgres => {
            q.and_where(Expr::cust_with_values(
                "(audit_seals.last_xact, audit_seals.last_call_id) >= ($1::text::xid8, $2)",
                [sea_query::Value::from(at.xact), at.id.into()],
            ))
            .order_by((S::Table, S::LastXact), Order::Asc)
            .order_by((S::Table, S::LastCallId), Order::Asc);
        }
    }
    q.limit(1);
    tx.fetch_optional(&q).await
}

/// Appends a seal.
pub async fn insert(tx: &mut Tx, seal: &SealRow) -> StoreResult<()> {
    use AuditSeals as S;
    let last_xact = match tx.backend() {
        Backend::Sqlite => Expr::val(0i64),
        Backend::Postgres => Expr::cust_with_values(
            "$1::text::xid8",
            [sea_query::Value::from(seal.last_xact.to_string())],
        ),
    };
    let mut columns = SEAL_COLUMNS.to_vec();
    columns.extend([S::LastCallId, S::CallIds, S::LeafHashes]);
    let mut values: Vec<Expr> = vec![
        seal.seq.into(),
        seal.first_position.into(),
        seal.last_position.into(),
        seal.record_count.into(),
        seal.merkle_root.as_str().into(),
        seal.prev_seal_hash.as_deref().into(),
        seal.sealed_at.as_str().into(),
        seal.key_id.as_deref().into(),
        seal.seal_hash.as_str().into(),
        seal.signature.as_deref().into(),
        seal.last_call_id.into(),
        seal.call_ids.as_str().into(),
        seal.leaf_hashes.as_str().into(),
    ];
    if tx.backend() == Backend::Postgres {
        columns.push(S::LastXact);
        values.push(last_xact);
    }
    let q = Query::insert()
        .into_table(S::Table)
        .columns(columns)
        .values_panic(values)
        .to_owned();
    tx.execute(&q).await.map(drop)
}

/// Empties the record ids and leaf hashes of seals `first..=through`
/// (their records are archived); returns how many seals.
pub async fn drop_lists(tx: &mut Tx, first: i64, through: i64) -> StoreResult<u64> {
    use AuditSeals as S;
    let q = Query::update()
        .table(S::Table)
        .value(S::CallIds, "[]")
        .value(S::LeafHashes, "[]")
        .and_where(Expr::col(S::Seq).gte(first))
        .and_where(Expr::col(S::Seq).lte(through))
        .to_owned();
    tx.execute(&q).await
}

/// A signing key as listed.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize, serde::Serialize)]
pub struct KeyRow {
    pub key_id: String,
    pub algorithm: String,
    pub public_key: String,
    pub first_used: String,
}

/// Every key that has signed, oldest first.
pub async fn keys(tx: &mut Tx) -> StoreResult<Vec<KeyRow>> {
    use AuditKeys as K;
    let q = Query::select()
        .columns([K::KeyId, K::Algorithm, K::PublicKey, K::FirstUsed])
        .from(K::Table)
        .order_by(K::FirstUsed, Order::Asc)
        .order_by(K::KeyId, Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// Lists `key` unless it is listed already.
pub async fn list_key(tx: &mut Tx, key: &KeyRow) -> StoreResult<()> {
    use AuditKeys as K;
    let q = Query::insert()
        .into_table(K::Table)
        .columns([K::KeyId, K::Algorithm, K::PublicKey, K::FirstUsed])
        .values_panic([
            key.key_id.as_str().into(),
            key.algorithm.as_str().into(),
            key.public_key.as_str().into(),
            key.first_used.as_str().into(),
        ])
        .on_conflict(
            sea_query::OnConflict::column(K::KeyId)
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await.map(drop)
}
