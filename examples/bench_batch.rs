//! A batched step of `B` sequences against a step of one, on the full-size Qwen3.5-0.8B preset:
//! `cargo run --release --example bench_batch [-- ROUNDS]` (5 rounds by default).
//!
//! Random weights, f32, every thread. Two figures, each a step of `B` rows against a step of one
//! row, the two timed in turn in every round (so that the machine's noise falls on both):
//!
//! 1. **through the pool** (`batch::run::BatchRunner`): a plan that admits the sequences into slots
//!    `0..B` and decodes `1 + STEPS` steps, less the same plan with 1 step, over `STEPS`: the cost
//!    of a step once the runner is warm (its scratch made by the first step), each row's snapshot
//!    included (the pool keeps one per slot for rollback, a copy of the slot's state). The runner
//!    runs a step whose rows share no storage as one batched step of the engine;
//! 2. **the engine's batched step alone** (`EngineRunner::step_batch` on `B` fresh states, no pool):
//!    after one step untimed, each of `STEPS` steps timed on its own;
//! 3. **the engine's steps in pairs**: one runner steps a batch of one state and a batch of `B`
//!    states in alternation, `PAIRS` times after one untimed step of each, and each step of `B` is
//!    set against the step of one just before it. Two steps a fifth of a second apart see the same
//!    minute of a shared machine, so the median of these ratios moves least from run to run.
//!
//! Each figure is the median over the rounds (and, for the second, over their steps); the ratio
//! is of the medians, and the rounds' range is printed beside it. Beside it too, the median (and
//! range) of each round's own ratio: its two sides timed one after the other, so that a slow
//! minute of a shared machine falls on both.
//!
//! `bench_batch engine B` times only the engine's batched step of `B` states, for a profile of it.

use std::time::Instant;

