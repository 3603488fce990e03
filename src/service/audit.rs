//! The audit of agent tool calls (MCP `tools/call` and the native agent
//! routes). Every call has one record; only argument names are recorded,
//! never values.
//!
//! A native agent-route call's record is written by the use case itself,
//! in its own transaction ([`open`]), once, whole, with its outcome
//! ([`complete_in`], or the use case's last statement through
//! [`outcome_target`]), and committed with the operation's writes
//! ([`commit`]): one commit per call, one row write per record, and no
//! answer, not even a read's, leaves before its record is committed. The
//! record and the operation commit together or not at all, so if the
//! record cannot be written nothing the operation did stays (503, fail
//! closed). If the operation refuses (its transaction rolls back), [`finish`]
//! writes the record with the refusal as its outcome on its own.
//!
//! A call that only reads changes nothing for its record to guard, so it
//! reads first, outside any write transaction ([`Access::Read`],
//! [`Access::ReadOne`]), and its record is then appended whole, with the
//! outcome, and committed before the answer leaves (`store::audit::
//! append_call`: on SQLite with group commit, one insert and one commit
//! for every record queued together, beside the writers' batches). If that
//! fails the read's answer is refused (503), as before.
//!
//! On SQLite, a read with one snapshot, such as a grant read, runs on the
//! group-commit writer's own thread and connection instead
//! ([`read_on_writer`]): its record joins the writer's next commit and the
//! answer comes back after it, in one hand-off.
//!
//! An MCP `tools/call` is first decided against the agent's tool grants,
//! and the decision's record committed with it ([`begin_mcp`]); an allowed
//! call's outcome is then added in the operation's transaction, as above.

use std::sync::{Arc, Mutex};

use super::auth::Caller;
use super::policy::{self, Check};
use super::{Ctx, Error, Result};
use crate::domain::policy::Decision;
use crate::domain::text::printable;
use crate::domain::tools::{Tool, argument_names};
use crate::store::Tx;
use crate::store::audit::{self as store, CallEnd, NewCall, Outcome};
use crate::store::batch::{Deliver, WriterRead};

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
    /// Reads with one statement (a second one only on the way to a
    /// refusal), so it needs no transaction.
    ReadOne,
    /// Writes.
    Write,
}

/// The audit record of one call, carried by its [`Caller`].
#[derive(Debug)]
pub struct Record {
    call: NewCall,
    state: Mutex<State>,
    /// While the call reads: its record announced to the store (see
    /// `store::audit::expect_call`), until appended.
    expected: Mutex<Option<crate::store::batch::Expected>>,
}

/// Where a record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not written, no transaction holds it.
    Pending,
    /// Not written, in an open transaction that writes it whole, with its
    /// outcome (see [`open`]).
    Deferred,
    /// Not written, while the call reads; appended at [`commit`].
    Reading,
    /// The read is done with this outcome; the record is appended at
    /// [`commit`].
    Read(u16, Option<&'static str>),
    /// Committed before (an MCP decision), in an open transaction that adds
    /// its outcome.
    InTx(i64),
    /// Its outcome is written in an open transaction: the record with it,
    /// or (`Some(id)`) added to the record committed before.
    Completed(Option<i64>),
    /// Committed without its outcome (an MCP decision).
    Committed(i64),
    /// Committed with its outcome.
    Done,
}

impl State {
    /// The state once the open transaction wrote the outcome (`None` when
    /// no transaction of this call is open).
    fn completed(self) -> Option<State> {
        match self {
            State::Deferred => Some(State::Completed(None)),
            State::InTx(id) => Some(State::Completed(Some(id))),
            _ => None,
        }
    }
}

impl Record {
    fn get(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    fn set_expected(&self, expected: Option<crate::store::batch::Expected>) {
        *self.expected.lock().unwrap_or_else(|e| e.into_inner()) = expected;
    }

    /// The state once any transaction not committed through [`commit`] is
    /// known to be gone (rolled back).
    fn settled(&self) -> State {
        let state = match self.get() {
            State::Deferred | State::Completed(None) | State::Reading | State::Read(..) => {
                State::Pending
            }
            State::InTx(id) | State::Completed(Some(id)) => State::Committed(id),
            other => other,
        };
        self.set(state);
        state
    }
}

/// The answer to a call whose audit record could not be written: the call
/// is refused (fail closed), as `storage_unavailable` when the database
/// itself cannot serve, else `audit_unavailable`.
pub(super) fn fail_closed(err: impl AuditFailure) -> Error {
    err.refusal()
}

/// A cause of a failed audit write.
pub(super) trait AuditFailure {
    /// The refusal it makes of the call.
    fn refusal(self) -> Error;
}

impl AuditFailure for crate::store::StoreError {
    fn refusal(self) -> Error {
        match self {
            crate::store::StoreError::Unavailable(why) => Error::StorageUnavailable(why),
            other => Error::AuditUnavailable(other.into()),
        }
    }
}

impl AuditFailure for anyhow::Error {
    fn refusal(self) -> Error {
        Error::AuditUnavailable(self)
    }
}

impl AuditFailure for serde_json::Error {
    fn refusal(self) -> Error {
        Error::AuditUnavailable(self.into())
    }
}

impl AuditFailure for Error {
    fn refusal(self) -> Error {
        match self {
            Error::Internal(cause) => Error::AuditUnavailable(cause),
            other => other,
        }
    }
}

fn new_call(
    ctx: &Ctx,
    caller: &Caller,
    via: Via,
    call: &CallInfo<'_>,
    check: &Check,
) -> Result<NewCall> {
    let names = argument_names(call.args.keys());
    let names = serde_json::to_string(&names).map_err(fail_closed)?;
    let (decision, matched, reason) = match (&check.decision, via) {
        (Decision::Allow { grant_id }, Via::Mcp) => ("allow", Some(grant_id.clone()), "granted"),
        (Decision::Allow { .. }, Via::Api) => ("allow", None, "native_api"),
        (Decision::Deny(denial), _) => ("deny", None, denial.code()),
    };
    Ok(NewCall {
        called_at: ctx.now().to_text(),
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
        .map_err(fail_closed)?;
    let record = new_call(ctx, caller, Via::Mcp, call, &check)?;
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
            expected: Mutex::new(None),
        }));
    }
    Ok(check)
}

