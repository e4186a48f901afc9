//! Graph mutations, each with the outcome it must have.
//!
//! A mutation edits an authored step graph (before the shim) or a fused one (after it), naming ops
//! by the first tensor they write and constants by their tensor, as the text form of the IR does.
//! Each carries the place (block and layer) its target sits at in the engine's reading order, read
//! off the author's names when it is drawn ([`super::roles`]); so [`Mutation::expected`] needs
//! nothing but the mutation, and a mutation printed in a corpus file says where it strikes.
//!
//! The expected outcomes assume the mutation is the only thing wrong with the graph (a spec the
//! engine accepts, the engine's shim, a recurrent state in f32); [`super::Case::expected`] composes
//! them with the rest of a case. Each variant's doc comment states its outcome and why.

use std::fmt;
use std::str::FromStr;

use super::draw::{Draw, splitmix};
use super::outcome::{Expected, Outcome, Place, Span};
use super::roles::{self, split};
use crate::engine::program::BlockKind;
use crate::engine::shim::EngineShim;
use crate::ir::{Act, Def, Graph, HeadMap, Op, OpKind, RopeStyle, StateKind, TensorDecl, TensorId};
use crate::model::bind::{Binding, View};
use crate::model::layout::layout;
use crate::model::spec::{Mixer, ModelSpec};

/// Which graph a mutation edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The authored graph, before the engine's shim fuses it.
    Authored,
    /// The graph as the engine's shim leaves it.
    Fused,
}

/// Which part of two layers' states a [`Mutation::SwapStates`] exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatePart {
    /// The layer each state is labelled with.
    Labels,
    /// The ops reading each state at the start of the step.
    Reads,
    /// The tensor each state is written as at the end of the step.
    Writes,
}

/// A change to a step graph, with the outcome it must have.
#[derive(Clone, Debug, PartialEq)]
pub enum Mutation {
    /// Constant `%constant` bound to `to` instead: another tensor of the layer, another layer's
    /// tensor, other rows, the other head half.
    ///
    /// Must be refused at the constant's block. A constant read whole: `WrongBinding` (each block
    /// checks the binding of every constant it reads), or `AmbiguousOp` when the new tensor is the
    /// one a sibling op of the block reads from the same input (two ops then fit the sibling's
    /// place). A member of a merged projection (a Gated-DeltaNet block's `attn_qkv` rows, an
    /// attention block's `attn_q` halves) rebound before the shim no longer tiles its matrix with
    /// the others, so the shim leaves the projections unfused and the block finds them where it
    /// wants `merged_qkv`: `NotFusable`; except the value rows moved to another tensor, which
    /// leave the query and key rows tiling the matrix from row 0, so the shim merges two
    /// projections where the block wants three: `WrongArity`. Rebound after the shim, the merged
    /// op's views are not ones one matvec runs: `MergedNotContiguous`. One rebind means the same
    /// step and is accepted: the head bound to the embedding table (a tied head, which the head
    /// unit takes).
    Rebind { stage: Stage, constant: String, to: Binding, at: Place },
    /// The bindings of constants `%a` and `%b` (of one shape) exchanged: the gate and up
    /// projections, the key and value projections, two norms, the query and key rows of
    /// `attn_qkv`, the two halves of `attn_q`.
    ///
    /// Two constants read whole: `WrongBinding` at the earlier one's block; or, when both are
    /// read by ops of one kind from one input (gate and up, beta and alpha, key and value), each op
    /// fits the other's place, the block binds them in exchanged roles and is refused at the first
    /// op that reads one in the wrong role: `WrongOp` or `WrongTensor`. Two members of a
    /// merged projection exchanged after the shim: `MergedNotContiguous`. Before the shim their
    /// views still tile the matrix, so the shim merges them with the outputs in row order, and the
    /// block then finds the author's tensors in each other's roles: the first op reading one in
    /// the wrong role is refused, `WrongTensor` when it is the conv's concat of the query, key and
    /// value rows, `WrongOp` when it is the query reshape that now finds the output gate.
    SwapBindings { stage: Stage, a: String, b: String, at: Place },
    /// Operand `operand` of the op writing `%op` rewired to `%to`, another tensor of the same type
    /// written before it (a stale residual, a cache before its append, a window before its shift,
    /// another layer's value).
    ///
    /// Must be refused, at a place from `from` (the earlier of the blocks of the old and the new
    /// operand) to `at` (the op's block). The matcher meets the change first at whichever block
    /// looks for the old operand's reader or meets the new one's: it finds no op of the kind it
    /// wants (`WrongOp`), an op of that kind reading the wrong tensor (`WrongTensor`) or, first
    /// among those of its kind, a projection of another constant (`WrongBinding`), two
    /// candidates (`AmbiguousOp`), a block's own tensor read from outside it (`StrayRead`), a
    /// fusion the change broke (`NotFusable`), a state written by the wrong op
    /// (`WrongStateWrite`), a residual feeding a projection with no norm in between or a norm
    /// reading a block's output (the shapes of a norm-after layer, `NormAfterMixer`), an FFN whose
    /// projections changed (`NotSwiGlu`), or
    /// the value projection moved to another input, so that the query and key rows merge
    /// without it (`WrongArity`), or a norm made to read a projection of an attention block's
    /// input whose normed value is projected again, which is latent attention's shape
    /// (`LatentAttention`); or the op is left outside every block (`UnreadOp`, which names no
    /// place).
    Rewire { stage: Stage, op: String, operand: usize, to: String, from: Place, at: Place },
    /// The kind of the ops writing `%ops` set to `kind` (before the shim): an attribute (eps, θ,
    /// rotary dims, RoPE style, window, scale, head map, factor) or the op's kind (an activation,
    /// add for mul, offset for scale).
    ///
    /// Accepted where the engine's unit takes the attribute from the graph: the eps of a block's
    /// norm, of the gated norm, of both q/k norms of an attention block; θ and rotary dims set on
    /// both RoPEs of a block. Otherwise refused at the op's block: `WrongAttribute` where the unit
    /// fixes the attribute (one q/k norm or RoPE apart from its twin, the l2 norms' eps, the query
    /// scale, head maps, the output gate's or gated norm's activation); `AttentionScale` for the
    /// attention's scale and `InterleavedRope` for both RoPEs made interleaved, the constructs the
    /// lowering names; `SlidingWindow` for a window; `NotSwiGlu` for the FFN's activation;
    /// `NotFusable` where the op belongs to a fusion pattern it no longer matches (the conv's
    /// SiLU, the gates' softplus, bias add and decay product, the products of a gated
    /// activation, the gates' sigmoid made a softplus); `WrongOp` where the op is no longer the
    /// kind the block wants (a residual add made a product, the query scale made an offset, the
    /// gates' sigmoid made an activation no gating pattern starts with).
    Set { ops: Vec<String>, kind: OpKind, at: Place },
    /// The op writing `%op` removed: what it wrote is never written, so the graph is not well
    /// formed, `InvalidGraph`, whatever else is wrong with it.
    Drop { stage: Stage, op: String, at: Place },
    /// The op writing `%op` removed and its readers made to read its first operand (of the same
    /// type): a norm, an activation, a scale, an add skipped.
    ///
    /// Must be refused at the op's block: the op the block wants is missing (`WrongOp`), another
    /// op reads the tensor it wanted (`WrongTensor`, `AmbiguousOp`, `StrayRead`), its pattern no
    /// longer fuses (`NotFusable`), a skipped pre-norm leaves the residual feeding the mixer
    /// (`NormAfterMixer`) or a skipped FFN activation leaves no SwiGLU (`NotSwiGlu`); or an op is
    /// left outside every block (`UnreadOp`).
    Bypass { op: String, at: Place },
    /// A copy of the op writing `%op`, writing new tensors nothing reads, inserted after it.
    ///
    /// Must be refused at the op's block: two ops fit where the block wants one (`AmbiguousOp`);
    /// the copy reads a tensor the block keeps to itself (`StrayRead`); before the shim, a copy
    /// of a projection of a merged matrix keeps it from tiling (`NotFusable`) and a third FFN
    /// projection is no SwiGLU (`NotSwiGlu`); or the copy is left outside every block
    /// (`UnreadOp`).
    Duplicate { stage: Stage, op: String, at: Place },
    /// A dead op: a SiLU of `%reads` (an op's output or a state), writing a new tensor nothing
    /// reads, appended at the end.
    ///
    /// Must be refused: the op belongs to no block (`UnreadOp`, which names no place), unless the
    /// tensor's block keeps it to itself (`StrayRead` at `at`, the block writing it) or it is an
    /// intermediate of a fusion pattern, which must be read only by the pattern's next op, so the
    /// shim leaves it unfused (`NotFusable` at `at`).
    DeadOp { stage: Stage, reads: String, at: Place },
    /// The ops put in another order that still writes every tensor before reading it (drawn from
    /// `seed`). The step means the same: the outcome must be the unmutated case's (accepted, and
    /// then the interpreters agree).
    Reorder { stage: Stage, seed: u64 },
    /// The `part` of the `kind` states of two layers exchanged: layer `layers[0]` reads (or is
    /// labelled with, or writes) layer `layers[1]`'s state and back.
    ///
    /// Must be refused at the earlier layer's mixer: labels or reads exchanged, its block finds
    /// the state's reader reading another layer's tensors (`WrongTensor`); writes exchanged, the
    /// state is written as another layer's value (`WrongStateWrite`).
    SwapStates { kind: StateKind, layers: [usize; 2], part: StatePart },
    /// Layer `layer`'s `kind` state (all its state when `kind` is `None`) labelled as layer `to`,
    /// a layer the step does not have. With one state moved the layer's mixer finds its other
    /// state but not this one: `MissingState` at its block. With all moved the layer has no
    /// state of either mixer: `UnknownMixer` (which the lowering reports at the Gated-DeltaNet
    /// block, the mixer it tries first).
    RelabelState { kind: Option<StateKind>, layer: usize, to: usize },
}

