//! A step graph as terms: each primitive op becomes its symbol, each fused symbol is expanded
//! through its one definition, `fuse::meaning`, into primitive symbols.

use super::term::{Dag, Id, Real, Sym};
use fuse::{Slot, meaning};
use ir::{Binding, Def, Graph, OpKind, StateKind, Ty};

/// The terms of a graph's outputs: its logits, and each piece of state as it leaves the step.
#[derive(Clone, Debug)]
pub struct GraphTerms {
    pub logits: Id,
    pub states: Vec<StateTerm>,
    /// The terms each op of the graph wrote, op by op (a refutation names the op that wrote the
    /// first differing subterm).
    pub ops: Vec<Vec<Id>>,
}

/// A piece of the graph's state: what it is, its type, and its term as it leaves the step.
#[derive(Clone, Debug)]
pub struct StateTerm {
    pub kind: StateKind,
    pub layer: Option<usize>,
    pub ty: Ty,
    pub out: Id,
}

/// The leaf of a graph state as it enters the step: the position is `pos`, the rest a state leaf.
/// The program's states enter as these leaves under the layout maps, so both sides read one
/// incoming position term.
pub fn state_leaf(dag: &mut Dag, kind: StateKind, layer: Option<usize>) -> Id {
    match kind {
        StateKind::Position => dag.leaf(Sym::Pos),
        _ => dag.leaf(Sym::State(kind, layer)),
    }
}

/// The terms of `graph`, built into `dag`, or why the graph cannot be read as terms (a tensor used
/// before it is written, an op whose shape rule fails).
pub fn graph_terms(dag: &mut Dag, graph: &Graph) -> Result<GraphTerms, String> {
    graph_terms_with(
        dag,
        graph,
        &mut |dag: &mut Dag, b: &Binding| Ok(dag.leaf(Sym::Weight(b.clone()))),
        &mut state_leaf,
    )
}

/// [`graph_terms`], each constant's term made by `weight` from its binding and each incoming
/// state's by `state` (the transformers link states a GGUF constant as its equation over the HF
/// tensor it is converted from, and a state in its tiled order over transformers' state).
pub fn graph_terms_with(
    dag: &mut Dag,
    graph: &Graph,
    weight: &mut dyn FnMut(&mut Dag, &Binding) -> Result<Id, String>,
    state: &mut dyn FnMut(&mut Dag, StateKind, Option<usize>) -> Id,
) -> Result<GraphTerms, String> {
    let mut val: Vec<Option<Id>> = vec![None; graph.tensors.len()];
    for (t, def) in graph.defs().iter().enumerate() {
        val[t] = match def {
            Some(Def::Token) => Some(dag.leaf(Sym::Token)),
            Some(Def::Const(i)) => Some(weight(dag, &graph.consts[*i].binding)?),
            Some(Def::State(i)) => Some(state(dag, graph.states[*i].kind, graph.states[*i].layer)),
            _ => None,
        };
    }
    let mut written = Vec::with_capacity(graph.ops.len());
    for op in &graph.ops {
        let ins: Vec<(Id, Ty)> = op
            .inputs
            .iter()
            .map(|&t| val.get(t.0).copied().flatten().map(|id| (id, graph.ty(t).clone())))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("{} reads a tensor no earlier op writes", op.kind.name()))?;
        let outs = match &op.kind {
            OpKind::Fused(f) => {
                let mut slots: Vec<(Slot, (Id, Ty))> = vec![];
                for step in meaning(*f, op.inputs.len(), op.outputs.len()) {
                    let reads: Vec<(Id, Ty)> = step
                        .reads
                        .iter()
                        .map(|s| match s {
                            Slot::In(i) => ins.get(*i).cloned(),
                            s => slots.iter().rev().find(|(k, _)| k == s).map(|(_, v)| v.clone()),
                        })
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("the meaning of {} reads a slot it has not written", f.name()))?;
                    let written = op_terms(dag, &step.kind, &reads)?;
                    slots.extend(step.writes.iter().copied().zip(written));
                }
                (0..op.outputs.len())
                    .map(|i| slots.iter().rev().find(|(k, _)| *k == Slot::Out(i)).map(|(_, v)| v.0))
                    .collect::<Option<Vec<Id>>>()
                    .ok_or_else(|| format!("the meaning of {} leaves an output unwritten", f.name()))?
            }
            kind => op_terms(dag, kind, &ins)?.into_iter().map(|(id, _)| id).collect(),
        };
        for (&t, &id) in op.outputs.iter().zip(&outs) {
            if let Some(v) = val.get_mut(t.0) {
                *v = Some(id);
            }
        }
        written.push(outs);
    }
    let get = |t: ir::TensorId| val.get(t.0).copied().flatten();
    let logits = get(graph.logits).ok_or("the logits are never written")?;
    let states = graph
        .states
        .iter()
        .map(|s| {
            let out = get(s.write).ok_or_else(|| format!("state {} is never written", graph.name_of(s.write)))?;
            Ok(StateTerm { kind: s.kind, layer: s.layer, ty: graph.ty(s.read).clone(), out })
        })
        .collect::<Result<_, String>>()?;
    Ok(GraphTerms { logits, states, ops: written })
}

