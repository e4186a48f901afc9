//! `lower_graph` accepts every preset's step as the engine's shim leaves it, and writes the program
//! the seed describes: per layer a mixer norm, the mixer's block (the Gated-DeltaNet or gated
//! attention unit sequence), its residual add, the FFN norm, the SwiGLU FFN and its add; then the
//! advance, the final norm and the head. The tiny preset's whole program, every tensor, eps, θ,
//! head size and scale, is the reviewed listing `tests/expected/tiny.program`.

use stepcheck::engine::program::BlockKind;
use stepcheck::engine::{Numerics, Program, lower::lower_graph, shim::EngineShim};
use stepcheck::model::spec::Mixer;
use stepcheck::model::{ModelSpec, author::decode_step, presets};

fn lowered(spec: &ModelSpec) -> Program {
    let g = EngineShim::default().prepare(&decode_step(spec).expect("author"));
    lower_graph(&g, Numerics::F32).unwrap_or_else(|e| panic!("{}: {e}", spec.name))
}

/// The blocks the seed's engine runs for `spec`, with their layer and their commands' units.
fn expected_blocks(spec: &ModelSpec) -> Vec<(BlockKind, Option<usize>, Vec<&'static str>)> {
    let mut blocks = vec![(BlockKind::Embedding, None, vec!["embed"])];
    for (l, mixer) in spec.layers.iter().enumerate() {
        let layer = Some(l);
        blocks.push((BlockKind::MixerNorm, layer, vec!["rms_norm"]));
        blocks.push(match mixer {
            Mixer::Attention => (
                BlockKind::Attention,
                layer,
                vec!["merged_head_halves", "matvec", "matvec", "attention", "sigmoid_gate", "matvec"],
            ),
            _ => (
                BlockKind::DeltaNet,
                layer,
                vec![
                    "merged_rows",
                    "matvec",
                    "matvec",
                    "matvec",
                    "conv",
                    "gates",
                    "delta_rule",
                    "gated_norm",
                    "matvec",
                ],
            ),
        });
        blocks.push((BlockKind::MixerAdd, layer, vec!["add"]));
        blocks.push((BlockKind::FfnNorm, layer, vec!["rms_norm"]));
        blocks.push((BlockKind::Ffn, layer, vec!["swiglu"]));
        blocks.push((BlockKind::FfnAdd, layer, vec!["add"]));
    }
    blocks.push((BlockKind::Advance, None, vec!["advance"]));
    blocks.push((BlockKind::FinalNorm, None, vec!["rms_norm"]));
    blocks.push((BlockKind::Head, None, vec!["matvec"]));
    blocks
}

#[test]
fn every_preset_lowers_to_the_blocks_and_units_of_its_layers() {
    for name in presets::PRESETS {
        let spec = presets::preset(name).expect("preset");
        assert!(spec.attention.output_gate, "{name}: the expectation is of gated attention");
        let p = lowered(&spec);
        let found: Vec<(BlockKind, Option<usize>, Vec<&'static str>)> =
            p.blocks.iter().map(|b| (b.kind, b.layer, b.commands.iter().map(|c| c.unit()).collect())).collect();
        assert_eq!(found, expected_blocks(&spec), "{name}");
    }
}

#[test]
fn the_tiny_preset_lowers_to_its_reviewed_listing() {
    let p = lowered(&presets::preset("tiny").expect("preset"));
    let listing = p.to_string();
    let commands = &listing[listing.find("block 0").expect("blocks")..];
    let want = include_str!("expected/tiny.program");
    assert_eq!(commands, want);
}