impl Mutation {
    /// The graph this mutation edits.
    pub fn stage(&self) -> Stage {
        match self {
            Mutation::Rebind { stage, .. }
            | Mutation::SwapBindings { stage, .. }
            | Mutation::Rewire { stage, .. }
            | Mutation::Drop { stage, .. }
            | Mutation::Duplicate { stage, .. }
            | Mutation::DeadOp { stage, .. }
            | Mutation::Reorder { stage, .. } => *stage,
            Mutation::Set { .. }
            | Mutation::Bypass { .. }
            | Mutation::SwapStates { .. }
            | Mutation::RelabelState { .. } => Stage::Authored,
        }
    }

    /// The mutation's kind, for coverage counts: `rebind-rows`, `set-attribute`, `swap-state-reads`, ….
    pub fn kind_name(&self) -> &'static str {
        match self {
            Mutation::Rebind { constant, to, .. } => {
                if split(constant).0 != split(&to.tensor).0 {
                    "rebind-layer"
                } else {
                    match to.view {
                        View::Rows { .. } => "rebind-rows",
                        View::HeadHalf { .. } => "rebind-half",
                        _ => "rebind-tensor",
                    }
                }
            }
            Mutation::SwapBindings { .. } => "swap-bindings",
            Mutation::Rewire { .. } => "rewire",
            Mutation::Set { ops, kind, .. } => {
                if ops.first().is_some_and(|_| same_kind_name(kind, ops)) {
                    "set-attribute"
                } else {
                    "set-kind"
                }
            }
            Mutation::Drop { .. } => "drop",
            Mutation::Bypass { .. } => "bypass",
            Mutation::Duplicate { .. } => "duplicate",
            Mutation::DeadOp { .. } => "dead-op",
            Mutation::Reorder { .. } => "reorder",
            Mutation::SwapStates { part: StatePart::Labels, .. } => "swap-states",
            Mutation::SwapStates { part: StatePart::Reads, .. } => "swap-state-reads",
            Mutation::SwapStates { part: StatePart::Writes, .. } => "swap-state-writes",
            Mutation::RelabelState { .. } => "relabel-state",
        }
    }

    /// Every kind [`Mutation::kind_name`] names.
    pub const KINDS: [&'static str; 17] = [
        "rebind-tensor",
        "rebind-layer",
        "rebind-rows",
        "rebind-half",
        "swap-bindings",
        "rewire",
        "set-attribute",
        "set-kind",
        "drop",
        "bypass",
        "duplicate",
        "dead-op",
        "reorder",
        "swap-states",
        "swap-state-reads",
        "swap-state-writes",
        "relabel-state",
    ];

    /// `graph` with this mutation made, or `None` when the graph lacks what it names.
    pub fn apply(&self, graph: &Graph) -> Option<Graph> {
        let mut g = graph.clone();
        match self {
            Mutation::Rebind { constant, to, .. } => {
                let t = g.find(constant)?;
                g.consts.iter_mut().find(|c| c.tensor == t)?.binding = to.clone();
            }
            Mutation::SwapBindings { a, b, .. } => {
                let (ta, tb) = (g.find(a)?, g.find(b)?);
                let i = g.consts.iter().position(|c| c.tensor == ta)?;
                let j = g.consts.iter().position(|c| c.tensor == tb)?;
                let bi = g.consts[i].binding.clone();
                g.consts[i].binding = std::mem::replace(&mut g.consts[j].binding, bi);
            }
            Mutation::Rewire { op, operand, to, .. } => {
                let (i, t) = (writer(&g, op)?, g.find(to)?);
                *g.ops[i].inputs.get_mut(*operand)? = t;
            }
            Mutation::Set { ops, kind, .. } => {
                for op in ops {
                    let i = writer(&g, op)?;
                    g.ops[i].kind = kind.clone();
                }
            }
            Mutation::Drop { op, .. } => {
                let i = writer(&g, op)?;
                g.ops.remove(i);
            }
            Mutation::Bypass { op, .. } => {
                let i = writer(&g, op)?;
                let (&out, &input) = (g.ops[i].outputs.first()?, g.ops[i].inputs.first()?);
                let is_state = g.states.iter().any(|s| s.write == out);
                if g.ops[i].outputs.len() != 1 || g.ty(out) != g.ty(input) || is_state || out == g.logits {
                    return None;
                }
                g.ops.remove(i);
                for t in g.ops.iter_mut().flat_map(|o| o.inputs.iter_mut()) {
                    if *t == out {
                        *t = input;
                    }
                }
                // The bypassed op's output is declared still, with no writer and no reader.
                g.compact();
            }
            Mutation::Duplicate { op, .. } => {
                let i = writer(&g, op)?;
                let mut copy = g.ops[i].clone();
                for t in copy.outputs.iter_mut() {
                    let decl = g.tensors[t.0].clone();
                    let mut name = format!("{}.dup", decl.name);
                    while g.find(&name).is_some() {
                        name.push_str(".dup");
                    }
                    g.tensors.push(TensorDecl { name, ty: decl.ty });
                    *t = TensorId(g.tensors.len() - 1);
                }
                g.ops.insert(i + 1, copy);
            }
            Mutation::DeadOp { reads, .. } => {
                let t = g.find(reads)?;
                let ty = g.ty(t).clone();
                let mut name = format!("{reads}.dead");
                while g.find(&name).is_some() {
                    name.push_str(".dead");
                }
                g.tensors.push(TensorDecl { name, ty });
                let out = TensorId(g.tensors.len() - 1);
                g.ops.push(Op { kind: OpKind::Act(Act::Silu), inputs: vec![t], outputs: vec![out] });
            }
            Mutation::Reorder { seed, .. } => g.ops = reordered(&g, *seed)?,
            Mutation::SwapStates { kind, layers: [a, b], part } => {
                let i = g.states.iter().position(|s| s.kind == *kind && s.layer == Some(*a))?;
                let j = g.states.iter().position(|s| s.kind == *kind && s.layer == Some(*b))?;
                match part {
                    StatePart::Labels => {
                        g.states[i].layer = Some(*b);
                        g.states[j].layer = Some(*a);
                    }
                    StatePart::Writes => {
                        let wi = g.states[i].write;
                        g.states[i].write = std::mem::replace(&mut g.states[j].write, wi);
                    }
                    StatePart::Reads => {
                        let (ri, rj) = (g.states[i].read, g.states[j].read);
                        for t in g.ops.iter_mut().flat_map(|o| o.inputs.iter_mut()) {
                            if *t == ri {
                                *t = rj;
                            } else if *t == rj {
                                *t = ri;
                            }
                        }
                    }
                }
            }
            Mutation::RelabelState { kind, layer, to } => {
                let mut moved = false;
                for s in g.states.iter_mut().filter(|s| kind.is_none_or(|k| s.kind == k) && s.layer == Some(*layer)) {
                    s.layer = Some(*to);
                    moved = true;
                }
                if !moved {
                    return None;
                }
            }
        }
        Some(g)
    }

    /// The outcomes this mutation allows on a graph the engine otherwise accepts (see each
    /// variant's doc comment for why).
    pub fn expected(&self) -> Expected {
        match self {
            Mutation::Rebind { stage, constant, to, at } => {
                let (layer, role) = split(constant);
                let leaves = layer.is_none_or(|l| to.tensor != crate::model::names::blk(l, "attn_qkv.weight"));
                if is_merged_member(constant) {
                    match stage {
                        Stage::Authored if role == "attn_qkv.v" && leaves => Expected::at("WrongArity", *at),
                        Stage::Authored => Expected::at("NotFusable", *at),
                        Stage::Fused => Expected::at("MergedNotContiguous", *at),
                    }
                } else if constant == "output" && *to == Binding::whole(crate::model::names::TOKEN_EMBD) {
                    Expected::accepted()
                } else {
                    Expected::one_of(&["WrongBinding", "AmbiguousOp"], Span::At(*at))
                }
            }
            Mutation::SwapBindings { stage, a, b, at } => match (is_merged_member(a) && is_merged_member(b), stage) {
                (true, Stage::Authored) => Expected::one_of(&["WrongTensor", "WrongOp"], Span::At(*at)),
                (true, Stage::Fused) => Expected::at("MergedNotContiguous", *at),
                (false, _) => Expected::one_of(&["WrongBinding", "WrongOp", "WrongTensor"], Span::At(*at)),
            },
            Mutation::Rewire { from, at, .. } => Expected::one_of(
                &[
                    "WrongOp",
                    "WrongTensor",
                    "WrongBinding",
                    "WrongArity",
                    "AmbiguousOp",
                    "StrayRead",
                    "NotFusable",
                    "WrongStateWrite",
                    "NormAfterMixer",
                    "NotSwiGlu",
                    "LatentAttention",
                ],
                Span::Within(*from, *at),
            )
            .or(Expected::nowhere("UnreadOp")),
            Mutation::Set { ops, kind, at } => set_expected(ops, kind, *at),
            Mutation::Drop { .. } => Expected::nowhere("InvalidGraph"),
            Mutation::Bypass { at, .. } => Expected::one_of(
                &["WrongOp", "WrongTensor", "AmbiguousOp", "StrayRead", "NotFusable", "NormAfterMixer", "NotSwiGlu"],
                Span::At(*at),
            )
            .or(Expected::nowhere("UnreadOp")),
            Mutation::Duplicate { at, .. } => {
                Expected::one_of(&["AmbiguousOp", "StrayRead", "NotFusable", "NotSwiGlu"], Span::At(*at))
                    .or(Expected::nowhere("UnreadOp"))
            }
            Mutation::DeadOp { at, .. } => {
                Expected::one_of(&["StrayRead", "NotFusable"], Span::At(*at)).or(Expected::nowhere("UnreadOp"))
            }
            Mutation::Reorder { .. } => Expected::accepted(),
            Mutation::SwapStates { kind, layers, part } => {
                let at = Place::layer(state_block(*kind), layers[0].min(layers[1]));
                match part {
                    StatePart::Labels | StatePart::Reads => Expected::at("WrongTensor", at),
                    StatePart::Writes => Expected::at("WrongStateWrite", at),
                }
            }
            Mutation::RelabelState { kind: Some(kind), layer, .. } => {
                Expected::at("MissingState", Place::layer(state_block(*kind), *layer))
            }
            Mutation::RelabelState { kind: None, layer, .. } => {
                Expected::at("UnknownMixer", Place::layer(BlockKind::DeltaNet, *layer))
            }
        }
    }

    /// The expected outcome combined with a case whose unmutated outcome is `base`: a dropped op
    /// makes any graph invalid, and a reordered step keeps its outcome; any other mutation is
    /// judged on a graph the engine otherwise accepts, so `None` (no expectation) on any other base.
    pub(crate) fn expected_on(&self, base: &Outcome) -> Option<Expected> {
        match (self, base) {
            (Mutation::Drop { .. }, _) => Some(self.expected()),
            (Mutation::Reorder { .. }, b) => Some(Expected::exactly(b)),
            (_, Outcome::Accepted) => Some(self.expected()),
            (_, Outcome::Refused { variant, .. }) if variant == "RecurrentStateBelowF32" => {
                Some(Expected::exactly(base))
            }
            _ => None,
        }
    }
}

