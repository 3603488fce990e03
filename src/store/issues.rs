//! Issues and submission receipts.

use sea_query::{Expr, ExprTrait, JoinType, Order, Query, SelectStatement, UpdateStatement};

use super::schema::{AdmissionEvaluations, Grants, Issues, Repositories, Submissions, Users};
use super::{StoreResult, Tx};

/// Allocates the next per-repository issue index (never reused: the counter
/// only grows, also across deletions and transfers).
pub async fn allocate_index(tx: &mut Tx, repository_id: i64) -> StoreResult<i64> {
    let q = bump_index(repository_id)
        .returning_col(Repositories::NextIssueIndex)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0 - 1)
}

/// A new issue.
pub struct NewIssue<'a> {
    pub repository_id: i64,
    pub index: i64,
    pub title: &'a str,
    pub body: &'a str,
    pub poster_id: i64,
    pub now: &'a str,
}

/// Inserts an issue and returns its id.
pub async fn insert_issue(tx: &mut Tx, i: NewIssue<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Issues::Table)
        .columns(ISSUE_COLUMNS)
        .values_panic([
            i.repository_id.into(),
            i.index.into(),
            i.title.into(),
            i.body.into(),
            i.poster_id.into(),
            i.now.into(),
        ])
        .returning_col(Issues::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// An issue with its poster and, for grant submissions, its attribution.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct IssueRow {
    pub id: i64,
    pub repository_id: i64,
    pub issue_index: i64,
    pub title: String,
    pub body: String,
    pub poster_id: i64,
    pub poster_login: String,
    pub created_at: String,
    pub grant_id: Option<i64>,
    pub request_key: Option<String>,
}

fn select_issue() -> SelectStatement {
    let i = Issues::Table;
    Query::select()
        .columns([
            (i, Issues::Id),
            (i, Issues::RepositoryId),
            (i, Issues::IssueIndex),
            (i, Issues::Title),
            (i, Issues::Body),
            (i, Issues::PosterId),
            (i, Issues::CreatedAt),
        ])
        .expr_as(Expr::col((Users::Table, Users::Login)), "poster_login")
        .column((Submissions::Table, Submissions::GrantId))
        .column((Submissions::Table, Submissions::RequestKey))
        .from(i)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id)).equals((i, Issues::PosterId)),
        )
        .join(
            JoinType::LeftJoin,
            Submissions::Table,
            Expr::col((Submissions::Table, Submissions::IssueId)).equals((i, Issues::Id)),
        )
        .to_owned()
}

