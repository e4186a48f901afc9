//! The constructs the engine has no unit for, recognised from the graph alone and refused by name.
//!
//! Each rule looks at the part of the step a block is about to read and names the construct it
//! finds there; the lowering runs them before matching the block, so a refused construct is
//! reported as itself and not as the first op that differs from the engine's block.

use super::error::{LowerError, Site};
use super::pattern::Matcher;
use crate::ir::{Graph, OpKind, TensorId};

/// The ops of a block's region: those reachable from `from` through unclaimed ops, not passing the
/// ops that read the layer's residual `residual` (its add), with their index.
fn region(m: &Matcher, from: TensorId, residual: TensorId) -> Vec<usize> {
    let mut seen = vec![false; m.graph.ops.len()];
    let mut stack = vec![from];
    let mut out = vec![];
    while let Some(t) = stack.pop() {
        for &r in m.uses.readers(t) {
            let op = &m.graph.ops[r];
            if seen[r] || m.claimed[r] || op.inputs.contains(&residual) {
                continue;
            }
            seen[r] = true;
            out.push(r);
            stack.extend(op.outputs.iter().copied());
        }
    }
    out.sort_unstable();
    out
}

fn at_op(at: Site, op: usize) -> Site {
    Site { op: Some(op), ..at }
}

/// A scale of the embedding before the first layer reads it.
pub fn scaled_embedding(m: &Matcher, h: TensorId, at: Site) -> Result<(), LowerError> {
    for &r in m.uses.readers(h) {
        if let OpKind::Scale { factor } = m.graph.ops[r].kind {
            return Err(LowerError::ScaledEmbedding { at: at_op(at, r), factor });
        }
    }
    Ok(())
}

/// A layer whose residual feeds its mixer directly and whose mixer's output is normed before its
/// add: a post-norm layer (OLMo 2).
pub fn missing_pre_norm(m: &Matcher, h: TensorId, at: Site) -> Result<(), LowerError> {
    let readers = m.uses.readers(h);
    let normed = readers.iter().any(|&r| matches!(m.graph.ops[r].kind, OpKind::RmsNorm { .. }));
    let projected = readers.iter().any(|&r| matches!(m.graph.ops[r].kind, OpKind::MatVec | OpKind::Fused(_)));
    match readers.iter().find(|&&r| matches!(m.graph.ops[r].kind, OpKind::MatVec | OpKind::Fused(_))) {
        Some(&r) if projected && !normed => Err(LowerError::NormAfterMixer { at: at_op(at, r) }),
        _ => Ok(()),
    }
}

/// A norm of a block's output before its residual add.
pub fn norm_after(m: &Matcher, y: TensorId, at: Site) -> Result<(), LowerError> {
    match m
        .uses
        .readers(y)
        .iter()
        .find(|&&r| matches!(m.graph.ops[r].kind, OpKind::RmsNorm { .. } | OpKind::LayerNorm { .. }))
    {
        Some(&r) => Err(LowerError::NormAfterMixer { at: at_op(at, r) }),
        None => Ok(()),
    }
}

/// Latent attention, attention sinks, a sliding window: in that order, in the attention block's
/// region.
pub fn attention(m: &Matcher, x: TensorId, h: TensorId, at: Site) -> Result<(), LowerError> {
    let ops = region(m, x, h);
    if let Some(&r) = ops.iter().find(|&&r| is_latent_projection(m.graph, m, r, x)) {
        return Err(LowerError::LatentAttention { at: at_op(at, r) });
    }
    for &r in &ops {
        let op = &m.graph.ops[r];
        if let OpKind::Attention { window, .. } = op.kind {
            if op.inputs.len() == 4 {
                return Err(LowerError::AttentionSinks { at: at_op(at, r) });
            }
            if let Some(window) = window {
                return Err(LowerError::SlidingWindow { at: at_op(at, r), window });
            }
        }
    }
    Ok(())
}

/// A matvec that projects up from a normed projection of the block's input `input` (through slices
/// and reshapes): the decompression of a latent (`q_b_proj` after `q_a_layernorm` of
/// `q_a_proj(x)`, `kv_b_proj` after `kv_a_layernorm` of `kv_a_proj_with_mqa(x)`). A norm of any
/// other projection (a block's output projection read by a miswired norm) is no latent.
fn is_latent_projection(g: &Graph, m: &Matcher, r: usize, input: TensorId) -> bool {
    let op = &g.ops[r];
    if op.kind != OpKind::MatVec {
        return false;
    }
    let through = |mut t: TensorId| {
        while let Some(p) = m.uses.producer(t) {
            match g.ops[p].kind {
                OpKind::Slice { .. } | OpKind::Reshape { .. } => t = g.ops[p].inputs[0],
                _ => return Some(p),
            }
        }
        None
    };
    let Some(&x) = op.inputs.get(1) else { return false };
    let Some(norm) = through(x) else { return false };
    if !matches!(g.ops[norm].kind, OpKind::RmsNorm { .. }) {
        return false;
    }
    through(g.ops[norm].inputs[0]).is_some_and(|p| match g.ops[p].kind {
        OpKind::MatVec => g.ops[p].inputs.get(1) == Some(&input),
        OpKind::Fused(_) => g.ops[p].inputs.first() == Some(&input),
        _ => false,
    })
}

/// A router with top-k in the FFN's region.
pub fn experts(m: &Matcher, x: TensorId, h: TensorId, at: Site) -> Result<(), LowerError> {
    match region(m, x, h).into_iter().find(|&r| matches!(m.graph.ops[r].kind, OpKind::TopK { .. })) {
        Some(r) => Err(LowerError::Experts { at: at_op(at, r) }),
        None => Ok(()),
    }
}

/// An FFN whose shape is not SwiGLU's: not two projections of its input, or an activation other
/// than SiLU, a clamp, an offset or a scale on the way.
pub fn ffn_shape(m: &Matcher, x: TensorId, h: TensorId, at: Site) -> Result<(), LowerError> {
    let projections = m.uses.readers(x).iter().filter(|&&r| m.graph.ops[r].kind == OpKind::MatVec).count();
    if projections != 2 {
        let found = format!("{projections} projections of its input, not a gate and an up projection");
        return Err(LowerError::NotSwiGlu { at, found });
    }
    let foreign = |k: &OpKind| match k {
        OpKind::Act(a) | OpKind::Fused(crate::ir::Fused::GluActMul { act: a }) => *a != crate::ir::Act::Silu,
        OpKind::Clamp { .. } | OpKind::Offset { .. } | OpKind::Scale { .. } => true,
        _ => false,
    };
    match region(m, x, h).into_iter().find(|&r| foreign(&m.graph.ops[r].kind)) {
        Some(r) => Err(LowerError::NotSwiGlu { at: at_op(at, r), found: format!("{:?}", m.graph.ops[r].kind) }),
        None => Ok(()),
    }
}
