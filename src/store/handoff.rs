//! The writes of a successful handoff: the handoff evaluation, the next
//! issue index, the issue, the receipt, the grant's counter and, for an
//! audited call, the call's outcome. One statement on PostgreSQL (data-
//! modifying `WITH`s chained by `RETURNING`), a sequence of statements on
//! SQLite (each runs where it is asked for, see `store::sqlite`). Every
//! statement is a [`Shape`]: rendered once, bound to each handoff's values.

use sea_query::{
    BinOper, CommonTableExpression, Expr, ExprTrait, InsertStatement, Query, SelectStatement,
    SubQueryStatement, UpdateStatement, Value, WithClause, WithQuery,
};

use super::admission::{EVALUATION_VALUES, NewEvaluation, evaluation_insert, evaluation_values};
use super::audit::{CallEnd, CallEndStatement, EndKind, Outcome};
use super::issues::{ISSUE_COLUMNS, RECEIPT_COLUMNS, bump_index};
use super::schema::{AdmissionEvaluations, Grants, Issues, Repositories, Submissions};
use super::shape::{Shape, slot};
use super::{Backend, StoreError, StoreResult, Tx};

/// Everything a successful handoff writes (see the module's doc).
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

// The slots of a handoff's values (see [`values`]).
const EVALUATION: usize = 0; // the evaluation's values: 0..=12
const GRANT: usize = EVALUATION;
const PROPOSAL_DIGEST: usize = EVALUATION + 9;
const NOW: usize = EVALUATION + EVALUATION_VALUES - 1;
const TITLE: usize = 13;
const BODY: usize = 14;
const KEY: usize = 15;
const CONTENT: usize = 16;
const AGENT: usize = 17;
const REPOSITORY: usize = 18;
const FULL_NAME: usize = 19;
const URL_PREFIX: usize = 20;
const COUNT: usize = 21;
/// The first slot after the handoff's own.
const NEXT: usize = 22;

/// The handoff's values, in slot order.
fn values(h: &Handoff<'_>) -> Vec<Value> {
    let mut values = evaluation_values(&h.evaluation);
    values.extend([
        h.title.into(),
        h.body.into(),
        h.request_key.into(),
        h.content_digest.into(),
        h.agent_id.into(),
        h.repository_id.into(),
        h.repository_full_name.into(),
        h.issue_url_prefix.into(),
        h.submission_count.into(),
    ]);
    values
}

/// Writes a handoff. The grant row must be locked by the caller. A unique
/// violation on `(grant_id, request_key)` is returned as is.
pub async fn hand_off(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    match tx.backend() {
        Backend::Postgres => hand_off_postgres(tx, h).await,
        Backend::Sqlite => hand_off_sqlite(tx, h).await,
    }
}

/// The issue insert, its index read from `index_source` (a table with the
/// repository's `next_issue_index` after the bump).
fn issue_from(index: Expr, source: SelectStatement) -> InsertStatement {
    let mut select = source;
    select
        .expr(slot(REPOSITORY))
        .expr(index)
        .expr(slot(TITLE))
        .expr(slot(BODY))
        .expr(slot(AGENT))
        .expr(slot(NOW));
    Query::insert()
        .into_table(Issues::Table)
        .columns(ISSUE_COLUMNS)
        .select_from(select)
        .expect("six columns, six values")
        .returning(Query::returning().columns([Issues::Id, Issues::IssueIndex]))
        .to_owned()
}

/// The receipt insert, its issue and evaluation read from `source`.
fn receipt_from(issue: (Expr, Expr), evaluation: Expr, source: SelectStatement) -> InsertStatement {
    let (issue_id, issue_index) = issue;
    let mut select = source;
    select
        .expr(slot(GRANT))
        .expr(slot(KEY))
        .expr(slot(CONTENT))
        .expr(slot(PROPOSAL_DIGEST))
        .expr(slot(AGENT))
        .expr(issue_id)
        .expr(issue_index.clone())
        .expr(slot(REPOSITORY))
        .expr(slot(FULL_NAME))
        .expr(slot(URL_PREFIX).binary(BinOper::Custom("||"), issue_index))
        .expr(evaluation)
        .expr(slot(NOW));
    Query::insert()
        .into_table(Submissions::Table)
        .columns(RECEIPT_COLUMNS)
        .select_from(select)
        .expect("twelve columns, twelve values")
        .returning_col(Submissions::Id)
        .to_owned()
}

fn bump_counter() -> UpdateStatement {
    Query::update()
        .table(Grants::Table)
        .value(Grants::SubmissionCount, slot(COUNT))
        .value(Grants::UpdatedAt, slot(NOW))
        .and_where(Expr::col(Grants::Id).eq(slot(GRANT)))
        .to_owned()
}

