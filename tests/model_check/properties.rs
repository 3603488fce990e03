//! What must hold in every reachable state (`always`), and states the
//! exploration must reach (`sometimes`) so that no invariant holds only
//! because its situation never arises.

use stateright::Property;
use writ::domain::admission::Status;
use writ::domain::grant::{GrantState, Refusal};
use writ::domain::submission::ReceiptStatus;

use crate::model::{
    Answer, Confirmed, Db, Grant, Human, Key, Outcome, Permission, Principal, Receipt, Reply,
    Request, State,
};
use crate::system::Writ;
use crate::tables::max_submissions;

pub const ONE_ISSUE_PER_KEY: &str = "at most one issue per request key";
pub const APPROVED_BEFORE_SUBMISSION: &str =
    "no submission without an approval whose admission allowed";
pub const HANDOFF_ADMITTED: &str = "no submission that the handoff admission blocked";
pub const NOT_AFTER_WITHDRAW: &str = "no submission after a committed withdraw";
pub const ACKED_HAS_RECEIPT: &str = "every acknowledged submission has its receipt";
pub const COUNT_IS_RECEIPTS: &str = "submission_count equals the number of receipts";
pub const REPLAY_CHANGES_NOTHING: &str = "a replay never changes state";
pub const REPLAY_IS_ORIGINAL: &str = "a replay or readback answers the original receipt";
pub const ONLY_THE_AGENT: &str = "only the grant's agent acts on it";
pub const ONLY_APPROVAL_ACTIVATES: &str =
    "only an allowed approver's approval makes a grant active";
pub const WITHDRAW_IS_DURABLE: &str = "an acknowledged withdraw is durable";
pub const WITHIN_LIMIT: &str = "submission_count stays within max_submissions";
pub const INDEX_NOT_REUSED: &str = "an issue index is never reused";
pub const RECEIPT_MATCHES_ISSUE: &str = "a receipt names its issue and the issue its request key";
pub const EDIT_CLEARS_CONFIRMATION: &str = "an edited proposal needs a new confirmation";
pub const REFUSAL_CHANGES_NOTHING: &str = "a refused request changes nothing";

