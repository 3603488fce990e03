//! The stateright model: what each client may send, how the server takes
//! requests into the open group commit, commits, crashes and restarts, and
//! how answers reach their clients or get lost.

use stateright::{Model, Property};

use crate::model::{
    Ack, Answer, Bot, Draft, FsContext, Human, Key, Outcome, Plan, Principal, Reply, RepoSettings,
    Request, State, Text,
};
use crate::properties;
use crate::server::{Handled, Mutation, Server, Setup};
use crate::tables::Tables;
use writ::domain::grant::GrantState;

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client's request runs as one transaction in the open group
    /// commit; its answer waits for the commit.
    Process(Request),
    /// The open group commit becomes durable and its answers leave; those
    /// to `lost` never arrive (the connection dropped after the commit).
    GroupCommit { lost: Option<Principal> },
    /// The process is killed and restarts: the open group commit is gone,
    /// with its answers.
    Crash,
    /// A setup-privilege or repository-admin change, committed alone.
    Setup(Setup),
    /// The clock passes the filesystem plan's `expires_at`.
    ClockPassesExpiry,
}

/// How far the clients go (bounds of the model, not rules of Writ).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Edits of one grant.
    pub max_edits: u8,
    /// Requests one bot may have in the open group commit (2: it retries
    /// before the first attempt was answered).
    pub bot_outstanding: usize,
    /// Every edit draft, and every key, text and readback for every bot
    /// (otherwise a smaller menu that still reaches every outcome).
    pub full_menus: bool,
    /// Issue deletes and transfers by the setup privilege.
    pub issue_setup: bool,
}

/// The model of Writ's grant protocol.
pub struct Writ {
    pub server: Server,
    pub settings: Vec<RepoSettings>,
    pub bounds: Bounds,
}

/// A request a client may send now.
fn offer(out: &mut Vec<Action>, request: Request) {
    out.push(Action::Process(request));
}

impl Writ {
    pub fn new(settings: Vec<RepoSettings>, bounds: Bounds, mutation: Option<Mutation>) -> Writ {
        Writ {
            server: Server {
                tables: Tables::new(),
                mutation,
            },
            settings,
            bounds,
        }
    }

    fn human_requests(&self, s: &State, by: Human, out: &mut Vec<Action>) {
        if s.outstanding(Principal::Human(by)) > 0 {
            return;
        }
        // A person posts what the grant page (committed state) offers.
        let Some(grant) = &s.durable.grant else {
            if s.working.grant.is_none() && !s.prepare_under_way() {
                for plan in [Plan::Plain, Plan::Filesystem] {
                    let draft = Draft {
                        plan,
                        agent: Bot::BuilderBot,
                    };
                    offer(out, Request::Prepare { by, draft });
                }
            }
            return;
        };
        let state_revision = grant.state_revision;
        let editable = matches!(
            grant.state,
            GrantState::AwaitingAgent | GrantState::AwaitingHuman
        );
        if editable && grant.edits < self.bounds.max_edits {
            for draft in self.edit_drafts(grant.proposal) {
                offer(
                    out,
                    Request::Edit {
                        by,
                        draft,
                        state_revision,
                    },
                );
            }
        }
        if grant.state == GrantState::AwaitingHuman {
            offer(out, Request::Approve { by, state_revision });
        }
        if grant.state != GrantState::Revoked {
            offer(out, Request::Withdraw { by, state_revision });
        }
    }

    /// Edits: every draft, or the other plan and the other agent.
    fn edit_drafts(&self, current: Draft) -> Vec<Draft> {
        let other_plan = match current.plan {
            Plan::Plain => Plan::Filesystem,
            Plan::Filesystem => Plan::Plain,
        };
        let other_agent = match current.agent {
            Bot::BuilderBot => Bot::ReviewBot,
            Bot::ReviewBot => Bot::BuilderBot,
        };
        if self.bounds.full_menus {
            let plans = [Plan::Plain, Plan::Filesystem];
            let bots = [Bot::BuilderBot, Bot::ReviewBot];
            plans
                .iter()
                .flat_map(|&plan| bots.iter().map(move |&agent| Draft { plan, agent }))
                .collect()
        } else {
            vec![
                Draft {
                    plan: other_plan,
                    ..current
                },
                Draft {
                    agent: other_agent,
                    ..current
                },
            ]
        }
    }

    fn bot_requests(&self, s: &State, by: Bot, out: &mut Vec<Action>) {
        if s.outstanding(Principal::Bot(by)) >= self.bounds.bot_outstanding {
            return;
        }
        // A bot learns the grant and its digest from the committed state.
        // Another bot gets 404 there, but may know the digest anyway.
        let Some(grant) = &s.durable.grant else {
            return;
        };
        let digest = grant.proposal;
        offer(out, Request::Confirm { by, digest });
        let agent = grant.proposal.agent == by;
        let submits: &[(Key, Text)] = match (agent, self.bounds.full_menus) {
            (false, _) => &[(Key::K0, Text::T0)],
            (true, false) => &[
                (Key::K0, Text::T0),
                (Key::K0, Text::T1),
                (Key::K1, Text::T0),
            ],
            (true, true) => &[
                (Key::K0, Text::T0),
                (Key::K0, Text::T1),
                (Key::K1, Text::T0),
                (Key::K1, Text::T1),
            ],
        };
        for &(key, text) in submits {
            let submit = Request::Submit {
                by,
                digest,
                key,
                text,
            };
            offer(out, submit);
        }
        let readbacks: &[Key] = if agent && self.bounds.full_menus {
            &Key::ALL
        } else {
            &[Key::K0]
        };
        for &key in readbacks {
            offer(out, Request::Readback { by, key });
        }
    }

