//! The server: one function per service use case (`service::forms`,
//! `service::agent`, `service::submit`, `service::issues`, the setup
//! routes), each applied whole to the working database, as its one
//! transaction is. Every decision is made by Writ's own domain rules
//! (`domain::grant`, `domain::admission`, `domain::submission`); what is
//! modelled here is the order of the steps inside each transaction and what
//! each writes.

use writ::domain::admission::Status;
use writ::domain::grant::{
    ConfirmOutcome, GrantFacts, GrantState, HumanEvent, Refusal, decide_confirm, decide_submit,
    human_transition,
};
use writ::domain::submission::{ReceiptStatus, receipt_status};
use writ::domain::time::Timestamp;

use crate::model::{
    Answer, Bot, Confirmed, Db, Draft, FsContext, Grant, Human, Issue, Key, Outcome, Permission,
    Place, Plan, Receipt, Repo, Request, Text,
};
use crate::tables::{Tables, max_submissions};

/// A deliberate bug, to show that the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Submit judges a withdrawn grant as if it were active.
    SubmitIgnoresWithdraw,
    /// Submit inserts the issue before it looks the request key up, and no
    /// unique `(grant_id, request_key)` stops the second insert.
    KeyLookupAfterInsert,
    /// Submit judges the grant and runs the handoff admission before it
    /// looks the request key up (the unique constraint still holds).
    ChecksBeforeKeyLookup,
    /// An answer leaves as soon as its job is applied, before the group
    /// commit that makes it durable.
    AnswerBeforeCommit,
    /// Approve makes the grant active even when its admission blocks.
    ApproveIgnoresAdmission,
    /// The agent routes find the grant for any bot, not only its agent.
    AnyBotMayAct,
}

/// A setup-privilege or repository-admin change that no model client
/// waits on (each its own transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setup {
    /// `POST /{owner}/{repo}/settings/filesystem-context` (approve `read`, or remove).
    FsContext(FsContext),
    /// `PUT /api/v1/admin/mcp/filesystem/health`.
    FilesystemHealth(bool),
    /// `DELETE /api/v1/repos/acme/widgets/issues/{index}` (by issue id here).
    DeleteIssue(u8),
    /// `POST /api/v1/repos/acme/widgets/issues/{index}/transfer` to `acme/archive`.
    TransferIssue(u8),
}

/// What a request did.
#[derive(Clone, Copy, Debug)]
pub struct Handled {
    pub answer: Answer,
    /// An approval or handoff evaluation was persisted.
    pub evaluation_stored: bool,
}

fn answer(answer: Answer) -> Handled {
    Handled {
        answer,
        evaluation_stored: false,
    }
}

fn evaluated(answer: Answer) -> Handled {
    Handled {
        answer,
        evaluation_stored: true,
    }
}

/// The server's code path, with at most one deliberate bug.
pub struct Server {
    pub tables: Tables,
    pub mutation: Option<Mutation>,
}

