//! The tool-call audit: one row per call, inserted before the operation runs
//! and completed once with its outcome. Rows are never deleted (the schema's
//! triggers refuse it, and any other update).

use sea_query::{Expr, ExprTrait, Iden, Query};

use super::{StoreResult, Tx};

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
}

/// A call as recorded before it runs.
#[derive(Debug, Clone)]
pub struct NewCall<'a> {
    /// Fixed-width UTC text.
    pub called_at: &'a str,
    /// `mcp` or `api`.
    pub via: &'a str,
    /// The calling principal.
    pub agent_id: i64,
    /// Its login at the time of the call.
    pub agent_login: &'a str,
    /// The token used.
    pub token_id: i64,
    /// The tool (for `api`, the tool of the same operation).
    pub tool: &'a str,
    /// `owner/repo` as resolved from the arguments, if any.
    pub repository: Option<&'a str>,
    /// `allow` or `deny`.
    pub decision: &'a str,
    /// The grant that allowed an MCP call.
    pub matched_grant: Option<&'a str>,
    /// Why: `granted`, `native_api`, or the denial code.
    pub reason: &'a str,
    /// The JSON-RPC id, as JSON text.
    pub rpc_id: Option<&'a str>,
    /// The HTTP request id.
    pub request_id: Option<&'a str>,
    /// JSON array of argument names.
    pub arg_names: &'a str,
}

/// A recorded call with its outcome, as tests and reports read it.
#[derive(Debug, Clone, sqlx::FromRow)]
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

/// Inserts a call; returns its id.
pub async fn insert_call(tx: &mut Tx, c: &NewCall<'_>) -> StoreResult<i64> {
    use ToolCalls as T;
    let denied_at = (c.decision == "deny").then_some(c.called_at);
    let q = Query::insert()
        .into_table(T::Table)
        .columns([
            T::CalledAt,
            T::Via,
            T::AgentId,
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
            T::CompletedAt,
        ])
        .values_panic([
            c.called_at.into(),
            c.via.into(),
            c.agent_id.into(),
            c.agent_login.into(),
            c.token_id.into(),
            c.tool.into(),
            c.repository.into(),
            c.decision.into(),
            c.matched_grant.into(),
            c.reason.into(),
            c.rpc_id.into(),
            c.request_id.into(),
            c.arg_names.into(),
            denied_at.into(),
        ])
        .returning_col(T::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Adds the outcome to a call not completed yet; returns the rows changed
/// (0 when it was already completed).
pub async fn complete_call(
    tx: &mut Tx,
    id: i64,
    native_status: u16,
    error_code: Option<&str>,
    at: &str,
) -> StoreResult<u64> {
    use ToolCalls as T;
    let q = Query::update()
        .table(T::Table)
        .values([
            (T::NativeStatus, Expr::val(i32::from(native_status))),
            (T::ErrorCode, Expr::val(error_code)),
            (T::CompletedAt, Expr::val(at)),
        ])
        .and_where(Expr::col(T::Id).eq(id))
        .and_where(Expr::col(T::CompletedAt).is_null())
        .to_owned();
    tx.execute(&q).await
}
