//! The model's vocabulary and state: two people, two bots, one repository
//! (and a second one that issues can be transferred to), one grant, and what
//! is durable, what is applied in the open group commit, and what is on the
//! wire.

use writ::domain::admission::Status;
use writ::domain::grant::{GrantState, Refusal};
use writ::domain::submission::ReceiptStatus;

/// A person with a browser session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Human {
    /// Owns `acme/widgets`: `admin` there.
    Alice,
    /// A collaborator on `acme/widgets` (`write` or `admin`, per [`RepoSettings`]).
    Bob,
}

/// A bot account with a token that reaches `acme/widgets` (both can read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bot {
    /// The agent a new grant names.
    BuilderBot,
    /// Another bot; an edit may name it instead.
    ReviewBot,
}

/// Who sends a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    /// A browser form.
    Human(Human),
    /// An agent route (or the same service function behind `/mcp`).
    Bot(Bot),
}

/// The two proposals a person can prepare (the form's task, limits and MCP
/// requirements); [`crate::server::Tables`] turns each into a real proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plan {
    /// No MCP requirement, `max_submissions` 2, no expiry: admission allows.
    Plain,
    /// Requires `filesystem.project.read` (fallback `block`),
    /// `max_submissions` 1, expires: admission allows only while the
    /// repository's filesystem context is approved and the MCP is healthy.
    Filesystem,
}

/// What a prepare or edit form posts: the plan and the agent. Its proposal
/// digest identifies it (the digest covers both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Draft {
    /// The work and its limits.
    pub plan: Plan,
    /// The bot that may do it.
    pub agent: Bot,
}

/// A bot's request key (a UUIDv4 on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    K0,
    K1,
}

impl Key {
    pub const ALL: [Key; 2] = [Key::K0, Key::K1];

    pub fn slot(self) -> usize {
        self as usize
    }
}

/// A submission's title and body (two distinct contents).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Text {
    T0,
    T1,
}

/// Where an issue lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Repo {
    /// `acme/widgets`: the grant's repository.
    Widgets,
    /// `acme/archive`: where the setup privilege may transfer an issue.
    Archive,
}

/// An issue's place: repository and per-repository index.
pub type Place = (Repo, u8);

/// A collaborator's permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    Write,
    Admin,
}

/// The repository's settings that decide who may approve (constant in a run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoSettings {
    /// Bob's collaborator permission.
    pub bob: Permission,
    /// `require_distinct_approver`: the issuer may not approve.
    pub require_distinct_approver: bool,
}

impl RepoSettings {
    /// Every combination.
    pub fn all() -> Vec<RepoSettings> {
        let mut out = Vec::new();
        for bob in [Permission::Admin, Permission::Write] {
            for require_distinct_approver in [true, false] {
                out.push(RepoSettings {
                    bob,
                    require_distinct_approver,
                });
            }
        }
        out
    }

    /// A person's permission on `acme/widgets`.
    pub fn permission(&self, who: Human) -> Permission {
        match who {
            Human::Alice => Permission::Admin,
            Human::Bob => self.bob,
        }
    }
}

/// The repository's project filesystem context (its latest change).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FsContext {
    /// Never approved.
    None,
    /// Approved, covering `read`.
    Approved,
    /// Approved once, since removed.
    Removed,
}

/// The grant row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    pub state: GrantState,
    pub state_revision: u8,
    pub issuer: Human,
    /// The current proposal (its digest and agent).
    pub proposal: Draft,
    pub approver: Option<Human>,
    /// Status of the approval evaluation that made the grant active.
    pub approval_admission: Option<Status>,
    /// Who confirmed the current proposal (the `confirmed` event's actor).
    pub confirmed_by: Option<Bot>,
    pub submission_count: u8,
    /// Edits so far (bounds the model, not Writ).
    pub edits: u8,
}

/// A submission receipt, keyed by its request key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    pub agent: Bot,
    /// Content: the offered proposal digest, title and body.
    pub proposal: Draft,
    pub text: Text,
    /// The issue's id (its position in [`Db::issues`] plus one).
    pub issue: u8,
    /// Repository and index as committed (historical).
    pub committed_at: Place,
    /// What the handoff transaction saw, for the properties.
    pub approver: Option<Human>,
    pub approval_admission: Option<Status>,
    pub handoff_admission: Status,
    pub issuer: Human,
    pub withdrawn_before: bool,
}

/// An issue; deleted issues keep their row here with no place.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Issue {
    /// The attribution `{grant_id, request_key}` (all issues here come from
    /// the grant).
    pub key: Key,
    /// Where it is now; `None` once deleted.
    pub at: Option<Place>,
}

/// The database.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Db {
    pub settings: RepoSettings,
    pub grant: Option<Grant>,
    pub receipts: [Option<Receipt>; 2],
    pub issues: Vec<Issue>,
    /// Next issue index per repository (only grows).
    pub next_index: [u8; 2],
    pub fs_context: FsContext,
    /// The `filesystem` MCP is installed and healthy.
    pub filesystem_healthy: bool,
}

impl Db {
    pub fn new(settings: RepoSettings) -> Db {
        Db {
            settings,
            grant: None,
            receipts: [None, None],
            issues: Vec::new(),
            next_index: [1, 1],
            fs_context: FsContext::None,
            filesystem_healthy: false,
        }
    }

    pub fn receipt(&self, key: Key) -> Option<&Receipt> {
        self.receipts[key.slot()].as_ref()
    }

    pub fn receipt_count(&self) -> usize {
        self.receipts.iter().flatten().count()
    }
}

