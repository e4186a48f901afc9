//! A batched step of `B` sequences against a step of one, on the full-size Qwen3.5-0.8B preset:
//! `cargo run --release --example bench_batch`.
//!
//! Both run through `batch::run::BatchRunner` (random weights, f32, every thread): a plan that admits
//! `B` sequences into slots `0..B` and decodes `STEPS` steps of `B` rows, against the same plan for
//! one sequence. The figure is the median over `RUNS` runs of a run's time divided by its steps
//! (the admissions, a reset of each slot, are included, and so is each row's snapshot: the pool keeps
//! one per slot for rollback, a copy of the slot's state). The runner runs a step whose rows share
//! no storage as one batched step of the engine (`EngineRunner::step_batch`, each weight read once
//! for all rows). The second pair of figures times `step_batch` itself on `B` states against one,
//! without the pool's copies.

use std::time::Instant;

use stepcheck::batch::BatchProgram;
use stepcheck::batch::plan::{Row, SlotOp, SlotPlan};
use stepcheck::batch::run::BatchRunner;
use stepcheck::engine::run::{BatchRow, EngineRunner};
use stepcheck::engine::{Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{author::decode_step, presets, random::random_checkpoint};

const RUNS: usize = 3;
const STEPS: usize = 2;
const BATCH: usize = 8;

/// A plan admitting `b` sequences into slots `0..b` and decoding `STEPS` steps of `b` rows.
fn plan(b: usize) -> SlotPlan {
    let mut ops: Vec<SlotOp> = (0..b).flat_map(|slot| [SlotOp::Claim { slot }, SlotOp::Zero { slot }]).collect();
    for step in 0..STEPS {
        let rows = (0..b).map(|s| Row { slot: Some(s), token: (step * 131 + s * 17 + 1) as u32 }).collect();
        ops.push(SlotOp::Step { rows });
    }
    SlotPlan { ops }
}

/// The median over `RUNS` runs of the time per step of `plan(b)` on a pool of `BATCH` slots and a
/// batch of `b` rows.
fn per_step(b: usize, program: &stepcheck::engine::Program, ckpt: &stepcheck::model::Checkpoint) -> f64 {
    let pool = BatchProgram::new(program.clone(), BATCH, b, 1, STEPS + 1).expect("pool");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let plan = plan(b);
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut runner = BatchRunner::new(&pool, ckpt).expect("runner").with_threads(threads);
            let t0 = Instant::now();
            runner.run(&plan).expect("run");
            t0.elapsed().as_secs_f64() / STEPS as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

/// The median over `RUNS` runs of the time per step of `STEPS` batched steps of `b` fresh states on
/// the engine alone.
fn engine_per_step(b: usize, program: &stepcheck::engine::Program, ckpt: &stepcheck::model::Checkpoint) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut runner = EngineRunner::new(program, ckpt, STEPS + 1).expect("runner").with_threads(threads);
            let mut states: Vec<_> = (0..b).map(|_| runner.fresh_state()).collect();
            let t0 = Instant::now();
            for step in 0..STEPS {
                let mut rows: Vec<BatchRow> = states
                    .iter_mut()
                    .enumerate()
                    .map(|(s, state)| BatchRow { state, token: (step * 131 + s * 17 + 1) as u32 })
                    .collect();
                runner.step_batch(&mut rows).expect("step");
            }
            t0.elapsed().as_secs_f64() / STEPS as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

fn main() {
    let spec = presets::qwen35_08b();
    let ckpt = random_checkpoint(&spec, 0);
    let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
    let program = lower_graph(&graph, Numerics::F32).expect("lowered");
    let one = per_step(1, &program, &ckpt);
    let many = per_step(BATCH, &program, &ckpt);
    let engine_one = engine_per_step(1, &program, &ckpt);
    let engine_many = engine_per_step(BATCH, &program, &ckpt);
    println!("0.8B, f32, median of {RUNS} runs of {STEPS} steps");
    println!("through the pool (BatchRunner, a snapshot per row):");
    println!("  step of 1 sequence:  {:.0} ms", one * 1e3);
    println!("  step of {BATCH} sequences: {:.0} ms", many * 1e3);
    println!("  ratio: {:.2} (aim: ≤ 1.5)", many / one);
    println!("the engine's batched step alone (EngineRunner::step_batch):");
    println!("  step of 1 sequence:  {:.0} ms", engine_one * 1e3);
    println!("  step of {BATCH} sequences: {:.0} ms", engine_many * 1e3);
    println!("  ratio: {:.2} (aim: ≤ 1.5)", engine_many / engine_one);
}
