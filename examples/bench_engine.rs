//! The engine's matvec against memory streaming: `cargo run --release --example bench_engine`.
//!
//! For the head of Qwen3.5-0.8B (`[248320, 1024]`, the largest matrix of a step) and its FFN
//! matrices (`[3584, 1024]`: one, which stays in cache between runs, and 24 distinct ones in turn,
//! read from memory as in a step), on 1 and 2 threads: the median time of `w · x` next to the
//! median time of one pass summing `w`'s values, and their ratio (1 is the memory bound). The
//! figures go in docs/PERFORMANCE.md.

use stepcheck::engine::run::bench::{MatVecTiming, matvec_vs_stream};

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

fn main() {
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