/// The terms (and types) a primitive op of kind `kind` writes when it reads `ins`.
pub(crate) fn op_terms(dag: &mut Dag, kind: &OpKind, ins: &[(Id, Ty)]) -> Result<Vec<(Id, Ty)>, String> {
    let tys: Vec<&Ty> = ins.iter().map(|(_, t)| t).collect();
    let outs = kind.infer(&tys).map_err(|e| format!("{}: {e}", kind.name()))?;
    let args: Vec<Id> = ins.iter().map(|(id, _)| *id).collect();
    let shape = |i: usize| ins[i].1.shape().unwrap_or(&[]).to_vec();
    let last = |i: usize| shape(i).last().copied().unwrap_or(1);
    let r = Real::new;
    let sym = match kind {
        OpKind::Embed => Sym::Embed,
        OpKind::MatVec => Sym::MatVec,
        OpKind::Add => Sym::Add,
        OpKind::Mul if shape(1) == [1] && shape(0) != [1] => Sym::MulScalar,
        OpKind::Mul => Sym::Mul,
        OpKind::Scale { factor } => Sym::Scale(r(*factor)),
        OpKind::Offset { value } => Sym::Offset(r(*value)),
        OpKind::Act(a) => Sym::Act(*a),
        OpKind::Clamp { min, max } => Sym::Clamp(r(*min), r(*max)),
        OpKind::RmsNorm { eps } => Sym::RmsNorm { eps: r(*eps), n: last(0) },
        OpKind::LayerNorm { eps } => Sym::LayerNorm { eps: r(*eps), n: last(0) },
        OpKind::L2Norm { eps } => Sym::L2Norm { eps: r(*eps), n: last(0) },
        OpKind::Softmax => Sym::Softmax { n: last(0) },
        OpKind::Concat => {
            let s = shape(0);
            let rows = s[..s.len().saturating_sub(1)].iter().product();
            Sym::Concat { rows, lens: (0..ins.len()).map(last).collect() }
        }
        OpKind::Slice { start, end } => Sym::Slice { start: *start, end: *end, n: last(0) },
        OpKind::Reshape { .. } => return Ok(vec![(args[0], outs[0].clone())]),
        OpKind::Broadcast { rows } => Sym::Broadcast { rows: *rows },
        OpKind::ConvShift => Sym::ConvShift { c: shape(0)[0], k: shape(0)[1] },
        OpKind::DepthwiseConv => Sym::DepthwiseConv { c: shape(0)[0], k: shape(0)[1] },
        OpKind::DeltaRule { head_map } => {
            let (s, q) = (shape(0), shape(1));
            let rule = Sym::DeltaRule { hv: s[0], hk: q[0], dk: s[1], dv: s[2], map: *head_map };
            let pair = dag.mk(rule, &args);
            let state = dag.mk(Sym::Proj(0), &[pair]);
            let out = dag.mk(Sym::Proj(1), &[pair]);
            return Ok(vec![(state, outs[0].clone()), (out, outs[1].clone())]);
        }
        OpKind::Rope { theta, rotary_dims, style } => {
            Sym::Rope { theta: r(*theta), dims: *rotary_dims, style: *style, hd: last(0) }
        }
        OpKind::RopeFreqs { inv_freq, scale, style } => Sym::RopeFreqs {
            freqs: inv_freq.iter().map(|&f| r(f)).collect(),
            scale: r(*scale),
            style: *style,
            hd: last(0),
        },
        OpKind::KvAppend => match &ins[0].1 {
            Ty::Cache { heads, dim } => Sym::KvAppend { h: *heads, d: *dim },
            t => return Err(format!("kv_append of {t}")),
        },
        OpKind::Attention { scale, window, head_map } => {
            let kv_heads = match &ins[1].1 {
                Ty::Cache { heads, .. } => *heads,
                t => return Err(format!("attention over {t}")),
            };
            Sym::Attention { scale: r(*scale), window: *window, map: *head_map, heads: shape(0)[0], kv_heads }
        }
        OpKind::TopK { k, renormalize } => Sym::TopK { k: *k, renormalize: *renormalize },
        OpKind::GroupLimit { groups, keep, top } => Sym::GroupLimit { groups: *groups, keep: *keep, top: *top },
        OpKind::Pick { index } => Sym::Pick { index: *index },
        OpKind::Advance => Sym::Advance,
        OpKind::Fused(f) => return Err(format!("{} inside a fused meaning", f.name())),
    };
    Ok(vec![(dag.mk(sym, &args), outs[0].clone())])
}
