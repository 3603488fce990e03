//! The audit of agent tool calls (MCP `tools/call` and the native agent
//! routes). Every call has one record; only argument names are recorded,
//! never values.
//!
//! A call's record rides on its [`Caller`] (prepared by [`prepare_api`],
//! or committed with its tool decision by [`begin_mcp`]). The use case
//! opens an [`AuditedTx`] with [`begin`], writes through it, and commits it
//! with the call's outcome ([`AuditedTx::commit_ok`],
//! [`AuditedTx::commit_answer`]): the record, with that outcome, is written
//! in the same transaction as the operation's writes (for an MCP call,
//! the outcome is added to its decision's record), so both commit or
//! neither does, and if the record cannot be written nothing the operation
//! did stays (503, fail closed). A call refused before or during its
//! transaction (which then rolls back) is recorded by [`finish`], in a
//! transaction of its own, before the answer leaves.
//!
//! Three measured shortcuts keep this shape (each has its decision record):
//! a read writes no transaction of its own for its record, which is
//! appended after the read and committed before the answer
//! (`store::audit::append_call`, ADR 0006 and 0017); a new submission's
//! record is written by the handoff statement itself
//! ([`AuditedTx::outcome_target`], ADR 0009); and on SQLite a grant read
//! runs on the group-commit writer's thread ([`read_on_writer`], ADR 0024).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// The id of the record committed with its MCP decision (its outcome is
    /// added later); `None` for a record not written yet.
    decided: Option<i64>,
    /// Set once the record with its outcome is committed.
    done: AtomicBool,
}

impl Record {
    fn new(call: NewCall, decided: Option<i64>) -> Arc<Record> {
        Arc::new(Record {
            call,
            decided,
            done: AtomicBool::new(false),
        })
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn set_done(&self) {
        self.done.store(true, Ordering::Release);
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
        caller.audit = Some(Record::new(record, Some(id)));
    }
    Ok(check)
}

/// Prepares the record of a native agent-route call (the native routes have
/// no tool policy: the decision is `allow`, reason `native_api`). Nothing is
/// written yet: the use case writes it, whole, with its outcome (see [`begin`]).
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
    caller.audit = Some(Record::new(record, None));
    Ok(())
}

/// A use case's transaction, carrying where its caller's audit record
/// goes; it derefs to the store's [`Tx`] for the use case's statements.
/// [`AuditedTx::commit`] writes the record with the call's outcome in the
/// same transaction as the operation's writes, so both commit or neither
/// does; dropped, it rolls back and the record stays unwritten ([`finish`]
/// records the refusal).
pub struct AuditedTx<'c> {
    tx: Tx,
    /// The caller's record and where its outcome goes; `None` for an
    /// unaudited caller or a record committed already.
    audit: Option<(&'c Record, End)>,
}

/// Where the outcome of the call goes.
enum End {
    /// The record, whole with its outcome, inserted in this transaction.
    Insert,
    /// The outcome added, in this transaction, to the record committed with
    /// its MCP decision.
    Complete(i64),
    /// A read: the record is appended whole once this transaction
    /// committed (`store::audit::append_call`).
    Append,
    /// A statement of the use case wrote the outcome ([`AuditedTx::outcome_target`]).
    Written,
}

impl std::ops::Deref for AuditedTx<'_> {
    type Target = Tx;
    fn deref(&self) -> &Tx {
        &self.tx
    }
}

impl std::ops::DerefMut for AuditedTx<'_> {
    fn deref_mut(&mut self) -> &mut Tx {
        &mut self.tx
    }
}

/// Begins the transaction of a use case run for `caller`. An audited
/// call's transaction is a write transaction (a consistent snapshot for
/// reads) that will hold its record, except a read whose record is not
/// written yet: it reads in a read transaction and its record is appended
/// after. Unaudited callers get a plain read or write transaction.
pub async fn begin<'c>(ctx: &Ctx, caller: &'c Caller, access: Access) -> Result<AuditedTx<'c>> {
    let Some(record) = caller.audit.as_deref().filter(|r| !r.is_done()) else {
        return Ok(AuditedTx {
            tx: plain(ctx, access).await?,
            audit: None,
        });
    };
    let (tx, end) = match (record.decided, access) {
        (None, Access::Read | Access::ReadOne) => (plain(ctx, access).await?, End::Append),
        (decided, access) => {
            let tx = match access {
                Access::Read | Access::ReadOne => ctx.store.write_snapshot().await,
                Access::Write => ctx.store.write().await,
            }
            .map_err(fail_closed)?;
            (tx, decided.map_or(End::Insert, End::Complete))
        }
    };
    Ok(AuditedTx {
        tx,
        audit: Some((record, end)),
    })
}

