//! New submissions on PostgreSQL share transactions: each submission waits
//! in one queue; whoever finds one of [`SLOTS`] free takes up to [`MOST`]
//! waiting submissions and runs them in one transaction, so a `BEGIN` and a
//! `COMMIT` (and its WAL flush) serve several (ADR 0037). Each submission
//! still has its own locking lookup, decision, admission and handoff
//! statement, with its call's record, exactly as alone; only the
//! transaction is shared, so they commit together or not at all.
//!
//! Only the ordinary case is combined: a submission whose key was used, that
//! its grant refuses, whose admission blocks, or whose grant is already in
//! the batch goes back to its caller, who runs it alone (the lock it then
//! waits for is released when the batch commits). If any statement of the
//! batch fails, nothing of it stays and every submission of it runs alone.
//!
//! Lock order: the grants are locked in id order, then the repositories'
//! issue counters in id order, so two batches never wait on each other in
//! a cycle, and a lone submission (grant, then repository) fits the order.
//!
//! The batch runs in a task of its own: a caller that goes away (its client
//! closed the connection) does not cancel the others' transaction.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, oneshot};

use super::agent::{KeyedRoute, locate_many_for_key};
use super::auth::Caller;
use super::submit::{Admitted, Outcome, Receipt, SubmitInput, judge};
use super::view::{GrantView, SubmissionView};
use super::{Ctx, Error, Result, audit};
use crate::domain::ids::GrantId;
use crate::store::audit::CallEnd;
use crate::store::grants::GrantRow;
use crate::store::issues::SubmissionRow;
use crate::store::{Backend, handoff};

/// How many batches may run at a time.
const SLOTS: usize = 2;
/// The most submissions in one batch.
const MOST: usize = 8;

/// The queue of submissions waiting for a batch.
pub struct Combiner {
    queue: Mutex<VecDeque<Job>>,
    slots: Arc<Semaphore>,
}

impl Default for Combiner {
    fn default() -> Self {
        Combiner {
            queue: Mutex::default(),
            slots: Arc::new(Semaphore::new(SLOTS)),
        }
    }
}

impl Combiner {
    /// Takes the oldest waiting submissions, at most [`MOST`].
    fn take(&self) -> Vec<Job> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = queue.len().min(MOST);
        queue.drain(..n).collect()
    }

    fn push(&self, job: Job) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push_back(job);
    }
}

/// One waiting submission.
struct Job {
    caller: Caller,
    owner: String,
    repo: String,
    id: GrantId,
    input: SubmitInput,
    content: String,
    reply: oneshot::Sender<Reply>,
}

/// What a batch did with a submission.
enum Reply {
    /// It ran: the answer (a commit's failure too).
    Done(Box<Result<Receipt>>),
    /// Its caller runs it alone.
    Alone,
}

impl Job {
    fn answer(self, reply: Reply) {
        // A caller that went away reads no answer; its work is committed.
        let _ = self.reply.send(reply);
    }
}

/// Submits `input` in a shared transaction on PostgreSQL. `None` when the
/// caller must run it alone (SQLite, whose writer batches on its own, or a
/// submission the batch gave back).
pub(super) async fn submit(
    ctx: &Ctx,
    caller: &Caller,
    route: (&str, &str, GrantId),
    input: &SubmitInput,
    content: &str,
) -> Option<Result<Receipt>> {
    let native = matches!(
        audit::shared_target_of(ctx, caller),
        Some((CallEnd::Insert(_), _))
    );
    if ctx.store.backend() != Backend::Postgres || !native {
        return None;
    }
    let (owner, repo, id) = route;
    let (reply, mut answer) = oneshot::channel();
    ctx.combiner.push(Job {
        caller: caller.clone(),
        owner: owner.to_owned(),
        repo: repo.to_owned(),
        id,
        input: input.clone(),
        content: content.to_owned(),
        reply,
    });
    let done = |got: std::result::Result<Reply, _>| match got {
        Ok(Reply::Done(answer)) => Some(*answer),
        Ok(Reply::Alone) | Err(_) => None,
    };
    loop {
        tokio::select! {
            biased;
            got = &mut answer => return done(got),
            slot = ctx.combiner.slots.clone().acquire_owned() => {
                let slot = slot.ok()?;
                let jobs = ctx.combiner.take();
                if jobs.is_empty() {
                    // This submission is in a batch already.
                    drop(slot);
                    return done(answer.await);
                }
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    run(&ctx, jobs).await;
                    drop(slot);
                });
            }
        }
    }
}

