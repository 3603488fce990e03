//! The tool-call audit: one row per call, written in the operation's own
//! transaction whole, with its outcome, or for an MCP decision committed
//! with the decision and completed once with its outcome in the operation's
//! transaction. Rows are never deleted (the schema's triggers refuse it, and
//! any other update).

use sea_query::{
    Expr, ExprTrait, Iden, InsertStatement, Query, SubQueryStatement, UpdateStatement, Value,
};

use super::shape::{Args, Bound, Shape, Statement, slot};
use super::{RecordDurability, Store, StoreResult, Tx};

/// `tool_calls`
#[derive(Iden, Clone, Copy)]
pub enum ToolCalls {
    Table,
    Id,
    CalledAt,
    Via,
    AgentId,
    AgentLogin,
    TokenId,
    Tool,
    Repository,
    Decision,
    MatchedGrant,
    Reason,
    RpcId,
    RequestId,
    ArgNames,
    NativeStatus,
    ErrorCode,
    CompletedAt,
    /// The writing transaction (PostgreSQL only; the sealing order).
    XactId,
}

/// A call as recorded before it runs.
#[derive(Debug, Clone)]
pub struct NewCall {
    /// Fixed-width UTC text.
    pub called_at: String,
    /// `mcp` or `api`.
    pub via: &'static str,
    /// The calling principal.
    pub agent_id: i64,
    /// Its login at the time of the call.
    pub agent_login: String,
    /// The token used.
    pub token_id: i64,
    /// The tool (for `api`, the tool of the same operation).
    pub tool: String,
    /// `owner/repo` as resolved from the arguments, if any.
    pub repository: Option<String>,
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// The grant that allowed an MCP call.
    pub matched_grant: Option<String>,
    /// Why: `granted`, `native_api`, or the denial code.
    pub reason: String,
    /// The JSON-RPC id, as JSON text.
    pub rpc_id: Option<String>,
    /// The HTTP request id.
    pub request_id: Option<String>,
    /// JSON array of argument names.
    pub arg_names: String,
}

/// The outcome of a call.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// The native HTTP status (none for a denial: nothing native ran).
    pub native_status: Option<u16>,
    /// The error code of a refusal.
    pub error_code: Option<&'a str>,
    /// Fixed-width UTC text.
    pub at: &'a str,
}

/// A recorded call with its outcome, as tests and reports read it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct CallRow {
    /// Call id.
    pub id: i64,
    /// `mcp` or `api`.
    pub via: String,
    /// The tool.
    pub tool: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// The native status, once completed.
    pub native_status: Option<i32>,
    /// The error code, once completed with an error.
    pub error_code: Option<String>,
}

/// Inserts a call, with its outcome when it is known already (a denial, or
/// a call whose operation's transaction rolled back); returns its id.
pub async fn insert_call(
    tx: &mut Tx,
    c: &NewCall,
    outcome: Option<Outcome<'_>>,
) -> StoreResult<i64> {
    static INSERT: Shape = Shape::new();
    let statement = || {
        let mut q = calls_table();
        q.values_panic(call_slots()).returning_col(ToolCalls::Id);
        q
    };
    let q = INSERT.bind(tx.backend(), statement, &call_args(c, outcome));
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// A call whose outcome is known before its record is written: a call that
/// changed nothing (a read, or a refusal whose transaction rolled back).
/// Its record is appended whole (see [`append_call`]).
#[derive(Debug, Clone)]
pub struct FinishedCall {
    /// The record.
    pub call: NewCall,
    /// The native status.
    pub native_status: u16,
    /// The error code of a refusal.
    pub error_code: Option<&'static str>,
    /// When the outcome was known, fixed-width UTC text.
    pub completed_at: String,
}

impl FinishedCall {
    fn outcome(&self) -> Outcome<'_> {
        Outcome {
            native_status: Some(self.native_status),
            error_code: self.error_code,
            at: &self.completed_at,
        }
    }
}

/// The insert of one finished call (a [`Shape`]: rendered once per backend,
/// every record bound to it; the writer inserts many a second).
pub(super) fn record_insert(backend: super::Backend, f: &FinishedCall) -> Bound {
    static RECORD: Shape = Shape::new();
    let statement = || {
        let mut q = calls_table();
        q.values_panic(call_slots());
        q
    };
    RECORD.bind(backend, statement, &call_args(&f.call, Some(f.outcome())))
}

