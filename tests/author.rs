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
