//! Issues and submission receipts.

use sea_query::{
    BinOper, CommonTableExpression, Expr, ExprTrait, InsertStatement, JoinType, Order, Query,
    SelectStatement, SubQueryStatement, UpdateStatement, WithClause,
};

use super::admission::{NewEvaluation, evaluation_insert};
use super::audit::{CallEnd, CallEndStatement, Outcome};
use super::schema::{AdmissionEvaluations, Grants, Issues, Repositories, Submissions, Users};
use super::{Backend, StoreResult, Tx};

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

/// Everything a successful handoff writes, in one round trip: the handoff
/// evaluation, the next issue index, the issue, the receipt, the grant's
/// counter and, for an audited call, the call's outcome.
pub struct Handoff<'a> {
    /// The handoff evaluation (status allowed or warning).
    pub evaluation: NewEvaluation<'a>,
    /// The issue's title, stored byte-for-byte.
    pub title: &'a str,
    /// The issue's body, stored byte-for-byte.
    pub body: &'a str,
    /// The receipt's request key.
    pub request_key: &'a str,
    /// The receipt's content digest.
    pub content_digest: &'a str,
    /// The poster of the issue and agent of the receipt.
    pub agent_id: i64,
    /// Where the issue goes.
    pub repository_id: i64,
    /// `owner/name` at submission time.
    pub repository_full_name: &'a str,
    /// The issue URL without its index (`…/owner/name/issues/`).
    pub issue_url_prefix: &'a str,
    /// The grant's counter after this submission.
    pub submission_count: i64,
    /// The audited call's record and outcome, if the call is audited.
    pub audit: Option<(CallEnd<'a>, Outcome<'a>)>,
}

/// The ids a [`hand_off`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct HandedOff {
    pub evaluation_id: i64,
    pub issue_id: i64,
    pub issue_index: i64,
    pub submission_id: i64,
}

const RECEIPT_COLUMNS: [Submissions; 12] = [
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
];

const ISSUE_COLUMNS: [Issues; 6] = [
    Issues::RepositoryId,
    Issues::IssueIndex,
    Issues::Title,
    Issues::Body,
    Issues::PosterId,
    Issues::CreatedAt,
];

/// Writes a handoff (see [`Handoff`]) with one statement on PostgreSQL
/// (data-modifying `WITH`) and one script on SQLite (one hand-off to the
/// connection's thread). The grant row must be locked by the caller. A
/// unique violation on `(grant_id, request_key)` is returned as is.
pub async fn hand_off(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    match tx.backend() {
        Backend::Postgres => hand_off_postgres(tx, h).await,
        Backend::Sqlite => hand_off_sqlite(tx, h).await,
    }
}

/// The issue insert, its index read from `index_source` (a table with the
/// repository's `next_issue_index` after the bump).
fn issue_from(h: &Handoff<'_>, index: Expr, source: SelectStatement) -> InsertStatement {
    let mut select = source;
    select
        .expr(Expr::val(h.repository_id))
        .expr(index)
        .expr(Expr::val(h.title))
        .expr(Expr::val(h.body))
        .expr(Expr::val(h.agent_id))
        .expr(Expr::val(h.evaluation.now));
    Query::insert()
        .into_table(Issues::Table)
        .columns(ISSUE_COLUMNS)
        .select_from(select)
        .expect("six columns, six values")
        .returning(Query::returning().columns([Issues::Id, Issues::IssueIndex]))
        .to_owned()
}

/// The receipt insert, its issue and evaluation read from `source`.
fn receipt_from(
    h: &Handoff<'_>,
    issue: (Expr, Expr),
    evaluation: Expr,
    source: SelectStatement,
) -> InsertStatement {
    let (issue_id, issue_index) = issue;
    let mut select = source;
    select
        .expr(Expr::val(h.evaluation.grant_id))
        .expr(Expr::val(h.request_key))
        .expr(Expr::val(h.content_digest))
        .expr(Expr::val(h.evaluation.proposal_digest))
        .expr(Expr::val(h.agent_id))
        .expr(issue_id)
        .expr(issue_index.clone())
        .expr(Expr::val(h.repository_id))
        .expr(Expr::val(h.repository_full_name))
        .expr(Expr::val(h.issue_url_prefix).binary(BinOper::Custom("||"), issue_index))
        .expr(evaluation)
        .expr(Expr::val(h.evaluation.now));
    Query::insert()
        .into_table(Submissions::Table)
        .columns(RECEIPT_COLUMNS)
        .select_from(select)
        .expect("twelve columns, twelve values")
        .returning_col(Submissions::Id)
        .to_owned()
}

