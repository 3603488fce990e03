//! The writes of a successful handoff: the handoff evaluation, the next
//! issue index, the issue, the receipt, the grant's counter, the
//! `submission.created` event and, for an audited call, the call's outcome. One statement on PostgreSQL (data-
//! modifying `WITH`s chained by `RETURNING`), a sequence of statements on
//! SQLite (each runs where it is asked for, see `store::sqlite`). Every
//! statement is a [`Shape`]: rendered once, bound to each handoff's values.

use sea_query::{
    BinOper, CommonTableExpression, Expr, ExprTrait, InsertStatement, Query, SelectStatement,
    SubQueryStatement, UpdateStatement, WithClause, WithQuery,
};

use super::admission::{NewEvaluation, evaluation_insert, evaluation_values};
use super::audit::{CallEnd, CallEndStatement, EndKind, Outcome, ToolCalls};
use super::events::Events;
use super::issues::{ISSUE_COLUMNS, RECEIPT_COLUMNS, bump_index};
use super::schema::{AdmissionEvaluations, Grants, Issues, Repositories, Submissions};
use super::shape::{Args, Shape, slot};
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
    /// The grant's state and revision (a submission changes neither).
    pub grant_state: &'a str,
    pub state_revision: i64,
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

/// The handoff's values, by slot name: the evaluation's (among them
/// `grant_id`, `proposal_digest` and `now`, which the other statements use
/// too) and the issue's, the receipt's and the counter's.
fn values(h: &Handoff<'_>) -> Args {
    let mut values = evaluation_values(&h.evaluation);
    values.extend([
        ("title", h.title.into()),
        ("body", h.body.into()),
        ("request_key", h.request_key.into()),
        ("content_digest", h.content_digest.into()),
        ("agent_id", h.agent_id.into()),
        ("repository_id", h.repository_id.into()),
        ("repository_full_name", h.repository_full_name.into()),
        ("issue_url_prefix", h.issue_url_prefix.into()),
        ("submission_count", h.submission_count.into()),
        ("grant_state", h.grant_state.into()),
        ("state_revision", h.state_revision.into()),
    ]);
    values
}

/// The `data` of a `submission.created` event whose issue got `index`.
pub fn created_data(request_key: &str, index: i64) -> String {
    serde_json::json!({
        "request_key": request_key,
        "issue_index": index,
        "receipt_status": "submitted",
    })
    .to_string()
}

/// Writes a handoff. The grant row must be locked by the caller. A unique
/// violation on `(grant_id, request_key)` is returned as is.
pub async fn hand_off(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    let written = match tx.backend() {
        Backend::Postgres => hand_off_postgres(tx, h).await,
        Backend::Sqlite => hand_off_sqlite(tx, h).await,
    }?;
    tx.note_event();
    Ok(written)
}

/// The `submission.created` event's insert, its `data` and the rest of its
/// row read from `source`.
fn event_from(data: Expr, source: SelectStatement) -> InsertStatement {
    let mut select = source;
    select
        .expr(Expr::val("submission.created"))
        .expr(slot("now"))
        .expr(slot("agent_id"))
        .expr(slot("repository_id"))
        .expr(slot("grant_id"))
        .expr(slot("grant_state"))
        .expr(slot("state_revision"))
        .expr(slot("proposal_digest"))
        .expr(data);
    Query::insert()
        .into_table(Events::Table)
        .columns([
            Events::Type,
            Events::OccurredAt,
            Events::ActorId,
            Events::RepositoryId,
            Events::GrantId,
            Events::State,
            Events::StateRevision,
            Events::ProposalDigest,
            Events::Data,
        ])
        .select_from(select)
        .expect("nine columns, nine values")
        .returning_col(Events::Id)
        .to_owned()
}

/// The webhook deliveries of the `submission.created` event `event`.
fn deliveries(event: Expr) -> InsertStatement {
    super::webhooks::enqueue(
        event,
        Expr::val("submission.created"),
        slot("repository_id"),
        slot("now"),
    )
}

/// The issue insert, its index read from `index_source` (a table with the
/// repository's `next_issue_index` after the bump).
fn issue_from(index: Expr, source: SelectStatement) -> InsertStatement {
    let mut select = source;
    select
        .expr(slot("repository_id"))
        .expr(index)
        .expr(slot("title"))
        .expr(slot("body"))
        .expr(slot("agent_id"))
        .expr(slot("now"));
    Query::insert()
        .into_table(Issues::Table)
        .columns(ISSUE_COLUMNS)
        .select_from(select)
        .expect("six columns, six values")
        .returning(Query::returning().columns([Issues::Id, Issues::IssueIndex]))
        .to_owned()
}

/// The receipt insert, its issue, evaluation and audit record read from
/// `source`.
fn receipt_from(
    issue: (Expr, Expr),
    evaluation: Expr,
    call: Expr,
    source: SelectStatement,
) -> InsertStatement {
    let (issue_id, issue_index) = issue;
    let mut select = source;
    select
        .expr(slot("grant_id"))
        .expr(slot("request_key"))
        .expr(slot("content_digest"))
        .expr(slot("proposal_digest"))
        .expr(slot("agent_id"))
        .expr(issue_id)
        .expr(issue_index.clone())
        .expr(slot("repository_id"))
        .expr(slot("repository_full_name"))
        .expr(slot("issue_url_prefix").binary(BinOper::Custom("||"), issue_index))
        .expr(evaluation)
        .expr(slot("now"))
        .expr(call);
    Query::insert()
        .into_table(Submissions::Table)
        .columns(RECEIPT_COLUMNS)
        .select_from(select)
        .expect("thirteen columns, thirteen values")
        .returning_col(Submissions::Id)
        .to_owned()
}

