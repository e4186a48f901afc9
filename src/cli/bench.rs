//! `stepcheck bench`: the engine's prompt processing and text generation rates, as llama-bench
//! reports them.
//!
//! Two tests, each a warm-up run and then `-r` timed runs from the start state: **pp`P`** runs a
//! prompt of `P` tokens as one prefill (in chunks of `--chunk`, the last token's logits only) and
//! **tg`N`** decodes `N` tokens one step at a time, from an empty cache as llama-bench's does. The
//! tokens are fixed pseudo-random ones below the vocabulary. Each run's rate is its tokens over
//! the time of the engine's calls alone (no sampling, no printing); the table shows the mean and
//! the sample standard deviation of the rates, `--json` every sample.

use std::process::ExitCode;
use std::time::Instant;

use serde::Serialize;

use super::CliError;
use super::args::BenchArgs;
use super::progress::Progress;
use crate::engine::program::prefill::Prefill;
use crate::engine::run::prefill::Outputs;
use crate::engine::{EngineRunner, lower::lower_graph, shim::EngineShim};
use crate::limits::{Budget, Need};
use crate::model::author::decode_step;

/// One test's figures, in llama-bench's names.
#[derive(Clone, Debug, Serialize)]
struct Test {
    /// `pp512`, `tg128`.
    test: String,
    n_prompt: usize,
    n_gen: usize,
    /// The mean rate, tokens per second.
    avg_ts: f64,
    /// The sample standard deviation of the rates.
    stddev_ts: f64,
    samples_ts: Vec<f64>,
}

/// `n` tokens below `vocab`, the same every run (a linear congruential sequence).
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// The mean and sample standard deviation of `xs`.
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n.max(1.0);
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

pub fn bench(a: BenchArgs) -> Result<ExitCode, CliError> {
    let mut progress = Progress::new();
    let source = a.model.source_as(a.weights)?;
    progress.show(&format!("{}: loading", source.label()));
    let budget = Budget::new(a.max_gib);
    let positions = a.prompt.max(a.generate).max(1);
    let (spec, ckpt) = source.load_within(budget.as_ref(), |spec, bytes| {
        Need::of(spec, positions, bytes).with_prefill(spec, a.chunk.min(a.prompt.max(1)))
    })?;
    let graph = decode_step(&spec)?;
    let program = lower_graph(&EngineShim::default().prepare(&graph), a.numerics)?;
    let mut runner = EngineRunner::new(&program, &ckpt, positions)?;
    if let Some(t) = a.threads {
        runner = runner.with_threads(t);
    }
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut tests = vec![];
    if a.prompt > 0 {
        let prompt = tokens(a.prompt, program.vocab, 1);
        let prefill = Prefill::chunked(a.prompt, a.chunk).map_err(|e| format!("--chunk: {e}"))?;
        let mut samples = vec![];
        for rep in 0..=a.repetitions {
            progress.show(&format!("pp{}: run {rep}/{} (run 0 warms up)", a.prompt, a.repetitions));
            let mut fresh = runner.fresh_state();
            runner.swap_state(&mut fresh)?;
            let start = Instant::now();
            runner.prefill(&prefill, &prompt, Outputs::Last)?;
            let t = start.elapsed().as_secs_f64();
            if rep > 0 {
                samples.push(a.prompt as f64 / t.max(1e-9));
            }
        }
        tests.push(test(format!("pp{}", a.prompt), a.prompt, 0, samples));
    }
    if a.generate > 0 {
        let gen_tokens = tokens(a.generate, program.vocab, 2);
        let mut samples = vec![];
        for rep in 0..=a.repetitions {
            progress.show(&format!("tg{}: run {rep}/{} (run 0 warms up)", a.generate, a.repetitions));
            let mut fresh = runner.fresh_state();
            runner.swap_state(&mut fresh)?;
            let start = Instant::now();
            for &t in &gen_tokens {
                runner.step(t)?;
            }
            let t = start.elapsed().as_secs_f64();
            if rep > 0 {
                samples.push(a.generate as f64 / t.max(1e-9));
            }
        }
        tests.push(test(format!("tg{}", a.generate), 0, a.generate, samples));
    }
    progress.clear();
    let model = source.label();
    let numerics = a.numerics.to_string();
    if a.json {
        let json = serde_json::json!({
            "model": model,
            "numerics": numerics,
            "threads": threads,
            "chunk": a.chunk,
            "tests": tests,
        });
        outln!("{json}");
        return Ok(ExitCode::SUCCESS);
    }
    outln!("| model | numerics | threads | test | t/s |");
    outln!("| --- | --- | ---: | ---: | ---: |");
    for t in &tests {
        outln!("| {model} | {numerics} | {threads} | {} | {:.2} ± {:.2} |", t.test, t.avg_ts, t.stddev_ts);
    }
    Ok(ExitCode::SUCCESS)
}

/// A test's figures from its samples.
fn test(name: String, n_prompt: usize, n_gen: usize, samples: Vec<f64>) -> Test {
    let (avg_ts, stddev_ts) = mean_sd(&samples);
    Test { test: name, n_prompt, n_gen, avg_ts, stddev_ts, samples_ts: samples }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rates_mean_and_sample_deviation() {
        assert_eq!(mean_sd(&[2.0, 4.0, 6.0]), (4.0, 2.0));
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
    }

    #[test]
    fn the_tokens_are_below_the_vocabulary_and_the_same_every_run() {
        let t = tokens(100, 7, 1);
        assert!(t.iter().all(|&x| x < 7));
        assert_eq!(t, tokens(100, 7, 1));
        assert_ne!(t, tokens(100, 7, 2));
    }
}
