//! The audit of agent tool calls (MCP `tools/call` and the native agent
//! routes). A call's record is committed in its own transaction before the
//! operation runs — for MCP, in the same transaction that makes the policy
//! decision — so a call whose record cannot be written is refused (fail
//! closed). The outcome is added once: by a writing use case inside its own
//! transaction (see [`complete_in`]), otherwise right after the operation.
//! Only argument names are recorded, never values.

use super::auth::Caller;
use super::policy::{self, Check};
use super::{Ctx, Error, Result, now};
use crate::domain::policy::Decision;
use crate::domain::text::printable;
use crate::domain::tools::{Tool, argument_names};
use crate::store::Tx;
use crate::store::audit::{self as store, NewCall};

/// How a call reached Writ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `POST /mcp`.
    Mcp,
    /// A native agent route.
    Api,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Mcp => "mcp",
            Via::Api => "api",
        }
    }
}

/// What is known about a call before it runs.
#[derive(Debug, Clone)]
pub struct CallInfo<'a> {
    /// The tool name as called (bounded); for `api`, the tool of the route.
    pub tool: &'a str,
    /// The call's arguments: for MCP its `arguments` object, for `api` the
    /// path parameters and body members by name (values are never stored).
    pub args: &'a serde_json::Map<String, serde_json::Value>,
    /// The JSON-RPC id, as JSON text.
    pub rpc_id: Option<String>,
    /// The HTTP request id.
    pub request_id: Option<String>,
}

fn fail_closed(err: impl Into<anyhow::Error>) -> Error {
    Error::AuditUnavailable(err.into())
}

async fn insert(
    tx: &mut Tx,
    caller: &Caller,
    via: Via,
    call: &CallInfo<'_>,
    check: &Check,
) -> Result<i64> {
    let names = argument_names(call.args.keys());
    let names = serde_json::to_string(&names).map_err(fail_closed)?;
    let repository = check
        .repository
        .as_ref()
        .map(|r| printable(&r.full_name(), 256));
    let (decision, matched, reason) = match (&check.decision, via) {
        (Decision::Allow { grant_id }, Via::Mcp) => ("allow", Some(grant_id.as_str()), "granted"),
        (Decision::Allow { .. }, Via::Api) => ("allow", None, "native_api"),
        (Decision::Deny(denial), _) => ("deny", None, denial.code()),
    };
    let tool = printable(call.tool, 64);
    let rpc_id = call.rpc_id.as_deref().map(|r| printable(r, 128));
    let request_id = call.request_id.as_deref().map(|r| printable(r, 128));
    let at = now().to_text();
    store::insert_call(
        tx,
        &NewCall {
            called_at: &at,
            via: via.as_str(),
            agent_id: caller.user_id,
            agent_login: &caller.login,
            token_id: caller.token_id,
            tool: &tool,
            repository: repository.as_deref(),
            decision,
            matched_grant: matched,
            reason,
            rpc_id: rpc_id.as_deref(),
            request_id: request_id.as_deref(),
            arg_names: &names,
        },
    )
    .await
    .map_err(fail_closed)
}

/// Decides an MCP `tools/call` against the caller's tool grants and commits
/// the decision's record in one transaction. On allow the caller carries the
/// record from then on; a denial's record is complete already.
pub async fn begin_mcp(ctx: &Ctx, caller: &mut Caller, call: &CallInfo<'_>) -> Result<Check> {
    let mut tx = ctx.store.write().await.map_err(fail_closed)?;
    let check = policy::allowed_in(&mut tx, caller.user_id, call.tool, call.args)
        .await
        .map_err(|e| match e {
            Error::Internal(cause) => fail_closed(cause),
            other => other,
        })?;
    let id = insert(&mut tx, caller, Via::Mcp, call, &check).await?;
    tx.commit().await.map_err(fail_closed)?;
    if check.decision.is_allowed() {
        caller.audit = Some(id);
    }
    Ok(check)
}

/// Records a native agent-route call before it runs (the native routes have
/// no tool policy: the decision is `allow`, reason `native_api`).
pub async fn begin_api(
    ctx: &Ctx,
    caller: &mut Caller,
    tool: Tool,
    call: &CallInfo<'_>,
) -> Result<()> {
    let check = Check {
        repository: crate::domain::policy::resolve_repository(call.args),
        decision: Decision::Allow {
            grant_id: String::new(),
        },
    };
    let call = CallInfo {
        tool: tool.name(),
        ..call.clone()
    };
    let mut tx = ctx.store.write().await.map_err(fail_closed)?;
    let id = insert(&mut tx, caller, Via::Api, &call, &check).await?;
    tx.commit().await.map_err(fail_closed)?;
    caller.audit = Some(id);
    Ok(())
}

/// Adds the outcome of the caller's audited call inside the operation's own
/// transaction (a no-op for unaudited callers).
pub async fn complete_in(
    tx: &mut Tx,
    caller: &Caller,
    status: u16,
    code: Option<&str>,
) -> Result<()> {
    if let Some(id) = caller.audit {
        store::complete_call(tx, id, status, code, &now().to_text())
            .await
            .map_err(fail_closed)?;
    }
    Ok(())
}

/// Adds the outcome after an operation that did not record it itself: reads
/// (`recorded_ok = Some(status)`), and every refusal of a writing use case
/// (`recorded_ok = None`: its success was recorded in its own transaction;
/// a refusal's transaction rolled back). Already-completed records are left
/// alone. A failure here is the call's failure (503), so no answer leaves
/// without its outcome recorded.
pub async fn finish<T>(
    ctx: &Ctx,
    caller: &Caller,
    result: Result<T>,
    recorded_ok: Option<u16>,
) -> Result<T> {
    let Some(id) = caller.audit else {
        return result;
    };
    let (status, code) = match (&result, recorded_ok) {
        (Ok(_), None) => return result,
        (Ok(_), Some(status)) => (status, None),
        (Err(e), _) => (e.status(), Some(e.code())),
    };
    let mut tx = ctx.store.write().await.map_err(fail_closed)?;
    store::complete_call(&mut tx, id, status, code, &now().to_text())
        .await
        .map_err(fail_closed)?;
    tx.commit().await.map_err(fail_closed)?;
    result
}
