//! A batched step of `B` sequences against a step of one, on the full-size Qwen3.5-0.8B preset:
//! `cargo run --release --example bench_batch`.
//!
//! Both run through `batch::run::BatchRunner` (random weights, f32, every thread): a plan that admits
//! `B` sequences into slots `0..B` and decodes `STEPS` steps of `B` rows, against the same plan for
//! one sequence. The figure is the median over `RUNS` runs of a run's time divided by its steps
//! (the admissions, a reset of each slot, are included and are small next to a step). A batched step
//! that read each weight once would cost little more than one row's; this runner steps its rows one
//! after another, so the ratio shows how far it is from that.

use std::time::Instant;

use stepcheck::batch::BatchProgram;
use stepcheck::batch::plan::{Row, SlotOp, SlotPlan};
use stepcheck::batch::run::BatchRunner;
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

fn main() {
    let spec = presets::qwen35_08b();
    let ckpt = random_checkpoint(&spec, 0);
    let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
    let program = lower_graph(&graph, Numerics::F32).expect("lowered");
    let one = per_step(1, &program, &ckpt);
    let many = per_step(BATCH, &program, &ckpt);
    println!("0.8B, f32, median of {RUNS} runs of {STEPS} steps");
    println!("step of 1 sequence:  {:.0} ms", one * 1e3);
    println!("step of {BATCH} sequences: {:.0} ms", many * 1e3);
    println!("ratio: {:.2} (aim: ≤ 1.5)", many / one);
}
