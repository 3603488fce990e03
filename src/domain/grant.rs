//! The grant state machine: which event may move a grant from which state,
//! and how confirm and submit are judged against the current grant.

use serde::Serialize;

use super::ids::Digest;
use super::time::Timestamp;

/// The four grant states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantState {
    /// Prepared or edited; waits for the bot's confirmation.
    AwaitingAgent,
    /// Confirmed by the bot; waits for a repository admin.
    AwaitingHuman,
    /// Approved; the bot may submit.
    Active,
    /// Withdrawn; terminal.
    Revoked,
}

impl GrantState {
    /// Every state, in lifecycle order.
    pub const ALL: [GrantState; 4] = [
        GrantState::AwaitingAgent,
        GrantState::AwaitingHuman,
        GrantState::Active,
        GrantState::Revoked,
    ];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantState::AwaitingAgent => "awaiting_agent",
            GrantState::AwaitingHuman => "awaiting_human",
            GrantState::Active => "active",
            GrantState::Revoked => "revoked",
        }
    }

    /// Parses a stored or wire name.
    pub fn parse(raw: &str) -> Option<GrantState> {
        GrantState::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// A human's browser event on a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HumanEvent {
    /// Replace the proposal; confirmation is cleared.
    Edit,
    /// Make the grant active.
    Approve,
    /// Revoke the grant for good.
    Withdraw,
}

/// Why an event or a call was refused; each maps to one 409 code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The offered digest is not the grant's current one.
    ProposalMismatch,
    /// The grant is not in a state that admits the event.
    StateConflict,
    /// The grant was withdrawn.
    GrantRevoked,
    /// `limits.expires_at` has passed.
    GrantExpired,
    /// `submission_count` reached `max_submissions`.
    SubmissionLimit,
    /// The request key was used before with different content.
    RequestKeyConflict,
}

impl Refusal {
    /// The stable error code.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::ProposalMismatch => "proposal_mismatch",
            Refusal::StateConflict => "state_conflict",
            Refusal::GrantRevoked => "grant_revoked",
            Refusal::GrantExpired => "grant_expired",
            Refusal::SubmissionLimit => "submission_limit",
            Refusal::RequestKeyConflict => "request_key_conflict",
        }
    }

    /// A sentence for people.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::ProposalMismatch => "the proposal digest is not the grant's current proposal",
            Refusal::StateConflict => "the grant is not in a state that allows this",
            Refusal::GrantRevoked => "the grant was withdrawn",
            Refusal::GrantExpired => "the grant has expired",
            Refusal::SubmissionLimit => "the grant has no submissions left",
            Refusal::RequestKeyConflict => {
                "this request_key was already used with a different proposal_digest, title or body"
            }
        }
    }
}

/// The state a human event leads to, or why it cannot happen now.
pub fn human_transition(event: HumanEvent, from: GrantState) -> Result<GrantState, Refusal> {
    use GrantState::*;
    match (event, from) {
        (_, Revoked) => Err(Refusal::GrantRevoked),
        (HumanEvent::Edit, AwaitingAgent | AwaitingHuman) => Ok(AwaitingAgent),
        (HumanEvent::Approve, AwaitingHuman) => Ok(Active),
        (HumanEvent::Withdraw, _) => Ok(Revoked),
        _ => Err(Refusal::StateConflict),
    }
}

/// What a confirm with a valid triple does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmOutcome {
    /// `awaiting_agent` → `awaiting_human`.
    Transition,
    /// Already past `awaiting_agent` with this digest: answer 200, unchanged.
    AlreadyConfirmed,
}

/// The facts about a grant that confirm and submit are judged on.
#[derive(Debug, Clone, Copy)]
pub struct GrantFacts<'a> {
    /// Current state.
    pub state: GrantState,
    /// Current proposal digest.
    pub digest: &'a str,
    /// `limits.expires_at`, if any.
    pub expires_at: Option<Timestamp>,
    /// Receipts so far.
    pub submission_count: i64,
    /// `limits.max_submissions`.
    pub max_submissions: i64,
}

impl GrantFacts<'_> {
    fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// Judges a confirm: revoked, then digest, then expiry, then state.
pub fn decide_confirm(
    grant: &GrantFacts<'_>,
    offered: &Digest,
    now: Timestamp,
) -> Result<ConfirmOutcome, Refusal> {
    if grant.state == GrantState::Revoked {
        return Err(Refusal::GrantRevoked);
    }
    if grant.digest != offered.as_str() {
        return Err(Refusal::ProposalMismatch);
    }
    if grant.expired(now) {
        return Err(Refusal::GrantExpired);
    }
    Ok(match grant.state {
        GrantState::AwaitingAgent => ConfirmOutcome::Transition,
        _ => ConfirmOutcome::AlreadyConfirmed,
    })
}