/// Writes the record of a finished call, committed on its own before this
/// returns. On SQLite with group commit it joins the writer's next commit,
/// one insert for every record queued with it; on PostgreSQL it is a single
/// statement in autocommit, by default one that does not wait for the WAL
/// flush ([`RecordDurability::Relaxed`]).
pub async fn append_call(store: &Store, call: FinishedCall) -> StoreResult<()> {
    match store {
        Store::Sqlite(_, writer, _) => writer.append(call).await,
        Store::Postgres(_, _, durability) => {
            let mut conn = store.single().await?;
            let insert = match durability {
                RecordDurability::Durable => record_insert(super::Backend::Postgres, &call),
                RecordDurability::Relaxed => relaxed_record_insert(&call),
            };
            conn.execute(&insert).await.map(drop)
        }
    }
}

/// A record's insert that, alone in its implicit transaction, commits with
/// `synchronous_commit = off`: `set_config(…, true)` is `SET LOCAL`, and the
/// one-row subquery that calls it is evaluated by the same statement, so
/// the setting holds when that transaction commits and is gone after.
fn relaxed_record_insert(f: &FinishedCall) -> Bound {
    static RELAXED: Shape = Shape::new();
    let statement = || {
        let mut relaxed = Query::select();
        relaxed.expr(Expr::cust("set_config('synchronous_commit', 'off', true)"));
        let mut values = Query::select();
        values.exprs(call_slots()).from_subquery(relaxed, "relaxed");
        let mut q = calls_table();
        q.select_from(values)
            .expect("the subquery selects one value per column");
        q
    };
    RELAXED.bind(
        super::Backend::Postgres,
        statement,
        &call_args(&f.call, Some(f.outcome())),
    )
}

fn calls_table() -> InsertStatement {
    Query::insert()
        .into_table(ToolCalls::Table)
        .columns(CALL_COLUMNS.map(|(column, _)| column))
        .to_owned()
}

/// A record's columns, each with the name of its slot.
const CALL_COLUMNS: [(ToolCalls, &str); 16] = {
    use ToolCalls as T;
    [
        (T::CalledAt, "call_called_at"),
        (T::Via, "call_via"),
        (T::AgentId, "call_agent_id"),
        (T::AgentLogin, "call_agent_login"),
        (T::TokenId, "call_token_id"),
        (T::Tool, "call_tool"),
        (T::Repository, "call_repository"),
        (T::Decision, "call_decision"),
        (T::MatchedGrant, "call_matched_grant"),
        (T::Reason, "call_reason"),
        (T::RpcId, "call_rpc_id"),
        (T::RequestId, "call_request_id"),
        (T::ArgNames, "call_arg_names"),
        (T::NativeStatus, "call_native_status"),
        (T::ErrorCode, "call_error_code"),
        (T::CompletedAt, "call_completed_at"),
    ]
};

/// The slots of a record's values, in [`calls_table`]'s column order.
fn call_slots() -> [Expr; 16] {
    CALL_COLUMNS.map(|(_, name)| slot(name))
}

/// A record's values (with its outcome, if known), by slot name.
fn call_args(c: &NewCall, outcome: Option<Outcome<'_>>) -> Args {
    vec![
        ("call_called_at", c.called_at.as_str().into()),
        ("call_via", c.via.into()),
        ("call_agent_id", c.agent_id.into()),
        ("call_agent_login", c.agent_login.as_str().into()),
        ("call_token_id", c.token_id.into()),
        ("call_tool", c.tool.as_str().into()),
        ("call_repository", c.repository.as_deref().into()),
        ("call_decision", c.decision.into()),
        ("call_matched_grant", c.matched_grant.as_deref().into()),
        ("call_reason", c.reason.as_str().into()),
        ("call_rpc_id", c.rpc_id.as_deref().into()),
        ("call_request_id", c.request_id.as_deref().into()),
        ("call_arg_names", c.arg_names.as_str().into()),
        (
            "call_native_status",
            outcome.and_then(|o| o.native_status).map(i32::from).into(),
        ),
        ("call_error_code", outcome.and_then(|o| o.error_code).into()),
        ("call_completed_at", outcome.map(|o| o.at).into()),
    ]
}