/// Prepares the record of a native agent-route call (the native routes have
/// no tool policy: the decision is `allow`, reason `native_api`). Nothing is
/// written yet: the use case writes it, whole, with its outcome (see [`open`]).
pub fn prepare_api(ctx: &Ctx, caller: &mut Caller, tool: Tool, call: &CallInfo<'_>) -> Result<()> {
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
    let record = new_call(ctx, caller, Via::Api, &call, &check)?;
    caller.audit = Some(Arc::new(Record {
        call: record,
        state: Mutex::new(State::Pending),
        expected: Mutex::new(None),
    }));
    Ok(())
}

/// Begins the transaction of a use case run for `caller`. For an audited
/// call it is a write transaction (a consistent snapshot for reads) that
/// will hold the call's record: written whole, with its outcome, by
/// [`complete_in`] or by the statement [`outcome_target`] feeds (or, for an
/// MCP call, whose record was committed before, completed there).
/// Unaudited callers get a plain read or write transaction.
pub async fn open(ctx: &Ctx, caller: &Caller, access: Access) -> Result<Tx> {
    let audited = caller.audit.as_deref().map(|r| (r, r.settled()));
    let Some((record, state)) = audited.filter(|(_, state)| *state != State::Done) else {
        return plain(ctx, access).await;
    };
    if access != Access::Write && state == State::Pending {
        let tx = plain(ctx, access).await?;
        record.set(State::Reading);
        record.set_expected(store::expect_call(&ctx.store));
        return Ok(tx);
    }
    let tx = match access {
        Access::Read | Access::ReadOne => ctx.store.write_snapshot().await,
        Access::Write => ctx.store.write().await,
    }
    .map_err(fail_closed)?;
    record.set(match state {
        State::Committed(id) => State::InTx(id),
        _ => State::Deferred,
    });
    Ok(tx)
}

/// A read or write transaction with no audit record in it.
async fn plain(ctx: &Ctx, access: Access) -> Result<Tx> {
    Ok(match access {
        Access::Read => ctx.store.read().await?,
        Access::ReadOne => ctx.store.single().await?,
        Access::Write => ctx.store.write().await?,
    })
}

/// Writes the outcome of the caller's audited call inside the transaction
/// [`open`] began: the record with it, or, for a record committed before,
/// the outcome alone (a no-op for unaudited callers).
pub async fn complete_in(
    ctx: &Ctx,
    tx: &mut Tx,
    caller: &Caller,
    status: u16,
    code: Option<&'static str>,
) -> Result<()> {
    let Some(record) = caller.audit.as_deref() else {
        return Ok(());
    };
    if record.get() == State::Reading {
        record.set(State::Read(status, code));
        return Ok(());
    }
    let at = ctx.now().to_text();
    let outcome = Outcome {
        native_status: Some(status),
        error_code: code,
        at: &at,
    };
    let state = record.get();
    let Some(completed) = state.completed() else {
        return Ok(());
    };
    match state {
        State::InTx(id) => store::complete_call(tx, id, outcome).await.map(drop),
        _ => store::insert_call(tx, &record.call, Some(outcome))
            .await
            .map(drop),
    }
    .map_err(fail_closed)?;
    record.set(completed);
    Ok(())
}

/// For a write that ends the call's record in its own statement (see
/// `store::handoff::Handoff`): the record to write whole or to complete, if
/// the caller is audited and its transaction is open, and the time. Call
/// [`completed_in`] once that statement succeeded.
pub fn outcome_target<'a>(ctx: &Ctx, caller: &'a Caller) -> Option<(CallEnd<'a>, String)> {
    let record = caller.audit.as_deref()?;
    let end = match record.get() {
        State::Deferred => CallEnd::Insert(&record.call),
        State::InTx(id) => CallEnd::Complete(id),
        _ => return None,
    };
    Some((end, ctx.now().to_text()))
}

