//! Archives of sealed audit records (docs/audit.md): the `audit_archives`
//! rows and the deletion of the records an archive holds.

use sea_query::{Expr, ExprTrait, Func, Iden, Order, Query};

use super::audit::ToolCalls;
use super::seal::Cursor;
use super::{Backend, StoreResult, Tx};

/// `audit_archives`
#[derive(Iden, Clone, Copy)]
pub enum AuditArchives {
    Table,
    Seq,
    FirstSeal,
    ThroughSeal,
    RecordCount,
    FileName,
    FileSha256,
    FileBytes,
    ArchivedBy,
    ArchivedAt,
    Deleting,
}

/// An archive as recorded.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize, serde::Serialize)]
pub struct ArchiveRow {
    pub seq: i64,
    pub first_seal: i64,
    pub through_seal: i64,
    pub record_count: i64,
    pub file_name: String,
    pub file_sha256: String,
    pub file_bytes: i64,
    pub archived_by: String,
    pub archived_at: String,
}

const COLUMNS: [AuditArchives; 9] = [
    AuditArchives::Seq,
    AuditArchives::FirstSeal,
    AuditArchives::ThroughSeal,
    AuditArchives::RecordCount,
    AuditArchives::FileName,
    AuditArchives::FileSha256,
    AuditArchives::FileBytes,
    AuditArchives::ArchivedBy,
    AuditArchives::ArchivedAt,
];

/// The latest archive.
pub async fn latest(tx: &mut Tx) -> StoreResult<Option<ArchiveRow>> {
    let q = Query::select()
        .columns(COLUMNS)
        .from(AuditArchives::Table)
        .order_by(AuditArchives::Seq, Order::Desc)
        .limit(1)
        .to_owned();
    tx.fetch_optional(&q).await
}

/// The last seal whose records are archived (0 when none is).
pub async fn archived_through(tx: &mut Tx) -> StoreResult<i64> {
    Ok(latest(tx).await?.map_or(0, |a| a.through_seal))
}

/// Records an archive. On SQLite the row is open (its records may be
/// deleted) until [`close`].
pub async fn insert(tx: &mut Tx, a: &ArchiveRow) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(AuditArchives::Table)
        .columns(COLUMNS)
        .values_panic([
            a.seq.into(),
            a.first_seal.into(),
            a.through_seal.into(),
            a.record_count.into(),
            a.file_name.as_str().into(),
            a.file_sha256.as_str().into(),
            a.file_bytes.into(),
            a.archived_by.as_str().into(),
            a.archived_at.as_str().into(),
        ])
        .to_owned();
    tx.execute(&q).await.map(drop)
}

/// Closes the archive row `seq` (SQLite): no record may be deleted by it
/// after this. On PostgreSQL the row's transaction id does that.
pub async fn close(tx: &mut Tx, seq: i64) -> StoreResult<()> {
    if tx.backend() == Backend::Postgres {
        return Ok(());
    }
    let q = Query::update()
        .table(AuditArchives::Table)
        .value(AuditArchives::Deleting, Option::<i64>::None)
        .and_where(Expr::col(AuditArchives::Seq).eq(seq))
        .to_owned();
    tx.execute(&q).await.map(drop)
}

/// Deletes the records after `after` through `through` in sealing order;
/// returns how many.
pub async fn delete_records(tx: &mut Tx, after: Cursor, through: Cursor) -> StoreResult<u64> {
    use ToolCalls as T;
    let mut q = Query::delete();
    q.from_table(T::Table);
    match tx.backend() {
        Backend::Sqlite => {
            q.and_where(Expr::col(T::Id).gt(after.id))
                .and_where(Expr::col(T::Id).lte(through.id));
        }
        Backend::Postgres => {
            q.and_where(Expr::cust_with_values(
                "(xact_id, id) > ($1::text::xid8, $2) AND (xact_id, id) <= ($3::text::xid8, $4)",
                [
                    sea_query::Value::from(after.xact),
                    after.id.into(),
                    through.xact.into(),
                    through.id.into(),
                ],
            ));
        }
    }
    tx.execute(&q).await
}

/// The largest record id (SQLite gives the next record this plus one, so
/// the record holding it is never deleted).
pub async fn newest_record(tx: &mut Tx) -> StoreResult<Option<i64>> {
    let q = Query::select()
        .expr(Func::max(Expr::col(ToolCalls::Id)))
        .from(ToolCalls::Table)
        .to_owned();
    Ok(tx.fetch_one::<(Option<i64>,)>(&q).await?.0)
}

/// The archive holding seal `seq`, if it is archived.
pub async fn covering(tx: &mut Tx, seq: i64) -> StoreResult<Option<ArchiveRow>> {
    let q = Query::select()
        .columns(COLUMNS)
        .from(AuditArchives::Table)
        .and_where(Expr::col(AuditArchives::FirstSeal).lte(seq))
        .and_where(Expr::col(AuditArchives::ThroughSeal).gte(seq))
        .to_owned();
    tx.fetch_optional(&q).await
}