/// A request as it leaves its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `POST /{owner}/{repo}/agent-work-grants`.
    Prepare { by: Human, draft: Draft },
    /// `POST .../agent-work-grants/{id}/edit` with the revision the page showed.
    Edit {
        by: Human,
        draft: Draft,
        state_revision: u8,
    },
    /// `POST .../agent-work-grants/{id}/approve` (warnings acknowledged).
    Approve { by: Human, state_revision: u8 },
    /// `POST .../agent-work-grants/{id}/withdraw`.
    Withdraw { by: Human, state_revision: u8 },
    /// `POST /api/v1/.../agent-work-grants/{id}/confirm` with the digest read.
    Confirm { by: Bot, digest: Draft },
    /// `POST /api/v1/.../agent-work-grants/{id}/issues`.
    Submit {
        by: Bot,
        digest: Draft,
        key: Key,
        text: Text,
    },
    /// `GET /api/v1/.../agent-work-grants/{id}/submissions/{request_key}`.
    Readback { by: Bot, key: Key },
}

impl Request {
    pub fn from(&self) -> Principal {
        match *self {
            Request::Prepare { by, .. }
            | Request::Edit { by, .. }
            | Request::Approve { by, .. }
            | Request::Withdraw { by, .. } => Principal::Human(by),
            Request::Confirm { by, .. }
            | Request::Submit { by, .. }
            | Request::Readback { by, .. } => Principal::Bot(by),
        }
    }
}

/// What a confirm did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Confirmed {
    Transition,
    AlreadyConfirmed,
}

/// How a receipt was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// 201 from submit.
    Created,
    /// 200 from submit, `Idempotent-Replayed: true`.
    Replayed,
    /// 200 from readback.
    ReadBack,
}

/// An answer (status and the part of the body the model tracks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// A form changed the grant (303 to the grant page).
    Changed {
        state: GrantState,
        state_revision: u8,
    },
    /// 200 `{grant}` from confirm.
    Confirmed { outcome: Confirmed, agent: Bot },
    /// `{grant, submission}` from submit or readback.
    Submission {
        outcome: Outcome,
        agent: Bot,
        issue: u8,
        status: ReceiptStatus,
        grant_state: GrantState,
    },
    /// 409 with a grant refusal code.
    Refused(Refusal),
    /// 409 `admission_blocked` (approval or handoff).
    AdmissionBlocked,
    /// 404 `not_found`.
    NotFound,
    /// 403 `forbidden`.
    Forbidden,
    /// 422: the form's `expires_at` is no longer in the future.
    Unprocessable,
}

impl Answer {
    /// A 2xx (or a form's 303).
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            Answer::Changed { .. } | Answer::Confirmed { .. } | Answer::Submission { .. }
        )
    }
}

/// An answer with the request it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reply {
    pub request: Request,
    pub answer: Answer,
}

impl PartialOrd for Answer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Answer {
    // Only to keep the wire sorted (a multiset): any total order will do.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

impl Answer {
    fn sort_key(&self) -> [u8; 6] {
        match *self {
            Answer::Changed {
                state,
                state_revision,
            } => [0, state as u8, state_revision, 0, 0, 0],
            Answer::Confirmed { outcome, agent } => [1, outcome as u8, agent as u8, 0, 0, 0],
            Answer::Submission {
                outcome,
                agent,
                issue,
                status,
                grant_state,
            } => [
                2,
                outcome as u8,
                agent as u8,
                issue,
                status as u8,
                grant_state as u8,
            ],
            Answer::Refused(r) => [3, r as u8, 0, 0, 0, 0],
            Answer::AdmissionBlocked => [4, 0, 0, 0, 0, 0],
            Answer::NotFound => [5, 0, 0, 0, 0, 0],
            Answer::Forbidden => [6, 0, 0, 0, 0, 0],
            Answer::Unprocessable => [7, 0, 0, 0, 0, 0],
        }
    }
}

/// A submission a bot saw acknowledged (201 or replayed 200).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ack {
    pub bot: Bot,
    pub key: Key,
    pub text: Text,
    pub issue: u8,
}

/// What the monitor saw that a correct Writ never does (each flag feeds one
/// `always` property; they stay false in every state of a correct model).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Monitor {
    /// A submit answered as a replay changed the database or stored an
    /// evaluation.
    pub replay_wrote: bool,
    /// A submit or readback of a key the bot saw acknowledged did not
    /// answer that receipt.
    pub replay_not_original: bool,
    /// A bot that is not the grant's agent got a 2xx on the grant.
    pub foreign_success: bool,
    /// A refused request changed the database (beyond the evaluation an
    /// `admission_blocked` stores).
    pub refusal_wrote: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// What the database has committed: all that survives a crash.
    pub durable: Db,
    /// `durable` plus the jobs of the open group commit.
    pub working: Db,
    /// Answers of the open group commit: they reach their clients (or are
    /// lost) when it commits, and vanish with it in a crash (kept sorted).
    pub held: Vec<Reply>,
    /// The clock is past every proposal's `expires_at`.
    pub expired: bool,
    /// Submissions the bots saw acknowledged (kept sorted).
    pub acked: Vec<Ack>,
    /// A person saw a withdraw succeed.
    pub acked_withdraw: bool,
    pub monitor: Monitor,
}

impl State {
    pub fn new(settings: RepoSettings) -> State {
        let db = Db::new(settings);
        State {
            durable: db.clone(),
            working: db,
            held: Vec::new(),
            expired: false,
            acked: Vec::new(),
            acked_withdraw: false,
            monitor: Monitor::default(),
        }
    }

    /// Requests of one principal waiting for the group commit.
    pub fn outstanding(&self, who: Principal) -> usize {
        self.held.iter().filter(|r| r.request.from() == who).count()
    }

    /// A prepare is applied and not yet committed.
    pub fn prepare_under_way(&self) -> bool {
        self.held
            .iter()
            .any(|r| matches!(r.request, Request::Prepare { .. }))
    }
}