/// The block whose ops read a state of `kind`.
fn state_block(kind: StateKind) -> BlockKind {
    match kind {
        StateKind::Conv | StateKind::Recurrent => BlockKind::DeltaNet,
        StateKind::KeyCache | StateKind::ValueCache => BlockKind::Attention,
        StateKind::Position => BlockKind::Advance,
    }
}

/// Whether constant `name` is one of the views of a matrix the engine merges: the query, key and
/// value rows of `attn_qkv`, or the query and output-gate halves of `attn_q` (the author's names).
fn is_merged_member(name: &str) -> bool {
    matches!(split(name).1, "attn_qkv.q" | "attn_qkv.k" | "attn_qkv.v" | "attn_q.q" | "attn_q.gate")
}

/// Whether `kind` is the kind the author gives the op writing `ops[0]` (by its role), so that a
/// `Set` changes only attributes.
fn same_kind_name(kind: &OpKind, ops: &[String]) -> bool {
    let role = ops.first().map(|o| split(o).1).unwrap_or("");
    let authored = match role {
        "x" | "x.ffn" | "h.final" | "o.normed" => "rms_norm",
        "q.normed" | "k.normed" => return matches!(kind, OpKind::RmsNorm { .. } | OpKind::L2Norm { .. }),
        "q.rope" | "k.rope" => "rope",
        "attn" => "attention",
        "state.next" => "delta_rule",
        "q.scaled" => "scale",
        _ => return false,
    };
    kind.name() == authored
}

