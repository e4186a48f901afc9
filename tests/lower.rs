//! `lower_graph` accepts every preset's step as the engine's shim leaves it.

use stepcheck::engine::{Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{author::decode_step, presets};

#[test]
fn every_preset_lowers() {
    for name in presets::PRESETS {
        let g = EngineShim::default().prepare(&decode_step(&presets::preset(name).expect("preset")).expect("author"));
        let p = lower_graph(&g, Numerics::F32).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!p.blocks.is_empty());
    }
}
