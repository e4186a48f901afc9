//! Where each op and tensor of an authored step sits: the block of the engine's reading order it
//! belongs to, read off the author's names.
//!
//! `decode_step` names every tensor after its layer and role (`l1.q.scaled`, `l0.h.mix`, `h.final`,
//! `blk.2.ssm_out`), and fused ops keep the names of the tensors they write, so a name and the
//! spec's layer list say which block an op belongs to. The mutations use this to say where the
//! refusal they cause must be; it is the author's view of the step, independent of the lowering.

use super::outcome::Place;
use crate::engine::program::BlockKind;
use crate::ir::{Def, Graph, TensorId};
use crate::model::spec::{Mixer, ModelSpec};

/// A tensor name split into its layer and the rest: `l1.q.scaled` → `(Some(1), "q.scaled")`,
/// `blk.2.ssm_out` → `(Some(2), "ssm_out")`, `h.final` → `(None, "h.final")`.
pub fn split(name: &str) -> (Option<usize>, &str) {
    for prefix in ["l", "blk."] {
        if let Some(rest) = name.strip_prefix(prefix) {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0
                && let (Ok(l), Some(role)) = (rest[..digits].parse(), rest[digits..].strip_prefix('.'))
            {
                return (Some(l), role);
            }
        }
    }
    (None, name)
}

/// The block of the op that writes the tensor named `name`, by the author's names.
pub(crate) fn place_of_output(spec: &ModelSpec, name: &str) -> Option<Place> {
    let (layer, role) = split(name);
    let Some(l) = layer else {
        return Some(Place::step(match role {
            "h0" | "h0.scaled" => BlockKind::Embedding,
            "pos.next" => BlockKind::Advance,
            "h.final" => BlockKind::FinalNorm,
            "logits" => BlockKind::Head,
            _ => return None,
        }));
    };
    let block = match role {
        "x" => BlockKind::MixerNorm,
        "h.mix" | "mix.normed" => BlockKind::MixerAdd,
        "x.ffn" => BlockKind::FfnNorm,
        "h" | "ffn.normed" => BlockKind::FfnAdd,
        r if r == "ffn" || r.starts_with("ffn.") => BlockKind::Ffn,
        _ => mixer_block(*spec.layers.get(l)?),
    };
    Some(Place::layer(block, l))
}

/// The block of a layer's mixer.
pub(crate) fn mixer_block(m: Mixer) -> BlockKind {
    match m {
        Mixer::DeltaNet => BlockKind::DeltaNet,
        Mixer::Attention => BlockKind::Attention,
    }
}

/// The block of op `op` of `graph`: that of the first tensor it writes.
pub(crate) fn place_of_op(spec: &ModelSpec, graph: &Graph, op: usize) -> Option<Place> {
    let t = *graph.ops.get(op)?.outputs.first()?;
    place_of_output(spec, graph.name_of(t))
}

/// The block where tensor `t` is first met in reading order: its writer's block for an op's
/// output; the block of its first reader for a constant or a state read; the embedding for the
/// token.
pub(crate) fn place_of_tensor(spec: &ModelSpec, graph: &Graph, t: TensorId) -> Option<Place> {
    match graph.defs().get(t.0).copied().flatten()? {
        Def::Op(i, _) => place_of_op(spec, graph, i),
        Def::Token => Some(Place::step(BlockKind::Embedding)),
        Def::Const(_) | Def::State(_) => graph
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.inputs.contains(&t))
            .filter_map(|(i, _)| place_of_op(spec, graph, i))
            .min_by_key(Place::rank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::shim::EngineShim;
    use crate::model::{author::decode_step, presets};

    #[test]
    fn names_split_into_layer_and_role() {
        assert_eq!(split("l1.q.scaled"), (Some(1), "q.scaled"));
        assert_eq!(split("blk.12.ssm_out"), (Some(12), "ssm_out"));
        assert_eq!(split("h.final"), (None, "h.final"));
        assert_eq!(split("logits"), (None, "logits"));
        assert_eq!(split("l.x"), (None, "l.x"));
    }

    #[test]
    fn every_op_of_the_presets_has_a_place_authored_and_fused() -> Result<(), Box<dyn std::error::Error>> {
        for name in presets::PRESETS {
            let spec = presets::preset(name).ok_or("no such preset")?;
            let g = decode_step(&spec)?;
            for graph in [g.clone(), EngineShim::default().prepare(&g)] {
                for i in 0..graph.ops.len() {
                    assert!(place_of_op(&spec, &graph, i).is_some(), "{name}: op {i} {:?}", graph.ops[i]);
                }
            }
        }
        Ok(())
    }
}
