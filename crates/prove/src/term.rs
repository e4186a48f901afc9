//! The term language: tensors as hash-consed terms over uninterpreted leaves and the IR's
//! primitive ops (with their attributes) as function symbols, plus the few symbols the engine's
//! Commands are documented in.
//!
//! Every array term denotes a row-major flat vector of reals, so a reshape is no symbol at all: a
//! symbol that works per row or per head carries the row or head length it needs as an attribute.
//! Terms live in one [`Dag`]: a node is a symbol and its arguments, interned, so equal terms are
//! one node and comparing two terms is comparing two ids. [`Dag::mk`] normalises as it builds:
//! each [`Lemma`] is a rewrite to a canonical form, applied when a node is built, and recorded.

use std::fmt;

use super::lemma::Lemma;
use formats::bind::{Binding, View};
use ir::{Act, HeadMap, RopeStyle, StateKind};

/// The id of a node of a [`Dag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub u32);

/// The nodes of one term of a [`Dag`] ([`Dag::cone`]): a flag per node of the DAG, since ids
/// are dense, and how many are set.
pub struct Cone {
    member: Vec<bool>,
    len: usize,
}

impl Cone {
    /// Whether node `id` is in the term.
    pub fn contains(&self, id: &Id) -> bool {
        self.member.get(id.0 as usize).copied().unwrap_or(false)
    }

    /// How many distinct nodes the term has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the term has no node (never, for a term of the DAG).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A real attribute (an eps, a θ, a scale), compared and hashed by its exact bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Real(u64);

impl Real {
    pub fn new(x: f64) -> Real {
        Real(x.to_bits())
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

/// A function symbol of the term language (a leaf when it takes no arguments).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Sym {
    // ---- Leaves: what a step reads. ----
    /// The token the step reads.
    Token,
    /// The position as the step starts (an integer).
    Pos,
    /// A checkpoint tensor seen through a view.
    Weight(Binding),
    /// A piece of state as it enters the step, in the graph's layout: its kind and layer.
    State(StateKind, Option<usize>),

    // ---- The IR's primitive ops. ----
    Embed,
    MatVec,
    Add,
    /// Same-shape elementwise product.
    Mul,
    /// `a · s` for a one-value `s`.
    MulScalar,
    Scale(Real),
    Offset(Real),
    Act(Act),
    Clamp(Real, Real),
    /// RMS norm over rows of `n`.
    RmsNorm {
        eps: Real,
        n: usize,
    },
    LayerNorm {
        eps: Real,
        n: usize,
    },
    L2Norm {
        eps: Real,
        n: usize,
    },
    Softmax {
        n: usize,
    },
    /// Concatenation along the last axis of `rows` rows, the operands' last axes `lens`.
    Concat {
        rows: usize,
        lens: Vec<usize>,
    },
    /// `x[.., start..end]` of rows of `n`.
    Slice {
        start: usize,
        end: usize,
        n: usize,
    },
    Broadcast {
        rows: usize,
    },
    /// `[C, K]`: drop column 0, append the vector as column `K−1`.
    ConvShift {
        c: usize,
        k: usize,
    },
    DepthwiseConv {
        c: usize,
        k: usize,
    },
    /// The graph's delta rule over `[hv, dk, dv]`; a pair (state, output), taken apart by [`Sym::Proj`].
    DeltaRule {
        hv: usize,
        hk: usize,
        dk: usize,
        dv: usize,
        map: HeadMap,
    },
    /// Component `i` of a pair.
    Proj(usize),
    Rope {
        theta: Real,
        dims: usize,
        style: RopeStyle,
        hd: usize,
    },
    RopeFreqs {
        freqs: Vec<Real>,
        scale: Real,
        style: RopeStyle,
        hd: usize,
    },
    KvAppend {
        h: usize,
        d: usize,
    },
    /// Attention of `heads` query heads over `kv_heads` cache heads (`q, K, V [, sinks]`).
    Attention {
        scale: Real,
        window: Option<usize>,
        map: HeadMap,
        heads: usize,
        kv_heads: usize,
    },
    TopK {
        k: usize,
        renormalize: bool,
    },
    GroupLimit {
        groups: usize,
        keep: usize,
        top: usize,
    },
    Pick {
        index: usize,
    },
    /// `pos + 1`.
    Advance,
    /// Block `i` (of `size` values) of the result is block `perm[i]` of the operand: the tiled
    /// value-head order of a GGUF tensor, stated over the HF tensor (`permute.rs`, canonical).
    Permute {
        perm: std::rc::Rc<[u32]>,
        size: usize,
    },

    // ---- The engine's vocabulary (the Commands' documented meaning). ----
    /// Rows `start..end` of a vector.
    Rows {
        start: usize,
        end: usize,
    },
    /// Half `half` of each head of `2·d` values.
    HeadHalf {
        d: usize,
        half: usize,
    },
    /// `[C, K] → [C, K−1]`: the window without its oldest column (the conv layout map).
    DropFirstCol {
        c: usize,
        k: usize,
    },
    /// `([C, K−1], [C]) → [C, K]`: the window with the current input appended.
    AppendCol {
        c: usize,
        k: usize,
    },
    /// `[hv, dk, dv] → [hv, dv, dk]` (the delta-state layout map).
    TransposeKv {
        hv: usize,
        dk: usize,
        dv: usize,
    },
    /// The engine's delta rule over its `[hv][dv][dk]` state, value head `h` with key head `h mod hk`.
    DeltaRuleVk {
        hv: usize,
        hk: usize,
        dk: usize,
        dv: usize,
    },
    /// A cache as the engine's preallocated `[h][capacity][d]` buffer (the KV layout map).
    Prealloc {
        h: usize,
        d: usize,
    },
    /// `(P, pos, x)`: `x` written at position `pos` of each head.
    KvWrite {
        h: usize,
        d: usize,
    },
    /// `(q, K, V, pos)`: attention over positions `0..=pos` of preallocated caches, grouped heads.
    AttendPrefix {
        scale: Real,
        heads: usize,
        kv_heads: usize,
    },
}

impl Sym {
    /// Whether this symbol is a leaf.
    pub(crate) fn is_leaf(&self) -> bool {
        matches!(self, Sym::Token | Sym::Pos | Sym::Weight(_) | Sym::State(..))
    }

