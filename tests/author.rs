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