fn bump_counter() -> UpdateStatement {
    Query::update()
        .table(Grants::Table)
        .value(Grants::SubmissionCount, slot("submission_count"))
        .value(Grants::UpdatedAt, slot("now"))
        .and_where(Expr::col(Grants::Id).eq(slot("grant_id")))
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

/// The event's insert inside the PostgreSQL statement: its `data` built
/// there, from the issue's index.
fn created_event() -> InsertStatement {
    let data = Expr::cust_with_exprs(
        "json_build_object('request_key', $1::text, 'issue_index', $2, \
         'receipt_status', 'submitted')::text",
        [slot("request_key"), Expr::col(("iss", Issues::IssueIndex))],
    );
    event_from(data, Query::select().from("iss").to_owned())
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
    let mut source = Query::select().from("iss").from("ev").to_owned();
    let call = match audit {
        Some(_) => {
            source.from("au");
            Expr::col(("au", ToolCalls::Id))
        }
        None => Expr::val(Option::<i64>::None),
    };
    let receipt = receipt_from(
        (
            Expr::col(("iss", Issues::Id)),
            Expr::col(("iss", Issues::IssueIndex)),
        ),
        Expr::col(("ev", AdmissionEvaluations::Id)),
        call,
        source,
    );
    let mut with = WithClause::new();
    if let Some(kind) = audit {
        with.cte(cte("au", CallEndStatement::shaped(kind).into_subquery()));
    }
    with.cte(cte("ev", evaluation_insert().into()))
        .cte(cte(
            "ix",
            bump_index(slot("repository_id"))
                .returning_col(Repositories::NextIssueIndex)
                .to_owned()
                .into(),
        ))
        .cte(cte("iss", issue.into()))
        .cte(cte("sub", receipt.into()))
        .cte(cte(
            "g",
            bump_counter().returning_col(Grants::Id).to_owned().into(),
        ))
        .cte(cte("evt", created_event().into()))
        .cte(cte("dl", {
            let event = Query::select().column(Events::Id).from("evt").to_owned();
            deliveries(Expr::SubQuery(None, Box::new(event.into()))).into()
        }));
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
    select.with(with)
}

async fn hand_off_postgres(tx: &mut Tx, h: &Handoff<'_>) -> StoreResult<HandedOff> {
    static SHAPES: [Shape; 3] = [const { Shape::new() }; 3];
    let mut args = values(h);
    if let Some((end, outcome)) = h.audit {
        args.extend(end.values(outcome));
    }
    let kind = h.audit.map(|(end, _)| end.kind());
    let q = SHAPES[audit_index(h)].bind(Backend::Postgres, || hand_off_statement(kind), &args);
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
    static EVENT: Shape = Shape::new();
    static DELIVERIES: Shape = Shape::new();
    static AUDIT: [Shape; 2] = [const { Shape::new() }; 2];
    const SQLITE: Backend = Backend::Sqlite;
    let mut args = values(h);
    let q = EVALUATION_INSERT.bind(SQLITE, evaluation_insert, &args);
    let (evaluation_id,): (i64,) = tx.fetch_one(&q).await?;
    let q = BUMP_INDEX.bind(SQLITE, || bump_index(slot("repository_id")), &args);
    tx.execute(&q).await?;
    let issue = || {
        issue_from(
            Expr::col(Repositories::NextIssueIndex).sub(1),
            Query::select()
                .from(Repositories::Table)
                .and_where(Expr::col(Repositories::Id).eq(slot("repository_id")))
                .to_owned(),
        )
    };
    let q = ISSUE.bind(SQLITE, issue, &args);
    let (issue_id, issue_index): (i64, i64) = tx.fetch_one(&q).await?;
    // The call's record first: the receipt keeps its id.
    let call_id = match h.audit {
        Some((end, outcome)) => {
            let kind = end.kind();
            let shape = &AUDIT[usize::from(kind == EndKind::Complete)];
            let q = shape.bind(
                SQLITE,
                || CallEndStatement::shaped(kind),
                &end.values(outcome),
            );
            let (id,) = tx
                .fetch_optional::<(i64,)>(&q)
                .await?
                .ok_or(StoreError::NotFound)?;
            Some(id)
        }
        None => None,
    };
    args.extend([
        ("issue_id", issue_id.into()),
        ("issue_index", issue_index.into()),
        ("evaluation_id", evaluation_id.into()),
        ("call_id", call_id.into()),
    ]);
    let receipt = || {
        receipt_from(
            (slot("issue_id"), slot("issue_index")),
            slot("evaluation_id"),
            slot("call_id"),
            Query::select().to_owned(),
        )
    };
    let q = RECEIPT.bind(SQLITE, receipt, &args);
    let (submission_id,): (i64,) = tx.fetch_one(&q).await?;
    let q = COUNTER.bind(SQLITE, bump_counter, &args);
    if tx.execute(&q).await? != 1 {
        return Err(StoreError::NotFound);
    }
    args.push((
        "event_data",
        created_data(h.request_key, issue_index).into(),
    ));
    let event = || event_from(slot("event_data"), Query::select().to_owned());
    let q = EVENT.bind(SQLITE, event, &args);
    let (event_id,): (i64,) = tx.fetch_one(&q).await?;
    args.push(("event_id", event_id.into()));
    let q = DELIVERIES.bind(SQLITE, || deliveries(slot("event_id")), &args);
    tx.execute(&q).await?;
    Ok(HandedOff {
        evaluation_id,
        issue_id,
        issue_index,
        submission_id,
    })
}
