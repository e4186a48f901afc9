//! The engine's decode step on a GGUF file: `cargo run --release --example bench_engine --
//! FILE.gguf [STEPS [NUMERICS]]`.
//!
//! The model and its checkpoint read from it (weights in place, in their stored
//! types), the step lowered at `NUMERICS` (default `f32`; `f32/f32/f32/q8_k` quantizes k-quant
//! matvecs' inputs to Q8_K, as llama.cpp does) and run on 2 threads, one warm-up step, then the median
//! of `STEPS` (default 16) steps in ms, printed as one JSON line `{"median_ms": …, "steps": …}`
//! (`reference/bench_llama_cpp.py` reads it).

use stepcheck::engine::{EngineRunner, Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{author::decode_step, gguf::load_gguf};

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
    let Some(path) = args.first() else {
        eprintln!("usage: bench_engine FILE.gguf [STEPS [NUMERICS]]");
        std::process::exit(2);
    };
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
}
