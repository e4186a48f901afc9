//! The engine's matvec against memory streaming: `cargo run --release --example bench_engine`;
//! and the engine's decode step on a GGUF file: `… --example bench_engine -- FILE.gguf [STEPS
//! [NUMERICS]]`.
//!
//! With a file: the model and its checkpoint read from it (weights in place, in their stored
//! types), the step lowered at `NUMERICS` (default `f32`; `f32/f32/f32/q8_k` quantizes k-quant
//! matvecs' inputs to Q8_K, as llama.cpp does) and run on 2 threads, one warm-up step, then the median
//! of `STEPS` (default 16) steps in ms, printed as one JSON line `{"median_ms": …, "steps": …}`
//! (`reference/bench_llama_cpp.py` reads it).
//!
//! For the head of Qwen3.5-0.8B (`[248320, 1024]`, the largest matrix of a step) and its FFN
//! matrices (`[3584, 1024]`: one, which stays in cache between runs, and 24 distinct ones in turn,
//! read from memory as in a step), on 1 and 2 threads: the median time of `w · x` next to the
//! median time of one pass summing `w`'s values, and their ratio (1 is the memory bound). The
//! figures go in docs/PERFORMANCE.md.

use stepcheck::engine::run::bench::{MatVecTiming, matvec_vs_stream};
use stepcheck::engine::{EngineRunner, Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{author::decode_step, gguf::load_gguf};

/// Runs per median.
const RUNS: usize = 10;

/// A `[rows, cols]` matrix of values that are not zero (so that every page is really read).
fn matrix(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i % 251) as f32 - 125.0) / 128.0).collect()
}

fn report(name: &str, t: &MatVecTiming) {
    let gbs = |s: f64| t.bytes() / s / 1e9;
    let times = if t.count > 1 { format!(" ×{}", t.count) } else { String::new() };
    println!(
        "| {name} [{}, {}]{times} | {} | {:.2} ms ({:.1} GB/s) | {:.2} ms ({:.1} GB/s) | {:.2} |",
        t.rows,
        t.cols,
        t.threads,
        t.matvec * 1e3,
        gbs(t.matvec),
        t.stream * 1e3,
        gbs(t.stream),
        t.ratio()
    );
}

/// The median ms of `steps` decode steps of the model in the GGUF file `path`, on 2 threads.
fn step_of_file(path: &str, steps: usize, numerics: Numerics) -> Result<f64, Box<dyn std::error::Error>> {
    let (spec, ckpt) = load_gguf(path)?;
    let program = lower_graph(&EngineShim::default().prepare(&decode_step(&spec)?), numerics)?;
    let mut engine = EngineRunner::new(&program, &ckpt, steps + 2)?.with_threads(2);
    engine.step(1)?;
    let mut times = vec![];
    let mut token = 1u32;
    for _ in 0..steps {
        token = (token * 31 + 7) % 1000;
        let start = std::time::Instant::now();
        std::hint::black_box(engine.step(token)?);
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(path) = args.first() {
        let steps = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
        let Some(numerics) = args.get(2).map_or(Some(Numerics::F32), |n| Numerics::parse(n)) else {
            eprintln!("NUMERICS is act[/kv[/state[/kquant-inputs]]], e.g. f32/f32/f32/q8_k");
            std::process::exit(2);
        };
        match step_of_file(path, steps, numerics) {
            Ok(ms) => println!("{{\"median_ms\": {ms:.3}, \"steps\": {steps}}}"),
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let x: Vec<f32> = (0..1024).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    println!("medians of {RUNS} runs, f32 weights\n");
    println!("| matrix | threads | matvec | stream (sum) | matvec / stream |");
    println!("|---|---|---|---|---|");
    for (name, rows, count) in [("FFN, cached", 3584, 1), ("FFN, 24 layers", 3584, 24), ("head", 248_320, 1)] {
        let w = matrix(rows * count, x.len());
        for threads in [1, 2] {
            report(name, &matvec_vs_stream(&w, count, &x, threads, RUNS));
        }
    }
}
