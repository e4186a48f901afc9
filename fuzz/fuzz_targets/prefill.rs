//! Prefills from the fuzzer's bytes: the tiny preset's program (at f32 and bf16 numerics) on a
//! seeded random checkpoint, a few decode steps, then a prompt run as a prefill whose chunks are
//! `Prefill::chunked`'s with edits (a mask, a window's entry, the kept token, a chunk moved,
//! dropped or repeated, a token outside the vocabulary). Every prefill is either refused by name
//! before any state changes, or runs; and one the prover proves computes, to the bit, what its
//! tokens' decode steps compute, run at once and token by token: the prover's soundness, held to
//! the engine.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use stepcheck::engine::program::prefill::{Entry, Prefill};
use stepcheck::engine::run::prefill::Outputs;
use stepcheck::engine::{EngineRunner, Numerics, Program, RunError, lower::lower_graph, shim::EngineShim};
use stepcheck::model::Checkpoint;
use stepcheck::model::{author::decode_step, presets, random::random_checkpoint};
use stepcheck::prefill::prove::prove_prefill;

/// The programs and their checkpoint, made once.
static MODELS: LazyLock<Vec<(Program, Checkpoint)>> = LazyLock::new(|| {
    let spec = presets::preset("tiny").expect("the tiny preset");
    let graph = EngineShim::default().prepare(&decode_step(&spec).expect("its graph"));
    [Numerics::F32, Numerics::BF16]
        .into_iter()
        .map(|n| (lower_graph(&graph, n).expect("its program"), random_checkpoint(&spec, 3)))
        .collect()
});

/// The KV caches' room: enough for the steps before and every token a mutated prefill may run.
const CAPACITY: usize = 64;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.iter().copied();
    let mut next = move || bytes.next().unwrap_or(0) as usize;
    let (program, ckpt) = &MODELS[next() % MODELS.len()];
    let vocab = program.vocab;
    let tokens = 1 + next() % 12;
    let mut prefill = Prefill::chunked(tokens, 1 + next() % 6).expect("a chunk of 1 to 6");
    for _ in 0..next() % 4 {
        let n = prefill.chunks.len();
        if n == 0 {
            break;
        }
        let c = next() % n;
        let len = prefill.chunks[c].len;
        match next() % 7 {
            0 => {
                let i = next() % len;
                prefill.chunks[c].seen[i] = next() % (len + 2);
            }
            1 => prefill.chunks[c].windows = Entry::Start,
            2 => prefill.chunks[c].keep = next() % (len + 1),
            3 => {
                prefill.chunks.remove(c);
            }
            4 => {
                let copy = prefill.chunks[c].clone();
                prefill.chunks.push(copy);
            }
            5 => prefill.chunks[c].first = next() % (tokens + 1),
            _ => prefill.chunks.swap(c, next() % n),
        }
    }
    let mut prompt: Vec<u32> = (0..tokens).map(|_| (next() * 7 % vocab) as u32).collect();
    if next() % 16 == 0 {
        prompt[0] = vocab as u32;
    }
    let before: Vec<u32> = (0..next() % 3).map(|i| (i * 5 + 1) as u32).collect();

    let run = |engine: &mut EngineRunner<'_>| -> Result<(), RunError> {
        for &t in &before {
            engine.step(t)?;
        }
        Ok(())
    };
    let mut fast = EngineRunner::new(program, ckpt, CAPACITY).expect("a runner");
    let mut watched = EngineRunner::new(program, ckpt, CAPACITY).expect("a runner");
    run(&mut fast).expect("the steps before");
    run(&mut watched).expect("the steps before");
    let at_start = fast.state();
    let got = match fast.prefill(&prefill, &prompt, Outputs::All) {
        Ok(l) => l,
        Err(e @ (RunError::Prefill(_) | RunError::TokenOutOfRange { .. } | RunError::CapacityExceeded { .. })) => {
            assert_eq!(fast.state(), at_start, "{e}: refused after the state changed");
            return;
        }
        Err(e) => panic!("a prefill failed with no refusal of its own: {e}"),
    };
    let seen = watched.prefill_observed(&prefill, &prompt, &mut ()).expect("the same prefill, token by token");
    if !prove_prefill(program, &prefill).is_proved() {
        return;
    }
    let mut steps = EngineRunner::new(program, ckpt, CAPACITY).expect("a runner");
    run(&mut steps).expect("the steps before");
    let want: Vec<Vec<f32>> = prompt.iter().map(|&t| steps.step(t).expect("a step")).collect();
    assert!(same(&got, &want), "a proved prefill computes other logits than its steps: {prefill:?}");
    assert!(same(&seen, &want), "a proved prefill, token by token, computes other logits: {prefill:?}");
    assert_eq!(fast.state(), steps.state(), "a proved prefill leaves another state: {prefill:?}");
    assert_eq!(watched.state(), steps.state(), "a proved prefill, token by token, leaves another state");
});

/// Whether two runs' logits are the same, bit for bit (NaN is NaN).
fn same(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        })
}
