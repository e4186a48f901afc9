//! The refused families are real graphs: for each fixture of `reference/fixtures/refused/`, the
//! reference interpreter runs the authored step on the canonical checkpoint of transformers'
//! safetensors and matches transformers' golden logits at every step; and the lowering refuses the
//! same graph by the name of the first construct the engine meets in its reading order, at its
//! place.

use std::path::PathBuf;

use stepcheck::engine::lower::lower_graph;
use stepcheck::engine::program::BlockKind::{self, *};
use stepcheck::engine::{Numerics, shim::EngineShim};
use stepcheck::interp::Runner;
use stepcheck::ir::RopeStyle;
use stepcheck::model::ModelSpec;
use stepcheck::model::author::decode_step;
use stepcheck::model::families::load_family_folder;
use stepcheck::model::spec::Routing;

mod common;
use common::{Golden, read_golden};

/// The tolerance the issue sets: absolute, per logit, at every step (transformers computes in f32,
/// the interpreter in f64; the numpy references of `check_refused.py` see ≈ 2e-6).
const TOLERANCE: f64 = 1e-4;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/refused").join(name)
}

fn golden(name: &str) -> Golden {
    read_golden(&dir(name).join("golden.json"))
}

/// The largest |difference| from the golden logits over every step of the fixture.
fn max_diff(name: &str) -> f64 {
    max_diff_with(name, |_| {})
}

/// The largest |difference| from the golden logits of the fixture's checkpoint run through the
/// step of its spec changed by `change`.
fn max_diff_with(name: &str, change: impl FnOnce(&mut ModelSpec)) -> f64 {
    let (mut spec, ckpt) = load_family_folder(&dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    change(&mut spec);
    let graph = decode_step(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut runner = Runner::new(&graph, &ckpt).unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = golden(name);
    let mut worst = 0f64;
    for (step, (&t, want)) in g.tokens.iter().zip(&g.logits).enumerate() {
        let got = runner.step(t).unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
        assert_eq!(got.len(), want.len(), "{name} step {step}: vocabulary");
        worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
    }
    worst
}

/// Each fixture, the refusal its graph must get and where: the first construct in the engine's
/// reading order.
const FIXTURES: [(&str, &str, BlockKind, Option<usize>); 4] = [
    // √hidden on the embedding comes before the sandwich norms, GeGLU and the windows.
    ("gemma3_text", "ScaledEmbedding", Embedding, None),
    // Layer 0 is a sliding attention layer with sinks: the sinks are named first, then the window.
    ("gpt_oss", "AttentionSinks", Attention, Some(0)),
    // Layer 0 is a Gated-DeltaNet the engine runs; its FFN is the first thing it has no unit for.
    ("qwen3_5_moe_text", "Experts", Ffn, Some(0)),
    // Layer 0's attention is latent; its FFN is dense, and the experts come only in layer 1.
    ("deepseek_v3", "LatentAttention", Attention, Some(0)),
];

#[test]
fn the_reference_interpreter_matches_transformers_on_every_refused_family() {
    let mut failed = vec![];
    for (name, ..) in FIXTURES {
        let d = max_diff(name);
        eprintln!("{name}: max |diff| {d:.3e}");
        if d > TOLERANCE {
            failed.push(format!("{name}: max |diff| {d:e}"));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn the_lowering_refuses_each_family_by_its_first_construct() {
    for (name, error, block, layer) in FIXTURES {
        let (spec, _) = load_family_folder(&dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
        let err = match lower_graph(&graph, Numerics::F32) {
            Ok(_) => panic!("{name}: accepted, expected {error}"),
            Err(e) => e,
        };
        assert_eq!(err.name(), error, "{name}: {err}");
        let at = err.site().map(|s| (s.block, s.layer));
        assert_eq!(at, Some((block, layer)), "{name}: {err}");
    }
}

/// A change to a family's spec that drops or alters one of its constructs.
type Change = fn(&mut ModelSpec);

/// For each fixture, constructs whose absence the goldens see: the graph without them misses by
/// far more than the tolerance, so the match above is a match of these constructs.
#[test]
fn each_construct_of_a_family_is_needed_for_the_match() {
    fn experts(s: &mut ModelSpec) -> &mut stepcheck::model::spec::Experts {
        s.constructs.experts.as_mut().expect("experts")
    }
    let cases: Vec<(&str, &str, Change)> = vec![
        ("gemma3_text", "no embedding scale", |s| s.constructs.embedding_scale = None),
        ("gemma3_text", "no sliding window", |s| s.constructs.sliding_window = None),
        ("gemma3_text", "the full layers' RoPE on the sliding layers", |s| s.constructs.sliding_rope = None),
        ("gemma3_text", "1/√head_dim scores", |s| s.constructs.attention_scale = None),
        ("gpt_oss", "no sinks", |s| s.constructs.attention_sinks = false),
        ("gpt_oss", "no YaRN", |s| s.constructs.rope_scaling = None),
        ("gpt_oss", "no router bias", |s| experts(s).router_bias = false),
        ("gpt_oss", "a window one wider", |s| {
            s.constructs.sliding_window.as_mut().expect("window").window += 1;
        }),
        ("qwen3_5_moe_text", "top-k weights not renormalised", |s| experts(s).renormalize = false),
        ("qwen3_5_moe_text", "the shared expert ungated", |s| experts(s).shared_gate = false),
        ("deepseek_v3", "NeoX RoPE", |s| s.attention.rope_style = RopeStyle::Neox),
        ("deepseek_v3", "no group limit", |s| {
            experts(s).routing = Routing::SigmoidGroupLimited { groups: 2, keep_groups: 2 };
        }),
        ("deepseek_v3", "no routed scaling", |s| experts(s).weight_scale = None),
    ];
    for (name, what, change) in cases {
        let d = max_diff_with(name, change);
        assert!(d > 1e-3, "{name} with {what} still matches: max |diff| {d:e}");
    }
}

#[test]
fn each_familys_graph_reads_back_from_its_listing() {
    for (name, ..) in FIXTURES {
        let (spec, _) = load_family_folder(&dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let graph = decode_step(&spec).expect("author");
        let text = graph.to_string();
        let back = stepcheck::ir::parse_graph(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, graph, "{name}");
    }
}