    /// Changes no client waits on, each committed alone (so only between
    /// group commits).
    fn setups(&self, s: &State, out: &mut Vec<Action>) {
        if !s.held.is_empty() || s.working != s.durable {
            return;
        }
        let plan = s.working.grant.as_ref().map(|g| g.proposal.plan);
        let mut candidates = Vec::new();
        // Context and health matter only to the filesystem plan's admission.
        if plan == Some(Plan::Filesystem) {
            candidates.extend([
                Setup::FsContext(FsContext::Approved),
                Setup::FsContext(FsContext::Removed),
                Setup::FilesystemHealth(!s.working.filesystem_healthy),
            ]);
        }
        if self.bounds.issue_setup {
            for id in 1..=s.working.issues.len() as u8 {
                candidates.push(Setup::DeleteIssue(id));
                candidates.push(Setup::TransferIssue(id));
            }
        }
        for change in candidates {
            let mut db = s.working.clone();
            if self.server.setup(&mut db, change) {
                out.push(Action::Setup(change));
            }
        }
        if !s.expired && plan == Some(Plan::Filesystem) {
            out.push(Action::ClockPassesExpiry);
        }
    }

    /// Watches one processed request for what a correct Writ never does.
    fn observe(&self, s: &mut State, request: Request, handled: &Handled, wrote: bool) {
        let answer = handled.answer;
        if let Answer::Submission {
            outcome: Outcome::Replayed,
            ..
        } = answer
            && (wrote || handled.evaluation_stored)
        {
            s.monitor.replay_wrote = true;
        }
        if !answer.is_success() && wrote {
            s.monitor.refusal_wrote = true;
        }
        let acked = |bot: Bot, key: Key, text: Option<Text>| {
            s.acked
                .iter()
                .find(|a| a.bot == bot && a.key == key && text.is_none_or(|t| t == a.text))
                .map(|a| a.issue)
        };
        let expected = match request {
            Request::Submit { by, key, text, .. } => {
                acked(by, key, Some(text)).map(|issue| (Outcome::Replayed, issue))
            }
            Request::Readback { by, key } => {
                acked(by, key, None).map(|issue| (Outcome::ReadBack, issue))
            }
            _ => None,
        };
        if let Some((want, want_issue)) = expected {
            let original = matches!(answer, Answer::Submission { outcome, issue, .. }
                if outcome == want && issue == want_issue);
            if !original {
                s.monitor.replay_not_original = true;
            }
        }
        if let Principal::Bot(bot) = request.from() {
            let agent = s.working.grant.as_ref().map(|g| g.proposal.agent);
            if answer.is_success() && agent != Some(bot) {
                s.monitor.foreign_success = true;
            }
        }
    }
}

fn insert_sorted<T: Ord>(items: &mut Vec<T>, item: T) {
    let at = items.partition_point(|x| *x <= item);
    items.insert(at, item);
}

impl Model for Writ {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.settings.iter().map(|s| State::new(*s)).collect()
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for by in [Human::Alice, Human::Bob] {
            self.human_requests(s, by, out);
        }
        for by in [Bot::BuilderBot, Bot::ReviewBot] {
            self.bot_requests(s, by, out);
        }
        if !s.held.is_empty() || s.working != s.durable {
            out.push(Action::GroupCommit { lost: None });
            // Losing an answer matters where the client would remember it.
            let mut lost: Vec<Principal> = s
                .held
                .iter()
                .filter(|r| remembered(r))
                .map(|r| r.request.from())
                .collect();
            lost.sort();
            lost.dedup();
            for who in lost {
                out.push(Action::GroupCommit { lost: Some(who) });
            }
            out.push(Action::Crash);
        }
        self.setups(s, out);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Process(request) => {
                let mut db = s.working.clone();
                let handled = self.server.handle(&mut db, request, s.expired);
                let wrote = db != s.working;
                self.observe(&mut s, request, &handled, wrote);
                s.working = db;
                let reply = Reply {
                    request,
                    answer: handled.answer,
                };
                if self.server.mutation == Some(Mutation::AnswerBeforeCommit) {
                    deliver(&mut s, reply);
                } else {
                    insert_sorted(&mut s.held, reply);
                }
            }
            Action::GroupCommit { lost } => {
                s.durable = s.working.clone();
                for reply in std::mem::take(&mut s.held) {
                    if Some(reply.request.from()) != lost {
                        deliver(&mut s, reply);
                    }
                }
            }
            Action::Crash => {
                s.working = s.durable.clone();
                s.held.clear();
            }
            Action::Setup(change) => {
                if !self.server.setup(&mut s.working, change) {
                    return None;
                }
                s.durable = s.working.clone();
            }
            Action::ClockPassesExpiry => s.expired = true,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// The client keeps something of this answer (a submission's receipt, a
/// withdraw's success).
fn remembered(reply: &Reply) -> bool {
    matches!(
        (reply.request, reply.answer),
        (
            Request::Submit { .. },
            Answer::Submission {
                outcome: Outcome::Created | Outcome::Replayed,
                ..
            }
        ) | (Request::Withdraw { .. }, Answer::Changed { .. })
    )
}

/// What a client learns from an answer that reaches it.
fn deliver(s: &mut State, reply: Reply) {
    match (reply.request, reply.answer) {
        (
            Request::Submit { by, key, text, .. },
            Answer::Submission {
                outcome: Outcome::Created | Outcome::Replayed,
                issue,
                ..
            },
        ) => {
            let ack = Ack {
                bot: by,
                key,
                text,
                issue,
            };
            if !s.acked.contains(&ack) {
                insert_sorted(&mut s.acked, ack);
            }
        }
        (Request::Withdraw { .. }, Answer::Changed { .. }) => s.acked_withdraw = true,
        _ => {}
    }
}