/// Every property, `always` first.
pub fn all() -> Vec<Property<Writ>> {
    vec![
        Property::always(ONE_ISSUE_PER_KEY, |_, s: &State| {
            both(s, |db| {
                Key::ALL
                    .iter()
                    .all(|k| db.issues.iter().filter(|i| i.key == *k).count() <= 1)
            })
        }),
        Property::always(APPROVED_BEFORE_SUBMISSION, |_, s: &State| {
            both(s, |db| receipts(db).all(|r| approved_and_admitted(db, r)))
        }),
        Property::always(HANDOFF_ADMITTED, |_, s: &State| {
            both(s, |db| {
                receipts(db).all(|r| r.handoff_admission != Status::Blocked)
            })
        }),
        Property::always(NOT_AFTER_WITHDRAW, |_, s: &State| {
            both(s, |db| receipts(db).all(|r| !r.withdrawn_before))
        }),
        Property::always(ACKED_HAS_RECEIPT, |_, s: &State| {
            s.acked.iter().all(|a| {
                s.durable
                    .receipt(a.key)
                    .is_some_and(|r| r.issue == a.issue && r.text == a.text && r.agent == a.bot)
            })
        }),
        Property::always(COUNT_IS_RECEIPTS, |_, s: &State| {
            both(s, |db| {
                db.grant
                    .as_ref()
                    .map_or(0, |g| usize::from(g.submission_count))
                    == db.receipt_count()
            })
        }),
        Property::always(REPLAY_CHANGES_NOTHING, |_, s: &State| {
            !s.monitor.replay_wrote
        }),
        Property::always(REFUSAL_CHANGES_NOTHING, |_, s: &State| {
            !s.monitor.refusal_wrote
        }),
        Property::always(REPLAY_IS_ORIGINAL, |_, s: &State| {
            !s.monitor.replay_not_original
        }),
        Property::always(ONLY_THE_AGENT, |_, s: &State| {
            !s.monitor.foreign_success && both(s, only_the_agent)
        }),
        Property::always(ONLY_APPROVAL_ACTIVATES, |_, s: &State| {
            both(s, |db| {
                db.grant.as_ref().is_none_or(|g| activated_properly(db, g))
            })
        }),
        Property::always(WITHDRAW_IS_DURABLE, |_, s: &State| {
            !s.acked_withdraw || grant_state(&s.durable) == Some(GrantState::Revoked)
        }),
        Property::always(WITHIN_LIMIT, |_, s: &State| {
            both(s, |db| {
                db.grant.as_ref().is_none_or(|g| {
                    i64::from(g.submission_count) <= max_submissions(g.proposal.plan)
                })
            })
        }),
        Property::always(INDEX_NOT_REUSED, |_, s: &State| both(s, indices_unique)),
        Property::always(RECEIPT_MATCHES_ISSUE, |_, s: &State| {
            both(s, |db| {
                Key::ALL.iter().all(|k| {
                    db.receipt(*k).is_none_or(|r| {
                        db.issues
                            .get(usize::from(r.issue) - 1)
                            .is_some_and(|i| i.key == *k)
                    })
                })
            })
        }),
        Property::always(EDIT_CLEARS_CONFIRMATION, |_, s: &State| {
            both(s, |db| {
                db.grant.as_ref().is_none_or(|g| {
                    (g.state == GrantState::AwaitingAgent) == g.confirmed_by.is_none()
                        || g.state == GrantState::Revoked
                })
            })
        }),
        // Reachability: each of these must be found.
        Property::sometimes("a submission is committed", |_, s: &State| {
            s.durable.receipt_count() > 0
        }),
        Property::sometimes("a grant with a submission is withdrawn", |_, s: &State| {
            s.durable.receipt_count() > 0 && grant_state(&s.durable) == Some(GrantState::Revoked)
        }),
        Property::sometimes("a submit is answered as a replay", |_, s: &State| {
            answered(s, |r| replayed(r, None))
        }),
        Property::sometimes("a replay is answered after the withdraw", |_, s: &State| {
            answered(s, |r| replayed(r, Some(GrantState::Revoked)))
        }),
        Property::sometimes("a replay shows the issue deleted", |_, s: &State| {
            answered(s, |r| {
                receipt_shows(r, Outcome::Replayed, ReceiptStatus::IssueDeleted)
            })
        }),
        Property::sometimes("a readback shows the issue transferred", |_, s: &State| {
            answered(s, |r| {
                receipt_shows(r, Outcome::ReadBack, ReceiptStatus::IssueBindingChanged)
            })
        }),
        Property::sometimes(
            "a readback finds a submission whose answer was lost",
            |_, s: &State| answered(s, |r| lost_then_read_back(s, r)),
        ),
        Property::sometimes(
            "a request key is reused with other content",
            |_, s: &State| {
                answered(s, |r| {
                    r.answer == Answer::Refused(Refusal::RequestKeyConflict)
                })
            },
        ),
        Property::sometimes("the handoff admission blocks a submit", |_, s: &State| {
            answered(s, |r| {
                matches!(r.request, Request::Submit { .. }) && r.answer == Answer::AdmissionBlocked
            })
        }),
        Property::sometimes(
            "the approval admission blocks an approve",
            |_, s: &State| {
                answered(s, |r| {
                    matches!(r.request, Request::Approve { .. })
                        && r.answer == Answer::AdmissionBlocked
                })
            },
        ),
        Property::sometimes("the submission limit refuses a submit", |_, s: &State| {
            answered(s, |r| r.answer == Answer::Refused(Refusal::SubmissionLimit))
        }),
        Property::sometimes("an expired grant refuses a submit", |_, s: &State| {
            answered(s, |r| {
                matches!(r.request, Request::Submit { .. })
                    && r.answer == Answer::Refused(Refusal::GrantExpired)
            })
        }),
        Property::sometimes("a stale form gets state_conflict", |_, s: &State| {
            answered(s, |r| {
                matches!(r.request.from(), Principal::Human(_))
                    && r.answer == Answer::Refused(Refusal::StateConflict)
            })
        }),
        Property::sometimes(
            "a confirm retry answers the grant unchanged",
            |_, s: &State| {
                answered(s, |r| {
                    matches!(
                        r.answer,
                        Answer::Confirmed {
                            outcome: Confirmed::AlreadyConfirmed,
                            ..
                        }
                    )
                })
            },
        ),
        Property::sometimes("another bot gets 404", |_, s: &State| {
            let agent = s.durable.grant.as_ref().map(|g| g.proposal.agent);
            answered(s, |r| {
                matches!(r.request.from(), Principal::Bot(b) if Some(b) != agent)
                    && r.answer == Answer::NotFound
                    && matches!(r.request, Request::Submit { .. })
            })
        }),
        Property::sometimes("a person is forbidden to approve", |_, s: &State| {
            answered(s, |r| {
                matches!(r.request, Request::Approve { .. }) && r.answer == Answer::Forbidden
            })
        }),
    ]
}