use stepcheck::batch::BatchProgram;
use stepcheck::batch::plan::{Row, SlotOp, SlotPlan};
use stepcheck::batch::run::BatchRunner;
use stepcheck::engine::run::{BatchRow, EngineRunner, RunnerState};
use stepcheck::engine::{Numerics, Program, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{Checkpoint, author::decode_step, presets, random::random_checkpoint};

const ROUNDS: usize = 5;
const STEPS: usize = 4;
const PAIRS: usize = 24;
const BATCH: usize = 8;

/// A plan admitting `b` sequences into slots `0..b` and decoding `steps` steps of `b` rows.
fn plan(b: usize, steps: usize) -> SlotPlan {
    let mut ops: Vec<SlotOp> = (0..b).flat_map(|slot| [SlotOp::Claim { slot }, SlotOp::Zero { slot }]).collect();
    for step in 0..steps {
        let rows = (0..b).map(|s| Row { slot: Some(s), token: (step * 131 + s * 17 + 1) as u32 }).collect();
        ops.push(SlotOp::Step { rows });
    }
    SlotPlan { ops }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The seconds `plan(b, steps)` takes on a fresh runner over a pool of `BATCH` slots.
fn pool_run(b: usize, steps: usize, program: &Program, ckpt: &Checkpoint) -> f64 {
    let pool = BatchProgram::new(program.clone(), BATCH, b, 1, 1 + STEPS + 1).expect("pool");
    let mut runner = BatchRunner::new(&pool, ckpt).expect("runner").with_threads(threads());
    let plan = plan(b, steps);
    let t0 = Instant::now();
    runner.run(&plan).expect("run");
    t0.elapsed().as_secs_f64()
}

/// A warm step through the pool: `1 + STEPS` steps less 1, over `STEPS`.
fn pool_step(b: usize, program: &Program, ckpt: &Checkpoint) -> f64 {
    let one = pool_run(b, 1, program, ckpt);
    let many = pool_run(b, 1 + STEPS, program, ckpt);
    (many - one).max(0.0) / STEPS as f64
}

/// The seconds of one batched step of `states`, each fed its row's token at step `step`.
fn timed_step(runner: &mut EngineRunner<'_>, states: &mut [RunnerState], step: usize) -> f64 {
    let mut rows: Vec<BatchRow> = states
        .iter_mut()
        .enumerate()
        .map(|(s, state)| BatchRow { state, token: (step * 131 + s * 17 + 1) as u32 })
        .collect();
    let t0 = Instant::now();
    runner.step_batch(&mut rows).expect("step");
    t0.elapsed().as_secs_f64()
}

/// The seconds of each of `STEPS` batched steps of `b` fresh states on the engine alone, after one
/// untimed step.
fn engine_steps(b: usize, program: &Program, ckpt: &Checkpoint) -> Vec<f64> {
    let mut runner = EngineRunner::new(program, ckpt, STEPS + 2).expect("runner").with_threads(threads());
    let mut states: Vec<_> = (0..b).map(|_| runner.fresh_state()).collect();
    (0..=STEPS).map(|step| timed_step(&mut runner, &mut states, step)).skip(1).collect()
}

/// Each of `PAIRS` steps of `BATCH` fresh states over the step of one state taken just before it,
/// on one runner, after one untimed step of each.
fn paired_steps(program: &Program, ckpt: &Checkpoint) -> Vec<f64> {
    let mut runner = EngineRunner::new(program, ckpt, PAIRS + 2).expect("runner").with_threads(threads());
    let mut one = vec![runner.fresh_state()];
    let mut many: Vec<_> = (0..BATCH).map(|_| runner.fresh_state()).collect();
    (0..=PAIRS)
        .map(|k| (timed_step(&mut runner, &mut one, k), timed_step(&mut runner, &mut many, k)))
        .skip(1)
        .map(|(a, b)| b / a)
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The median, in ms, and the range.
fn shown(xs: &[f64]) -> String {
    let (lo, hi) = xs.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{:.0} ms ({:.0}–{:.0})", median(xs.to_vec()) * 1e3, lo * 1e3, hi * 1e3)
}

fn main() {
    let spec = presets::qwen35_08b();
    let ckpt = random_checkpoint(&spec, 0);
    let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
    let program = lower_graph(&graph, Numerics::F32).expect("lowered");
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [phase, b] = &args[..] {
        let b: usize = b.parse().expect("a batch size");
        assert_eq!(phase, "engine", "the one phase that runs alone is `engine`");
        println!("step_batch of {b}: {}", shown(&engine_steps(b, &program, &ckpt)));
        return;
    }
    let rounds: usize = args.first().map_or(ROUNDS, |r| r.parse().expect("a number of rounds"));
    let (mut pool, mut engine) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..rounds {
        for (i, b) in [1, BATCH].into_iter().enumerate() {
            pool[i].push(pool_step(b, &program, &ckpt));
            engine[i].extend(engine_steps(b, &program, &ckpt));
        }
    }
    let ratio = |x: &[Vec<f64>; 2]| median(x[1].clone()) / median(x[0].clone());
    // Each round's own ratio (its step of 8 over its step of 1, timed one after the other), so
    // that a slow minute of the machine falls on both sides of a ratio.
    let paired = |x: &[Vec<f64>; 2], per: usize| -> Vec<f64> {
        let round = |v: &[f64], r: usize| median(v[r * per..(r + 1) * per].to_vec());
        (0..rounds).map(|r| round(&x[1], r) / round(&x[0], r)).collect()
    };
    let shown_ratios = |xs: Vec<f64>| {
        let (lo, hi) = xs.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{:.2} ({:.2}–{:.2})", median(xs), lo, hi)
    };
    println!("0.8B, f32, {} threads, {rounds} rounds, each 1 and {BATCH} sequences in turn; median (range)", threads());
    println!("through the pool (BatchRunner, a snapshot per row; a warm step: {STEPS} steps after the first):");
    println!("  step of 1 sequence:  {}", shown(&pool[0]));
    println!("  step of {BATCH} sequences: {}", shown(&pool[1]));
    println!("  ratio: {:.2} (aim: ≤ 1.5); each round's: {}", ratio(&pool), shown_ratios(paired(&pool, 1)));
    println!("the engine's batched step alone (EngineRunner::step_batch, {STEPS} steps after the first):");
    println!("  step of 1 sequence:  {}", shown(&engine[0]));
    println!("  step of {BATCH} sequences: {}", shown(&engine[1]));
    println!("  ratio: {:.2} (aim: ≤ 1.5); each round's: {}", ratio(&engine), shown_ratios(paired(&engine, STEPS)));
    let mut pairs = paired_steps(&program, &ckpt);
    pairs.sort_by(f64::total_cmp);
    let quartile = |q: usize| pairs[(pairs.len() - 1) * q / 4];
    println!("the engine's steps in pairs ({PAIRS} steps of {BATCH}, each over the step of 1 just before it):");
    println!(
        "  ratio: {:.2} (aim: ≤ 1.5); quartiles {:.2}–{:.2}, range {:.2}–{:.2}",
        quartile(2),
        quartile(1),
        quartile(3),
        quartile(0),
        quartile(4)
    );
}
