//! The audit of agent tool calls (MCP `tools/call` and the native agent
//! routes). Every call has one record; only argument names are recorded,
//! never values.
//!
//! A native agent-route call is written by the use case itself, as the first
//! statement of its own transaction ([`open`]), and its outcome is added in
//! that same transaction ([`complete_in`], then [`commit`]): one commit per
//! call, and no answer, not even a read's, leaves before its record is
//! durable. If the record cannot be written, nothing runs (503, fail
//! closed). If the operation refuses (its transaction rolls back, taking
//! the record with it), [`finish`] writes the record with the refusal as
//! its outcome in a transaction of its own.
//!
//! An MCP `tools/call` is first decided against the agent's tool grants,
//! and the decision's record committed with it ([`begin_mcp`]); an allowed
//! call's outcome is then added in the operation's transaction, as above.

use std::sync::{Arc, Mutex};

use super::auth::Caller;
use super::policy::{self, Check};
use super::{Ctx, Error, Result, now};
use crate::domain::policy::Decision;
use crate::domain::text::printable;
use crate::domain::tools::{Tool, argument_names};
use crate::store::Tx;
use crate::store::audit::{self as store, NewCall, Outcome};

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

/// Whether a use case only reads or also writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads one snapshot.
    Read,
    /// Writes.
    Write,
}

/// The audit record of one call, carried by its [`Caller`].
#[derive(Debug)]
pub struct Record {
    call: NewCall,
    state: Mutex<State>,
}

/// Where a record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not written yet: the call's transaction writes it.
    Pending,
    /// Not written yet, in an open transaction whose first statement writes
    /// it (see [`open_deferred`]).
    Deferred,
    /// In a transaction that has not committed (yet): written there when
    /// `fresh`, else committed before; `completed` once its outcome is there.
    InTx {
        id: i64,
        fresh: bool,
        completed: bool,
    },
    /// Committed without its outcome (an MCP decision).
    Committed(i64),
    /// Committed with its outcome.
    Done,
}

