//! The programs the engine's own tests run: presets lowered at a few numerics, on random
//! checkpoints.

use lower::{lower_graph, shim::EngineShim};
use model::{author::decode_step, presets, random::random_checkpoint};
use program::Numerics;

/// The tiny and small presets' programs (f32 and bf16 storage) and random checkpoints, each named.
pub(crate) fn programs() -> Vec<(String, program::Program, formats::checkpoint::Checkpoint)> {
    let mut out = vec![];
    for (name, numerics) in [("tiny", Numerics::F32), ("tiny", Numerics::BF16), ("small", Numerics::F32)] {
        let spec = presets::preset(name).expect("a preset");
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("a graph"));
        let program = lower_graph(&graph, numerics).expect("a program");
        out.push((format!("{name} {numerics}"), program, random_checkpoint(&spec, 3)));
    }
    out
}