/// The outcome of setting the kind of `ops` (one role, one block) to `kind`: the table in
/// [`Mutation::Set`]'s doc comment. A role the table does not know allows any outcome.
fn set_expected(ops: &[String], kind: &OpKind, at: Place) -> Expected {
    let roles: Vec<&str> = ops.iter().map(|o| split(o).1).collect();
    let both = |a: &str, b: &str| roles.contains(&a) && roles.contains(&b);
    let refused = |v: &'static str| Expected::at(v, at);
    let role = roles.first().copied().unwrap_or("");
    match (at.block, role, kind) {
        (_, "x" | "x.ffn" | "h.final", OpKind::RmsNorm { .. }) => Expected::accepted(),
        (BlockKind::DeltaNet, "o.normed", OpKind::RmsNorm { .. }) => Expected::accepted(),
        (BlockKind::Attention, "q.normed" | "k.normed", OpKind::RmsNorm { .. }) => {
            if both("q.normed", "k.normed") {
                Expected::accepted()
            } else {
                refused("WrongAttribute")
            }
        }
        (BlockKind::DeltaNet, "q.normed" | "k.normed", OpKind::L2Norm { .. }) => refused("WrongAttribute"),
        (_, "q.rope" | "k.rope", OpKind::Rope { style: RopeStyle::Neox, .. }) if both("q.rope", "k.rope") => {
            Expected::accepted()
        }
        (_, "q.rope" | "k.rope", OpKind::Rope { style: RopeStyle::Interleaved, .. }) if both("q.rope", "k.rope") => {
            refused("InterleavedRope")
        }
        (_, "q.rope" | "k.rope", OpKind::Rope { .. }) => refused("WrongAttribute"),
        (_, "attn", OpKind::Attention { window: Some(_), .. }) => refused("SlidingWindow"),
        (_, "attn", OpKind::Attention { head_map: HeadMap::Grouped, .. }) => refused("AttentionScale"),
        (_, "attn", OpKind::Attention { .. }) => refused("WrongAttribute"),
        (_, "state.next", OpKind::DeltaRule { .. }) => refused("WrongAttribute"),
        (_, "q.scaled", OpKind::Scale { .. }) => refused("WrongAttribute"),
        (_, "q.scaled", OpKind::Offset { .. }) => refused("WrongOp"),
        (_, "ffn.act", OpKind::Act(_)) => refused("NotSwiGlu"),
        (_, "gate.sigmoid" | "z.silu", OpKind::Act(_)) => refused("WrongAttribute"),
        (_, "beta", OpKind::Act(Act::Sigmoid | Act::Softplus)) => refused("NotFusable"),
        (_, "beta", OpKind::Act(_)) => refused("WrongOp"),
        (_, "conv.silu" | "a.softplus", OpKind::Act(_)) => refused("NotFusable"),
        (_, "h.mix" | "h", OpKind::Mul) => refused("WrongOp"),
        (_, "a.biased", OpKind::Mul) => refused("NotFusable"),
        (_, "g" | "ffn.hidden" | "o.gated" | "attn.gated", OpKind::Add) => refused("NotFusable"),
        _ => anything(),
    }
}

/// Every outcome: accepted (then the interpreters must agree) or any refusal anywhere.
fn anything() -> Expected {
    Expected::accepted().or(Expected::one_of(&super::outcome::VARIANTS, Span::Nowhere)).or(Expected::one_of(
        &super::outcome::VARIANTS,
        Span::Within(Place::step(BlockKind::Embedding), Place::step(BlockKind::Head)),
    ))
}

/// The index of the op writing the tensor named `name`.
fn writer(g: &Graph, name: &str) -> Option<usize> {
    let t = g.find(name)?;
    g.ops.iter().position(|o| o.outputs.contains(&t))
}