/// A read or write transaction with no audit record in it.
async fn plain(ctx: &Ctx, access: Access) -> Result<Tx> {
    Ok(match access {
        Access::Read => ctx.store.read().await?,
        Access::ReadOne => ctx.store.single().await?,
        Access::Write => ctx.store.write().await?,
    })
}

impl<'c> AuditedTx<'c> {
    /// Commits with the outcome of a success (`200`).
    pub async fn commit_ok(self, ctx: &Ctx) -> Result<()> {
        self.commit(ctx, 200, None).await
    }

    /// Commits with the outcome of `answer`: `200`, or its refusal's status
    /// and code (a refusal that keeps writes, such as a blocked handoff's
    /// evaluation).
    pub async fn commit_answer<T>(self, ctx: &Ctx, answer: &Result<T>) -> Result<()> {
        match answer {
            Ok(_) => self.commit(ctx, 200, None).await,
            Err(e) => self.commit(ctx, e.status(), Some(e.code())).await,
        }
    }

    /// Writes the call's record with this outcome (or adds the outcome to
    /// its decision's record, or leaves it to the statement that wrote it)
    /// and commits; a read's record is appended after. Once this returned
    /// the record is durable.
    pub async fn commit(self, ctx: &Ctx, status: u16, code: Option<&'static str>) -> Result<()> {
        let AuditedTx { mut tx, audit } = self;
        let Some((record, end)) = audit else {
            tx.commit().await?;
            return Ok(());
        };
        let at = ctx.now().to_text();
        let outcome = Outcome {
            native_status: Some(status),
            error_code: code,
            at: &at,
        };
        match &end {
            End::Insert => store::insert_call(&mut tx, &record.call, Some(outcome))
                .await
                .map(drop),
            End::Complete(id) => store::complete_call(&mut tx, *id, outcome).await.map(drop),
            End::Append | End::Written => Ok(()),
        }
        .map_err(fail_closed)?;
        tx.commit().await?;
        if let End::Append = end {
            append(ctx, record, status, code).await?;
        }
        record.set_done();
        Ok(())
    }

    /// For a write that ends the call's record in its own statement (see
    /// `store::handoff::Handoff`): the record to write whole or to complete,
    /// and the time; `None` when this transaction holds no record. Call
    /// [`AuditedTx::outcome_written`] once that statement succeeded.
    pub fn outcome_target(&self, ctx: &Ctx) -> Option<(CallEnd<'c>, String)> {
        let (record, end) = self.audit.as_ref()?;
        let end = match *end {
            End::Insert => CallEnd::Insert(&record.call),
            End::Complete(id) => CallEnd::Complete(id),
            _ => return None,
        };
        Some((end, ctx.now().to_text()))
    }

    /// Notes that a statement of the use case wrote the outcome
    /// ([`AuditedTx::outcome_target`]).
    pub fn outcome_written(&mut self) {
        if let Some((_, end @ (End::Insert | End::Complete(_)))) = &mut self.audit {
            *end = End::Written;
        }
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
    if record.is_done() {
        return result;
    }
    let (status, code) = match &result {
        Ok(_) => (ok_status, None),
        Err(e) => (e.status(), Some(e.code())),
    };
    let Some(id) = record.decided else {
        append(ctx, record, status, code).await?;
        return result;
    };
    let at = ctx.now().to_text();
    let outcome = Outcome {
        native_status: Some(status),
        error_code: code,
        at: &at,
    };
    let mut tx = ctx.store.write().await.map_err(fail_closed)?;
    store::complete_call(&mut tx, id, outcome)
        .await
        .map_err(fail_closed)?;
    tx.commit().await.map_err(fail_closed)?;
    record.set_done();
    result
}

/// Runs an audited read that needs one snapshot and no write on SQLite's
/// writer (`store::batch::Writer::read`): `read` runs there, on the
/// writer's connection, and when it succeeds the call's record, with
/// `ok_status`, is committed before the answer comes back. A refusal comes
/// back at once, with nothing written: [`finish`] records it as any
/// refusal (after the token check). `None` when this does not apply
/// (PostgreSQL, an unaudited caller, a record already written or committed
/// with its MCP decision): use [`begin`].
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
    if record.is_done() || record.decided.is_some() {
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
        record.set_done();
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
    store::append_call(&ctx.store, finished)
        .await
        .map_err(fail_closed)?;
    record.set_done();
    Ok(())
}
