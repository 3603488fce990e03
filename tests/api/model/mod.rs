//! Model-based testing: random sequences of operations by several
//! principals (the native routes, the browser forms and `/mcp`), run over
//! real HTTP against a fresh Writ on each engine, every answer and the
//! stored state compared with the reference model after every step
//! (`reference.rs`; docs/model.md).
//!
//! The short run (fixed seed) is part of the suite. `scripts/model-test`
//! runs a long one: `WRIT_MODEL_CASES`, `WRIT_MODEL_STEPS` (the longest
//! sequence) and `WRIT_MODEL_SEED` choose its size and seed. A failure
//! shrinks to a minimal sequence and prints it as JSON; add that line to
//! `regressions.jsonl` beside this file to keep it as a test (every line
//! there is replayed first, on both engines), or replay it alone with
//! `WRIT_MODEL_REPLAY='<json>'`.

mod drive;
mod generate;
mod reference;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Mutex;

use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest};

use crate::helpers::{Backend, postgres_admin_url, skip_postgres};
use drive::Sut;
use generate::Protocol;
use reference::{Model, Op};

/// The engine a run uses, as a type (the runner is generic over it).
pub trait Engine {
    const BACKEND: Backend;
}

pub struct OnSqlite;
pub struct OnPostgres;

impl Engine for OnSqlite {
    const BACKEND: Backend = Backend::Sqlite;
}

impl Engine for OnPostgres {
    const BACKEND: Backend = Backend::Postgres;
}

/// A fresh server and the runtime that serves it.
pub struct Harness {
    sut: Sut,
    steps: usize,
    runtime: tokio::runtime::Runtime,
}

pub struct ModelTest<E>(PhantomData<E>);

/// How often each kind of operation got each answer, over a whole run.
static ANSWERS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn tally(op: &Op, status: u16, code: Option<&str>) {
    let kind = match op {
        Op::Post { form, .. } => format!("Post {form:?}"),
        Op::Submit { .. } => "Submit".to_owned(),
        _ => format!("{op:?}")
            .split([' ', '('])
            .next()
            .unwrap_or_default()
            .to_owned(),
    };
    let key = format!("{kind} {status} {}", code.unwrap_or_default());
    *ANSWERS.lock().expect("tally").entry(key).or_default() += 1;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

impl<E: Engine> StateMachineTest for ModelTest<E> {
    type SystemUnderTest = Harness;
    type Reference = Protocol;

    fn init_test(_: &Model) -> Harness {
        let runtime = runtime();
        let sut = runtime.block_on(Sut::start(E::BACKEND));
        Harness {
            sut,
            steps: 0,
            runtime,
        }
    }

    fn apply(mut h: Harness, model: &Model, op: Op) -> Harness {
        h.steps += 1;
        let seen = h.runtime.block_on(h.sut.run(model.now, &op));
        tally(&op, seen.status, seen.code.as_deref());
        if let Some(diff) = seen.differences(&model.expect, &op) {
            panic!("step {}: {op:?}: {diff}", h.steps);
        }
        if let Err(diff) = h.runtime.block_on(h.sut.check_stored(model)) {
            panic!("after step {}: {op:?}: {diff}", h.steps);
        }
        h
    }

    fn teardown(mut h: Harness, model: Model) {
        let records = h.runtime.block_on(h.sut.audit_records());
        assert_eq!(
            records, model.audited,
            "audit records written (one per agent call, allowed or refused)"
        );
        drop(h.sut);
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs generated sequences on `E`; on failure, the shrunk sequence as JSON.
fn explore<E: Engine>() {
    if E::BACKEND == Backend::Postgres && postgres_admin_url().is_none() {
        skip_postgres();
        return;
    }
    replay_regressions::<E>();
    let cases = env_number("WRIT_MODEL_CASES", 8) as u32;
    let steps = env_number("WRIT_MODEL_STEPS", 400) as usize;
    let seed = env_number("WRIT_MODEL_SEED", 20_261_205);
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 400,
        max_shrink_time: 600_000,
        ..Config::default()
    };
    eprintln!("model: {cases} sequences of up to {steps} steps, seed {seed}");
    let strategy = Protocol::sequential_strategy(steps / 2..=steps);
    let mut runner = TestRunner::new(config.clone());
    let result = runner.run(&strategy, |(initial, transitions, seen)| {
        ModelTest::<E>::test_sequential(config.clone(), initial, transitions, seen);
        Ok(())
    });
    let answers = std::mem::take(&mut *ANSWERS.lock().expect("tally"));
    let steps: u64 = answers.values().sum();
    eprintln!("model: {steps} steps run; answers by operation:");
    for (answer, n) in answers {
        eprintln!("  {n:>6}  {answer}");
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, (_, transitions, _))) => {
            let json = serde_json::to_string(&transitions).expect("ops as JSON");
            panic!(
                "the server disagreed with the model: {reason}\n\
                 minimal sequence ({} steps), replay with WRIT_MODEL_REPLAY or keep it in \
                 tests/api/model/regressions.jsonl:\n{json}",
                transitions.len()
            );
        }
        Err(e) => panic!("{e}"),
    }
}

/// Runs one sequence of operations against a fresh server on `E`.
fn replay<E: Engine>(ops: &[Op]) {
    let mut model = Model::new();
    let mut harness = ModelTest::<E>::init_test(&model);
    for op in ops {
        assert!(
            Protocol::preconditions(&model, op),
            "the sequence is not valid for the model at {op:?}"
        );
        model = Protocol::apply(model, op);
        harness = ModelTest::<E>::apply(harness, &model, op.clone());
    }
    ModelTest::<E>::teardown(harness, model);
}

/// Every sequence kept in `regressions.jsonl`, and `WRIT_MODEL_REPLAY`.
fn replay_regressions<E: Engine>() {
    let kept = include_str!("regressions.jsonl");
    let extra = std::env::var("WRIT_MODEL_REPLAY").unwrap_or_default();
    for line in kept.lines().chain(extra.lines()) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let ops: Vec<Op> = serde_json::from_str(line).expect("a sequence of ops as JSON");
        replay::<E>(&ops);
    }
}

#[test]
fn sqlite() {
    explore::<OnSqlite>();
}

#[test]
fn postgres() {
    explore::<OnPostgres>();
}