/// The ops of `g` in another order that writes every tensor before reading it: at each point one
/// of the ops whose operands are all written, drawn from `seed`; `None` if there is no such order.
fn reordered(g: &Graph, seed: u64) -> Option<Vec<Op>> {
    let mut written = vec![false; g.tensors.len()];
    let mut mark = |t: TensorId| {
        if let Some(w) = written.get_mut(t.0) {
            *w = true;
        }
    };
    mark(g.token);
    g.consts.iter().for_each(|c| mark(c.tensor));
    g.states.iter().for_each(|s| mark(s.read));
    let mut pending: Vec<usize> = (0..g.ops.len()).collect();
    let mut out = Vec::with_capacity(pending.len());
    let mut state = seed;
    while !pending.is_empty() {
        let ready: Vec<usize> = (0..pending.len())
            .filter(|&k| g.ops[pending[k]].inputs.iter().all(|t| written.get(t.0).copied().unwrap_or(false)))
            .collect();
        if ready.is_empty() {
            return None;
        }
        state = splitmix(state);
        let k = ready[(state % ready.len() as u64) as usize];
        let op = pending.remove(k);
        for &t in &g.ops[op].outputs {
            if let Some(w) = written.get_mut(t.0) {
                *w = true;
            }
        }
        out.push(g.ops[op].clone());
    }
    Some(out)
}

// ---- Drawing a mutation. ----

/// What a mutation is drawn from: the spec, its authored step and (made when first needed) that
/// step as the engine's shim leaves it.
pub struct Basis<'a> {
    pub spec: &'a ModelSpec,
    pub authored: &'a Graph,
    fused: std::cell::OnceCell<Graph>,
}

impl<'a> Basis<'a> {
    pub fn new(spec: &'a ModelSpec, authored: &'a Graph) -> Basis<'a> {
        Basis { spec, authored, fused: std::cell::OnceCell::new() }
    }

    /// The step as the engine's default shim leaves it, if a draw needed it.
    pub(crate) fn into_fused(self) -> Option<Graph> {
        self.fused.into_inner()
    }

    fn graph(&self, stage: Stage) -> &Graph {
        match stage {
            Stage::Authored => self.authored,
            Stage::Fused => self.fused.get_or_init(|| EngineShim::default().prepare(self.authored)),
        }
    }

    fn place_of(&self, stage: Stage, t: TensorId) -> Option<Place> {
        roles::place_of_tensor(self.spec, self.graph(stage), t)
    }

    fn name(&self, stage: Stage, t: TensorId) -> String {
        self.graph(stage).name_of(t).to_string()
    }
}

/// The drawers, one per family of mutation, in the order a draw tries them.
const DRAWERS: [fn(&mut Draw, &Basis) -> Option<Mutation>; 13] = [
    draw_reorder,
    draw_rebind,
    draw_rebind_layer,
    draw_rebind_view,
    draw_swap_bindings,
    draw_rewire,
    draw_set,
    draw_drop,
    draw_bypass,
    draw_duplicate,
    draw_dead_op,
    draw_swap_states,
    draw_relabel,
];

impl Mutation {
    /// A mutation of `subject` drawn from `d`: a family drawn first, then the next family that
    /// applies to the subject if it does not (a reorder always does).
    pub fn draw(d: &mut Draw, subject: &Basis) -> Mutation {
        let first = d.below(DRAWERS.len());
        for k in 0..DRAWERS.len() {
            if let Some(m) = DRAWERS[(first + k) % DRAWERS.len()](d, subject) {
                return m;
            }
        }
        Mutation::Reorder { stage: Stage::Authored, seed: 0 }
    }
}

fn stage(d: &mut Draw) -> Stage {
    if d.below(2) == 0 { Stage::Authored } else { Stage::Fused }
}

fn draw_reorder(d: &mut Draw, _: &Basis) -> Option<Mutation> {
    Some(Mutation::Reorder { stage: stage(d), seed: d.u64() })
}

/// The checkpoint tensors of the subject's spec, with their shapes.
fn tensors(s: &Basis) -> Vec<(String, Vec<usize>)> {
    layout(s.spec).into_iter().map(|t| (t.name, t.shape)).collect()
}

/// The constants of the authored graph read whole, with their tensor and shape.
fn whole_constants(s: &Basis) -> Vec<(TensorId, String, Vec<usize>)> {
    let g = s.authored;
    g.consts
        .iter()
        .filter(|c| c.binding.view == View::Whole)
        .map(|c| (c.tensor, c.binding.tensor.clone(), g.ty(c.tensor).shape().unwrap_or(&[]).to_vec()))
        .collect()
}

