//! What each stage of the oracle costs on generated cases: `cargo run --release --example
//! stage_costs -- [CASES]`. It draws the cases `gen_run` draws ([`measured_case_bytes`]) and
//! times, per case, the stages `judge_drawn` runs when it judges a case stage by stage: the trace
//! (author, shim, lower; authored again, where `judge_drawn` reuses the draw's step), the random
//! checkpoint, the reference's runs of the shim's two graphs, the proof and the engine's runs with
//! their comparison. It prints each stage's total and share, and the mean size of a case (ops of
//! the fused graph, checkpoint weights and how many times its runs read one, blocks of the
//! program), for the cost model in docs/PERFORMANCE.md. It is a measurement, not a judge: it
//! checks no verdict.

use std::time::{Duration, Instant};

use stepcheck::check::{compare_with, reference_run_with};
use stepcheck::r#gen::Case;
use stepcheck::r#gen::draw::measured_case_bytes;
use stepcheck::r#gen::oracle::{prove_trace, trace};
use stepcheck::interp::Decoded;
use stepcheck::model::random::random_checkpoint;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The stages, in the order a case runs them.
const STAGES: [&str; 6] = [
    "draw",
    "trace: author, shim, lower",
    "random checkpoint",
    "reference: two runs",
    "proof",
    "engine: runs, compare",
];

fn main() {
    let cases: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    let mut spent = [Duration::ZERO; STAGES.len()];
    let (mut ops, mut blocks, mut accepted, mut weights, mut passes) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut clock = Instant::now();
    let mut lap = |stage: usize, spent: &mut [Duration]| {
        let now = Instant::now();
        spent[stage] += now - clock;
        clock = now;
    };
    for i in 0..cases {
        let bytes = measured_case_bytes(i);
        lap(0, &mut spent);
        let Some(drawn) = Case::draw(&bytes) else { continue };
        let case = drawn.case;
        lap(0, &mut spent);
        let Ok(t) = trace(&case) else { continue };
        ops += t.fused.ops.len();
        lap(1, &mut spent);
        let Some(ckpt) = case.spec().map(|s| random_checkpoint(s, case.seed)) else { continue };
        weights += ckpt.numel();
        let tokens = case.tokens();
        // The reference's runs of the shim's two graphs: each step reads every weight once.
        passes += 2 * ckpt.numel() * tokens.len();
        lap(2, &mut spent);
        let decoded = Decoded::default();
        let runs = reference_run_with(&t.shim.0, &ckpt, &tokens, &decoded)
            .and_then(|a| Ok((a, reference_run_with(&t.shim.1, &ckpt, &tokens, &decoded)?)));
        lap(3, &mut spent);
        let (Ok(program), Ok((_, fused_run))) = (&t.lowered, runs) else { continue };
        accepted += 1;
        // The engine's exact run, and its run beside its shadow (f32 and f64): three more passes.
        passes += 3 * ckpt.numel() * tokens.len();
        blocks += program.blocks.len();
        let _ = prove_trace(&case, &t, program);
        lap(4, &mut spent);
        let _ = compare_with(&t.fused, &fused_run, program, &ckpt, &tokens);
        lap(5, &mut spent);
    }
    let total: Duration = spent.iter().sum();
    println!("{cases} cases, {accepted} accepted, {:.0} µs a case", total.as_secs_f64() * 1e6 / cases as f64);
    println!(
        "a case's means: {:.1} fused ops, {:.0} weights, {:.0} weights read; an accepted program's: {:.1} blocks",
        ops as f64 / cases as f64,
        weights as f64 / cases as f64,
        passes as f64 / cases as f64,
        blocks as f64 / accepted.max(1) as f64
    );
    for (name, d) in STAGES.iter().zip(spent) {
        println!(
            "{name:<30} {:>8.0} µs a case {:>5.1} %",
            d.as_secs_f64() * 1e6 / cases as f64,
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        );
    }
}
