//! The reference interpreter matches Hugging Face transformers' logits at every step, for every
//! fixture, read from safetensors and from GGUF.

use std::path::PathBuf;

use stepcheck::interp::Runner;
use stepcheck::model::{Checkpoint, ModelSpec, author::decode_step, gguf::load_gguf, hf::load_hf_folder};

mod common;
use common::{Golden, read_golden};

/// The tolerance the issue sets: absolute, per logit, at every step (transformers computes in f32,
/// the interpreter in f64; the numpy reference of the facts file sees ≈ 3e-6).
const TOLERANCE: f64 = 1e-4;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(name)
}

fn golden(name: &str) -> Golden {
    read_golden(&dir(name).join("golden.json"))
}

/// The largest |difference| from the golden logits over every step.
fn max_diff(spec: &ModelSpec, ckpt: &Checkpoint, g: &Golden) -> f64 {
    let graph = decode_step(spec).expect("author");
    let mut runner = Runner::new(&graph, ckpt).expect("runner");
    let mut worst = 0f64;
    for (step, (&t, want)) in g.tokens.iter().zip(&g.logits).enumerate() {
        let got = runner.step(t).unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(got.len(), want.len());
        worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
    }
    worst
}

#[test]
fn the_reference_interpreter_matches_transformers_from_safetensors() {
    for name in ["qwen35-a", "qwen35-b", "qwen35-c"] {
        let (spec, ckpt) = load_hf_folder(&dir(name)).expect("load");
        let d = max_diff(&spec, &ckpt, &golden(name));
        eprintln!("{name}: max |diff| {d:.2e}");
        assert!(d <= TOLERANCE, "{name}: max |diff| {d:e}");
    }
}

#[test]
fn the_reference_interpreter_matches_transformers_from_gguf() {
    for name in ["qwen35-a", "qwen35-b", "qwen35-c"] {
        let (spec, ckpt) = load_gguf(dir(name).join("model.gguf")).expect("load");
        let d = max_diff(&spec, &ckpt, &golden(name));
        eprintln!("{name}: max |diff| {d:.2e}");
        assert!(d <= TOLERANCE, "{name}: max |diff| {d:e}");
    }
}

#[test]
fn reading_value_heads_in_grouped_order_breaks_the_match() {
    // The check is sharp enough to see the value-head order: the same checkpoint through a graph
    // whose delta rules read value heads in grouped order misses by far more than the tolerance.
    let (spec, ckpt) = load_hf_folder(&dir("qwen35-a")).expect("load");
    let mut graph = decode_step(&spec).expect("author");
    for op in &mut graph.ops {
        if let stepcheck::ir::OpKind::DeltaRule { head_map } = &mut op.kind {
            *head_map = stepcheck::ir::HeadMap::Grouped;
        }
    }
    let g = golden("qwen35-a");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let mut worst = 0f64;
    for (&t, want) in g.tokens.iter().zip(&g.logits) {
        let got = runner.step(t).expect("step");
        worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
    }
    assert!(worst > 100.0 * TOLERANCE, "grouped order still matches: {worst:e}");
}