/// Adds the outcome to a call not completed yet; returns the rows changed
/// (0 when it was already completed).
pub async fn complete_call(tx: &mut Tx, id: i64, outcome: Outcome<'_>) -> StoreResult<u64> {
    tx.execute(&call_completion(id, outcome)).await
}

/// The update that adds the outcome to a call not completed yet.
fn call_completion(id: i64, outcome: Outcome<'_>) -> UpdateStatement {
    use ToolCalls as T;
    Query::update()
        .table(T::Table)
        .values([
            (
                T::NativeStatus,
                Expr::val(outcome.native_status.map(i32::from)),
            ),
            (T::ErrorCode, Expr::val(outcome.error_code)),
            (T::CompletedAt, Expr::val(outcome.at)),
        ])
        .and_where(Expr::col(T::Id).eq(id))
        .and_where(Expr::col(T::CompletedAt).is_null())
        .to_owned()
}

/// Which record a statement that ends a call writes its outcome to.
#[derive(Debug, Clone, Copy)]
pub enum CallEnd<'a> {
    /// The record is not written yet: insert it whole, with the outcome.
    Insert(&'a NewCall),
    /// The record was committed before (an MCP decision): add the outcome.
    Complete(i64),
}

/// The kind of statement that ends a call (a [`super::shape::Shape`] each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndKind {
    /// Inserts the record whole.
    Insert,
    /// Adds the outcome to the record committed before.
    Complete,
}

impl CallEnd<'_> {
    /// Which statement ends the call.
    pub(super) fn kind(&self) -> EndKind {
        match self {
            CallEnd::Insert(_) => EndKind::Insert,
            CallEnd::Complete(_) => EndKind::Complete,
        }
    }

    /// The values of [`CallEndStatement::shaped`], by slot name.
    pub(super) fn values(&self, outcome: Outcome<'_>) -> Args {
        match self {
            CallEnd::Insert(call) => call_args(call, Some(outcome)),
            CallEnd::Complete(id) => vec![
                ("call_id", (*id).into()),
                (
                    "call_native_status",
                    outcome.native_status.map(i32::from).into(),
                ),
                ("call_error_code", outcome.error_code.into()),
                ("call_completed_at", outcome.at.into()),
            ],
        }
    }
}

/// The statement that writes a call's outcome (see [`CallEnd`]), returning
/// the record's id.
pub(super) enum CallEndStatement {
    Insert(InsertStatement),
    Complete(UpdateStatement),
}

impl CallEndStatement {
    /// The statement that ends a call of `kind`, its values in the slots
    /// named by [`CallEnd::values`], returning the record's id.
    pub(super) fn shaped(kind: EndKind) -> CallEndStatement {
        use ToolCalls as T;
        match kind {
            EndKind::Insert => {
                let mut q = calls_table();
                q.values_panic(call_slots()).returning_col(T::Id);
                CallEndStatement::Insert(q)
            }
            EndKind::Complete => CallEndStatement::Complete(
                Query::update()
                    .table(T::Table)
                    .values([
                        (T::NativeStatus, slot("call_native_status")),
                        (T::ErrorCode, slot("call_error_code")),
                        (T::CompletedAt, slot("call_completed_at")),
                    ])
                    .and_where(Expr::col(T::Id).eq(slot("call_id")))
                    .and_where(Expr::col(T::CompletedAt).is_null())
                    .returning_col(T::Id)
                    .to_owned(),
            ),
        }
    }

    /// For a data-modifying `WITH` (PostgreSQL).
    pub(super) fn into_subquery(self) -> SubQueryStatement {
        match self {
            CallEndStatement::Insert(q) => q.into(),
            CallEndStatement::Complete(q) => q.into(),
        }
    }
}