    /// The symbol's name, without attributes.
    pub fn name(&self) -> &'static str {
        match self {
            Sym::Token => "token",
            Sym::Pos => "pos",
            Sym::Weight(_) => "weight",
            Sym::State(..) => "state",
            Sym::Embed => "embed",
            Sym::MatVec => "matvec",
            Sym::Add => "add",
            Sym::Mul => "mul",
            Sym::MulScalar => "mul_scalar",
            Sym::Scale(_) => "scale",
            Sym::Offset(_) => "offset",
            Sym::Act(a) => a.name(),
            Sym::Clamp(..) => "clamp",
            Sym::RmsNorm { .. } => "rms_norm",
            Sym::LayerNorm { .. } => "layer_norm",
            Sym::L2Norm { .. } => "l2_norm",
            Sym::Softmax { .. } => "softmax",
            Sym::Concat { .. } => "concat",
            Sym::Slice { .. } => "slice",
            Sym::Broadcast { .. } => "broadcast",
            Sym::ConvShift { .. } => "conv_shift",
            Sym::DepthwiseConv { .. } => "depthwise_conv",
            Sym::DeltaRule { .. } => "delta_rule",
            Sym::Proj(_) => "proj",
            Sym::Rope { .. } => "rope",
            Sym::RopeFreqs { .. } => "rope_freqs",
            Sym::KvAppend { .. } => "kv_append",
            Sym::Attention { .. } => "attention",
            Sym::TopK { .. } => "top_k",
            Sym::GroupLimit { .. } => "group_limit",
            Sym::Pick { .. } => "pick",
            Sym::Advance => "advance",
            Sym::Permute { .. } => "permute",
            Sym::Rows { .. } => "rows",
            Sym::HeadHalf { .. } => "head_half",
            Sym::DropFirstCol { .. } => "drop_first_col",
            Sym::AppendCol { .. } => "append_col",
            Sym::TransposeKv { .. } => "transpose_kv",
            Sym::DeltaRuleVk { .. } => "delta_rule_vk",
            Sym::Prealloc { .. } => "prealloc",
            Sym::KvWrite { .. } => "kv_write",
            Sym::AttendPrefix { .. } => "attend_prefix",
        }
    }