/// The audit's shape variant: none, or the kind of its statement.
fn audit_index(h: &Handoff<'_>) -> usize {
    match h.audit.map(|(end, _)| end.kind()) {
        None => 0,
        Some(EndKind::Insert) => 1,
        Some(EndKind::Complete) => 2,
    }
}

fn hand_off_statement(audit: Option<EndKind>) -> WithQuery {
    let cte = |name: &str, query: SubQueryStatement| {
        CommonTableExpression::new()
            .query(query)
            .table_name(name.to_owned())
            .to_owned()
    };
    let next = Expr::col(("ix", Repositories::NextIssueIndex)).sub(1);
    let issue = issue_from(next, Query::select().from("ix").to_owned());
    let receipt = receipt_from(
        (
            Expr::col(("iss", Issues::Id)),
            Expr::col(("iss", Issues::IssueIndex)),
        ),
        Expr::col(("ev", AdmissionEvaluations::Id)),
        Query::select().from("iss").from("ev").to_owned(),
    );
    let mut with = WithClause::new();
    with.cte(cte("ev", evaluation_insert(EVALUATION).into()))
        .cte(cte(
            "ix",
            bump_index(slot(REPOSITORY))
                .returning_col(Repositories::NextIssueIndex)
                .to_owned()
                .into(),
        ))
        .cte(cte("iss", issue.into()))
        .cte(cte("sub", receipt.into()))
        .cte(cte(
            "g",
            bump_counter().returning_col(Grants::Id).to_owned().into(),
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
    if let Some(kind) = audit {
        with.cte(cte(
            "au",
            CallEndStatement::shaped(kind, NEXT).into_subquery(),
        ));
        select.from("au");
    }
    select.with(with)
}

async fn hand_off_postgres(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    static SHAPES: [Shape; 3] = [const { Shape::new() }; 3];
    let mut args = values(h);
    if let Some((end, outcome)) = h.audit {
        args.extend(end.values(outcome));
    }
    let kind = h.audit.map(|(end, _)| end.kind());
    let q = SHAPES[audit_index(h)].bind(Backend::Postgres, || hand_off_statement(kind), args);
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
    static EVALUATION_INSERT: Shape = Shape::new();
    static BUMP_INDEX: Shape = Shape::new();
    static ISSUE: Shape = Shape::new();
    static RECEIPT: Shape = Shape::new();
    static COUNTER: Shape = Shape::new();
    static AUDIT: [Shape; 2] = [const { Shape::new() }; 2];
    const SQLITE: Backend = Backend::Sqlite;
    let mut args = values(h);
    let q = EVALUATION_INSERT.bind(SQLITE, || evaluation_insert(EVALUATION), args.clone());
    let (evaluation_id,): (i64,) = tx.fetch_one(&q).await?;
    let q = BUMP_INDEX.bind(SQLITE, || bump_index(slot(REPOSITORY)), args.clone());
    tx.execute(&q).await?;
    let issue = || {
        issue_from(
            Expr::col(Repositories::NextIssueIndex).sub(1),
            Query::select()
                .from(Repositories::Table)
                .and_where(Expr::col(Repositories::Id).eq(slot(REPOSITORY)))
                .to_owned(),
        )
    };
    let q = ISSUE.bind(SQLITE, issue, args.clone());
    let (issue_id, issue_index): (i64, i64) = tx.fetch_one(&q).await?;
    args.extend([issue_id.into(), issue_index.into(), evaluation_id.into()]);
    let receipt = || {
        receipt_from(
            (slot(NEXT), slot(NEXT + 1)),
            slot(NEXT + 2),
            Query::select().to_owned(),
        )
    };
    let q = RECEIPT.bind(SQLITE, receipt, args.clone());
    let (submission_id,): (i64,) = tx.fetch_one(&q).await?;
    let q = COUNTER.bind(SQLITE, bump_counter, args);
    if tx.execute(&q).await? != 1 {
        return Err(StoreError::NotFound);
    }
    if let Some((end, outcome)) = h.audit {
        let kind = end.kind();
        let shape = &AUDIT[usize::from(kind == EndKind::Complete)];
        let q = shape.bind(
            SQLITE,
            || CallEndStatement::shaped(kind, 0),
            end.values(outcome),
        );
        if tx.fetch_optional::<(i64,)>(&q).await?.is_none() {
            return Err(StoreError::NotFound);
        }
    }
    Ok(HandedOff {
        evaluation_id,
        issue_id,
        issue_index,
        submission_id,
    })
}