/// Marks the caller's record as completed inside the transaction (the
/// statement [`outcome_target`] fed wrote it).
pub fn completed_in(caller: &Caller) {
    if let Some(record) = caller.audit.as_deref()
        && let Some(completed) = record.get().completed()
    {
        record.set(completed);
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
        let at = ctx.now().to_text();
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
/// record is durable. A record the use case did not complete is written
/// without its outcome first, so the operation's writes never commit
/// without it ([`finish`] adds the outcome).
pub async fn commit(ctx: &Ctx, mut tx: Tx, caller: &Caller) -> Result<()> {
    let Some(record) = caller.audit.as_deref() else {
        tx.commit().await?;
        return Ok(());
    };
    let state = match record.get() {
        State::Deferred => State::InTx(
            store::insert_call(&mut tx, &record.call, None)
                .await
                .map_err(fail_closed)?,
        ),
        State::Reading => {
            // Not completed: [`finish`] appends it with the outcome.
            tx.commit().await?;
            record.set(State::Pending);
            return Ok(());
        }
        State::Read(status, code) => {
            tx.commit().await?;
            return append(ctx, record, status, code).await;
        }
        other => other,
    };
    tx.commit().await?;
    match state {
        State::InTx(id) => record.set(State::Committed(id)),
        State::Completed(_) => record.set(State::Done),
        _ => {}
    }
    Ok(())
}

/// Ends an audited call: when its outcome was not committed with the
/// operation (a refusal rolled the operation back, the call failed before
/// the operation began, or an MCP read), records it now, in a transaction
/// of its own; `ok_status` is the status of a success. A failure here is
/// the call's failure (503), so no answer leaves without its record.
///
/// A refusal of a caller whose token came from the cache unverified
/// (`auth::authenticate_deferred`) first checks the token: revoked, the
/// call is a 401 with no record, as if refused at the door
/// (`auth::check_before_refusal`). A success needs no check: the use
/// case's route lookup made it.
pub async fn finish<T>(ctx: &Ctx, caller: &Caller, result: Result<T>, ok_status: u16) -> Result<T> {
    if result.is_err() {
        super::auth::check_before_refusal(ctx, caller).await?;
    }
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
    if state == State::Pending {
        append(ctx, record, status, code).await?;
        return result;
    }
    let at = ctx.now().to_text();
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

/// Runs an audited read that needs one snapshot and no write on SQLite's
/// writer (`store::batch::Writer::read`): `read` runs there, on the
/// writer's connection, and when it succeeds the call's record, with
/// `ok_status`, is committed before the answer comes back. A refusal comes
/// back at once, with nothing written: [`finish`] records it as any
/// refusal (after the token check). `None` when this does not apply
/// (PostgreSQL, an unaudited caller, a record already written or in a
/// transaction): use [`open`].
///
/// `read` runs on the writer's thread: it may only run statements on the
/// transaction it is given, which complete at once (drive them with
/// `store::batch::run_local`), and never wait for anything else.
pub async fn read_on_writer<T: Send + 'static>(
    ctx: &Ctx,
    caller: &Caller,
    ok_status: u16,
    read: impl FnOnce(&mut Tx) -> Result<T> + Send + 'static,
) -> Option<Result<T>> {
    let writer = ctx.store.writer()?;
    let record = caller.audit.as_deref()?;
    if record.settled() != State::Pending {
        return None;
    }
    let call = record.call.clone();
    let clock = ctx.config.clock.clone();
    let (answer, wait) = tokio::sync::oneshot::channel::<Result<T>>();
    let job: WriterRead = Box::new(move |tx| match read(tx) {
        Ok(value) => {
            let finished = store::FinishedCall {
                call,
                native_status: ok_status,
                error_code: None,
                completed_at: clock.now().to_text(),
            };
            let deliver: Deliver = Box::new(move |committed| {
                let _ = answer.send(committed.map(|()| value).map_err(fail_closed));
            });
            Some((finished, deliver))
        }
        Err(refused) => {
            let _ = answer.send(Err(refused));
            None
        }
    });
    if let Err(gone) = writer.read(job) {
        return Some(Err(fail_closed(gone)));
    }
    let result = wait
        .await
        .unwrap_or_else(|_| Err(fail_closed(anyhow::anyhow!("the read was dropped unrun"))));
    if result.is_ok() {
        record.set(State::Done);
    }
    Some(result)
}

/// Writes a record not written yet, whole, with its outcome, committed on
/// its own (see `store::audit::append_call`).
async fn append(ctx: &Ctx, record: &Record, status: u16, code: Option<&'static str>) -> Result<()> {
    let finished = store::FinishedCall {
        call: record.call.clone(),
        native_status: status,
        error_code: code,
        completed_at: ctx.now().to_text(),
    };
    let appended = store::append_call(&ctx.store, finished).await;
    record.set_expected(None);
    appended.map_err(fail_closed)?;
    record.set(State::Done);
    Ok(())
}
