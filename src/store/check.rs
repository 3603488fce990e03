//! The receipt invariants `writ check` verifies (quality.md's crash
//! harness invariants that the database alone can decide): each query
//! returns the ids of the rows that break one, lowest first, at most
//! [`SHOWN`].

use sea_query::{Alias, Expr, ExprTrait, Func, Iden, JoinType, Order, Query, SelectStatement};

use super::schema::{AdmissionEvaluations, Grants, Issues, Repositories, Submissions};
use super::{StoreResult, Tx};

/// The most offending ids a check returns.
pub const SHOWN: u64 = 100;

/// One invariant: its name and the statement that finds its offenders.
pub struct Invariant {
    /// What holds when the statement finds nothing.
    pub name: &'static str,
    /// What the offending ids are ids of.
    pub of: &'static str,
    query: fn() -> SelectStatement,
}

/// Every invariant, in the order `writ check` prints them.
pub const INVARIANTS: [Invariant; 5] = [
    Invariant {
        name: "every receipt's issue exists at its repository and index, posted by its agent",
        of: "receipt",
        query: receipt_without_issue,
    },
    Invariant {
        name: "every issue created by a submission has exactly one receipt",
        of: "issue",
        query: issue_with_receipts,
    },
    Invariant {
        name: "every receipt has its handoff evaluation, of its grant",
        of: "receipt",
        query: receipt_without_evaluation,
    },
    Invariant {
        name: "each grant's submission_count equals its receipts",
        of: "grant",
        query: grant_miscounted,
    },
    Invariant {
        name: "each repository's next issue index is past all its issues",
        of: "repository",
        query: repository_behind,
    },
];

/// The ids of the rows that break `invariant`.
pub async fn offenders(tx: &mut Tx, invariant: &Invariant) -> StoreResult<Vec<i64>> {
    let mut q = (invariant.query)();
    q.limit(SHOWN);
    let rows: Vec<(i64,)> = tx.fetch_all(&q).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Receipts whose row of `table` (its `id` column equal to the receipt's
/// `link`) is missing, or where `differs` holds.
fn receipts_whose<T: Iden + Copy + 'static>(
    table: T,
    id: T,
    link: Submissions,
    differs: Expr,
) -> SelectStatement {
    let s = Submissions::Table;
    Query::select()
        .column((s, Submissions::Id))
        .from(s)
        .join(
            JoinType::LeftJoin,
            table,
            Expr::col((table, id)).equals((s, link)),
        )
        .cond_where(Expr::col((table, id)).is_null().or(differs))
        .order_by((s, Submissions::Id), Order::Asc)
        .to_owned()
}

fn receipt_without_issue() -> SelectStatement {
    let (s, i) = (Submissions::Table, Issues::Table);
    receipts_whose(
        i,
        Issues::Id,
        Submissions::IssueId,
        Expr::col((i, Issues::RepositoryId))
            .ne(Expr::col((s, Submissions::RepositoryId)))
            .or(Expr::col((i, Issues::IssueIndex)).ne(Expr::col((s, Submissions::IssueIndex))))
            .or(Expr::col((i, Issues::PosterId)).ne(Expr::col((s, Submissions::AgentId)))),
    )
}

fn issue_with_receipts() -> SelectStatement {
    Query::select()
        .column(Submissions::IssueId)
        .from(Submissions::Table)
        .group_by_col(Submissions::IssueId)
        .and_having(Expr::col(Submissions::Id).count().gt(1))
        .order_by(Submissions::IssueId, Order::Asc)
        .to_owned()
}

fn receipt_without_evaluation() -> SelectStatement {
    let (s, e) = (Submissions::Table, AdmissionEvaluations::Table);
    receipts_whose(
        e,
        AdmissionEvaluations::Id,
        Submissions::EvaluationId,
        Expr::col((e, AdmissionEvaluations::Phase))
            .ne("handoff")
            .or(Expr::col((e, AdmissionEvaluations::GrantId))
                .ne(Expr::col((s, Submissions::GrantId)))),
    )
}

fn grant_miscounted() -> SelectStatement {
    let g = Grants::Table;
    let counts = Query::select()
        .column(Submissions::GrantId)
        .expr_as(Expr::col(Submissions::Id).count(), Alias::new("n"))
        .from(Submissions::Table)
        .group_by_col(Submissions::GrantId)
        .to_owned();
    Query::select()
        .column((g, Grants::Id))
        .from(g)
        .join_subquery(
            JoinType::LeftJoin,
            counts,
            Alias::new("c"),
            Expr::col(("c", Submissions::GrantId)).equals((g, Grants::Id)),
        )
        .and_where(
            Expr::col((g, Grants::SubmissionCount))
                .ne(Func::coalesce([Expr::col(("c", "n")), Expr::val(0)])),
        )
        .order_by((g, Grants::Id), Order::Asc)
        .to_owned()
}

fn repository_behind() -> SelectStatement {
    let (r, i) = (Repositories::Table, Issues::Table);
    Query::select()
        .column((r, Repositories::Id))
        .from(r)
        .join(
            JoinType::InnerJoin,
            i,
            Expr::col((i, Issues::RepositoryId)).equals((r, Repositories::Id)),
        )
        .group_by_columns([(r, Repositories::Id), (r, Repositories::NextIssueIndex)])
        .and_having(
            Expr::col((i, Issues::IssueIndex))
                .max()
                .gte(Expr::col((r, Repositories::NextIssueIndex))),
        )
        .order_by((r, Repositories::Id), Order::Asc)
        .to_owned()
}

/// A page of receipts with their issues' text, for the content digest
/// check: those with an id above `after`, lowest first.
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
pub struct ReceiptContent {
    pub id: i64,
    pub proposal_digest: String,
    pub content_digest: String,
    pub title: String,
    pub body: String,
}

/// Up to `limit` receipts after `after` with their issues' title and body
/// (receipts whose issue is missing are the first invariant's).
pub async fn receipt_contents(
    tx: &mut Tx,
    after: i64,
    limit: u64,
) -> StoreResult<Vec<ReceiptContent>> {
    let (s, i) = (Submissions::Table, Issues::Table);
    let q = Query::select()
        .column((s, Submissions::Id))
        .column((s, Submissions::ProposalDigest))
        .column((s, Submissions::ContentDigest))
        .column((i, Issues::Title))
        .column((i, Issues::Body))
        .from(s)
        .join(
            JoinType::InnerJoin,
            i,
            Expr::col((i, Issues::Id)).equals((s, Submissions::IssueId)),
        )
        .and_where(Expr::col((s, Submissions::Id)).gt(after))
        .order_by((s, Submissions::Id), Order::Asc)
        .limit(limit)
        .to_owned();
    tx.fetch_all(&q).await
}