    /// Whether `self` and `other` are the same symbol up to their attributes (an act is one symbol
    /// whatever its function).
    pub(crate) fn same_head(&self, other: &Sym) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sym::Weight(b) => write!(f, "{b}"),
            Sym::State(k, Some(l)) => write!(f, "{}@l{l}", k.name()),
            Sym::State(k, None) => write!(f, "{}", k.name()),
            Sym::Scale(x) => write!(f, "scale[{x}]"),
            Sym::Offset(x) => write!(f, "offset[{x}]"),
            Sym::Clamp(a, b) => write!(f, "clamp[{a}, {b}]"),
            Sym::RmsNorm { eps, n } => write!(f, "rms_norm[eps={eps}, n={n}]"),
            Sym::LayerNorm { eps, n } => write!(f, "layer_norm[eps={eps}, n={n}]"),
            Sym::L2Norm { eps, n } => write!(f, "l2_norm[eps={eps}, n={n}]"),
            Sym::Softmax { n } => write!(f, "softmax[n={n}]"),
            Sym::Concat { rows, lens } => write!(f, "concat[rows={rows}, lens={lens:?}]"),
            Sym::Slice { start, end, n } => write!(f, "slice[{start}..{end} of {n}]"),
            Sym::Broadcast { rows } => write!(f, "broadcast[{rows}]"),
            Sym::ConvShift { c, k } => write!(f, "conv_shift[{c}x{k}]"),
            Sym::DepthwiseConv { c, k } => write!(f, "depthwise_conv[{c}x{k}]"),
            Sym::DeltaRule { hv, hk, dk, dv, map } => {
                write!(f, "delta_rule[hv={hv}, hk={hk}, dk={dk}, dv={dv}, {}]", map.name())
            }
            Sym::Proj(i) => write!(f, "proj{i}"),
            Sym::Rope { theta, dims, style, hd } => {
                write!(f, "rope[theta={theta}, dims={dims}, {}, hd={hd}]", style.name())
            }
            Sym::RopeFreqs { freqs, scale, style, hd } => {
                write!(f, "rope_freqs[{} freqs, scale={scale}, {}, hd={hd}]", freqs.len(), style.name())
            }
            Sym::KvAppend { h, d } => write!(f, "kv_append[{h}x{d}]"),
            Sym::Attention { scale, window, map, heads, kv_heads } => write!(
                f,
                "attention[scale={scale}, window={window:?}, {}, heads={heads}, kv_heads={kv_heads}]",
                map.name()
            ),
            Sym::TopK { k, renormalize } => write!(f, "top_k[{k}, renormalize={renormalize}]"),
            Sym::GroupLimit { groups, keep, top } => write!(f, "group_limit[{groups}, {keep}, {top}]"),
            Sym::Pick { index } => write!(f, "pick[{index}]"),
            Sym::Permute { perm, size } => write!(f, "permute[{} blocks of {size}]", perm.len()),
            Sym::Rows { start, end } => write!(f, "rows[{start}..{end}]"),
            Sym::HeadHalf { d, half } => write!(f, "head_half[d={d}, half={half}]"),
            Sym::DropFirstCol { c, k } => write!(f, "drop_first_col[{c}x{k}]"),
            Sym::AppendCol { c, k } => write!(f, "append_col[{c}x{k}]"),
            Sym::TransposeKv { hv, dk, dv } => write!(f, "transpose_kv[{hv}x{dk}x{dv}]"),
            Sym::DeltaRuleVk { hv, hk, dk, dv } => write!(f, "delta_rule_vk[hv={hv}, hk={hk}, dk={dk}, dv={dv}]"),
            Sym::Prealloc { h, d } => write!(f, "prealloc[{h}x{d}]"),
            Sym::KvWrite { h, d } => write!(f, "kv_write[{h}x{d}]"),
            Sym::AttendPrefix { scale, heads, kv_heads } => {
                write!(f, "attend_prefix[scale={scale}, heads={heads}, kv_heads={kv_heads}]")
            }
            s => f.write_str(s.name()),
        }
    }
}

