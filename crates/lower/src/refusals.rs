//! The constructs the engine has no unit for, recognised from the graph alone and refused by name.
//!
//! Each rule looks at the part of the step a block is about to read and names every construct it
//! finds there, in op order. The lowering runs them before matching the block and refuses with the
//! first finding, so a refused construct is reported as itself and not as the first op that differs
//! from the engine's block; [`super::refusals_in_order`] runs the same rules on every block and
//! keeps all findings.

use super::error::{LowerError, Site};
use super::pattern::Matcher;
use ir::{Act, Fused, Graph, OpKind, RopeStyle, TensorId};

/// The ops of a block's region: those reachable from `from` through unclaimed ops, not passing the
/// ops that read the layer's residual `residual` (its add), with their index, in op order.
pub(crate) fn region(m: &Matcher, from: TensorId, residual: TensorId) -> Vec<usize> {
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
pub(crate) fn scaled_embedding(m: &Matcher, h: TensorId, at: Site) -> Vec<LowerError> {
    (m.uses.readers(h).iter())
        .filter_map(|&r| match m.graph.ops[r].kind {
            OpKind::Scale { factor } => Some(LowerError::ScaledEmbedding { at: at_op(at, r), factor }),
            _ => None,
        })
        .collect()
}

/// A layer whose residual feeds its mixer directly and whose mixer's output is normed before its
/// add: a post-norm layer (OLMo 2).
pub(crate) fn missing_pre_norm(m: &Matcher, h: TensorId, at: Site) -> Vec<LowerError> {
    let readers = m.uses.readers(h);
    let normed = readers.iter().any(|&r| matches!(m.graph.ops[r].kind, OpKind::RmsNorm { .. }));
    match readers.iter().find(|&&r| matches!(m.graph.ops[r].kind, OpKind::MatVec | OpKind::Fused(_))) {
        Some(&r) if !normed => vec![LowerError::NormAfterMixer { at: at_op(at, r) }],
        _ => vec![],
    }
}

/// A norm of a block's output `y` before its residual add.
pub(crate) fn norm_after(m: &Matcher, y: TensorId, at: Site) -> Vec<LowerError> {
    (m.uses.readers(y).iter())
        .find(|&&r| is_norm(&m.graph.ops[r].kind))
        .map(|&r| LowerError::NormAfterMixer { at: at_op(at, r) })
        .into_iter()
        .collect()
}

pub(crate) fn is_norm(kind: &OpKind) -> bool {
    matches!(kind, OpKind::RmsNorm { .. } | OpKind::LayerNorm { .. })
}

/// In an attention block's region `ops`, whose input is `input` (the mixer norm's output): latent
/// attention (once); per attention op, sinks, a
/// sliding window and a score scale other than 1/√head_dim; then, once each, interleaved RoPE,
/// scaled RoPE (frequencies given, not θ) and a bias (a constant added in the block).
pub fn attention(m: &Matcher, ops: &[usize], input: TensorId, at: Site) -> Vec<LowerError> {
    let g = m.graph;
    let mut out = vec![];
    if let Some(&r) = ops.iter().find(|&&r| is_latent_projection(g, m, r, input)) {
        out.push(LowerError::LatentAttention { at: at_op(at, r) });
    }
    for &r in ops {
        let op = &g.ops[r];
        let OpKind::Attention { window, scale, .. } = op.kind else { continue };
        if op.inputs.len() == 4 {
            out.push(LowerError::AttentionSinks { at: at_op(at, r) });
        }
        if let Some(window) = window {
            out.push(LowerError::SlidingWindow { at: at_op(at, r), window });
        }
        let head_dim = op.inputs.first().and_then(|&q| match g.ty(q).shape()? {
            &[_, head_dim] => Some(head_dim),
            _ => None,
        });
        if let Some(head_dim) = head_dim {
            let expected = 1.0 / (head_dim as f64).sqrt();
            if (expected - scale).abs() > 4.0 * f64::EPSILON * expected {
                out.push(LowerError::AttentionScale { at: at_op(at, r), found: scale, expected });
            }
        }
    }
    let interleaved = |r: &&usize| {
        matches!(
            g.ops[**r].kind,
            OpKind::Rope { style: RopeStyle::Interleaved, .. }
                | OpKind::RopeFreqs { style: RopeStyle::Interleaved, .. }
        )
    };
    if let Some(&r) = ops.iter().find(interleaved) {
        out.push(LowerError::InterleavedRope { at: at_op(at, r) });
    }
    if let Some(&r) = ops.iter().find(|&&r| matches!(g.ops[r].kind, OpKind::RopeFreqs { .. })) {
        out.push(LowerError::ScaledRope { at: at_op(at, r) });
    }
    let bias =
        |r: &&usize| g.ops[**r].kind == OpKind::Add && g.ops[**r].inputs.iter().any(|&t| g.constant(t).is_some());
    if let Some(&r) = ops.iter().find(bias) {
        out.push(LowerError::AttentionBias { at: at_op(at, r) });
    }
    out
}

/// A matvec that projects up from a normed projection of the block's input `input` (through slices
/// and reshapes): the decompression of a latent (`q_b_proj` after `q_a_layernorm` of
/// `q_a_proj(x)`, `kv_b_proj` after `kv_a_layernorm` of `kv_a_proj_with_mqa(x)`), each a matvec
/// of one whole tensor, as DeepSeek's are. A norm of any other projection (a block's output
/// projection read by a miswired norm) is no latent.
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
    through(g.ops[norm].inputs[0])
        .is_some_and(|p| g.ops[p].kind == OpKind::MatVec && g.ops[p].inputs.get(1) == Some(&input))
}

/// A router with top-k in the FFN's region `ops`.
pub fn experts(m: &Matcher, ops: &[usize], at: Site) -> Vec<LowerError> {
    (ops.iter().find(|&&r| matches!(m.graph.ops[r].kind, OpKind::TopK { .. })))
        .map(|&r| LowerError::Experts { at: at_op(at, r) })
        .into_iter()
        .collect()
}

/// An FFN of input `x` and region `ops` whose shape is not SwiGLU's: not two projections of its
/// input, or an activation other than SiLU, a clamp, an offset or a scale on the way. In a mixture
/// of experts (`experts`), whose router reads the input too and may weigh by sigmoids and scales,
/// only a clamp, an offset or an activation other than SiLU and sigmoid marks the experts' FFN.
pub(crate) fn ffn_shape(m: &Matcher, x: TensorId, ops: &[usize], experts: bool, at: Site) -> Vec<LowerError> {
    let projections = m.uses.readers(x).iter().filter(|&&r| m.graph.ops[r].kind == OpKind::MatVec).count();
    if projections != 2 && !experts {
        let found = format!("{projections} projections of its input, not a gate and an up projection");
        return vec![LowerError::NotSwiGlu { at, found }];
    }
    let foreign = |k: &OpKind| match k {
        OpKind::Act(a) | OpKind::Fused(Fused::GluActMul { act: a }) => {
            *a != Act::Silu && !(experts && *a == Act::Sigmoid)
        }
        OpKind::Clamp { .. } | OpKind::Offset { .. } => true,
        OpKind::Scale { .. } => !experts,
        _ => false,
    };
    (ops.iter().find(|&&r| foreign(&m.graph.ops[r].kind)))
        .map(|&r| LowerError::NotSwiGlu { at: at_op(at, r), found: format!("{:?}", m.graph.ops[r].kind) })
        .into_iter()
        .collect()
}