/// Finds an issue by repository and index.
pub async fn issue_by_index(
    tx: &mut Tx,
    repository_id: i64,
    index: i64,
) -> StoreResult<Option<IssueRow>> {
    let q = select_issue()
        .and_where(Expr::col((Issues::Table, Issues::RepositoryId)).eq(repository_id))
        .and_where(Expr::col((Issues::Table, Issues::IssueIndex)).eq(index))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Finds an issue by id.
pub async fn issue_by_id(tx: &mut Tx, id: i64) -> StoreResult<Option<IssueRow>> {
    let q = select_issue()
        .and_where(Expr::col((Issues::Table, Issues::Id)).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// One page of a repository's issues by index, and the total.
pub async fn list_issues(
    tx: &mut Tx,
    repository_id: i64,
    limit: u64,
    offset: u64,
) -> StoreResult<(Vec<IssueRow>, i64)> {
    let count = Query::select()
        .expr(Expr::col(Issues::Id).count())
        .from(Issues::Table)
        .and_where(Expr::col(Issues::RepositoryId).eq(repository_id))
        .to_owned();
    let total = tx.fetch_one::<(i64,)>(&count).await?.0;
    let q = select_issue()
        .and_where(Expr::col((Issues::Table, Issues::RepositoryId)).eq(repository_id))
        .order_by((Issues::Table, Issues::IssueIndex), Order::Asc)
        .limit(limit)
        .offset(offset)
        .to_owned();
    Ok((tx.fetch_all(&q).await?, total))
}

/// Deletes an issue; its receipts keep their historical copy.
pub async fn delete_issue(tx: &mut Tx, id: i64) -> StoreResult<u64> {
    let q = Query::delete()
        .from_table(Issues::Table)
        .and_where(Expr::col(Issues::Id).eq(id))
        .to_owned();
    tx.execute(&q).await
}

/// A receipt of an issue, with its grant as it stands.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ReceiptOfIssue {
    pub request_key: String,
    pub grant_id: i64,
    pub repository_id: i64,
    pub state: String,
    pub state_revision: i64,
    pub proposal_digest: String,
}

/// The receipts whose issue is `issue_id`, oldest first.
pub async fn receipts_of_issue(tx: &mut Tx, issue_id: i64) -> StoreResult<Vec<ReceiptOfIssue>> {
    let (s, g) = (Submissions::Table, Grants::Table);
    let q = Query::select()
        .column((s, Submissions::RequestKey))
        .column((s, Submissions::GrantId))
        .columns([
            (g, Grants::RepositoryId),
            (g, Grants::State),
            (g, Grants::StateRevision),
            (g, Grants::ProposalDigest),
        ])
        .from(s)
        .inner_join(
            g,
            Expr::col((g, Grants::Id)).equals((s, Submissions::GrantId)),
        )
        .and_where(Expr::col((s, Submissions::IssueId)).eq(issue_id))
        .order_by((s, Submissions::Id), sea_query::Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// Moves an issue to another repository under a new index.
pub async fn move_issue(tx: &mut Tx, id: i64, repository_id: i64, index: i64) -> StoreResult<u64> {
    let q = Query::update()
        .table(Issues::Table)
        .value(Issues::RepositoryId, repository_id)
        .value(Issues::IssueIndex, index)
        .and_where(Expr::col(Issues::Id).eq(id))
        .to_owned();
    tx.execute(&q).await
}

/// A receipt, with where its issue is now (if it still exists).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct SubmissionRow {
    pub id: i64,
    pub grant_id: i64,
    pub request_key: String,
    pub content_digest: String,
    pub proposal_digest: String,
    pub agent_id: i64,
    pub agent_login: String,
    pub issue_id: i64,
    pub issue_index: i64,
    pub repository_id: i64,
    pub repository_full_name: String,
    pub issue_url: String,
    pub evaluation_id: Option<i64>,
    pub created_at: String,
    pub current_repository_id: Option<i64>,
    pub current_index: Option<i64>,
    pub evaluation_phase: Option<String>,
    pub evaluation_status: Option<String>,
    pub evaluation_snapshot_id: Option<i64>,
}

fn select_submission() -> SelectStatement {
    let s = Submissions::Table;
    Query::select()
        .columns([
            (s, Submissions::Id),
            (s, Submissions::GrantId),
            (s, Submissions::RequestKey),
            (s, Submissions::ContentDigest),
            (s, Submissions::ProposalDigest),
            (s, Submissions::AgentId),
            (s, Submissions::IssueId),
            (s, Submissions::IssueIndex),
            (s, Submissions::RepositoryId),
            (s, Submissions::RepositoryFullName),
            (s, Submissions::IssueUrl),
            (s, Submissions::EvaluationId),
            (s, Submissions::CreatedAt),
        ])
        .expr_as(Expr::col((Users::Table, Users::Login)), "agent_login")
        .expr_as(
            Expr::col((Issues::Table, Issues::RepositoryId)),
            "current_repository_id",
        )
        .expr_as(
            Expr::col((Issues::Table, Issues::IssueIndex)),
            "current_index",
        )
        .expr_as(
            Expr::col(("ae", AdmissionEvaluations::Phase)),
            "evaluation_phase",
        )
        .expr_as(
            Expr::col(("ae", AdmissionEvaluations::Status)),
            "evaluation_status",
        )
        .expr_as(
            Expr::col(("ae", AdmissionEvaluations::SnapshotId)),
            "evaluation_snapshot_id",
        )
        .from(s)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id)).equals((s, Submissions::AgentId)),
        )
        .join(
            JoinType::LeftJoin,
            Issues::Table,
            Expr::col((Issues::Table, Issues::Id)).equals((s, Submissions::IssueId)),
        )
        .join_as(
            JoinType::LeftJoin,
            AdmissionEvaluations::Table,
            "ae",
            Expr::col(("ae", AdmissionEvaluations::Id)).equals((s, Submissions::EvaluationId)),
        )
        .to_owned()
}

/// Finds a grant's receipt by request key.
pub async fn submission_by_key(
    tx: &mut Tx,
    grant_id: i64,
    key: &str,
) -> StoreResult<Option<SubmissionRow>> {
    let q = select_submission()
        .and_where(Expr::col((Submissions::Table, Submissions::GrantId)).eq(grant_id))
        .and_where(Expr::col((Submissions::Table, Submissions::RequestKey)).eq(key))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// A grant's receipts, oldest first.
pub async fn submissions_of_grant(tx: &mut Tx, grant_id: i64) -> StoreResult<Vec<SubmissionRow>> {
    let q = select_submission()
        .and_where(Expr::col((Submissions::Table, Submissions::GrantId)).eq(grant_id))
        .order_by((Submissions::Table, Submissions::Id), Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

pub(super) const RECEIPT_COLUMNS: [Submissions; 13] = [
    Submissions::GrantId,
    Submissions::RequestKey,
    Submissions::ContentDigest,
    Submissions::ProposalDigest,
    Submissions::AgentId,
    Submissions::IssueId,
    Submissions::IssueIndex,
    Submissions::RepositoryId,
    Submissions::RepositoryFullName,
    Submissions::IssueUrl,
    Submissions::EvaluationId,
    Submissions::CreatedAt,
    Submissions::CallId,
];

pub(super) const ISSUE_COLUMNS: [Issues; 6] = [
    Issues::RepositoryId,
    Issues::IssueIndex,
    Issues::Title,
    Issues::Body,
    Issues::PosterId,
    Issues::CreatedAt,
];

/// The bump of a repository's issue counter (`next_issue_index + 1`).
pub(super) fn bump_index(repository_id: impl Into<Expr>) -> UpdateStatement {
    Query::update()
        .table(Repositories::Table)
        .value(
            Repositories::NextIssueIndex,
            Expr::col(Repositories::NextIssueIndex).add(1),
        )
        .and_where(Expr::col(Repositories::Id).eq(repository_id.into()))
        .to_owned()
}