/// A node: a symbol and its arguments.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub sym: Sym,
    pub args: Vec<Id>,
}

/// The hash-consed DAG every term of a proof lives in, with the lemmas its builder applied.
#[derive(Default)]
pub struct Dag {
    nodes: Vec<Node>,
    /// Hash-consing's table, hashed by foldhash: its keys are the prover's own nodes, with no
    /// adversary to flood it, and it is probed once per node built.
    index: foldhash::HashMap<Node, Id>,
    /// Every rewrite the builder made: the lemma and the node it produced.
    pub fired: Vec<(Lemma, Id)>,
    /// The row count of each checkpoint matrix whose count the proof knows (`whole-rows`); empty
    /// unless a link sets it.
    pub rows: foldhash::HashMap<String, usize>,
    /// The column count of each checkpoint matrix the proof knows (a permuted matrix's matvec).
    pub cols: foldhash::HashMap<String, usize>,
}

impl Dag {
    pub fn new() -> Dag {
        Dag::default()
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `id`.
    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// The node of `sym` over `args` as it is, without normalising (lemma tests build the left side
    /// of a lemma with it).
    pub fn raw(&mut self, sym: Sym, args: &[Id]) -> Id {
        let node = Node { sym, args: args.to_vec() };
        if let Some(&id) = self.index.get(&node) {
            return id;
        }
        let id = Id(self.nodes.len() as u32);
        self.nodes.push(node.clone());
        self.index.insert(node, id);
        id
    }

    /// A leaf; rows `0..R` of a matrix of `R` rows is the whole matrix (`whole-rows`).
    pub fn leaf(&mut self, sym: Sym) -> Id {
        if let Sym::Weight(Binding { tensor, view: View::Rows { start: 0, end } }) = &sym
            && self.rows.get(tensor) == Some(end)
        {
            let id = self.raw(Sym::Weight(Binding::whole(tensor.clone())), &[]);
            return self.fire(Lemma::WholeRows, id);
        }
        self.raw(sym, &[])
    }

    pub(crate) fn fire(&mut self, lemma: Lemma, id: Id) -> Id {
        self.fired.push((lemma, id));
        id
    }

    /// The node of `sym` over `args` in normal form: each lemma whose left side matches is
    /// rewritten to its right side (itself normalised), and recorded.
    pub fn mk(&mut self, sym: Sym, args: &[Id]) -> Id {
        if let Some(id) = self.permutation_rules(&sym, args) {
            return id;
        }
        if let (Sym::Concat { lens, .. }, &[a, b]) = (&sym, args)
            && let Some((rope, x, pos)) = self.partial_rotary(lens, a, b)
        {
            let id = self.mk(rope, &[x, pos]);
            return self.fire(Lemma::PartialRotary, id);
        }
        match (&sym, args) {
            (Sym::Weight(_), []) => self.leaf(sym),
            (Sym::Add, [a, b]) | (Sym::Mul, [a, b]) if b < a => {
                let lemma = if sym == Sym::Add { Lemma::AddCommutes } else { Lemma::MulCommutes };
                let id = self.raw(sym, &[*b, *a]);
                self.fire(lemma, id)
            }
            (Sym::Rows { start, end }, [m]) => match self.weight_matvec(*m) {
                Some((tensor, x)) => {
                    let w = self.leaf(Sym::Weight(Binding::rows(tensor, *start, *end)));
                    let id = self.mk(Sym::MatVec, &[w, x]);
                    self.fire(Lemma::RowsOfMatVec, id)
                }
                None => self.raw(sym, args),
            },
            (Sym::HeadHalf { d, half }, [m]) => match self.weight_matvec(*m) {
                Some((tensor, x)) => {
                    let w = self.leaf(Sym::Weight(Binding::head_half(tensor, *d, *half)));
                    let id = self.mk(Sym::MatVec, &[w, x]);
                    self.fire(Lemma::HeadHalfOfMatVec, id)
                }
                None => self.raw(sym, args),
            },
            (&Sym::Slice { start, end, n }, [x]) => {
                if start == 0 && end == n {
                    return self.fire(Lemma::WholeSlice, *x);
                }
                let inner = self.node(*x).clone();
                if let Sym::Concat { rows: 1, lens } = &inner.sym {
                    let mut at = 0;
                    for (i, len) in lens.iter().enumerate() {
                        if at == start && at + len == end {
                            return self.fire(Lemma::SliceOfConcat, inner.args[i]);
                        }
                        at += len;
                    }
                }
                let half = (n == 2 * (end - start) && (start == 0 || start == n / 2)).then_some(start / (n / 2).max(1));
                if let (Some(half), Some(_)) = (half, self.weight_matvec(*x)) {
                    let id = self.mk(Sym::HeadHalf { d: n / 2, half }, &[*x]);
                    return self.fire(Lemma::SliceOfHeads, id);
                }
                self.raw(sym, args)
            }
            (Sym::Concat { rows: 1, lens }, _) => {
                let (mut lens, mut parts) = (lens.clone(), args.to_vec());
                let mut merged = false;
                let mut i = 0;
                while i + 1 < parts.len() {
                    match self.adjacent_rows(parts[i], parts[i + 1]) {
                        Some(m) => {
                            parts[i] = m;
                            parts.remove(i + 1);
                            lens[i] += lens.remove(i + 1);
                            merged = true;
                        }
                        None => i += 1,
                    }
                }
                match (merged, parts.as_slice()) {
                    (false, _) => self.raw(sym, args),
                    (true, [one]) => self.fire(Lemma::ConcatOfRows, *one),
                    (true, _) => {
                        let id = self.raw(Sym::Concat { rows: 1, lens }, &parts);
                        self.fire(Lemma::ConcatOfRows, id)
                    }
                }
            }
            (&Sym::AppendCol { c, k }, [w, x]) => {
                let inner = self.node(*w).clone();
                if inner.sym == (Sym::DropFirstCol { c, k }) {
                    let id = self.mk(Sym::ConvShift { c, k }, &[inner.args[0], *x]);
                    return self.fire(Lemma::ConvWindow, id);
                }
                self.raw(sym, args)
            }
            (Sym::Scale(s), [x]) if s.get() == 1.0 => self.fire(Lemma::ScaleByOne, *x),
            (&Sym::Proj(i), [t])
                if matches!(self.node(*t).sym, Sym::DeltaRule { .. })
                    && matches!(self.node(self.node(*t).args[1]).sym, Sym::Scale(_)) =>
            {
                let inner = self.node(*t).clone();
                let scaled = self.node(inner.args[1]).clone();
                let mut ins = inner.args.clone();
                ins[1] = scaled.args[0];
                let rule = self.mk(inner.sym, &ins);
                let part = self.mk(Sym::Proj(i), &[rule]);
                let id = if i == 1 { self.mk(scaled.sym, &[part]) } else { part };
                self.fire(Lemma::DeltaQueryScale, id)
            }
            (&Sym::Proj(i), [t]) => {
                let inner = self.node(*t).clone();
                if let Sym::DeltaRuleVk { hv, hk, dk, dv } = inner.sym {
                    let s = self.node(inner.args[0]).clone();
                    if s.sym == (Sym::TransposeKv { hv, dk, dv }) {
                        let mut ins = inner.args.clone();
                        ins[0] = s.args[0];
                        let rule = self.mk(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Tiled }, &ins);
                        let part = self.mk(Sym::Proj(i), &[rule]);
                        let id = if i == 0 { self.mk(Sym::TransposeKv { hv, dk, dv }, &[part]) } else { part };
                        return self.fire(Lemma::DeltaOrientation, id);
                    }
                }
                self.raw(sym, args)
            }
            (&Sym::KvWrite { h, d }, [p, pos, x]) => {
                let inner = self.node(*p).clone();
                let filled_to_pos = matches!(self.node(*pos).sym, Sym::Pos)
                    && inner.sym == (Sym::Prealloc { h, d })
                    && self.is_cache_leaf(inner.args[0]);
                if filled_to_pos {
                    let appended = self.mk(Sym::KvAppend { h, d }, &[inner.args[0], *x]);
                    let id = self.mk(Sym::Prealloc { h, d }, &[appended]);
                    return self.fire(Lemma::KvAppendAtFill, id);
                }
                self.raw(sym, args)
            }
            (&Sym::AttendPrefix { scale, heads, kv_heads }, [q, k, v, pos]) => {
                let caches = [self.filled_past_pos(*k), self.filled_past_pos(*v)];
                if let ([Some(k), Some(v)], Sym::Pos) = (caches, &self.node(*pos).sym) {
                    let attn = Sym::Attention { scale, window: None, map: HeadMap::Grouped, heads, kv_heads };
                    let id = self.mk(attn, &[*q, k, v]);
                    return self.fire(Lemma::AttendFilledPrefix, id);
                }
                self.raw(sym, args)
            }
            (&Sym::Attention { scale, window, map, heads, kv_heads }, _)
                if map != HeadMap::Grouped && (kv_heads == 1 || kv_heads == heads) =>
            {
                let id = self.mk(Sym::Attention { scale, window, map: HeadMap::Grouped, heads, kv_heads }, args);
                self.fire(Lemma::TrivialHeadMap, id)
            }
            (&Sym::DeltaRule { hv, hk, dk, dv, map }, _) if map != HeadMap::Grouped && (hk == 1 || hk == hv) => {
                let id = self.mk(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, args);
                self.fire(Lemma::TrivialHeadMap, id)
            }
            (&Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, [s, q, k, rest @ ..])
                if hk == hv && hv > 1 && self.broadcast_of(*q, hv).is_some() && self.broadcast_of(*k, hv).is_some() =>
            {
                let (q1, k1) = (self.broadcast_of(*q, hv).unwrap_or(*q), self.broadcast_of(*k, hv).unwrap_or(*k));
                let ins = [&[*s, q1, k1][..], rest].concat();
                let id = self.mk(Sym::DeltaRule { hv, hk: 1, dk, dv, map: HeadMap::Grouped }, &ins);
                self.fire(Lemma::OneKeyHead, id)
            }
            (Sym::Scale(_) | Sym::Offset(_) | Sym::Act(_) | Sym::L2Norm { .. }, [x])
                if matches!(self.node(*x).sym, Sym::Broadcast { .. }) =>
            {
                let inner = self.node(*x).clone();
                let inside = self.mk(sym.clone(), &inner.args);
                let id = self.mk(inner.sym, &[inside]);
                self.fire(Lemma::BroadcastCommutes, id)
            }
            _ => self.raw(sym, args),
        }
    }

