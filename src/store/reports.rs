//! Streams rows of the reporting views with constant memory: a task fetches
//! row by row into a bounded channel that the reader drains.

use futures_util::TryStreamExt;
use sea_query::{
    Alias, Expr, ExprTrait, Order, PostgresQueryBuilder, Query, SelectStatement, SqliteQueryBuilder,
};
use sea_query_sqlx::SqlxBinder;
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::mpsc;

use super::{Store, StoreError};

/// How a column's text is typed in JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Text,
    /// An integer.
    Int,
}

/// A reporting view and its documented columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// `report_receipts_v1`
    Receipts,
    /// `report_grants_v1`
    Grants,
    /// `report_admissions_v1`
    Admissions,
    /// `report_tool_calls_v1`
    ToolCalls,
    /// `report_webhook_deliveries_v1`
    WebhookDeliveries,
}

use Kind::{Int, Text};

impl Report {
    /// Every report's name.
    pub const NAMES: [&'static str; 5] = [
        "receipts",
        "grants",
        "admissions",
        "tool-calls",
        "webhook-deliveries",
    ];

    /// Parses a report name (`receipts`, `grants`).
    pub fn parse(name: &str) -> Option<Report> {
        let all = [
            Report::Receipts,
            Report::Grants,
            Report::Admissions,
            Report::ToolCalls,
            Report::WebhookDeliveries,
        ];
        Report::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| all[i])
    }

    /// The view's name.
    pub fn view(self) -> &'static str {
        match self {
            Report::Receipts => "report_receipts_v1",
            Report::Grants => "report_grants_v1",
            Report::Admissions => "report_admissions_v1",
            Report::ToolCalls => "report_tool_calls_v1",
            Report::WebhookDeliveries => "report_webhook_deliveries_v1",
        }
    }

    /// The columns, in view order.
    pub fn columns(self) -> &'static [(&'static str, Kind)] {
        match self {
            Report::Receipts => &[
                ("grant_id", Int),
                ("request_key", Text),
                ("repository", Text),
                ("agent_login", Text),
                ("issuer_login", Text),
                ("approver_login", Text),
                ("issue_id", Int),
                ("issue_index", Int),
                ("issue_url", Text),
                ("outcome", Text),
                ("review_state", Text),
                ("handoff_evaluation_id", Int),
                ("handoff_status", Text),
                ("snapshot_id", Int),
                ("submitted_at", Text),
            ],
            Report::Grants => &[
                ("grant_id", Int),
                ("repository", Text),
                ("agent_login", Text),
                ("issuer_login", Text),
                ("approver_login", Text),
                ("state", Text),
                ("state_revision", Int),
                ("submission_count", Int),
                ("max_submissions", Int),
                ("created_at", Text),
                ("confirmed_at", Text),
                ("approved_at", Text),
                ("revoked_at", Text),
                ("last_admission_status", Text),
            ],
            Report::Admissions => &[
                ("evaluation_id", Int),
                ("grant_id", Int),
                ("phase", Text),
                ("status", Text),
                ("retryable", Int),
                ("blocked_count", Int),
                ("warning_count", Int),
                ("snapshot_id", Int),
                ("catalog_version", Text),
                ("evaluated_at", Text),
                ("repository", Text),
                ("agent_login", Text),
            ],
            Report::ToolCalls => &[
                ("call_id", Int),
                ("called_at", Text),
                ("via", Text),
                ("agent_login", Text),
                ("token_id", Int),
                ("tool", Text),
                ("repository", Text),
                ("decision", Text),
                ("matched_grant", Text),
                ("reason", Text),
                ("rpc_id", Text),
                ("request_id", Text),
                ("arg_names", Text),
                ("native_status", Int),
                ("error_code", Text),
                ("completed_at", Text),
                ("at", Text),
                ("grant_rule_id", Text),
            ],
            Report::WebhookDeliveries => &[
                ("delivery_id", Int),
                ("subscription_id", Int),
                ("event_id", Int),
                ("event_type", Text),
                ("status", Text),
                ("attempts", Int),
                ("last_attempt_at", Text),
                ("last_status_code", Int),
                ("last_error", Text),
                ("delivered_at", Text),
            ],
        }
    }

    fn time_column(self) -> &'static str {
        match self {
            Report::Receipts => "submitted_at",
            Report::Grants => "created_at",
            Report::Admissions => "evaluated_at",
            Report::ToolCalls => "called_at",
            Report::WebhookDeliveries => "last_attempt_at",
        }
    }

    fn order(self) -> &'static [&'static str] {
        match self {
            Report::Receipts => &["submitted_at", "grant_id", "request_key"],
            Report::Grants => &["grant_id"],
            Report::Admissions => &["evaluation_id"],
            Report::ToolCalls => &["call_id"],
            Report::WebhookDeliveries => &["delivery_id"],
        }
    }

    /// Whether the view has this column (the `repo` and `agent` filters
    /// match no row of a view without `repository` or `agent_login`).
    pub fn has(self, column: &str) -> bool {
        self.columns().iter().any(|(name, _)| *name == column)
    }
}

