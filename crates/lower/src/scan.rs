//! `refusals_in_order`: every construct of a step graph the engine has no unit for, in the order
//! the lowering reads the step.
//!
//! The lowering stops at the first construct it refuses; a user deciding whether to bring a model
//! to the engine needs all of them. The scan follows the residual stream instead of the engine's
//! blocks: from the embedding, each layer is the part of the graph between a residual and the add
//! that reads it, twice (mixer, then FFN), until no add reads the residual (the final norm's). It runs the
//! lowering's own rules ([`super::refusals`]) on each part, so its first finding is the refusal
//! `lower_graph` names whenever `lower_graph` refuses a construct.

use super::error::LowerError;
use super::pattern::Matcher;
use super::{refusals, site};
use crate::shim::EngineShim;
use fuse::Uses;
use ir::{Graph, OpKind, StateKind, TensorId};
use program::BlockKind;
use program::numerics::{Numerics, Storage};

/// Every construct of `graph` the engine has no unit for, at `numerics`, in reading order: the
/// embedding, then per layer its mixer norm, mixer, mixer add, FFN and FFN add. A recurrent state
/// stored below f32 comes first, as `lower_graph` refuses it first. A graph that is not well formed
/// has none (the lowering refuses it as malformed, not by a construct).
pub fn refusals_in_order(graph: &Graph, numerics: Numerics) -> Vec<LowerError> {
    if graph.validate().is_err() {
        return vec![];
    }
    let mut out = vec![];
    if numerics.recurrent_state != Storage::F32 {
        out.push(LowerError::RecurrentStateBelowF32 { found: numerics.recurrent_state });
    }
    let uses = Uses::of(graph);
    let shim = EngineShim::default();
    let m = Matcher::new(graph, &uses, &shim);
    let Some(h0) = graph.ops.iter().find(|o| o.kind == OpKind::Embed).and_then(|o| o.outputs.first().copied()) else {
        return out;
    };
    out.extend(refusals::scaled_embedding(&m, h0, site(BlockKind::Embedding, None)));
    let mut h = past_scales(&m, h0);
    for layer in 0..graph.ops.len() {
        match scan_layer(&m, layer, h, &mut out) {
            Some(next) => h = next,
            None => break,
        }
    }
    out
}

/// The residual after the scales applied to the embedding `h`.
fn past_scales(m: &Matcher, mut h: TensorId) -> TensorId {
    while let [r] = m.uses.readers(h) {
        match (&m.graph.ops[*r].kind, m.graph.ops[*r].outputs.first()) {
            (OpKind::Scale { .. }, Some(&next)) => h = next,
            _ => break,
        }
    }
    h
}

/// Scans layer `layer`, whose residual is `h`, into `out`; the residual the layer leaves, unless
/// the layer has no residual adds to follow.
fn scan_layer(m: &Matcher, layer: usize, h: TensorId, out: &mut Vec<LowerError>) -> Option<TensorId> {
    let at = |block| site(block, Some(layer));
    let (add, h1, y) = residual_add(m, h)?;
    out.extend(refusals::missing_pre_norm(m, h, at(BlockKind::MixerNorm)));
    let has = |k: StateKind| m.graph.states.iter().any(|s| s.kind == k && s.layer == Some(layer));
    if !(has(StateKind::Conv) || has(StateKind::Recurrent)) {
        let x = m.uses.readers(h).iter().find(|&&r| refusals::is_norm(&m.graph.ops[r].kind));
        let x = x.and_then(|&r| m.graph.ops[r].outputs.first().copied()).unwrap_or(h);
        out.extend(refusals::attention(m, &between(m, h, add), x, at(BlockKind::Attention)));
    }
    out.extend(norm_before_add(m, y, at(BlockKind::MixerAdd)));
    let (add, h2, f) = residual_add(m, h1)?;
    let x = m.uses.readers(h1).iter().find(|&&r| refusals::is_norm(&m.graph.ops[r].kind));
    let x = x.and_then(|&r| m.graph.ops[r].outputs.first().copied()).unwrap_or(h1);
    let ops = between(m, h1, add);
    let experts = refusals::experts(m, &ops, at(BlockKind::Ffn));
    let has_experts = !experts.is_empty();
    out.extend(experts);
    out.extend(refusals::ffn_shape(m, x, &ops, has_experts, at(BlockKind::Ffn)));
    out.extend(norm_before_add(m, f, at(BlockKind::FfnAdd)));
    Some(h2)
}

/// The residual add reading `h`: its op, the residual it writes and the block output it adds.
fn residual_add(m: &Matcher, h: TensorId) -> Option<(usize, TensorId, TensorId)> {
    m.uses.readers(h).iter().find_map(|&r| {
        let op = &m.graph.ops[r];
        match (&op.kind, op.inputs.as_slice(), op.outputs.first()) {
            (OpKind::Add, [a, b], Some(&out)) if *a == h => Some((r, out, *b)),
            // A reader of `h` that does not read it first reads it second.
            (OpKind::Add, [y, _], Some(&out)) => Some((r, out, *y)),
            _ => None,
        }
    })
}

/// The ops between the residual `h` and its add `add`: those reachable from the readers of `h`
/// without passing through `add`, in op order.
fn between(m: &Matcher, h: TensorId, add: usize) -> Vec<usize> {
    let mut seen = vec![false; m.graph.ops.len()];
    let mut stack: Vec<usize> = m.uses.readers(h).iter().copied().filter(|&r| r != add).collect();
    let mut out = vec![];
    while let Some(r) = stack.pop() {
        if std::mem::replace(&mut seen[r], true) {
            continue;
        }
        out.push(r);
        for &t in &m.graph.ops[r].outputs {
            stack.extend(m.uses.readers(t).iter().copied().filter(|&n| n != add && !seen[n]));
        }
    }
    out.sort_unstable();
    out
}

/// A norm writing `y`, the block output a residual add reads: the lowering finds it as the norm
/// reading the block's output.
fn norm_before_add(m: &Matcher, y: TensorId, at: super::Site) -> Vec<LowerError> {
    match m.uses.producer(y) {
        Some(p) if refusals::is_norm(&m.graph.ops[p].kind) => {
            vec![LowerError::NormAfterMixer { at: super::Site { op: Some(p), ..at } }]
        }
        _ => vec![],
    }
}