impl Statement for CallEndStatement {
    fn render(&self, backend: super::Backend) -> (std::borrow::Cow<'static, str>, Vec<Value>) {
        match self {
            CallEndStatement::Insert(q) => q.render(backend),
            CallEndStatement::Complete(q) => q.render(backend),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished_call() -> FinishedCall {
        FinishedCall {
            call: NewCall {
                called_at: "2026-12-01T00:00:00.000001Z".into(),
                via: "api",
                agent_id: 7,
                agent_login: "bot".into(),
                token_id: 9,
                tool: "get_agent_work_grant".into(),
                repository: None,
                decision: "allow",
                matched_grant: Some("3".into()),
                reason: "native_api".into(),
                rpc_id: None,
                request_id: Some("r".into()),
                arg_names: "[\"owner\"]".into(),
            },
            native_status: 404,
            error_code: Some("not_found"),
            completed_at: "2026-12-01T00:00:00.000002Z".into(),
        }
    }

    /// A shaped record insert is what sea-query renders for the same
    /// record, value for value, on both backends.
    #[test]
    fn a_shaped_record_insert_is_the_rendered_one() {
        let call = finished_call();
        for backend in [
            super::super::Backend::Sqlite,
            super::super::Backend::Postgres,
        ] {
            let args = call_args(&call.call, Some(call.outcome()));
            let mut fresh = calls_table();
            fresh.values_panic(args.into_iter().map(|(_, value)| Expr::val(value)));
            let fresh = fresh.render(backend);
            assert_eq!(record_insert(backend, &call).render(backend), fresh);
        }
    }

    /// The relaxed insert writes the whole record, and its
    /// `synchronous_commit = off` ends with its own implicit transaction:
    /// the connection's next statement runs with the setting it had
    /// before. Against the PostgreSQL of `WRIT_TEST_POSTGRES_URL`, on a
    /// temporary `tool_calls` of the connection's own.
    #[tokio::test]
    async fn a_relaxed_record_leaves_its_connection_as_it_found_it() {
        use super::super::pg_conns::tests::{conns, one, run};
        let Some(conns) = conns(1) else { return };
        let mut conn = conns.acquire().await.expect("acquire");
        run(
            &mut conn,
            "CREATE TEMPORARY TABLE tool_calls (id BIGINT GENERATED BY DEFAULT AS IDENTITY, \
             called_at TEXT NOT NULL, via TEXT NOT NULL, agent_id BIGINT NOT NULL, \
             agent_login TEXT NOT NULL, token_id BIGINT NOT NULL, tool TEXT NOT NULL, \
             repository TEXT, decision TEXT NOT NULL, matched_grant TEXT, reason TEXT NOT NULL, \
             rpc_id TEXT, request_id TEXT, arg_names TEXT NOT NULL, native_status INTEGER, \
             error_code TEXT, completed_at TEXT)",
        )
        .await
        .expect("scratch table");
        let before = one::<String>(&mut conn, "SELECT current_setting('synchronous_commit')").await;
        assert_eq!(
            one::<String>(
                &mut conn,
                "SELECT current_setting('synchronous_commit') \
                 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed"
            )
            .await,
            "off",
            "the subquery's SET LOCAL holds for the statement that calls it"
        );
        assert_eq!(
            one::<String>(&mut conn, "SELECT current_setting('synchronous_commit')").await,
            before
        );
        let mut tx = Tx::PostgresSingle(conn);
        let rows = tx
            .execute(&relaxed_record_insert(&finished_call()))
            .await
            .expect("relaxed insert");
        assert_eq!(rows, 1);
        let Tx::PostgresSingle(mut conn) = tx else {
            unreachable!("still the same connection")
        };
        assert_eq!(
            one::<String>(&mut conn, "SELECT current_setting('synchronous_commit')").await,
            before,
            "the setting did not outlive the insert's own transaction"
        );
        assert_eq!(
            one::<String>(
                &mut conn,
                "SELECT concat_ws('|', called_at, via, agent_id, agent_login, token_id, tool, \
                 coalesce(repository, '-'), decision, matched_grant, reason, \
                 coalesce(rpc_id, '-'), request_id, arg_names, native_status, error_code, \
                 completed_at) FROM tool_calls"
            )
            .await,
            "2026-12-01T00:00:00.000001Z|api|7|bot|9|get_agent_work_grant|-|allow|3|\
             native_api|-|r|[\"owner\"]|404|not_found|2026-12-01T00:00:00.000002Z"
        );
        run(&mut conn, "DROP TABLE pg_temp.tool_calls")
            .await
            .expect("drop the scratch table");
    }
}