    /// `(tensor, x)` when `m` is `W·x` with `W` the whole of checkpoint tensor `tensor`.
    fn weight_matvec(&self, m: Id) -> Option<(String, Id)> {
        let n = self.node(m);
        if n.sym != Sym::MatVec {
            return None;
        }
        match &self.node(n.args[0]).sym {
            Sym::Weight(Binding { tensor, view: View::Whole }) => Some((tensor.clone(), n.args[1])),
            _ => None,
        }
    }

    /// `x` when `b` is `broadcast(rows)(x)`.
    fn broadcast_of(&self, b: Id, rows: usize) -> Option<Id> {
        let n = self.node(b);
        (n.sym == Sym::Broadcast { rows }).then(|| n.args[0])
    }

    /// `(rope(θ, r, hd), x, pos)` when `a` is `rope(θ, r, hd=r)(slice(0..r of hd, x), pos)` and `b`
    /// is `slice(r..hd of hd, x)`, concatenated as rows of `[r, hd − r]`.
    fn partial_rotary(&self, lens: &[usize], a: Id, b: Id) -> Option<(Sym, Id, Id)> {
        let (na, nb) = (self.node(a), self.node(b));
        let Sym::Rope { theta, dims, style, hd: r } = na.sym else { return None };
        let [rotated, pos] = na.args[..] else { return None };
        let head = self.node(rotated);
        let (&Sym::Slice { start: 0, end, n: hd }, &Sym::Slice { start, end: tail, n: hd2 }) = (&head.sym, &nb.sym)
        else {
            return None;
        };
        let fits = dims == r && end == r && start == r && tail == hd && hd2 == hd && lens == [r, hd - r];
        (fits && head.args == nb.args).then(|| (Sym::Rope { theta, dims, style, hd }, head.args[0], pos))
    }

