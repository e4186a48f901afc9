//! One engine step of the full-size Qwen3.5-0.8B preset against streaming its weights once, and the
//! time of `lower_graph`: `cargo run --release --example bench_step`.
//!
//! In one run: the median time of an engine step (random weights, f32), the median time of one pass
//! summing every weight the program reads (the memory bound of a step), their ratio; then the median
//! time of the shim and of `lower_graph` for the 0.8B preset and for a 64-layer spec of its sizes.

#[path = "common/timing.rs"]
mod timing;

use std::hint::black_box;
use std::time::Instant;

use stepcheck::engine::{Command, EngineRunner, Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{ModelSpec, author::decode_step, presets, random::random_checkpoint};
use timing::{median_secs, par_sum};

const RUNS: usize = 9;

/// The checkpoint tensors a program's commands name.
fn weights(p: &stepcheck::engine::Program) -> Vec<String> {
    let mut names = vec![];
    for c in p.blocks.iter().flat_map(|b| &b.commands) {
        let named: Vec<&String> = match c {
            Command::Embed { .. } => vec![],
            Command::RmsNorm { weight, .. } | Command::MatVec { weight, .. } | Command::MergedRows { weight, .. } => {
                vec![weight]
            }
            Command::MergedHeadHalves { weight, .. } => vec![weight],
            Command::Conv { weight, .. } => vec![weight],
            Command::Gates { decay, dt_bias, .. } => vec![decay, dt_bias],
            Command::GatedNorm { weight, .. } => vec![weight],
            Command::Attention { q_norm, k_norm, .. } => q_norm.iter().chain(k_norm).collect(),
            Command::SwiGlu { gate, up, down, .. } => vec![gate, up, down],
            _ => vec![],
        };
        names.extend(named.into_iter().cloned());
    }
    names.sort();
    names.dedup();
    names
}

fn lowering(spec: &ModelSpec) {
    let graph = decode_step(spec).expect("author");
    let shim = median_secs(RUNS, || EngineShim::default().prepare(black_box(&graph)));
    let fused = EngineShim::default().prepare(&graph);
    let lower = median_secs(RUNS, || lower_graph(black_box(&fused), Numerics::F32).expect("lowered"));
    println!(
        "| {} | {} layers | {} ops | {:.2} ms | {:.2} ms |",
        spec.name,
        spec.layers.len(),
        fused.ops.len(),
        shim * 1e3,
        lower * 1e3
    );
}

fn main() {
    let spec = presets::qwen35_08b();
    let t0 = Instant::now();
    let ckpt = random_checkpoint(&spec, 0);
    println!(
        "random checkpoint: {} values ({:.2} GB) in {:.2} s",
        ckpt.numel(),
        ckpt.bytes() as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
    let program = lower_graph(&graph, Numerics::F32).expect("lowered");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut engine = EngineRunner::new(&program, &ckpt, RUNS + 2).expect("engine").with_threads(threads);
    engine.step(1).expect("warm-up step");
    let mut token = 1u32;
    let step = median_secs(RUNS, || {
        token = (token * 31 + 7) % 1000;
        engine.step(token).expect("step")
    });
    // The same bytes, streamed once: every weight the program reads, plus the one embedding row.
    let names = weights(&program);
    let bytes: usize = names.iter().map(|n| ckpt.get(n).map_or(0, |t| t.bytes().len())).sum();
    // The same values as f32 (the checkpoint is F32), streamed from a copy of their own.
    let values: Vec<Vec<f32>> = names.iter().filter_map(|n| ckpt.get(n)).map(|t| t.to_f32().expect("f32")).collect();
    let stream = median_secs(RUNS, || values.iter().map(|v| par_sum(v, threads)).sum::<f32>());
    println!("\n| 0.8B, f32, {threads} threads | median of {RUNS} |");
    println!("|---|---|");
    println!("| engine step | {:.1} ms |", step * 1e3);
    println!(
        "| stream the {:.2} GB it reads, once | {:.1} ms ({:.1} GB/s) |",
        bytes as f64 / 1e9,
        stream * 1e3,
        bytes as f64 / stream / 1e9
    );
    println!("| step / stream | {:.2} |", step / stream);
    drop(engine);
    drop(ckpt);
    println!("\n| spec | layers | fused ops | EngineShim::prepare | lower_graph |");
    println!("|---|---|---|---|---|");
    lowering(&spec);
    let mut deep = presets::qwen35_08b();
    deep.name = "0.8b sizes, 64 layers".into();
    deep.layers = ModelSpec::every_nth_attention(64, 4);
    lowering(&deep);
}
