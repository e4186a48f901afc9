//! Every accepted program computes what its graph computes: on every preset and fixture, the engine
//! interpreter agrees with the reference interpreter, and through the engine every fixture matches
//! transformers.

use std::path::PathBuf;

use stepcheck::check::{Verdict, compare};
use stepcheck::engine::{EngineRunner, Numerics, Program, lower::lower_graph, shim::EngineShim};
use stepcheck::ir::Graph;
use stepcheck::model::random::random_checkpoint;
use stepcheck::model::{Checkpoint, ModelSpec, author::decode_step, gguf::load_gguf, hf::load_hf_folder, presets};

fn lowered(spec: &ModelSpec, numerics: Numerics) -> (Graph, Program) {
    let g = EngineShim::default().prepare(&decode_step(spec).expect("author"));
    let p = lower_graph(&g, numerics).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    (g, p)
}

fn agrees(spec: &ModelSpec, ckpt: &Checkpoint, numerics: Numerics, tokens: &[u32]) -> Verdict {
    let (g, p) = lowered(spec, numerics);
    let v = compare(&g, &p, ckpt, tokens).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    eprintln!("{} at {numerics}: {v}", spec.name);
    v
}

const TOKENS: [u32; 8] = [1, 17, 3, 96, 0, 42, 42, 5];

#[test]
fn the_engine_agrees_with_the_reference_on_every_small_preset() {
    for name in ["tiny", "tiny-tied", "small"] {
        let spec = presets::preset(name).expect("preset");
        for numerics in [Numerics::F32, Numerics::BF16] {
            let v = agrees(&spec, &random_checkpoint(&spec, 3), numerics, &TOKENS);
            // Tight at every numerics: the structure within EXACT of the reference, and every
            // Command's bound within 1e-3 of its tensor's scale beyond half a unit of its storage
            // type (the bf16 branch once passed at about 1 absolute).
            let Verdict::Agree { structure, widest, .. } = v else { panic!("{name} at {numerics}: {v}") };
            assert!(structure <= stepcheck::check::EXACT, "{name} at {numerics}: {v}");
            let half_unit = numerics.activations.unit_roundoff();
            assert!(widest <= 1e-3 + half_unit, "{name} at {numerics}: {v}");
        }
    }
}

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(name)
}

fn golden(name: &str) -> (Vec<u32>, Vec<Vec<f64>>) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir(name).join("golden.json")).expect("golden")).expect("json");
    let tokens = v["tokens"].as_array().expect("tokens").iter().filter_map(|t| t.as_u64()).map(|t| t as u32).collect();
    let logits = v["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|r| r.as_array().expect("row").iter().filter_map(|x| x.as_f64()).collect())
        .collect();
    (tokens, logits)
}

#[test]
fn every_fixture_is_accepted_and_the_interpreters_agree_from_both_files() {
    for name in ["qwen35-a", "qwen35-b", "qwen35-c"] {
        let (tokens, _) = golden(name);
        for (spec, ckpt) in
            [load_hf_folder(&dir(name)).expect("hf"), load_gguf(dir(name).join("model.gguf")).expect("gguf")]
        {
            let v = agrees(&spec, &ckpt, Numerics::F32, &tokens);
            assert!(matches!(v, Verdict::Agree { .. }), "{name}: {v}");
        }
    }
}

#[test]
fn through_the_engine_every_fixture_matches_transformers() {
    for name in ["qwen35-a", "qwen35-b", "qwen35-c"] {
        let (tokens, want) = golden(name);
        let (spec, ckpt) = load_gguf(dir(name).join("model.gguf")).expect("gguf");
        let (_, p) = lowered(&spec, Numerics::F32);
        let mut engine = EngineRunner::new(&p, &ckpt, tokens.len()).expect("engine");
        let mut worst = 0f64;
        for (&t, w) in tokens.iter().zip(&want) {
            let got = engine.step(t).expect("step");
            worst = got.iter().zip(w).map(|(&a, &b)| (a as f64 - b).abs()).fold(worst, f64::max);
        }
        eprintln!("{name}: engine vs transformers max |diff| {worst:.2e}");
        assert!(worst <= 1e-4, "{name}: {worst:e}");
    }
}

#[test]
fn reduced_numerics_change_only_where_the_program_stores() {
    // The program at any numerics is the f32 program with its storage types changed: so the f32
    // agreement, which is tight, covers every command of it, and the engine's rounding is the one
    // thing reduced numerics add.
    use stepcheck::engine::Storage;
    for name in ["tiny", "tiny-tied", "small", "qwen3.5-0.8b"] {
        let spec = presets::preset(name).expect("preset");
        let (_, f32_program) = lowered(&spec, Numerics::F32);
        for numerics in
            [Numerics::BF16, Numerics { activations: Storage::F16, kv_cache: Storage::Bf16, ..Numerics::F32 }]
        {
            let (_, p) = lowered(&spec, numerics);
            assert_eq!(p.blocks, f32_program.blocks, "{name} at {numerics}");
            assert!(p.buffers.iter().all(|b| b.storage == numerics.activations), "{name}");
            for s in &p.states {
                let want = match s.layout {
                    stepcheck::engine::program::StateLayout::Position => Storage::F32,
                    stepcheck::engine::program::StateLayout::ConvWindow { .. } => numerics.activations,
                    stepcheck::engine::program::StateLayout::DeltaState { .. } => Storage::F32,
                    stepcheck::engine::program::StateLayout::KvCache { .. } => numerics.kv_cache,
                };
                assert_eq!(s.storage, want, "{name}: {}", s.name);
            }
        }
    }
}