fn bump_index(repository_id: i64) -> UpdateStatement {
    Query::update()
        .table(Repositories::Table)
        .value(
            Repositories::NextIssueIndex,
            Expr::col(Repositories::NextIssueIndex).add(1),
        )
        .and_where(Expr::col(Repositories::Id).eq(repository_id))
        .to_owned()
}

fn bump_counter(h: &Handoff<'_>) -> UpdateStatement {
    Query::update()
        .table(Grants::Table)
        .value(Grants::SubmissionCount, h.submission_count)
        .value(Grants::UpdatedAt, h.evaluation.now)
        .and_where(Expr::col(Grants::Id).eq(h.evaluation.grant_id))
        .to_owned()
}

async fn hand_off_postgres(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    let cte = |name: &str, query: SubQueryStatement| {
        CommonTableExpression::new()
            .query(query)
            .table_name(name.to_owned())
            .to_owned()
    };
    let next = Expr::col(("ix", Repositories::NextIssueIndex)).sub(1);
    let issue = issue_from(h, next, Query::select().from("ix").to_owned());
    let receipt = receipt_from(
        h,
        (
            Expr::col(("iss", Issues::Id)),
            Expr::col(("iss", Issues::IssueIndex)),
        ),
        Expr::col(("ev", AdmissionEvaluations::Id)),
        Query::select().from("iss").from("ev").to_owned(),
    );
    let mut with = WithClause::new();
    with.cte(cte("ev", evaluation_insert(&h.evaluation).into()))
        .cte(cte(
            "ix",
            bump_index(h.repository_id)
                .returning_col(Repositories::NextIssueIndex)
                .to_owned()
                .into(),
        ))
        .cte(cte("iss", issue.into()))
        .cte(cte("sub", receipt.into()))
        .cte(cte(
            "g",
            bump_counter(h).returning_col(Grants::Id).to_owned().into(),
        ));
    let mut select = Query::select();
    select
        .expr(Expr::col(("ev", AdmissionEvaluations::Id)))
        .expr(Expr::col(("iss", Issues::Id)))
        .expr(Expr::col(("iss", Issues::IssueIndex)))
        .expr(Expr::col(("sub", Submissions::Id)))
        .from("ev")
        .from("iss")
        .from("sub")
        .from("g");
    if let Some((end, outcome)) = h.audit {
        with.cte(cte(
            "au",
            CallEndStatement::new(end, outcome).into_subquery(),
        ));
        select.from("au");
    }
    let q = select.with(with);
    let (evaluation_id, issue_id, issue_index, submission_id) =
        tx.fetch_one::<(i64, i64, i64, i64)>(&q).await?;
    Ok(HandedOff {
        evaluation_id,
        issue_id,
        issue_index,
        submission_id,
    })
}

async fn hand_off_sqlite(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    // Each statement runs on the writer's connection where it is asked for
    // (store::sqlite): one after the other costs no hand-off.
    let (evaluation_id,): (i64,) = tx.fetch_one(&evaluation_insert(&h.evaluation)).await?;
    tx.execute(&bump_index(h.repository_id)).await?;
    let issue = issue_from(
        h,
        Expr::col(Repositories::NextIssueIndex).sub(1),
        Query::select()
            .from(Repositories::Table)
            .and_where(Expr::col(Repositories::Id).eq(h.repository_id))
            .to_owned(),
    );
    let (issue_id, issue_index): (i64, i64) = tx.fetch_one(&issue).await?;
    let receipt = receipt_from(
        h,
        (Expr::val(issue_id), Expr::val(issue_index)),
        Expr::val(evaluation_id),
        Query::select().to_owned(),
    );
    let (submission_id,): (i64,) = tx.fetch_one(&receipt).await?;
    if tx.execute(&bump_counter(h)).await? != 1 {
        return Err(sqlx::Error::RowNotFound);
    }
    if let Some((end, outcome)) = h.audit
        && !CallEndStatement::new(end, outcome).run(tx).await?
    {
        return Err(sqlx::Error::RowNotFound);
    }
    Ok(HandedOff {
        evaluation_id,
        issue_id,
        issue_index,
        submission_id,
    })
}