/// A submission judged ready for its handoff in the batch's transaction.
struct Ready {
    job: Job,
    grant: GrantRow,
    at: String,
}

/// Runs one batch (see the module's doc).
async fn run(ctx: &Ctx, mut jobs: Vec<Job>) {
    jobs.sort_by_key(|j| j.id.0);
    let mut batch: Vec<Job> = Vec::with_capacity(jobs.len());
    for job in jobs {
        if batch.last().is_some_and(|b| b.id == job.id) {
            job.answer(Reply::Alone);
        } else {
            batch.push(job);
        }
    }
    let Ok(mut tx) = ctx.store.write().await else {
        return alone(batch);
    };
    let routes: Vec<_> = batch
        .iter()
        .map(|job| KeyedRoute {
            caller: &job.caller,
            owner: &job.owner,
            repo: &job.repo,
            id: job.id,
            request_key: job.input.request_key.as_str(),
        })
        .collect();
    let located = locate_many_for_key(&mut tx, &routes).await;
    drop(routes);
    let Ok(located) = located else {
        drop(tx);
        return alone(batch);
    };
    let mut ready: Vec<Ready> = Vec::with_capacity(batch.len());
    let mut pending = Vec::with_capacity(batch.len());
    let mut batch = batch.into_iter().zip(located);
    while let Some((job, found)) = batch.next() {
        let Some(found) = found.filter(|f| f.used.is_none()) else {
            job.answer(Reply::Alone);
            continue;
        };
        let at = ctx.now();
        match judge(ctx, &mut tx, &found.grant, &job.input, at, found.inputs).await {
            Ok(judged) if !judged.package.blocked() => {
                pending.push(judged);
                ready.push(Ready {
                    job,
                    grant: found.grant,
                    at: at.to_text(),
                });
            }
            // Refused or blocked: it runs alone, and is answered there.
            Ok(_) => job.answer(Reply::Alone),
            Err(e) if e.status() < 500 => job.answer(Reply::Alone),
            Err(_) => {
                drop(tx);
                let rest = batch.map(|(job, _)| job);
                return alone(ready.into_iter().map(|r| r.job).chain([job]).chain(rest));
            }
        }
    }
    if ready.is_empty() {
        // Rolled back: a policy snapshot captured here is captured again.
        return;
    }
    let targets: Vec<_> = ready
        .iter()
        .map(|r| audit::shared_target_of(ctx, &r.job.caller))
        .collect();
    let admitted: Vec<Admitted<'_>> = ready
        .iter()
        .zip(pending)
        .map(|(r, pending)| {
            let job = &r.job;
            Admitted::new(
                ctx,
                &job.caller,
                &r.grant,
                &job.input,
                &job.content,
                pending,
                &r.at,
            )
        })
        .collect();
    let handoffs: Vec<_> = admitted
        .iter()
        .zip(&targets)
        .map(|(a, target)| a.handoff(target.as_ref().map(|(end, at)| (*end, at.as_str()))))
        .collect();
    let written = handoff::hand_off_many(&mut tx, &handoffs).await;
    drop(handoffs);
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            // The statement failed (a racer's request key, say): the
            // transaction is lost, and each submission runs alone.
            tracing::debug!(submissions = ready.len(), error = %e, "a batch of submissions failed");
            drop(tx);
            return alone(ready.into_iter().map(|r| r.job));
        }
    };
    let rows: Vec<_> = admitted
        .into_iter()
        .zip(written)
        .map(|(a, w)| a.done(w))
        .collect();
    let committed = tx.commit().await;
    metrics::counter!("writ_submission_batches_total").increment(1);
    for (r, (grant, receipt)) in ready.into_iter().zip(rows) {
        let job = r.job;
        let answer = match &committed {
            Ok(()) => {
                audit::shared_written(&job.caller);
                metrics::counter!("writ_submissions_batched_total").increment(1);
                receipt_of(ctx, &grant, &receipt)
            }
            Err(e) => Err(Error::from(e.clone())),
        };
        job.answer(Reply::Done(Box::new(answer)));
    }
}

fn alone(jobs: impl IntoIterator<Item = Job>) {
    for job in jobs {
        job.answer(Reply::Alone);
    }
}

fn receipt_of(ctx: &Ctx, grant: &GrantRow, receipt: &SubmissionRow) -> Result<Receipt> {
    Ok(Receipt {
        outcome: Outcome::Created,
        grant: GrantView::from_row(grant, &ctx.config.public_base())?,
        submission: SubmissionView::from_row(receipt),
    })
}
