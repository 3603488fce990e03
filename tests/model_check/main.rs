//! Exhaustive exploration of Writ's grant protocol with stateright
//! (docs/model.md): two people, two bots, one grant; group commits, crashes
//! and restarts, lost answers and same-key retries. Every decision is made
//! by Writ's own domain code; the properties are checked in every state
//! reached.
//!
//! `bounded_exploration` runs in the normal suite: breadth-first, every
//! state within [`SUITE_STEPS`] steps. `WRIT_MODEL_DEPTH=N` (steps, or
//! `full` for no bound) runs `long_exploration` with wider bounds;
//! `scripts/model-check` does that in an optimized build. Each `mutation_*`
//! test breaks one step of the server on purpose and asserts that the named
//! invariant fails, printing the shortest path found.

mod model;
mod properties;
mod server;
mod system;
mod tables;

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use model::{Permission, RepoSettings, State};
use server::Mutation;
use system::{Action, Bounds, Writ};

/// Steps from the initial state explored in the normal suite.
const SUITE_STEPS: usize = 12;

fn threads() -> usize {
    std::env::var("WRIT_MODEL_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Bob is an admin too, and the repository requires a second person.
fn two_admins() -> Vec<RepoSettings> {
    vec![RepoSettings {
        bob: Permission::Admin,
        require_distinct_approver: true,
    }]
}

/// The actions of `path` up to the first state where `name` is decided
/// (an `always` fails, a `sometimes` holds): the checker reports the last
/// such state of its block, this is the shortest prefix of that path.
fn decided_prefix(model: &Writ, name: &'static str, path: Path<State, Action>) -> Vec<Action> {
    let property = model.property(name);
    let wanted = property.expectation == Expectation::Sometimes;
    let mut actions = Vec::new();
    for (state, action) in path.into_vec() {
        if (property.condition)(model, &state) == wanted {
            break;
        }
        actions.extend(action);
    }
    actions
}

fn numbered(actions: &[Action]) -> String {
    actions
        .iter()
        .enumerate()
        .map(|(n, a)| format!("  {:>2}. {a:?}\n", n + 1))
        .collect()
}

/// What one run explored.
struct Explored {
    unique: usize,
    elapsed: Duration,
}

/// Explores breadth-first every state within `steps` (all when `None`)
/// and fails on any counterexample or any unreached `sometimes`.
fn explore(model: Writ, steps: Option<usize>, label: &str) -> Explored {
    let started = Instant::now();
    let mut builder = model.checker().threads(threads());
    if let Some(steps) = steps {
        builder = builder.target_max_depth(steps + 2);
    }
    let checker = builder.spawn_bfs().join();
    let explored = Explored {
        unique: checker.unique_state_count(),
        elapsed: started.elapsed(),
    };
    let bound = steps.map_or("every reachable state".into(), |n| format!("{n} steps"));
    println!(
        "{label}: {} unique states ({} generated) within {bound}, {:.1} s",
        explored.unique,
        checker.state_count(),
        explored.elapsed.as_secs_f64()
    );
    let model = checker.model();
    let discoveries = checker.discoveries();
    let mut failures = Vec::new();
    for property in model.properties() {
        let found = discoveries.get(property.name).cloned();
        match (property.expectation, found) {
            (Expectation::Sometimes, None) => {
                failures.push(format!("never reached: \"{}\"", property.name));
            }
            (Expectation::Sometimes, Some(path)) => {
                let steps = decided_prefix(model, property.name, path).len();
                println!("  reached \"{}\" in {steps} steps", property.name);
            }
            (_, Some(path)) => {
                let actions = decided_prefix(model, property.name, path);
                failures.push(format!(
                    "invariant \"{}\" fails after:\n{}",
                    property.name,
                    numbered(&actions)
                ));
            }
            (_, None) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    explored
}

#[test]
fn bounded_exploration() {
    let bounds = Bounds {
        max_edits: 1,
        bot_outstanding: 1,
        full_menus: false,
        issue_setup: true,
    };
    let model = Writ::new(two_admins(), bounds, None);
    let explored = explore(model, Some(SUITE_STEPS), "bounded");
    assert!(explored.unique > 100_000, "the bounded run explored little");
}

/// `WRIT_MODEL_DEPTH`: a number of steps, or `full`; unset, the long runs
/// are skipped.
fn long_run_steps() -> Option<Option<usize>> {
    let raw = std::env::var("WRIT_MODEL_DEPTH").ok()?;
    Some(match raw.trim() {
        "full" => None,
        n => Some(
            n.parse()
                .expect("WRIT_MODEL_DEPTH: a number of steps, or `full`"),
        ),
    })
}

/// The long run: the suite's bounds under every repository setting (Bob
/// `write` or `admin`, a second approver required or not), to
/// `WRIT_MODEL_DEPTH` steps or, with `full`, every reachable state.
#[test]
fn long_exploration() {
    let Some(steps) = long_run_steps() else {
        println!("skipped: WRIT_MODEL_DEPTH unset");
        return;
    };
    let bounds = Bounds {
        max_edits: 1,
        bot_outstanding: 1,
        full_menus: false,
        issue_setup: true,
    };
    explore(Writ::new(RepoSettings::all(), bounds, None), steps, "long");
}

/// The wide run (with `WRIT_MODEL_DEPTH` set): two edits, every draft, key,
/// text and readback, and a bot that retries before its first attempt was
/// answered, to `WRIT_MODEL_WIDE_STEPS` steps (default 13; this space is
/// too large to exhaust).
#[test]
fn wide_exploration() {
    if long_run_steps().is_none() {
        println!("skipped: WRIT_MODEL_DEPTH unset");
        return;
    }
    let steps = std::env::var("WRIT_MODEL_WIDE_STEPS")
        .ok()
        .map(|v| v.parse().expect("WRIT_MODEL_WIDE_STEPS: a number of steps"))
        .unwrap_or(13);
    let bounds = Bounds {
        max_edits: 2,
        bot_outstanding: 2,
        full_menus: true,
        issue_setup: true,
    };
    explore(Writ::new(two_admins(), bounds, None), Some(steps), "wide");
}

/// Runs the model with `mutation` until `invariant` fails, and prints the
/// steps that break it.
fn caught(mutation: Mutation, invariant: &'static str) {
    let bounds = Bounds {
        max_edits: 0,
        bot_outstanding: 1,
        full_menus: false,
        issue_setup: false,
    };
    let started = Instant::now();
    let checker = Writ::new(two_admins(), bounds, Some(mutation))
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf([invariant].into()))
        .target_max_depth(SUITE_STEPS + 2)
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(invariant)
        .unwrap_or_else(|| panic!("{mutation:?}: \"{invariant}\" was not caught"));
    let actions = decided_prefix(checker.model(), invariant, path);
    println!(
        "{mutation:?} breaks \"{invariant}\" ({} states, {:.1} s) after:\n{}",
        checker.unique_state_count(),
        started.elapsed().as_secs_f64(),
        numbered(&actions)
    );
}

#[test]
fn mutation_submit_ignores_withdraw() {
    caught(
        Mutation::SubmitIgnoresWithdraw,
        properties::NOT_AFTER_WITHDRAW,
    );
}

#[test]
fn mutation_key_lookup_after_insert() {
    caught(
        Mutation::KeyLookupAfterInsert,
        properties::ONE_ISSUE_PER_KEY,
    );
}

#[test]
fn mutation_checks_before_key_lookup() {
    caught(
        Mutation::ChecksBeforeKeyLookup,
        properties::REPLAY_IS_ORIGINAL,
    );
}

#[test]
fn mutation_answer_before_commit() {
    caught(Mutation::AnswerBeforeCommit, properties::ACKED_HAS_RECEIPT);
}

#[test]
fn mutation_approve_ignores_admission() {
    caught(
        Mutation::ApproveIgnoresAdmission,
        properties::APPROVED_BEFORE_SUBMISSION,
    );
}

#[test]
fn mutation_any_bot_may_act() {
    caught(Mutation::AnyBotMayAct, properties::ONLY_THE_AGENT);
}
