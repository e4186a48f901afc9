//! The author writes a valid step graph for every preset, with every constant bound to a tensor
//! of the preset's checkpoint layout.

use stepcheck::model::{author::decode_step, bind, layout::layout, presets, random::random_checkpoint};

#[test]
fn every_preset_authors_a_valid_graph() {
    for name in presets::PRESETS {
        let spec = presets::preset(name).expect("preset");
        let g = decode_step(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        g.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn every_binding_names_a_tensor_of_the_layout_and_fits_it() {
    for name in ["tiny", "tiny-tied", "small"] {
        let spec = presets::preset(name).expect("preset");
        let g = decode_step(&spec).expect("author");
        let ckpt = random_checkpoint(&spec, 7);
        bind::check(&g, &ckpt).unwrap_or_else(|e| panic!("{name}: {e}"));
        let names: Vec<String> = layout(&spec).into_iter().map(|t| t.name).collect();
        for c in &g.consts {
            assert!(names.contains(&c.binding.tensor), "{name}: {} not in layout", c.binding.tensor);
        }
    }
}

#[test]
fn random_checkpoints_are_deterministic_in_the_seed() {
    let spec = presets::tiny();
    assert_eq!(random_checkpoint(&spec, 1), random_checkpoint(&spec, 1));
    assert_ne!(random_checkpoint(&spec, 1), random_checkpoint(&spec, 2));
}

#[test]
fn the_engine_shim_fuses_every_symbol_and_leaves_a_valid_graph() {
    use stepcheck::engine::shim::EngineShim;
    for name in presets::PRESETS {
        let g = decode_step(&presets::preset(name).expect("preset")).expect("author");
        let f = EngineShim::default().prepare(&g);
        f.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let count = |sym: &str| f.ops.iter().filter(|o| o.kind.name() == sym).count();
        let spec = presets::preset(name).expect("preset");
        let (gdn, attn) = spec.layers.iter().fold((0, 0), |(g, a), m| match m {
            stepcheck::model::spec::Mixer::DeltaNet => (g + 1, a),
            stepcheck::model::spec::Mixer::Attention => (g, a + 1),
        });
        assert_eq!(count("merged_qkv"), gdn + attn, "{name}");
        assert_eq!(count("conv_bias_silu"), gdn, "{name}");
        assert_eq!(count("gdn_gating"), gdn, "{name}");
        // The gated norm's silu, the attention's sigmoid gate, every FFN's silu.
        assert_eq!(count("glu_act_mul"), gdn + attn + spec.layers.len(), "{name}");
    }
}

/// The tiny preset with each construct of other families on its own, and the families' mixes.
fn with_constructs() -> Vec<(&'static str, stepcheck::model::ModelSpec)> {
    use stepcheck::model::spec::{
        Experts, Ffn, LatentAttention, LayerRope, PostNorm, RopeScaling, Routing, SlidingWindow,
    };
    let tiny = presets::tiny;
    let with = |f: &dyn Fn(&mut stepcheck::model::ModelSpec)| {
        let mut s = tiny();
        f(&mut s);
        s
    };
    let latent = |q_rank| LatentAttention { q_rank, kv_rank: 12, nope_dim: 6, rope_dim: 4, value_dim: 5 };
    vec![
        ("experts", with(&|s| s.constructs.experts = Some(Experts::new(4, 2, 16)))),
        (
            "experts with a gated shared expert and dense layers",
            with(&|s| {
                let mut e = Experts::new(4, 2, 16);
                e.shared_intermediate = Some(24);
                e.dense_layers = vec![0];
                s.constructs.experts = Some(e);
            }),
        ),
        (
            "gpt-oss experts",
            with(&|s| {
                let mut e = Experts::new(4, 2, 16);
                (e.routing, e.router_bias, e.expert_bias) = (Routing::TopKSoftmax, true, true);
                s.constructs.experts = Some(e);
                s.constructs.ffn = Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 };
            }),
        ),
        (
            "DeepSeek-V3 experts",
            with(&|s| {
                let mut e = Experts::new(8, 2, 16);
                e.routing = Routing::SigmoidGroupLimited { groups: 2, keep_groups: 1 };
                (e.shared_intermediate, e.shared_gate, e.weight_scale) = (Some(16), false, Some(2.5));
                s.constructs.experts = Some(e);
            }),
        ),
        (
            "GELU MLP experts",
            with(&|s| {
                s.constructs.experts = Some(Experts::new(3, 1, 8));
                s.constructs.ffn = Ffn::GeluMlp { tanh: false };
            }),
        ),
        ("latent attention", with(&|s| s.constructs.latent_attention = Some(latent(Some(10))))),
        ("latent attention without a compressed query", with(&|s| s.constructs.latent_attention = Some(latent(None)))),
        (
            "Gemma-style attention",
            with(&|s| {
                let c = &mut s.constructs;
                c.post_norm = PostNorm::Sandwich;
                c.ffn = Ffn::GeGlu;
                c.embedding_scale = Some(8.0);
                c.attention_scale = Some(0.2);
                c.rope_scaling = Some(RopeScaling::Linear { factor: 8.0 });
                c.sliding_window = Some(SlidingWindow { window: 2, layers: vec![0] });
                c.sliding_rope = Some(LayerRope { theta: 1e4, scaling: None });
            }),
        ),
        (
            "gpt-oss attention",
            with(&|s| {
                let c = &mut s.constructs;
                s.attention.output_gate = false;
                (c.qkv_bias, c.output_bias, c.attention_sinks) = (true, true, true);
                c.rope_scaling = Some(RopeScaling::Yarn {
                    factor: 32.0,
                    original_context: 4096,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    truncate: false,
                    attention_factor: 1.3,
                });
            }),
        ),
    ]
}

#[test]
fn every_construct_authors_a_graph_the_interpreter_runs_on_its_layout() {
    use stepcheck::interp::Runner;
    for (what, spec) in with_constructs() {
        let g = decode_step(&spec).unwrap_or_else(|e| panic!("{what}: {e}"));
        let ckpt = random_checkpoint(&spec, 3);
        let names: Vec<String> = layout(&spec).into_iter().map(|t| t.name).collect();
        for c in &g.consts {
            assert!(names.contains(&c.binding.tensor), "{what}: {} not in layout", c.binding.tensor);
        }
        let mut runner = Runner::new(&g, &ckpt).unwrap_or_else(|e| panic!("{what}: {e}"));
        for t in [3, 1, 4, 1, 5] {
            let logits = runner.step(t).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(logits.iter().all(|x| x.is_finite()), "{what}: {logits:?}");
        }
        let read: std::collections::BTreeSet<&str> = g.consts.iter().map(|c| c.binding.tensor.as_str()).collect();
        let unread: Vec<&String> = names.iter().filter(|n| !read.contains(n.as_str())).collect();
        assert!(unread.is_empty(), "{what}: the layout has tensors the graph never reads: {unread:?}");
    }
}

#[test]
fn a_spec_the_author_cannot_write_is_refused_by_validation() {
    use stepcheck::model::spec::{Experts, Routing};
    let mut s = presets::tiny();
    let mut e = Experts::new(6, 2, 8);
    e.routing = Routing::SigmoidGroupLimited { groups: 4, keep_groups: 1 };
    s.constructs.experts = Some(e);
    assert!(decode_step(&s).is_err(), "6 experts do not form 4 groups");
    let mut s = presets::tiny();
    s.constructs.qkv_bias = true;
    assert!(decode_step(&s).is_err(), "q/k/v biases with tiny's output gate in attn_q");
}