/// A constant read whole, bound to another whole tensor of its shape that is not its own role in
/// another layer.
fn draw_rebind(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let all = tensors(s);
    let options: Vec<(TensorId, String)> = whole_constants(s)
        .into_iter()
        .flat_map(|(t, tensor, shape)| {
            let role = split(&tensor).1.to_string();
            all.iter()
                .filter(move |(n, sh)| *sh == shape && *n != tensor && split(n).1 != role)
                .map(move |(n, _)| (t, n.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    if options.is_empty() {
        return None;
    }
    let (t, to) = d.pick(&options).clone();
    Some(Mutation::Rebind {
        stage,
        constant: s.name(Stage::Authored, t),
        to: Binding::whole(to),
        at: s.place_of(Stage::Authored, t)?,
    })
}

/// A constant bound to the same view of its tensor in another layer.
fn draw_rebind_layer(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let g = s.authored;
    let all = tensors(s);
    let shape_of = |n: &str| all.iter().find(|(m, _)| m == n).map(|(_, sh)| sh.clone());
    let options: Vec<(TensorId, Binding)> = g
        .consts
        .iter()
        .flat_map(|c| {
            let (layer, role) = split(&c.binding.tensor);
            let own = shape_of(&c.binding.tensor);
            (0..s.spec.layers.len())
                .filter(move |&m| layer.is_some_and(|l| l != m))
                .map(move |m| crate::model::names::blk(m, role))
                .filter(|n| shape_of(n).is_some() && shape_of(n) == own)
                .map(|n| (c.tensor, Binding { tensor: n, view: c.binding.view }))
                .collect::<Vec<_>>()
        })
        .collect();
    if options.is_empty() {
        return None;
    }
    let (t, to) = d.pick(&options).clone();
    Some(Mutation::Rebind { stage, constant: s.name(Stage::Authored, t), to, at: s.place_of(Stage::Authored, t)? })
}

/// A member of a merged projection bound to other rows of its matrix, or to the other half of
/// each head.
fn draw_rebind_view(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let g = s.authored;
    let all = tensors(s);
    let options: Vec<(TensorId, Binding)> = g
        .consts
        .iter()
        .flat_map(|c| {
            let rows = all.iter().find(|(n, _)| *n == c.binding.tensor).and_then(|(_, sh)| sh.first().copied());
            match (c.binding.view, rows) {
                (View::Rows { start, end }, Some(rows)) => (0..=rows - (end - start))
                    .filter(|&s| s != start)
                    .map(|s| (c.tensor, Binding::rows(c.binding.tensor.clone(), s, s + end - start)))
                    .collect::<Vec<_>>(),
                (View::HeadHalf { head_dim, half }, _) => {
                    vec![(c.tensor, Binding::head_half(c.binding.tensor.clone(), head_dim, 1 - half.min(1)))]
                }
                _ => vec![],
            }
        })
        .collect();
    if options.is_empty() {
        return None;
    }
    let (t, to) = d.pick(&options).clone();
    Some(Mutation::Rebind { stage, constant: s.name(Stage::Authored, t), to, at: s.place_of(Stage::Authored, t)? })
}

/// Two constants of one shape whose bindings are exchanged: both read whole, or both members of
/// one merged projection.
fn draw_swap_bindings(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let g = s.authored;
    let mut pairs = vec![];
    for (i, a) in g.consts.iter().enumerate() {
        for b in &g.consts[i + 1..] {
            let (na, nb) = (g.name_of(a.tensor), g.name_of(b.tensor));
            let whole = a.binding.view == View::Whole && b.binding.view == View::Whole;
            let merged = is_merged_member(na)
                && is_merged_member(nb)
                && a.binding.tensor == b.binding.tensor
                && a.binding.view != b.binding.view;
            if g.ty(a.tensor) == g.ty(b.tensor) && a.binding != b.binding && (whole || merged) {
                pairs.push((a.tensor, b.tensor));
            }
        }
    }
    if pairs.is_empty() {
        return None;
    }
    let (a, b) = *d.pick(&pairs);
    let (pa, pb) = (s.place_of(Stage::Authored, a)?, s.place_of(Stage::Authored, b)?);
    Some(Mutation::SwapBindings {
        stage,
        a: s.name(Stage::Authored, a),
        b: s.name(Stage::Authored, b),
        at: if pa.rank() <= pb.rank() { pa } else { pb },
    })
}

/// An operand of an op that is not a constant, rewired to another tensor of its type written
/// before the op (not a constant).
fn draw_rewire(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let g = s.graph(stage);
    let defs = g.defs();
    let before = |t: TensorId, op: usize| match defs.get(t.0).copied().flatten() {
        Some(Def::Op(i, _)) => i < op,
        Some(Def::State(_) | Def::Token) => true,
        _ => false,
    };
    let mut options = vec![];
    for (i, op) in g.ops.iter().enumerate() {
        for (j, &old) in op.inputs.iter().enumerate() {
            if matches!(defs.get(old.0).copied().flatten(), Some(Def::Const(_))) {
                continue;
            }
            for t in (0..g.tensors.len()).map(TensorId) {
                if t != old && g.ty(t) == g.ty(old) && before(t, i) {
                    options.push((i, j, old, t));
                }
            }
        }
    }
    if options.is_empty() {
        return None;
    }
    let (i, j, old, t) = *d.pick(&options);
    let at = roles::place_of_op(s.spec, g, i)?;
    let (p_old, p_new) = (s.place_of(stage, old)?, s.place_of(stage, t)?);
    let from = if p_old.rank() <= p_new.rank() { p_old } else { p_new };
    Some(Mutation::Rewire { stage, op: s.name(stage, g.ops[i].outputs[0]), operand: j, to: s.name(stage, t), from, at })
}

/// An attribute or the kind of one op (or of a q/k pair) set to another, by the op's role.
fn draw_set(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let g = s.authored;
    let mut options: Vec<(Vec<String>, OpKind)> = vec![];
    let name = |i: usize| g.name_of(g.ops[i].outputs[0]).to_string();
    let acts = [Act::Sigmoid, Act::Silu, Act::Softplus, Act::Exp, Act::Tanh, Act::Relu, Act::Gelu, Act::GeluTanh];
    for (i, op) in g.ops.iter().enumerate() {
        let n = name(i);
        let (layer, role) = split(&n);
        let twin = |other: &str| layer.map(|l| format!("l{l}.{other}"));
        match (&op.kind, role) {
            (OpKind::RmsNorm { eps }, "x" | "x.ffn" | "h.final" | "o.normed") => {
                options.push((vec![n.clone()], OpKind::RmsNorm { eps: other_eps(*eps) }));
            }
            (OpKind::RmsNorm { eps }, "q.normed") => {
                let k = twin("k.normed")?;
                options.push((vec![n.clone(), k.clone()], OpKind::RmsNorm { eps: other_eps(*eps) }));
                options.push((vec![n.clone()], OpKind::RmsNorm { eps: other_eps(*eps) }));
                options.push((vec![k], OpKind::RmsNorm { eps: other_eps(*eps) }));
            }
            (OpKind::L2Norm { eps }, _) => options.push((vec![n.clone()], OpKind::L2Norm { eps: other_eps(*eps) })),
            (OpKind::Rope { theta, rotary_dims, style }, "q.rope") => {
                let k = twin("k.rope")?;
                let head_dim = g.ty(op.inputs[0]).shape().and_then(|sh| sh.get(1).copied()).unwrap_or(0);
                let dims = if *rotary_dims >= 2 { rotary_dims - 2 } else { (rotary_dims + 2).min(head_dim) };
                let both = vec![n.clone(), k.clone()];
                options.push((
                    both.clone(),
                    OpKind::Rope { theta: theta * 2.0, rotary_dims: *rotary_dims, style: *style },
                ));
                options.push((both.clone(), OpKind::Rope { theta: *theta, rotary_dims: dims, style: *style }));
                options.push((
                    both,
                    OpKind::Rope { theta: *theta, rotary_dims: *rotary_dims, style: RopeStyle::Interleaved },
                ));
                options.push((
                    vec![n.clone()],
                    OpKind::Rope { theta: theta * 2.0, rotary_dims: *rotary_dims, style: *style },
                ));
                options.push((vec![k], OpKind::Rope { theta: *theta, rotary_dims: dims, style: *style }));
            }
            (OpKind::Attention { scale, window, head_map }, _) => {
                options.push((
                    vec![n.clone()],
                    OpKind::Attention { scale: *scale, window: Some(d.range(1, 8)), head_map: *head_map },
                ));
                options.push((
                    vec![n.clone()],
                    OpKind::Attention { scale: scale * 2.0, window: *window, head_map: *head_map },
                ));
                options.push((
                    vec![n.clone()],
                    OpKind::Attention { scale: *scale, window: *window, head_map: HeadMap::Tiled },
                ));
            }
            (OpKind::DeltaRule { .. }, _) => {
                options.push((vec![n.clone()], OpKind::DeltaRule { head_map: HeadMap::Grouped }));
            }
            (OpKind::Scale { factor }, "q.scaled") => {
                options.push((vec![n.clone()], OpKind::Scale { factor: factor * 2.0 }));
                options.push((vec![n.clone()], OpKind::Offset { value: *factor }));
            }
            (OpKind::Act(a), "ffn.act" | "gate.sigmoid" | "z.silu" | "conv.silu" | "beta" | "a.softplus") => {
                let others: Vec<Act> = acts.iter().copied().filter(|b| b != a).collect();
                options.push((vec![n.clone()], OpKind::Act(*d.pick(&others))));
            }
            (OpKind::Add, "h.mix" | "h" | "a.biased") => options.push((vec![n.clone()], OpKind::Mul)),
            (OpKind::Mul, "g" | "ffn.hidden" | "o.gated" | "attn.gated") => {
                options.push((vec![n.clone()], OpKind::Add))
            }
            _ => {}
        }
    }
    if options.is_empty() {
        return None;
    }
    let (ops, kind) = d.pick(&options).clone();
    let at = roles::place_of_output(s.spec, &ops[0])?;
    Some(Mutation::Set { ops, kind, at })
}

/// Another eps than `eps`.
fn other_eps(eps: f64) -> f64 {
    if eps == 1e-2 { 1e-4 } else { 1e-2 }
}

fn any_op(d: &mut Draw, s: &Basis, stage: Stage, fits: impl Fn(&Graph, &Op) -> bool) -> Option<(String, Place)> {
    let g = s.graph(stage);
    let options: Vec<usize> = (0..g.ops.len()).filter(|&i| fits(g, &g.ops[i])).collect();
    if options.is_empty() {
        return None;
    }
    let i = *d.pick(&options);
    Some((g.name_of(*g.ops[i].outputs.first()?).to_string(), roles::place_of_op(s.spec, g, i)?))
}

fn draw_drop(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let (op, at) = any_op(d, s, stage, |_, _| true)?;
    Some(Mutation::Drop { stage, op, at })
}

fn draw_bypass(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let (op, at) = any_op(d, s, Stage::Authored, |g, o| {
        let (Some(&out), Some(&input)) = (o.outputs.first(), o.inputs.first()) else { return false };
        o.outputs.len() == 1
            && g.ty(out) == g.ty(input)
            && out != g.logits
            && !g.states.iter().any(|st| st.write == out)
    })?;
    Some(Mutation::Bypass { op, at })
}

fn draw_duplicate(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let (op, at) = any_op(d, s, stage, |_, _| true)?;
    Some(Mutation::Duplicate { stage, op, at })
}

fn draw_dead_op(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let stage = stage(d);
    let g = s.graph(stage);
    let defs = g.defs();
    let options: Vec<TensorId> = (0..g.tensors.len())
        .map(TensorId)
        .filter(|&t| matches!(g.ty(t), crate::ir::Ty::Tensor(_)))
        .filter(|&t| matches!(defs.get(t.0).copied().flatten(), Some(Def::Op(..) | Def::State(_))))
        .collect();
    if options.is_empty() {
        return None;
    }
    let t = *d.pick(&options);
    Some(Mutation::DeadOp { stage, reads: s.name(stage, t), at: s.place_of(stage, t)? })
}

fn draw_swap_states(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let of = |m: Mixer| -> Vec<usize> {
        s.spec.layers.iter().enumerate().filter(|(_, x)| **x == m).map(|(i, _)| i).collect()
    };
    let mut options = vec![];
    for (mixer, kinds) in [
        (Mixer::DeltaNet, [StateKind::Conv, StateKind::Recurrent]),
        (Mixer::Attention, [StateKind::KeyCache, StateKind::ValueCache]),
    ] {
        let layers = of(mixer);
        for (i, &a) in layers.iter().enumerate() {
            for &b in &layers[i + 1..] {
                for kind in kinds {
                    options.push((kind, [a, b]));
                }
            }
        }
    }
    if options.is_empty() {
        return None;
    }
    let (kind, layers) = *d.pick(&options);
    let part = *d.pick(&[StatePart::Labels, StatePart::Reads, StatePart::Writes]);
    let layers = if d.below(2) == 0 { layers } else { [layers[1], layers[0]] };
    Some(Mutation::SwapStates { kind, layers, part })
}

fn draw_relabel(d: &mut Draw, s: &Basis) -> Option<Mutation> {
    let states: Vec<(StateKind, usize)> =
        s.authored.states.iter().filter_map(|st| st.layer.map(|l| (st.kind, l))).collect();
    if states.is_empty() {
        return None;
    }
    let (kind, layer) = *d.pick(&states);
    let kind = if d.below(4) == 0 { None } else { Some(kind) };
    Some(Mutation::RelabelState { kind, layer, to: s.spec.layers.len() + d.below(3) })
}

// ---- The text form. ----

fn state_kind(name: &str) -> Result<StateKind, String> {
    StateKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| format!("{name:?} is not a state kind"))
}

impl fmt::Display for Mutation {
    /// One line: `[fused ]VERB ARGUMENTS at PLACE`, e.g.
    /// `fused rebind %blk.1.attn_qkv.k = blk.1.attn_qkv.weight rows 17..33 at DeltaNet layer 1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.stage() == Stage::Fused {
            f.write_str("fused ")?;
        }
        match self {
            Mutation::Rebind { constant, to, at, .. } => write!(f, "rebind %{constant} = {to} at {at}"),
            Mutation::SwapBindings { a, b, at, .. } => write!(f, "swap-bindings %{a} %{b} at {at}"),
            Mutation::Rewire { op, operand, to, from, at, .. } => {
                write!(f, "rewire %{op} operand {operand} to %{to} within {from} ..= {at}")
            }
            Mutation::Set { ops, kind, at } => {
                let ops: Vec<String> = ops.iter().map(|o| format!("%{o}")).collect();
                write!(f, "set {} to {kind} at {at}", ops.join(", "))
            }
            Mutation::Drop { op, at, .. } => write!(f, "drop %{op} at {at}"),
            Mutation::Bypass { op, at } => write!(f, "bypass %{op} at {at}"),
            Mutation::Duplicate { op, at, .. } => write!(f, "duplicate %{op} at {at}"),
            Mutation::DeadOp { reads, at, .. } => write!(f, "dead-op reading %{reads} at {at}"),
            Mutation::Reorder { seed, .. } => write!(f, "reorder seed {seed}"),
            Mutation::SwapStates { kind, layers: [a, b], part } => {
                let verb = match part {
                    StatePart::Labels => "swap-states",
                    StatePart::Reads => "swap-state-reads",
                    StatePart::Writes => "swap-state-writes",
                };
                write!(f, "{verb} {} layers {a} {b}", kind.name())
            }
            Mutation::RelabelState { kind, layer, to } => {
                write!(f, "relabel-state {} layer {layer} as {to}", kind.map_or("all", |k| k.name()))
            }
        }
    }
}

impl FromStr for Mutation {
    type Err = String;

    fn from_str(text: &str) -> Result<Mutation, String> {
        let text = text.trim();
        let (stage, text) = match text.strip_prefix("fused ") {
            Some(rest) => (Stage::Fused, rest.trim_start()),
            None => (Stage::Authored, text),
        };
        let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
        let rest = rest.trim();
        let tensor = |w: &str| {
            w.strip_prefix('%').map(str::to_string).ok_or_else(|| format!("{w:?} is not a tensor name like %l1.x"))
        };
        let number = |w: &str| w.parse::<usize>().map_err(|_| format!("{w:?} is not a number"));
        // `ARGS at PLACE`
        let placed = |s: &str| -> Result<(String, Place), String> {
            let (args, place) = s.rsplit_once(" at ").ok_or_else(|| format!("{s:?} lacks 'at PLACE'"))?;
            Ok((args.trim().to_string(), place.parse()?))
        };
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let authored_only = |m: Mutation| {
            if stage == Stage::Fused { Err(format!("{verb} edits the authored graph; drop 'fused'")) } else { Ok(m) }
        };
        match verb {
            "rebind" => {
                let (args, at) = placed(rest)?;
                let (c, b) = args.split_once(" = ").ok_or("rebind %CONSTANT = BINDING at PLACE")?;
                let to = crate::ir::parse_binding(b.trim()).map_err(|e| e.to_string())?;
                Ok(Mutation::Rebind { stage, constant: tensor(c.trim())?, to, at })
            }
            "swap-bindings" => {
                let (args, at) = placed(rest)?;
                match words(&args).as_slice() {
                    [a, b] => Ok(Mutation::SwapBindings { stage, a: tensor(a)?, b: tensor(b)?, at }),
                    _ => Err("swap-bindings %A %B at PLACE".into()),
                }
            }
            "rewire" => {
                let (args, span) =
                    rest.split_once(" within ").ok_or("rewire %OP operand N to %T within PLACE ..= PLACE")?;
                let (from, at) = span.split_once("..=").ok_or("within PLACE ..= PLACE")?;
                match words(args).as_slice() {
                    [op, o, j, t, to] if o == "operand" && t == "to" => Ok(Mutation::Rewire {
                        stage,
                        op: tensor(op)?,
                        operand: number(j)?,
                        to: tensor(to)?,
                        from: from.trim().parse()?,
                        at: at.trim().parse()?,
                    }),
                    _ => Err("rewire %OP operand N to %T within PLACE ..= PLACE".into()),
                }
            }
            "set" => {
                let (args, at) = placed(rest)?;
                let (ops, kind) = args.split_once(" to ").ok_or("set %OP[, %OP] to KIND at PLACE")?;
                let ops = ops.split(',').map(|o| tensor(o.trim())).collect::<Result<Vec<_>, _>>()?;
                let kind = crate::ir::parse_op_kind(kind.trim()).map_err(|e| e.to_string())?;
                authored_only(Mutation::Set { ops, kind, at })
            }
            "drop" | "bypass" | "duplicate" => {
                let (args, at) = placed(rest)?;
                let op = tensor(&args)?;
                match verb {
                    "drop" => Ok(Mutation::Drop { stage, op, at }),
                    "bypass" => authored_only(Mutation::Bypass { op, at }),
                    _ => Ok(Mutation::Duplicate { stage, op, at }),
                }
            }
            "dead-op" => {
                let (args, at) = placed(rest)?;
                match words(&args).as_slice() {
                    [r, t] if r == "reading" => Ok(Mutation::DeadOp { stage, reads: tensor(t)?, at }),
                    _ => Err("dead-op reading %T at PLACE".into()),
                }
            }
            "reorder" => match words(rest).as_slice() {
                [s, n] if s == "seed" => {
                    Ok(Mutation::Reorder { stage, seed: n.parse().map_err(|_| format!("{n:?} is not a seed"))? })
                }
                _ => Err("reorder seed N".into()),
            },
            "swap-states" | "swap-state-reads" | "swap-state-writes" => match words(rest).as_slice() {
                [k, l, a, b] if l == "layers" => {
                    let part = match verb {
                        "swap-states" => StatePart::Labels,
                        "swap-state-reads" => StatePart::Reads,
                        _ => StatePart::Writes,
                    };
                    authored_only(Mutation::SwapStates { kind: state_kind(k)?, layers: [number(a)?, number(b)?], part })
                }
                _ => Err(format!("{verb} KIND layers A B")),
            },
            "relabel-state" => match words(rest).as_slice() {
                [k, l, n, a, to] if l == "layer" && a == "as" => {
                    let kind = if k == "all" { None } else { Some(state_kind(k)?) };
                    authored_only(Mutation::RelabelState { kind, layer: number(n)?, to: number(to)? })
                }
                _ => Err("relabel-state KIND|all layer L as M".into()),
            },
            other => Err(format!("{other:?} is not a mutation")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_reads_back() {
        let at = Place::layer(BlockKind::DeltaNet, 1);
        for m in [
            Mutation::Rebind {
                stage: Stage::Fused,
                constant: "blk.1.attn_qkv.k".into(),
                to: Binding::rows("blk.1.attn_qkv.weight", 17, 33),
                at,
            },
            Mutation::SwapBindings {
                stage: Stage::Authored,
                a: "blk.1.ssm_beta".into(),
                b: "blk.1.ssm_alpha".into(),
                at,
            },
            Mutation::Rewire {
                stage: Stage::Authored,
                op: "l1.x".into(),
                operand: 0,
                to: "h0".into(),
                from: Place::step(BlockKind::Embedding),
                at: Place::layer(BlockKind::MixerNorm, 1),
            },
            Mutation::Set {
                ops: vec!["l0.q.rope".into(), "l0.k.rope".into()],
                kind: OpKind::Rope { theta: 500.0, rotary_dims: 8, style: RopeStyle::Neox },
                at: Place::layer(BlockKind::Attention, 0),
            },
            Mutation::Drop { stage: Stage::Fused, op: "l1.q.scaled".into(), at },
            Mutation::Bypass { op: "l1.q.scaled".into(), at },
            Mutation::Duplicate { stage: Stage::Authored, op: "l1.q.scaled".into(), at },
            Mutation::DeadOp { stage: Stage::Fused, reads: "l1.beta".into(), at },
            Mutation::Reorder { stage: Stage::Fused, seed: 12345678901234 },
            Mutation::SwapStates { kind: StateKind::Recurrent, layers: [2, 1], part: StatePart::Writes },
            Mutation::RelabelState { kind: Some(StateKind::KeyCache), layer: 0, to: 9 },
            Mutation::RelabelState { kind: None, layer: 2, to: 5 },
        ] {
            let text = m.to_string();
            assert_eq!(text.parse::<Mutation>(), Ok(m.clone()), "{text}");
        }
    }
}
