//! Admission records: catalogs, MCP health, snapshots, project filesystem
//! context history, evaluations. Evaluations are never updated or deleted.

use sea_query::{
    Expr, ExprTrait, InsertStatement, OnConflict, Order, Query, SelectStatement, UnionType,
};

use super::schema::{
    AdmissionEvaluations, Catalogs, FsContextChanges, HealthSnapshots, McpHealth, Users,
};
use super::shape::{Args, Shape, slot};
use super::{StoreError, StoreResult, Tx};

/// Records a catalog version (once).
pub async fn record_catalog(
    tx: &mut Tx,
    version: &str,
    content: &str,
    now: &str,
) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(Catalogs::Table)
        .columns([
            Catalogs::Version,
            Catalogs::Content,
            Catalogs::FirstLoadedAt,
        ])
        .values_panic([version.into(), content.into(), now.into()])
        .on_conflict(
            OnConflict::column(Catalogs::Version)
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// The current health of one MCP.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct HealthRow {
    pub mcp_id: String,
    pub installed: bool,
    pub healthy: bool,
    pub detail: String,
    pub checked_at: String,
    pub updated_by: String,
}

/// Every MCP's current health, by id.
pub async fn all_health(tx: &mut Tx) -> StoreResult<Vec<HealthRow>> {
    let q = Query::select()
        .columns([
            McpHealth::McpId,
            McpHealth::Installed,
            McpHealth::Healthy,
            McpHealth::Detail,
            McpHealth::CheckedAt,
            McpHealth::UpdatedBy,
        ])
        .from(McpHealth::Table)
        .order_by(McpHealth::McpId, Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// Sets one MCP's health.
pub async fn set_health(tx: &mut Tx, row: &HealthRow) -> StoreResult<()> {
    let q = Query::insert()
        .into_table(McpHealth::Table)
        .columns([
            McpHealth::McpId,
            McpHealth::Installed,
            McpHealth::Healthy,
            McpHealth::Detail,
            McpHealth::CheckedAt,
            McpHealth::UpdatedBy,
        ])
        .values_panic([
            row.mcp_id.clone().into(),
            row.installed.into(),
            row.healthy.into(),
            row.detail.clone().into(),
            row.checked_at.clone().into(),
            row.updated_by.clone().into(),
        ])
        .on_conflict(
            OnConflict::column(McpHealth::McpId)
                .update_columns([
                    McpHealth::Installed,
                    McpHealth::Healthy,
                    McpHealth::Detail,
                    McpHealth::CheckedAt,
                    McpHealth::UpdatedBy,
                ])
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// The id of the snapshot with this digest, if one was captured.
pub async fn find_snapshot(tx: &mut Tx, digest: &str) -> StoreResult<Option<i64>> {
    let q = Query::select()
        .column(HealthSnapshots::Id)
        .from(HealthSnapshots::Table)
        .and_where(Expr::col(HealthSnapshots::Digest).eq(digest))
        .to_owned();
    Ok(tx.fetch_optional::<(i64,)>(&q).await?.map(|r| r.0))
}

/// Captures a snapshot (deduplicated by digest) and returns its id: one
/// statement when it is stored already (the usual case: health changes
/// rarely), else an insert that tolerates a concurrent one, and a read.
pub async fn capture_snapshot(
    tx: &mut Tx,
    digest: &str,
    content: &str,
    now: &str,
) -> StoreResult<i64> {
    if let Some(id) = find_snapshot(tx, digest).await? {
        return Ok(id);
    }
    let q = Query::insert()
        .into_table(HealthSnapshots::Table)
        .columns([
            HealthSnapshots::Digest,
            HealthSnapshots::Content,
            HealthSnapshots::CreatedAt,
        ])
        .values_panic([digest.into(), content.into(), now.into()])
        .on_conflict(
            OnConflict::column(HealthSnapshots::Digest)
                .do_nothing()
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await?;
    match find_snapshot(tx, digest).await? {
        Some(id) => Ok(id),
        None => Err(StoreError::NotFound),
    }
}

/// One change of project filesystem context.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct FsChangeRow {
    pub id: i64,
    pub action: String,
    pub capabilities: String,
    pub actor_login: String,
    pub at: String,
}

/// A repository's project filesystem context history, oldest first.
pub async fn fs_history(tx: &mut Tx, repository_id: i64) -> StoreResult<Vec<FsChangeRow>> {
    let c = FsContextChanges::Table;
    let q = Query::select()
        .columns([
            (c, FsContextChanges::Id),
            (c, FsContextChanges::Action),
            (c, FsContextChanges::Capabilities),
            (c, FsContextChanges::At),
        ])
        .expr_as(Expr::col((Users::Table, Users::Login)), "actor_login")
        .from(c)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id)).equals((c, FsContextChanges::ActorId)),
        )
        .and_where(Expr::col((c, FsContextChanges::RepositoryId)).eq(repository_id))
        .order_by((c, FsContextChanges::Id), Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// Appends a change of project filesystem context.
pub async fn insert_fs_change(
    tx: &mut Tx,
    repository_id: i64,
    action: &str,
    capabilities: &str,
    actor_id: i64,
    now: &str,
) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(FsContextChanges::Table)
        .columns([
            FsContextChanges::RepositoryId,
            FsContextChanges::Action,
            FsContextChanges::Capabilities,
            FsContextChanges::ActorId,
            FsContextChanges::At,
        ])
        .values_panic([
            repository_id.into(),
            action.into(),
            capabilities.into(),
            actor_id.into(),
            now.into(),
        ])
        .returning_col(FsContextChanges::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// A persisted evaluation.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct EvaluationRow {
    pub id: i64,
    pub grant_id: i64,
    pub phase: String,
    pub status: String,
    pub retryable: bool,
    pub snapshot_id: i64,
    pub catalog_version: String,
    pub filesystem_grant_id: Option<i64>,
    pub decisions: String,
    pub evaluated_at: String,
}

/// An evaluation to persist.
pub struct NewEvaluation<'a> {
    pub grant_id: i64,
    pub phase: &'a str,
    pub status: &'a str,
    pub retryable: bool,
    pub blocked_count: i64,
    pub warning_count: i64,
    pub snapshot_id: i64,
    pub catalog_version: &'a str,
    pub filesystem_grant_id: Option<i64>,
    pub proposal_digest: &'a str,
    pub decisions: &'a str,
    pub actor_id: i64,
    pub now: &'a str,
}

/// Persists an evaluation and returns its id.
pub async fn insert_evaluation(tx: &mut Tx, e: NewEvaluation<'_>) -> StoreResult<i64> {
    static INSERT: Shape = Shape::new();
    let q = INSERT.bind(tx.backend(), evaluation_insert, &evaluation_values(&e));
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// The values of an evaluation, by the slot names of [`evaluation_insert`].
/// `grant_id`, `proposal_digest`, `actor_id` and `now` are the handoff's
/// values of the same names (see `store::handoff`).
pub(super) fn evaluation_values(e: &NewEvaluation<'_>) -> Args {
    vec![
        ("grant_id", e.grant_id.into()),
        ("phase", e.phase.into()),
        ("status", e.status.into()),
        ("retryable", e.retryable.into()),
        ("blocked_count", e.blocked_count.into()),
        ("warning_count", e.warning_count.into()),
        ("snapshot_id", e.snapshot_id.into()),
        ("catalog_version", e.catalog_version.into()),
        ("filesystem_grant_id", e.filesystem_grant_id.into()),
        ("proposal_digest", e.proposal_digest.into()),
        ("decisions", e.decisions.into()),
        ("actor_id", e.actor_id.into()),
        ("now", e.now.into()),
    ]
}

/// The insert of an evaluation, its values in the slots named by
/// [`evaluation_values`], returning its id.
pub(super) fn evaluation_insert() -> InsertStatement {
    use AdmissionEvaluations as A;
    Query::insert()
        .into_table(A::Table)
        .columns([
            A::GrantId,
            A::Phase,
            A::Status,
            A::Retryable,
            A::BlockedCount,
            A::WarningCount,
            A::SnapshotId,
            A::CatalogVersion,
            A::FilesystemGrantId,
            A::ProposalDigest,
            A::Decisions,
            A::ActorId,
            A::EvaluatedAt,
        ])
        .values_panic(
            [
                "grant_id",
                "phase",
                "status",
                "retryable",
                "blocked_count",
                "warning_count",
                "snapshot_id",
                "catalog_version",
                "filesystem_grant_id",
                "proposal_digest",
                "decisions",
                "actor_id",
                "now",
            ]
            .map(slot),
        )
        .returning_col(A::Id)
        .to_owned()
}

/// A grant's evaluations, oldest first.
pub async fn evaluations_of(tx: &mut Tx, grant_id: i64) -> StoreResult<Vec<EvaluationRow>> {
    use AdmissionEvaluations as A;
    let q = Query::select()
        .columns([
            A::Id,
            A::GrantId,
            A::Phase,
            A::Status,
            A::Retryable,
            A::SnapshotId,
            A::CatalogVersion,
            A::FilesystemGrantId,
            A::Decisions,
            A::EvaluatedAt,
        ])
        .from(A::Table)
        .and_where(Expr::col(A::GrantId).eq(grant_id))
        .order_by(A::Id, Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// What an evaluation reads, fetched in one statement: the repository's
/// project filesystem context history (oldest first), every MCP's health (by
/// id), and the newest stored health snapshot (id, digest).
#[derive(Debug, Clone, Default)]
pub struct EvaluationInputs {
    /// As [`fs_history`].
    pub fs: Vec<FsChangeRow>,
    /// As [`all_health`].
    pub health: Vec<HealthRow>,
    /// The newest snapshot, which the current health usually matches.
    pub latest_snapshot: Option<(i64, String)>,
}

/// One row of [`evaluation_inputs`]' union: `kind` 0 is a filesystem change,
/// 1 an MCP's health, 2 the newest snapshot; the other columns mean what
/// their kind gives them.
///
/// Deserialized from JSON too, as an array in column order (see
/// [`inputs_json`]).
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
pub(super) struct InputRow {
    kind: i32,
    id: Option<i64>,
    a: Option<String>,
    b: Option<String>,
    c: Option<String>,
    d: Option<String>,
    installed: Option<bool>,
    healthy: Option<bool>,
}

/// [`fs_history`], [`all_health`] and the newest snapshot as one `UNION ALL`
/// (one round trip instead of three on every handoff and approval).
pub async fn evaluation_inputs(tx: &mut Tx, repository_id: i64) -> StoreResult<EvaluationInputs> {
    let rows = tx
        .fetch_all::<InputRow>(&inputs_query(Expr::val(repository_id)))
        .await?;
    parse_inputs(rows)
}

/// [`evaluation_inputs`] of the repository `repository` (an expression:
/// an id, or a subquery that finds it), as a statement.
pub(super) fn inputs_query(repository: Expr) -> SelectStatement {
    let c = FsContextChanges::Table;
    let none_text = || Expr::val(Option::<String>::None);
    let none_bool = || Expr::val(Option::<bool>::None);
    let health = Query::select()
        .expr_as(Expr::val(1i32), "kind")
        .expr_as(Expr::val(Option::<i64>::None), "id")
        .expr_as(Expr::col(McpHealth::McpId), "a")
        .expr_as(Expr::col(McpHealth::Detail), "b")
        .expr_as(Expr::col(McpHealth::CheckedAt), "c")
        .expr_as(Expr::col(McpHealth::UpdatedBy), "d")
        .expr_as(Expr::col(McpHealth::Installed), "installed")
        .expr_as(Expr::col(McpHealth::Healthy), "healthy")
        .from(McpHealth::Table)
        .to_owned();
    let newest = Query::select()
        .expr(Expr::col(HealthSnapshots::Id).max())
        .from(HealthSnapshots::Table)
        .to_owned();
    let snapshot = Query::select()
        .expr_as(Expr::val(2i32), "kind")
        .expr_as(Expr::col(HealthSnapshots::Id), "id")
        .expr_as(Expr::col(HealthSnapshots::Digest), "a")
        .expr_as(none_text(), "b")
        .expr_as(none_text(), "c")
        .expr_as(none_text(), "d")
        .expr_as(none_bool(), "installed")
        .expr_as(none_bool(), "healthy")
        .from(HealthSnapshots::Table)
        .and_where(Expr::col(HealthSnapshots::Id).in_subquery(newest))
        .to_owned();
    Query::select()
        .expr_as(Expr::val(0i32), "kind")
        .expr_as(Expr::col((c, FsContextChanges::Id)), "id")
        .expr_as(Expr::col((c, FsContextChanges::Action)), "a")
        .expr_as(Expr::col((c, FsContextChanges::Capabilities)), "b")
        .expr_as(Expr::col((c, FsContextChanges::At)), "c")
        .expr_as(Expr::col((Users::Table, Users::Login)), "d")
        .expr_as(none_bool(), "installed")
        .expr_as(none_bool(), "healthy")
        .from(c)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id)).equals((c, FsContextChanges::ActorId)),
        )
        .and_where(Expr::col((c, FsContextChanges::RepositoryId)).eq(repository))
        .union(UnionType::All, health)
        .union(UnionType::All, snapshot)
        .to_owned()
}

/// [`inputs_query`] aggregated into one JSON text value (PostgreSQL): an
/// array of rows, each an array of the row's columns in order (`NULL` when
/// there is none), to ride along as one column of another statement.
pub(super) fn inputs_json(repository: Expr) -> Expr {
    let rows = Query::select()
        .expr(Expr::cust(
            r#"CAST(json_agg(json_build_array("i"."kind", "i"."id", "i"."a", "i"."b", "i"."c", "i"."d", "i"."installed", "i"."healthy")) AS TEXT)"#,
        ))
        .from_subquery(inputs_query(repository), "i")
        .to_owned();
    Expr::from(rows)
}

/// The value of an [`inputs_json`] column, sorted into its parts.
pub(super) fn parse_inputs_json(json: Option<&str>) -> StoreResult<EvaluationInputs> {
    let rows = match json {
        Some(json) => serde_json::from_str::<Vec<InputRow>>(json)
            .map_err(|e| StoreError::other(format!("evaluation inputs: {e}")))?,
        None => Vec::new(),
    };
    parse_inputs(rows)
}

/// The rows of [`inputs_query`], sorted into their parts.
pub(super) fn parse_inputs(rows: Vec<InputRow>) -> StoreResult<EvaluationInputs> {
    let mut inputs = EvaluationInputs::default();
    for row in rows {
        let text = |v: Option<String>| v.unwrap_or_default();
        match (row.kind, row.id) {
            (0, Some(id)) => inputs.fs.push(FsChangeRow {
                id,
                action: text(row.a),
                capabilities: text(row.b),
                at: text(row.c),
                actor_login: text(row.d),
            }),
            (1, _) => inputs.health.push(HealthRow {
                mcp_id: text(row.a),
                detail: text(row.b),
                checked_at: text(row.c),
                updated_by: text(row.d),
                installed: row.installed.unwrap_or(false),
                healthy: row.healthy.unwrap_or(false),
            }),
            (2, Some(id)) => inputs.latest_snapshot = Some((id, text(row.a))),
            _ => {
                return Err(StoreError::other("unexpected evaluation input row"));
            }
        }
    }
    inputs.fs.sort_by_key(|r| r.id);
    inputs.health.sort_by(|x, y| x.mcp_id.cmp(&y.mcp_id));
    Ok(inputs)
}