/// Judges a new submission (after the request key was found unused).
pub fn decide_submit(
    grant: &GrantFacts<'_>,
    offered: &Digest,
    now: Timestamp,
) -> Result<(), Refusal> {
    match grant.state {
        GrantState::Revoked => return Err(Refusal::GrantRevoked),
        GrantState::Active => {}
        _ => return Err(Refusal::StateConflict),
    }
    if grant.digest != offered.as_str() {
        return Err(Refusal::ProposalMismatch);
    }
    if grant.expired(now) {
        return Err(Refusal::GrantExpired);
    }
    if grant.submission_count >= grant.max_submissions {
        return Err(Refusal::SubmissionLimit);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use GrantState::*;

    fn facts(state: GrantState) -> GrantFacts<'static> {
        GrantFacts {
            state,
            digest: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            expires_at: None,
            submission_count: 0,
            max_submissions: 2,
        }
    }

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap()
    }

    #[test]
    fn human_transitions_table() {
        let cases = [
            (HumanEvent::Edit, AwaitingAgent, Ok(AwaitingAgent)),
            (HumanEvent::Edit, AwaitingHuman, Ok(AwaitingAgent)),
            (HumanEvent::Edit, Active, Err(Refusal::StateConflict)),
            (HumanEvent::Edit, Revoked, Err(Refusal::GrantRevoked)),
            (
                HumanEvent::Approve,
                AwaitingAgent,
                Err(Refusal::StateConflict),
            ),
            (HumanEvent::Approve, AwaitingHuman, Ok(Active)),
            (HumanEvent::Approve, Active, Err(Refusal::StateConflict)),
            (HumanEvent::Approve, Revoked, Err(Refusal::GrantRevoked)),
            (HumanEvent::Withdraw, AwaitingAgent, Ok(Revoked)),
            (HumanEvent::Withdraw, AwaitingHuman, Ok(Revoked)),
            (HumanEvent::Withdraw, Active, Ok(Revoked)),
            (HumanEvent::Withdraw, Revoked, Err(Refusal::GrantRevoked)),
        ];
        for (event, from, want) in cases {
            assert_eq!(
                human_transition(event, from),
                want,
                "{event:?} from {from:?}"
            );
        }
    }

    #[test]
    fn confirm_rules() {
        let good = Digest::parse(&"a".repeat(64)).unwrap();
        let other = Digest::parse(&"b".repeat(64)).unwrap();
        assert_eq!(
            decide_confirm(&facts(AwaitingAgent), &good, now()),
            Ok(ConfirmOutcome::Transition)
        );
        assert_eq!(
            decide_confirm(&facts(AwaitingHuman), &good, now()),
            Ok(ConfirmOutcome::AlreadyConfirmed)
        );
        assert_eq!(
            decide_confirm(&facts(Active), &good, now()),
            Ok(ConfirmOutcome::AlreadyConfirmed)
        );
        assert_eq!(
            decide_confirm(&facts(Revoked), &good, now()),
            Err(Refusal::GrantRevoked)
        );
        assert_eq!(
            decide_confirm(&facts(Revoked), &other, now()),
            Err(Refusal::GrantRevoked)
        );
        assert_eq!(
            decide_confirm(&facts(AwaitingAgent), &other, now()),
            Err(Refusal::ProposalMismatch)
        );
        let mut expired = facts(AwaitingAgent);
        expired.expires_at = Some(now());
        assert_eq!(
            decide_confirm(&expired, &good, now()),
            Err(Refusal::GrantExpired)
        );
        expired.expires_at = Some(now().plus_seconds(1));
        assert_eq!(
            decide_confirm(&expired, &good, now()),
            Ok(ConfirmOutcome::Transition)
        );
    }

    #[test]
    fn submit_rules() {
        let good = Digest::parse(&"a".repeat(64)).unwrap();
        let other = Digest::parse(&"b".repeat(64)).unwrap();
        assert_eq!(decide_submit(&facts(Active), &good, now()), Ok(()));
        assert_eq!(
            decide_submit(&facts(AwaitingHuman), &good, now()),
            Err(Refusal::StateConflict)
        );
        assert_eq!(
            decide_submit(&facts(Revoked), &good, now()),
            Err(Refusal::GrantRevoked)
        );
        assert_eq!(
            decide_submit(&facts(Active), &other, now()),
            Err(Refusal::ProposalMismatch)
        );
        let mut full = facts(Active);
        full.submission_count = 2;
        assert_eq!(
            decide_submit(&full, &good, now()),
            Err(Refusal::SubmissionLimit)
        );
        full.expires_at = Some(now());
        assert_eq!(
            decide_submit(&full, &good, now()),
            Err(Refusal::GrantExpired)
        );
    }
}