impl Server {
    fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }

    /// Runs one request as its one transaction against `db`.
    pub fn handle(&self, db: &mut Db, request: Request, expired: bool) -> Handled {
        let now = self.tables.now(expired);
        match request {
            Request::Prepare { by, draft } => self.prepare(db, by, draft, now),
            Request::Edit {
                by,
                draft,
                state_revision,
            } => self.edit(db, by, draft, state_revision, now),
            Request::Approve { by, state_revision } => self.approve(db, by, state_revision),
            Request::Withdraw { by, state_revision } => self.withdraw(db, by, state_revision),
            Request::Confirm { by, digest } => self.confirm(db, by, digest, now),
            Request::Submit {
                by,
                digest,
                key,
                text,
            } => self.submit(db, by, digest, key, text, now),
            Request::Readback { by, key } => self.readback(db, by, key),
        }
    }

    /// `GrantForm::parse`: `expires_at` must be in the future.
    fn form_parses(&self, draft: Draft, now: Timestamp) -> bool {
        self.tables.expires_at(draft.plan).is_none_or(|at| at > now)
    }

    /// `service::forms::prepare` (`prepare_in`).
    fn prepare(&self, db: &mut Db, by: Human, draft: Draft, now: Timestamp) -> Handled {
        if !self.form_parses(draft, now) {
            return answer(Answer::Unprocessable);
        }
        // Both people have at least `write`, which preparing needs.
        assert!(db.grant.is_none(), "the model prepares one grant");
        db.grant = Some(Grant {
            state: GrantState::AwaitingAgent,
            state_revision: 1,
            issuer: by,
            proposal: draft,
            approver: None,
            approval_admission: None,
            confirmed_by: None,
            submission_count: 0,
            edits: 0,
        });
        answer(Answer::Changed {
            state: GrantState::AwaitingAgent,
            state_revision: 1,
        })
    }

    /// `service::forms::edit`.
    fn edit(&self, db: &mut Db, by: Human, draft: Draft, posted: u8, now: Timestamp) -> Handled {
        if !self.form_parses(draft, now) {
            return answer(Answer::Unprocessable);
        }
        let admin = db.settings.permission(by) == Permission::Admin;
        let Some(grant) = db.grant.as_mut() else {
            return answer(Answer::NotFound);
        };
        if grant.issuer != by && !admin {
            return answer(Answer::Forbidden);
        }
        let to = match judge(grant, posted, HumanEvent::Edit) {
            Ok(to) => to,
            Err(refusal) => return answer(Answer::Refused(refusal)),
        };
        grant.proposal = draft;
        grant.confirmed_by = None;
        grant.edits += 1;
        answer(cas(grant, to))
    }

    /// `service::forms::approve`, warnings acknowledged on the form.
    fn approve(&self, db: &mut Db, by: Human, posted: u8) -> Handled {
        let settings = db.settings;
        let status = db
            .grant
            .as_ref()
            .map(|g| self.admission(db, g.proposal.plan));
        let Some(grant) = db.grant.as_mut() else {
            return answer(Answer::NotFound);
        };
        if settings.permission(by) != Permission::Admin {
            return answer(Answer::Forbidden);
        }
        if settings.require_distinct_approver && grant.issuer == by {
            return answer(Answer::Forbidden);
        }
        let to = match judge(grant, posted, HumanEvent::Approve) {
            Ok(to) => to,
            Err(refusal) => return answer(Answer::Refused(refusal)),
        };
        // Admission at approval, persisted in this transaction.
        let status = status.expect("the grant exists");
        if status == Status::Blocked && !self.mutated(Mutation::ApproveIgnoresAdmission) {
            return evaluated(Answer::AdmissionBlocked);
        }
        grant.approver = Some(by);
        grant.approval_admission = Some(status);
        evaluated(cas(grant, to))
    }

    /// `service::forms::withdraw`.
    fn withdraw(&self, db: &mut Db, by: Human, posted: u8) -> Handled {
        let admin = db.settings.permission(by) == Permission::Admin;
        let Some(grant) = db.grant.as_mut() else {
            return answer(Answer::NotFound);
        };
        if grant.issuer != by && !admin {
            return answer(Answer::Forbidden);
        }
        let to = match judge(grant, posted, HumanEvent::Withdraw) {
            Ok(to) => to,
            Err(refusal) => return answer(Answer::Refused(refusal)),
        };
        answer(cas(grant, to))
    }

    /// `service::agent::locate`: the caller's grant, or 404 for another bot.
    fn locate<'a>(&self, db: &'a Db, by: Bot) -> Option<&'a Grant> {
        db.grant
            .as_ref()
            .filter(|g| g.proposal.agent == by || self.mutated(Mutation::AnyBotMayAct))
    }

    /// `service::agent::facts`.
    fn facts<'a>(&'a self, grant: &Grant) -> GrantFacts<'a> {
        GrantFacts {
            state: grant.state,
            digest: self.tables.digest(grant.proposal).as_str(),
            expires_at: self.tables.expires_at(grant.proposal.plan),
            submission_count: i64::from(grant.submission_count),
            max_submissions: max_submissions(grant.proposal.plan),
        }
    }

    /// `service::admission::evaluate_in` / `persist_in`: the one admission
    /// function on the repository's context and the current health.
    fn admission(&self, db: &Db, plan: Plan) -> Status {
        self.tables
            .admission(plan, db.fs_context, db.filesystem_healthy)
    }

    /// `service::agent::confirm`.
    fn confirm(&self, db: &mut Db, by: Bot, digest: Draft, now: Timestamp) -> Handled {
        let Some(grant) = self.locate(db, by) else {
            return answer(Answer::NotFound);
        };
        let agent = grant.proposal.agent;
        match decide_confirm(&self.facts(grant), self.tables.digest(digest), now) {
            Err(refusal) => answer(Answer::Refused(refusal)),
            Ok(ConfirmOutcome::AlreadyConfirmed) => answer(Answer::Confirmed {
                outcome: Confirmed::AlreadyConfirmed,
                agent,
            }),
            Ok(ConfirmOutcome::Transition) => {
                let grant = db.grant.as_mut().expect("located");
                grant.state = GrantState::AwaitingHuman;
                grant.state_revision += 1;
                grant.confirmed_by = Some(by);
                answer(Answer::Confirmed {
                    outcome: Confirmed::Transition,
                    agent,
                })
            }
        }
    }

    /// `service::submit::submit`: lock the grant, resolve the request key
    /// (replay or conflict), else judge, admit and hand off.
    fn submit(
        &self,
        db: &mut Db,
        by: Bot,
        digest: Draft,
        key: Key,
        text: Text,
        now: Timestamp,
    ) -> Handled {
        if self.locate(db, by).is_none() {
            return answer(Answer::NotFound);
        }
        let Some(existing) = db.receipt(key).cloned() else {
            return self.create(db, by, digest, key, text, now);
        };
        if self.mutated(Mutation::KeyLookupAfterInsert) {
            let created = self.create(db, by, digest, key, text, now);
            db.receipts[key.slot()] = Some(existing.clone());
            if !matches!(created.answer, Answer::Submission { .. }) {
                return created;
            }
            let replayed = replay_or_conflict(db, &existing, digest, text);
            return evaluated(replayed.answer);
        }
        if self.mutated(Mutation::ChecksBeforeKeyLookup) {
            let grant = db.grant.as_ref().expect("located");
            if let Err(refusal) = decide_submit(&self.facts(grant), self.tables.digest(digest), now)
            {
                return answer(Answer::Refused(refusal));
            }
            if self.admission(db, grant.proposal.plan) == Status::Blocked {
                return evaluated(Answer::AdmissionBlocked);
            }
            // The insert then hits the unique key and the transaction
            // rolls back; the answer is read again as a replay or conflict.
            return replay_or_conflict(db, &existing, digest, text);
        }
        replay_or_conflict(db, &existing, digest, text)
    }

    /// `service::submit::create` and `store::handoff::hand_off`.
    fn create(
        &self,
        db: &mut Db,
        by: Bot,
        digest: Draft,
        key: Key,
        text: Text,
        now: Timestamp,
    ) -> Handled {
        let grant = db.grant.as_ref().expect("located");
        let mut facts = self.facts(grant);
        if self.mutated(Mutation::SubmitIgnoresWithdraw) && facts.state == GrantState::Revoked {
            facts.state = GrantState::Active;
        }
        if let Err(refusal) = decide_submit(&facts, self.tables.digest(digest), now) {
            return answer(Answer::Refused(refusal));
        }
        let handoff_admission = self.admission(db, grant.proposal.plan);
        if handoff_admission == Status::Blocked {
            // Only the evaluation is committed; the key stays unused.
            return evaluated(Answer::AdmissionBlocked);
        }
        let place = (Repo::Widgets, db.next_index[Repo::Widgets as usize]);
        let receipt = Receipt {
            agent: by,
            proposal: digest,
            text,
            issue: db.issues.len() as u8 + 1,
            committed_at: place,
            approver: grant.approver,
            approval_admission: grant.approval_admission,
            handoff_admission,
            issuer: grant.issuer,
            withdrawn_before: grant.state == GrantState::Revoked,
        };
        db.next_index[Repo::Widgets as usize] += 1;
        db.issues.push(Issue {
            key,
            at: Some(place),
        });
        let grant = db.grant.as_mut().expect("located");
        grant.submission_count += 1;
        let grant_state = grant.state;
        let issue = receipt.issue;
        db.receipts[key.slot()] = Some(receipt);
        evaluated(Answer::Submission {
            outcome: Outcome::Created,
            agent: by,
            issue,
            status: ReceiptStatus::Submitted,
            grant_state,
        })
    }

    /// `service::submit::readback`.
    fn readback(&self, db: &mut Db, by: Bot, key: Key) -> Handled {
        let Some(grant) = self.locate(db, by) else {
            return answer(Answer::NotFound);
        };
        let Some(receipt) = db.receipt(key) else {
            return answer(Answer::NotFound);
        };
        answer(Answer::Submission {
            outcome: Outcome::ReadBack,
            agent: receipt.agent,
            issue: receipt.issue,
            status: status_of(db, receipt),
            grant_state: grant.state,
        })
    }

    /// Applies a setup change; `false` when it does not apply now.
    pub fn setup(&self, db: &mut Db, change: Setup) -> bool {
        match change {
            Setup::FsContext(to) => {
                let applies = match to {
                    FsContext::Approved => db.fs_context != FsContext::Approved,
                    FsContext::Removed => db.fs_context == FsContext::Approved,
                    FsContext::None => false,
                };
                if applies {
                    db.fs_context = to;
                }
                applies
            }
            Setup::FilesystemHealth(healthy) => {
                let applies = db.filesystem_healthy != healthy;
                db.filesystem_healthy = healthy;
                applies
            }
            Setup::DeleteIssue(id) => match issue_mut(db, id) {
                Some(issue) if issue.at.is_some() => {
                    issue.at = None;
                    true
                }
                _ => false,
            },
            Setup::TransferIssue(id) => {
                let index = db.next_index[Repo::Archive as usize];
                match issue_mut(db, id) {
                    Some(issue) if matches!(issue.at, Some((Repo::Widgets, _))) => {
                        issue.at = Some((Repo::Archive, index));
                        db.next_index[Repo::Archive as usize] += 1;
                        true
                    }
                    _ => false,
                }
            }
        }
    }
}