impl Record {
    fn get(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// The state once any transaction not committed through [`commit`] is
    /// known to be gone (rolled back).
    fn settled(&self) -> State {
        let state = match self.get() {
            State::InTx { fresh: true, .. } | State::Deferred => State::Pending,
            State::InTx { id, .. } => State::Committed(id),
            other => other,
        };
        self.set(state);
        state
    }
}

pub(super) fn fail_closed(err: impl Into<anyhow::Error>) -> Error {
    Error::AuditUnavailable(err.into())
}

fn new_call(caller: &Caller, via: Via, call: &CallInfo<'_>, check: &Check) -> Result<NewCall> {
    let names = argument_names(call.args.keys());
    let names = serde_json::to_string(&names).map_err(fail_closed)?;
    let (decision, matched, reason) = match (&check.decision, via) {
        (Decision::Allow { grant_id }, Via::Mcp) => ("allow", Some(grant_id.clone()), "granted"),
        (Decision::Allow { .. }, Via::Api) => ("allow", None, "native_api"),
        (Decision::Deny(denial), _) => ("deny", None, denial.code()),
    };
    Ok(NewCall {
        called_at: now().to_text(),
        via: via.as_str(),
        agent_id: caller.user_id,
        agent_login: caller.login.clone(),
        token_id: caller.token_id,
        tool: printable(call.tool, 64),
        repository: check
            .repository
            .as_ref()
            .map(|r| printable(&r.full_name(), 256)),
        decision,
        matched_grant: matched,
        reason: reason.to_owned(),
        rpc_id: call.rpc_id.as_deref().map(|r| printable(r, 128)),
        request_id: call.request_id.as_deref().map(|r| printable(r, 128)),
        arg_names: names,
    })
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
    let record = new_call(caller, Via::Mcp, call, &check)?;
    let denied = (!check.decision.is_allowed()).then(|| Outcome {
        native_status: None,
        error_code: None,
        at: &record.called_at,
    });
    let id = store::insert_call(&mut tx, &record, denied)
        .await
        .map_err(fail_closed)?;
    tx.commit().await.map_err(fail_closed)?;
    if check.decision.is_allowed() {
        caller.audit = Some(Arc::new(Record {
            call: record,
            state: Mutex::new(State::Committed(id)),
        }));
    }
    Ok(check)
}

/// Prepares the record of a native agent-route call (the native routes have
/// no tool policy: the decision is `allow`, reason `native_api`). Nothing is
/// written yet: the use case writes it first thing in its transaction.
pub fn prepare_api(caller: &mut Caller, tool: Tool, call: &CallInfo<'_>) -> Result<()> {
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
    let record = new_call(caller, Via::Api, &call, &check)?;
    caller.audit = Some(Arc::new(Record {
        call: record,
        state: Mutex::new(State::Pending),
    }));
    Ok(())
}

/// Begins the transaction of a use case run for `caller`. For an audited
/// call it is a write transaction (a consistent snapshot for reads) that
/// holds the call's record: written here, as its first statement, unless it
/// was committed before (MCP). Unaudited callers get a plain read or write
/// transaction.
pub async fn open(ctx: &Ctx, caller: &Caller, access: Access) -> Result<Tx> {
    let audited = caller.audit.as_deref().map(|r| (r, r.settled()));
    let Some((record, state)) = audited.filter(|(_, state)| *state != State::Done) else {
        return plain(ctx, access).await;
    };
    let mut tx = match access {
        Access::Read => ctx.store.write_snapshot().await,
        Access::Write => ctx.store.write().await,
    }
    .map_err(fail_closed)?;
    let next = match state {
        State::Committed(id) => State::InTx {
            id,
            fresh: false,
            completed: false,
        },
        _ => {
            let id = store::insert_call(&mut tx, &record.call, None)
                .await
                .map_err(fail_closed)?;
            State::InTx {
                id,
                fresh: true,
                completed: false,
            }
        }
    };
    record.set(next);
    Ok(tx)
}

/// [`open`] for a use case whose first statement is its grant lookup
/// (`agent::locate`): a record not written yet is written by that statement
/// ([`deferred_record`], [`written_in`]), in the same round trip. Anything
/// the use case does comes after it, so the record still precedes the
/// operation.
pub async fn open_deferred(ctx: &Ctx, caller: &Caller, access: Access) -> Result<Tx> {
    let Some(record) = caller.audit.as_deref() else {
        return plain(ctx, access).await;
    };
    if record.settled() != State::Pending {
        return open(ctx, caller, access).await;
    }
    let tx = match access {
        Access::Read => ctx.store.write_snapshot().await,
        Access::Write => ctx.store.write().await,
    }
    .map_err(fail_closed)?;
    record.set(State::Deferred);
    Ok(tx)
}

/// The caller's record, if [`open_deferred`] left it for the first
/// statement to write.
pub fn deferred_record(caller: &Caller) -> Option<&NewCall> {
    let record = caller.audit.as_deref()?;
    (record.get() == State::Deferred).then_some(&record.call)
}

/// The first statement wrote the deferred record as `id`.
pub fn written_in(caller: &Caller, id: i64) {
    if let Some(record) = caller.audit.as_deref() {
        record.set(State::InTx {
            id,
            fresh: true,
            completed: false,
        });
    }
}

/// A read or write transaction with no audit record in it.
async fn plain(ctx: &Ctx, access: Access) -> Result<Tx> {
    Ok(match access {
        Access::Read => ctx.store.read().await?,
        Access::Write => ctx.store.write().await?,
    })
}

/// Adds the outcome of the caller's audited call inside the transaction
/// [`open`] began (a no-op for unaudited callers).
pub async fn complete_in(
    tx: &mut Tx,
    caller: &Caller,
    status: u16,
    code: Option<&str>,
) -> Result<()> {
    let Some(record) = caller.audit.as_deref() else {
        return Ok(());
    };
    if let State::InTx { id, fresh, .. } = record.get() {
        let at = now().to_text();
        let outcome = Outcome {
            native_status: Some(status),
            error_code: code,
            at: &at,
        };
        store::complete_call(tx, id, outcome)
            .await
            .map_err(fail_closed)?;
        record.set(State::InTx {
            id,
            fresh,
            completed: true,
        });
    }
    Ok(())
}

/// For a write that adds the outcome in its own statement (see
/// `store::issues::Handoff`): the record to complete and the time, if the
/// caller is audited and its record is in this transaction. Call
/// [`completed_in`] once that statement succeeded.
pub fn outcome_target(caller: &Caller) -> Option<(i64, String)> {
    match caller.audit.as_deref()?.get() {
        State::InTx { id, .. } => Some((id, now().to_text())),
        _ => None,
    }
}

/// Marks the caller's record as completed inside the transaction (its
/// outcome was written by the statement [`outcome_target`] fed).
pub fn completed_in(caller: &Caller) {
    if let Some(record) = caller.audit.as_deref()
        && let State::InTx { id, fresh, .. } = record.get()
    {
        record.set(State::InTx {
            id,
            fresh,
            completed: true,
        });
    }
}

/// After a write that carried the outcome in the same statement as the
/// operation's writes failed with `err` (its transaction already dropped):
/// finds out whether writing the outcome was what failed, by writing a copy
/// of the record and completing it in a transaction that is rolled back. If
/// that fails too the call is refused as `audit_unavailable`; otherwise
/// `err` stands. Only refusals of the store are probed; the fast path never
/// pays for it.
pub async fn classify_failed_write(ctx: &Ctx, caller: &Caller, err: Error) -> Error {
    let Some(record) = caller.audit.as_deref() else {
        return err;
    };
    if !matches!(err, Error::Internal(_)) {
        return err;
    }
    let probe = async {
        let mut tx = ctx.store.write().await?;
        let id = store::insert_call(&mut tx, &record.call, None).await?;
        let at = now().to_text();
        let outcome = Outcome {
            native_status: Some(201),
            error_code: None,
            at: &at,
        };
        store::complete_call(&mut tx, id, outcome).await?;
        tx.rollback().await
    };
    match probe.await {
        Ok(()) => err,
        Err(e) => fail_closed(e),
    }
}

/// Commits a transaction begun by [`open`]; from then on the caller's
/// record is durable (with its outcome, if [`complete_in`] added it).
pub async fn commit(tx: Tx, caller: &Caller) -> Result<()> {
    tx.commit().await?;
    if let Some(record) = caller.audit.as_deref()
        && let State::InTx { id, completed, .. } = record.get()
    {
        record.set(if completed {
            State::Done
        } else {
            State::Committed(id)
        });
    }
    Ok(())
}

/// Ends an audited call: when its outcome was not committed with the
/// operation (a refusal rolled the operation back, the call failed before
/// the operation began, or an MCP read), records it now, in a transaction
/// of its own; `ok_status` is the status of a success. A failure here is
/// the call's failure (503), so no answer leaves without its record.
pub async fn finish<T>(ctx: &Ctx, caller: &Caller, result: Result<T>, ok_status: u16) -> Result<T> {
    let Some(record) = caller.audit.as_deref() else {
        return result;
    };
    let state = record.settled();
    if state == State::Done {
        return result;
    }
    let (status, code) = match &result {
        Ok(_) => (ok_status, None),
        Err(e) => (e.status(), Some(e.code())),
    };
    let at = now().to_text();
    let outcome = Outcome {
        native_status: Some(status),
        error_code: code,
        at: &at,
    };
    let mut tx = ctx.store.write().await.map_err(fail_closed)?;
    match state {
        State::Committed(id) => store::complete_call(&mut tx, id, outcome).await.map(drop),
        _ => store::insert_call(&mut tx, &record.call, Some(outcome))
            .await
            .map(drop),
    }
    .map_err(fail_closed)?;
    tx.commit().await.map_err(fail_closed)?;
    record.set(State::Done);
    result
}
