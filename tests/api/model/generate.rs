//! Generation: which operations to try from a model state, weighted so
//! that long sequences reach every state and answer (a submission, a
//! replay, a withdraw after a submission, an expiry, a blocked handoff).

use proptest::prelude::*;
use proptest_state_machine::ReferenceStateMachine;

use super::reference::{
    Access, Bot, Cred, DigestPick, EditSpec, Expiry, Form, FsAction, Grant, Human, Model,
    NONCE_SECONDS, Op, Reqs, State, Tools, Via,
};

fn human() -> impl Strategy<Value = Human> {
    prop_oneof![Just(Human::Alice), Just(Human::Bob), Just(Human::Carol)]
}

fn bot() -> impl Strategy<Value = Bot> {
    prop_oneof![4 => Just(Bot::Builder), 1 => Just(Bot::Rival)]
}

fn cred() -> impl Strategy<Value = Cred> {
    prop_oneof![
        12 => Just(Cred::Bot(Bot::Builder)),
        1 => Just(Cred::Bot(Bot::Rival)),
        1 => Just(Cred::BuilderReadOnly),
        1 => Just(Cred::BuilderElsewhere),
        1 => Just(Cred::HumanToken),
    ]
}

fn via() -> impl Strategy<Value = Via> {
    prop_oneof![3 => Just(Via::Api), 1 => Just(Via::Mcp)]
}

fn reqs() -> impl Strategy<Value = Reqs> {
    prop_oneof![
        8 => Just(Reqs::Nothing),
        2 => Just(Reqs::FsRequired),
        1 => Just(Reqs::FsOptional),
        1 => Just(Reqs::Deferred),
        1 => Just(Reqs::Typo),
    ]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![3 => Just(Expiry::Never), 1 => Just(Expiry::In2500s), 1 => Just(Expiry::In6500s)]
}

fn digest() -> impl Strategy<Value = DigestPick> {
    prop_oneof![8 => Just(DigestPick::Current), 1 => Just(DigestPick::Previous), 1 => Just(DigestPick::Other)]
}

fn edit_spec() -> impl Strategy<Value = EditSpec> {
    (bot(), reqs(), 1..=3u8, expiry()).prop_map(|(agent, reqs, max, expiry)| EditSpec {
        agent,
        reqs,
        max,
        expiry,
    })
}

/// An agent call's credential and route: `/mcp` carries a bot's token.
fn agent_call() -> impl Strategy<Value = (Cred, Via)> {
    (cred(), via()).prop_map(|(cred, via)| match cred {
        Cred::HumanToken => (cred, Via::Api),
        _ => (cred, via),
    })
}

/// A grant position: mostly one of the grants `wanted` picks, else one of
/// the newest, any, or now and then one past the last (a grant that does
/// not exist).
fn grant_position(state: &Model, wanted: fn(&Grant) -> bool) -> BoxedStrategy<usize> {
    let grants = state.grants.len();
    if grants == 0 {
        return Just(0).boxed();
    }
    let picked: Vec<usize> = (0..grants).filter(|i| wanted(&state.grants[*i])).collect();
    let others = prop_oneof![
        1 => Just(grants),
        4 => grants.saturating_sub(2)..grants,
        2 => 0..grants,
    ];
    if picked.is_empty() {
        others.boxed()
    } else {
        prop_oneof![3 => proptest::sample::select(picked), 1 => others].boxed()
    }
}

/// The model as a proptest reference state machine.
pub struct Protocol;