fn issue_mut(db: &mut Db, id: u8) -> Option<&mut Issue> {
    db.issues.get_mut(usize::from(id).checked_sub(1)?)
}

/// `service::forms::judge`: the posted revision, then the transition.
fn judge(grant: &Grant, posted: u8, event: HumanEvent) -> Result<GrantState, Refusal> {
    if posted != grant.state_revision {
        return Err(Refusal::StateConflict);
    }
    human_transition(event, grant.state)
}

/// `service::forms::cas`: the new state under the next revision.
fn cas(grant: &mut Grant, to: GrantState) -> Answer {
    grant.state = to;
    grant.state_revision += 1;
    Answer::Changed {
        state: to,
        state_revision: grant.state_revision,
    }
}

/// `service::submit::replay_or_conflict`: same content answers the
/// original receipt, other content is a conflict; nothing is written.
fn replay_or_conflict(db: &Db, existing: &Receipt, digest: Draft, text: Text) -> Handled {
    if existing.proposal != digest || existing.text != text {
        return answer(Answer::Refused(Refusal::RequestKeyConflict));
    }
    let grant = db.grant.as_ref().expect("a receipt has a grant");
    answer(Answer::Submission {
        outcome: Outcome::Replayed,
        agent: existing.agent,
        issue: existing.issue,
        status: status_of(db, existing),
        grant_state: grant.state,
    })
}

/// `domain::submission::receipt_status` of a receipt now.
pub fn status_of(db: &Db, receipt: &Receipt) -> ReceiptStatus {
    let wide = |(repo, index): Place| (repo as i64, i64::from(index));
    let now = db.issues[usize::from(receipt.issue) - 1].at;
    receipt_status(wide(receipt.committed_at), now.map(wide))
}