/// Row filters; times compare as the fixed-width UTC text the views hold.
#[derive(Debug, Clone, Default)]
pub struct ReportFilter {
    /// `owner/name`, case-insensitive.
    pub repo: Option<String>,
    /// Agent login, case-insensitive.
    pub agent: Option<String>,
    /// Inclusive lower bound on the view's time column.
    pub since: Option<String>,
    /// Exclusive upper bound on the view's time column.
    pub until: Option<String>,
}

fn query(report: Report, filter: &ReportFilter) -> SelectStatement {
    let mut q = Query::select();
    for (name, _) in report.columns() {
        q.expr_as(Expr::col(*name).cast_as("TEXT"), Alias::new(*name));
    }
    q.from(report.view());
    // A view without the filtered column has no row of that repository
    // or agent.
    if let Some(repo) = &filter.repo {
        match report.has("repository") {
            true => q.and_where(
                sea_query::Func::lower(Expr::col("repository")).eq(repo.to_ascii_lowercase()),
            ),
            false => q.and_where(Expr::val(1).eq(0)),
        };
    }
    if let Some(agent) = &filter.agent {
        match report.has("agent_login") {
            true => q.and_where(
                sea_query::Func::lower(Expr::col("agent_login")).eq(agent.to_ascii_lowercase()),
            ),
            false => q.and_where(Expr::val(1).eq(0)),
        };
    }
    if let Some(since) = &filter.since {
        q.and_where(Expr::col(report.time_column()).gte(since.clone()));
    }
    if let Some(until) = &filter.until {
        q.and_where(Expr::col(report.time_column()).lt(until.clone()));
    }
    // Qualified, so the typed view column sorts, not its text alias.
    for column in report.order() {
        q.order_by((Alias::new(report.view()), Alias::new(*column)), Order::Asc);
    }
    q
}

/// One row: every column as text (NULL as `None`), in view order.
pub type ReportRow = Vec<Option<String>>;

/// Starts streaming a report; rows arrive on the returned bounded channel.
pub fn stream(
    store: &Store,
    report: Report,
    filter: &ReportFilter,
) -> mpsc::Receiver<Result<ReportRow, StoreError>> {
    let (tx, rx) = mpsc::channel(64);
    let q = query(report, filter);
    let width = report.columns().len();
    let store = store.clone();
    tokio::spawn(async move {
        macro_rules! pump {
            ($pool:expr, $builder:expr) => {{
                let (sql, values) = q.build_sqlx($builder);
                let mut rows = sqlx::query_with(AssertSqlSafe(sql), values).fetch($pool);
                loop {
                    let item = match rows.try_next().await {
                        Ok(Some(row)) => (0..width)
                            .map(|i| row.try_get::<Option<String>, _>(i))
                            .collect(),
                        Ok(None) => break,
                        Err(e) => Err(e),
                    }
                    .map_err(StoreError::from);
                    let failed = item.is_err();
                    if tx.send(item).await.is_err() || failed {
                        break;
                    }
                }
            }};
        }
        match &store {
            Store::Sqlite(pool, ..) => pump!(pool, SqliteQueryBuilder),
            Store::Postgres(pool, ..) => pump!(pool, PostgresQueryBuilder),
        }
    });
    rx
}