/// Holds on the committed database and on the one with the open batch.
fn both(s: &State, holds: impl Fn(&Db) -> bool) -> bool {
    holds(&s.durable) && holds(&s.working)
}

fn receipts(db: &Db) -> impl Iterator<Item = &Receipt> {
    db.receipts.iter().flatten()
}

fn grant_state(db: &Db) -> Option<GrantState> {
    db.grant.as_ref().map(|g| g.state)
}

/// The approver may approve on this repository (admin; not the issuer when
/// a second person is required).
fn allowed_approver(db: &Db, approver: Human, issuer: Human) -> bool {
    db.settings.permission(approver) == Permission::Admin
        && !(db.settings.require_distinct_approver && approver == issuer)
}

fn approved_and_admitted(db: &Db, r: &Receipt) -> bool {
    r.approver
        .is_some_and(|a| allowed_approver(db, a, r.issuer))
        && matches!(
            r.approval_admission,
            Some(Status::Allowed | Status::Warning)
        )
}

fn activated_properly(db: &Db, g: &Grant) -> bool {
    let approved = g
        .approver
        .is_some_and(|a| allowed_approver(db, a, g.issuer))
        && matches!(
            g.approval_admission,
            Some(Status::Allowed | Status::Warning)
        );
    match g.state {
        GrantState::Active => approved && g.confirmed_by == Some(g.proposal.agent),
        GrantState::AwaitingAgent | GrantState::AwaitingHuman => g.approver.is_none(),
        GrantState::Revoked => g.approver.is_none() || approved,
    }
}

fn only_the_agent(db: &Db) -> bool {
    let Some(g) = &db.grant else {
        return true;
    };
    receipts(db).all(|r| r.agent == g.proposal.agent)
        && g.confirmed_by.is_none_or(|b| b == g.proposal.agent)
}

/// No two issues ever held the same repository and index: current places
/// and the places receipts committed, each below its repository's counter.
fn indices_unique(db: &Db) -> bool {
    let committed = receipts(db).map(|r| (r.committed_at, r.issue));
    let current = (1u8..)
        .zip(&db.issues)
        .filter_map(|(id, i)| i.at.map(|p| (p, id)));
    let places: Vec<_> = committed.chain(current).collect();
    places.iter().all(|((repo, index), id)| {
        *index < db.next_index[*repo as usize]
            && places
                .iter()
                .all(|(p, other)| p != &(*repo, *index) || other == id)
    })
}

/// Some answer of the open group commit satisfies `pred`.
fn answered(s: &State, pred: impl Fn(&Reply) -> bool) -> bool {
    s.held.iter().any(pred)
}

fn replayed(r: &Reply, after: Option<GrantState>) -> bool {
    matches!(r.answer, Answer::Submission { outcome: Outcome::Replayed, grant_state, .. }
        if after.is_none_or(|a| a == grant_state))
}

fn receipt_shows(r: &Reply, how: Outcome, status: ReceiptStatus) -> bool {
    matches!(r.answer, Answer::Submission { outcome, status: st, .. }
        if outcome == how && st == status)
}

fn lost_then_read_back(s: &State, r: &Reply) -> bool {
    let Request::Readback { by, key } = r.request else {
        return false;
    };
    let acked = s.acked.iter().any(|a| a.bot == by && a.key == key);
    let pending = s
        .held
        .iter()
        .any(|x| matches!(x.request, Request::Submit { by: b, key: k, .. } if b == by && k == key));
    matches!(r.answer, Answer::Submission { .. }) && !acked && !pending
}