impl ReferenceStateMachine for Protocol {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        let grant = |wanted: fn(&Grant) -> bool| grant_position(state, wanted);
        let any_grant = |_: &Grant| true;
        // Mostly a form that can still work; sometimes a used, expired or
        // stale one (a replayed or outdated form).
        let mut fresh = Vec::new();
        let mut stale = Vec::new();
        for ((by, grant), tab) in &state.tabs {
            let live = state.now < tab.opened_at + NONCE_SECONDS
                && state.grants[*grant].revision == tab.revision;
            for form in &tab.forms {
                if live && !tab.used.contains(form) {
                    fresh.push((*by, *grant, *form));
                } else {
                    stale.push((*by, *grant, *form));
                }
            }
        }
        let prepare = (human(), bot(), 1..=3u8, expiry(), reqs()).prop_map(
            |(by, agent, max, expiry, reqs)| Op::Prepare {
                by,
                agent,
                max,
                expiry,
                reqs,
            },
        );
        let open = (human(), grant(|g| g.state == State::AwaitingHuman))
            .prop_map(|(by, grant)| Op::Open { by, grant });
        let read = (agent_call(), grant(any_grant)).prop_map(|((cred, via), grant)| Op::Read {
            cred,
            grant,
            via,
        });
        let confirm = (
            agent_call(),
            grant(|g| g.state == State::AwaitingAgent),
            digest(),
        )
            .prop_map(|((cred, via), grant, digest)| Op::Confirm {
                cred,
                grant,
                digest,
                via,
            });
        let submit = (
            agent_call(),
            grant(|g| g.state == State::Active),
            0..4u8,
            0..2u8,
            digest(),
        )
            .prop_map(|((cred, via), grant, key, title, digest)| Op::Submit {
                cred,
                grant,
                key,
                title,
                digest,
                via,
            });
        let readback = (agent_call(), grant(|g| !g.receipts.is_empty()), 0..4u8).prop_map(
            |((cred, via), grant, key)| Op::Readback {
                cred,
                grant,
                key,
                via,
            },
        );
        let issue = (any::<bool>(), 0..8u8).prop_map(|(delete, nth)| {
            if delete {
                Op::DeleteIssue { nth }
            } else {
                Op::TransferIssue { nth }
            }
        });
        let health = (any::<bool>(), any::<bool>())
            .prop_map(|(installed, healthy)| Op::SetHealth { installed, healthy });
        let fs_action = prop_oneof![
            3 => (1..8u8).prop_map(FsAction::Approve),
            1 => Just(FsAction::Deny),
            1 => Just(FsAction::Remove),
        ];
        let fs = (prop_oneof![Just(Human::Alice), Just(Human::Bob)], fs_action)
            .prop_map(|(by, action)| Op::FsContext { by, action });
        let access = (bot(), prop_oneof![1 => Just(Access::Removed), 1 => Just(Access::Read), 3 => Just(Access::Write)])
            .prop_map(|(bot, access)| Op::SetAccess { bot, access });
        let tools = (bot(), prop_oneof![3 => Just(Tools::All), 1 => Just(Tools::ReadOnly), 1 => Just(Tools::Nothing)])
            .prop_map(|(bot, tools)| Op::SetTools { bot, tools });
        let advance =
            prop_oneof![Just(1000i64), Just(3000i64)].prop_map(|seconds| Op::Advance { seconds });
        let base = prop_oneof![
            3 => prepare,
            10 => open,
            4 => read,
            8 => confirm,
            12 => submit,
            4 => readback,
            2 => issue,
            2 => health,
            2 => fs,
            1 => access,
            2 => tools,
            1 => advance,
        ];
        let any_fresh = !fresh.is_empty();
        let tab = match (fresh.is_empty(), stale.is_empty()) {
            (true, true) => return base.boxed(),
            (false, true) => proptest::sample::select(fresh).boxed(),
            (true, false) => proptest::sample::select(stale).boxed(),
            (false, false) => prop_oneof![
                6 => proptest::sample::select(fresh),
                1 => proptest::sample::select(stale),
            ]
            .boxed(),
        };
        let post =
            (tab, any::<bool>(), edit_spec()).prop_map(|((by, grant, form), ack, edit)| Op::Post {
                by,
                grant,
                form,
                acknowledge: ack || form != Form::Approve,
                edit,
            });
        if any_fresh {
            prop_oneof![2 => base, 1 => post].boxed()
        } else {
            prop_oneof![6 => base, 1 => post].boxed()
        }
    }

    fn preconditions(state: &Model, op: &Op) -> bool {
        let grant_ok = |g: usize| g <= state.grants.len();
        match op {
            Op::Open { grant, .. }
            | Op::Read { grant, .. }
            | Op::Confirm { grant, .. }
            | Op::Submit { grant, .. }
            | Op::Readback { grant, .. } => grant_ok(*grant),
            Op::Post {
                by, grant, form, ..
            } => state
                .tabs
                .get(&(*by, *grant))
                .is_some_and(|tab| tab.forms.contains(form)),
            _ => true,
        }
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        state.step(op);
        state
    }
}