    /// `W[rows a..c]·x` when `p` is `W[rows a..b]·x` and `q` is `W[rows b..c]·x`.
    fn adjacent_rows(&mut self, p: Id, q: Id) -> Option<Id> {
        let rows = |dag: &Dag, m: Id| {
            let n = dag.node(m);
            if n.sym != Sym::MatVec {
                return None;
            }
            match &dag.node(n.args[0]).sym {
                Sym::Weight(Binding { tensor, view: View::Rows { start, end } }) => {
                    Some((tensor.clone(), *start, *end, n.args[1]))
                }
                _ => None,
            }
        };
        let ((t1, a, b, x1), (t2, b2, c, x2)) = (rows(self, p)?, rows(self, q)?);
        if t1 != t2 || b != b2 || x1 != x2 {
            return None;
        }
        let w = self.leaf(Sym::Weight(Binding::rows(t1, a, c)));
        Some(self.mk(Sym::MatVec, &[w, x1]))
    }

    /// Whether `c` is a key or value cache as it enters the step.
    fn is_cache_leaf(&self, c: Id) -> bool {
        matches!(self.node(c).sym, Sym::State(StateKind::KeyCache | StateKind::ValueCache, _))
    }

    /// The cache `C` when `p` is `prealloc(kv_append(leaf, x))`: filled to `pos + 1`.
    fn filled_past_pos(&self, p: Id) -> Option<Id> {
        let n = self.node(p);
        let Sym::Prealloc { .. } = n.sym else { return None };
        let c = self.node(n.args[0]);
        (matches!(c.sym, Sym::KvAppend { .. }) && self.is_cache_leaf(c.args[0])).then_some(n.args[0])
    }

    /// The number of distinct nodes of the term `root`.
    pub fn size(&self, root: Id) -> usize {
        self.cone(root).len()
    }

    /// The nodes of the term `root` (itself and everything under it), each once.
    pub fn cone(&self, root: Id) -> Cone {
        let mut cone = Cone { member: vec![false; self.nodes.len()], len: 0 };
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            if let Some(m) = cone.member.get_mut(id.0 as usize)
                && !*m
            {
                *m = true;
                cone.len += 1;
                stack.extend(self.node(id).args.iter().copied());
            }
        }
        cone
    }

    /// The term `id` printed as an expression, cut off below `depth` levels with `…`.
    pub fn show(&self, id: Id, depth: usize) -> String {
        let n = self.node(id);
        if n.args.is_empty() {
            return n.sym.to_string();
        }
        if depth == 0 {
            return format!("{}(…)", n.sym);
        }
        let args: Vec<String> = n.args.iter().map(|&a| self.show(a, depth - 1)).collect();
        format!("{}({})", n.sym, args.join(", "))
    }
}
