//! One tiny Qwen3.5 model as the GGUF files users download — Q4_K_M, Q8_0, BF16 and F16, in
//! llama.cpp's qwen35 layout — runs through both interpreters and `check`, and matches transformers
//! run on that file's dequantized weights.
//!
//! The files and goldens are `reference/fixtures/quant-models/<file>/{model.gguf, golden.json}`,
//! written by `reference/make_quant_models.py`: the Q4_K_M file holds llama.cpp's mix (Q4_K, Q6_K
//! for the head and for `attn_v` / `ffn_down` where llama.cpp's `use_more_bits` holds, F32 norms
//! and 1-D tensors), and each golden is transformers' logits on the weights gguf-py dequantizes from
//! that file, the converter's transforms inverted. So a decoder that is wrong anywhere a weight
//! lies misses the golden.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use stepcheck::check::{Verdict, compare};
use stepcheck::engine::{EngineRunner, Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::formats::gguf::GgufFile;
use stepcheck::interp::Runner;
use stepcheck::model::{author::decode_step, gguf::load_gguf};

mod common;
use common::{Golden, read_golden};

/// The tolerance the issue sets: absolute, per logit, at every step (transformers computes in f32;
/// the reference interpreter in f64, the engine in f32 with its own order of sums).
const TOLERANCE: f64 = 1e-4;

/// Each file and the number of tensors of each ggml type it holds.
const FILES: [(&str, &[(&str, usize)]); 4] = [
    ("q4_k_m", &[("F32", 11), ("Q4_K", 14), ("Q6_K", 3)]),
    ("q8_0", &[("F32", 11), ("Q8_0", 17)]),
    ("bf16", &[("BF16", 17), ("F32", 11)]),
    ("f16", &[("F16", 17), ("F32", 11)]),
];

/// The tensors llama.cpp's Q4_K_M stores as Q6_K in this two-layer model: the head, and the
/// second of the two `attn_v`-like tensors (`blk.0.attn_qkv`, `blk.1.attn_v`) and of the two
/// `ffn_down`, where `use_more_bits(i, 2)` holds.
const Q4_K_M_Q6_K: [&str; 3] = ["blk.1.attn_v.weight", "blk.1.ffn_down.weight", "output.weight"];

fn model(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/quant-models").join(file).join("model.gguf")
}

fn golden(file: &str) -> Golden {
    read_golden(&model(file).with_file_name("golden.json"))
}

/// The largest |difference| of `steps` (one row of logits per token) from the golden logits.
fn max_diff(file: &str, g: &Golden, steps: impl IntoIterator<Item = Vec<f64>>) -> f64 {
    let mut worst = 0f64;
    let mut n = 0;
    for (got, want) in steps.into_iter().zip(&g.logits) {
        assert_eq!(got.len(), want.len(), "{file}: vocab");
        worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
        n += 1;
    }
    assert_eq!(n, g.logits.len(), "{file}: steps");
    worst
}

#[test]
fn each_file_holds_the_type_mix_it_is_named_for() {
    for (file, mix) in FILES {
        let f = GgufFile::open(model(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in f.info().tensors() {
            *counts.entry(t.ggml_type.name().expect("known type")).or_default() += 1;
            assert!(t.ggml_type.decodes(), "{file}: {} is {}", t.name, t.ggml_type);
        }
        assert_eq!(counts, mix.iter().copied().collect(), "{file}");
    }
    let f = GgufFile::open(model("q4_k_m")).expect("q4_k_m");
    let q6: Vec<&str> =
        f.info().tensors().iter().filter(|t| t.ggml_type.name() == Some("Q6_K")).map(|t| t.name.as_str()).collect();
    let mut q6 = q6;
    q6.sort();
    assert_eq!(q6, Q4_K_M_Q6_K);
}

#[test]
fn the_reference_interpreter_matches_transformers_on_every_file() {
    for (file, _) in FILES {
        let (spec, ckpt) = load_gguf(model(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let g = golden(file);
        let graph = decode_step(&spec).expect("author");
        let mut runner = Runner::new(&graph, &ckpt).expect("runner");
        let steps = g.tokens.iter().map(|&t| runner.step(t).unwrap_or_else(|e| panic!("{file}: {e}")));
        let d = max_diff(file, &g, steps);
        eprintln!("{file}: reference vs transformers max |diff| {d:.2e}");
        assert!(d <= TOLERANCE, "{file}: max |diff| {d:e}");
    }
}

#[test]
fn the_engine_matches_transformers_on_every_file_and_check_finds_the_interpreters_agree() {
    for (file, _) in FILES {
        let (spec, ckpt) = load_gguf(model(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let g = golden(file);
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
        let program = lower_graph(&graph, Numerics::F32).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut engine = EngineRunner::new(&program, &ckpt, g.tokens.len()).expect("engine");
        let steps = g
            .tokens
            .iter()
            .map(|&t| engine.step(t).unwrap_or_else(|e| panic!("{file}: {e}")).iter().map(|&x| f64::from(x)).collect());
        let d = max_diff(file, &g, steps);
        eprintln!("{file}: engine vs transformers max |diff| {d:.2e}");
        assert!(d <= TOLERANCE, "{file}: max |diff| {d:e}");
        let verdict = compare(&graph, &program, &ckpt, &g.tokens).unwrap_or_else(|e| panic!("{file}: {e}"));
        eprintln!("{file}: check {verdict}");
        assert!(matches!(verdict, Verdict::Agree { .. }), "{file}: {verdict}");
    }
}

#[test]
fn stepcheck_run_and_check_take_every_file() {
    let stepcheck = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_stepcheck")).args(args).output().expect("runs");
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (file, _) in FILES {
        let path = model(file);
        let path = path.to_str().expect("utf-8 path");
        let g = golden(file);
        let tokens = g.tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        for interp in ["engine", "reference"] {
            let out = stepcheck(&["run", path, "--tokens", &tokens, "--json", "--interp", interp]);
            let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
            let rows =
                v["logits"].as_array().expect("logits").iter().map(|r| {
                    r.as_array().expect("row").iter().map(|x| x.as_f64().expect("logit")).collect::<Vec<f64>>()
                });
            let d = max_diff(file, &g, rows);
            assert!(d <= TOLERANCE, "{file}: stepcheck run --interp {interp}: max |diff| {d:e}");
        }
        let out = stepcheck(&["check", path, "--steps", "10", "--json"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
        let models = v["models"].as_array().expect("models");
        assert!(models.len() == 1 && models[0]["verdict"] == "agree", "{file}: {out}");
    }
}

#[test]
fn a_bf16_file_is_read_in_place_with_no_f32_copy() {
    let path = model("bf16");
    let (_, ckpt) = load_gguf(&path).expect("loads");
    let file = GgufFile::open(&path).expect("opens");
    assert_eq!(ckpt.owned_bytes(), 0, "every tensor is borrowed from the mapped file");
    let mut stored = 0;
    for (name, t) in &ckpt.tensors {
        let info = file.info().tensor(name).expect("in the file");
        assert!(t.is_mapped(), "{name}");
        assert_eq!(t.ty(), info.ggml_type, "{name}: kept in its stored type");
        assert_eq!(Some(t.bytes().len() as u64), info.n_bytes, "{name}");
        stored += t.bytes().len();
    }
    // The matrices are BF16: the checkpoint takes their two bytes per value, not f32's four.
    let bf16_values: usize = ckpt.tensors.values().filter(|t| t.ty().name() == Some("BF16")).map(|t| t.numel()).sum();
    assert!(bf16_values > ckpt.numel() / 2, "most values are BF16");
    assert_eq!(ckpt.bytes(), stored);
    assert!(ckpt.bytes() < ckpt.numel() * 4 * 6 / 10, "{} bytes for {} values", ckpt.bytes(), ckpt.numel());
    assert!((ckpt.bytes() as u64) <= file.info().file_len);
}
