//! The text form of a step graph: a listing of one line per declaration or op, which
//! [`parse_graph`](super::parse_graph) reads back.
//!
//! ```text
//! graph "tiny"
//! token %token
//! state position %pos: position -> %pos.next
//! const %token_embd: [97, 64] = token_embd.weight
//! %h0: [64] = embed %token_embd, %token
//! const %blk.0.attn_norm: [64] = blk.0.attn_norm.weight
//! %l0.x: [64] = rms_norm(eps=1e-6) %h0, %blk.0.attn_norm
//! …
//! logits %logits
//! ```
//!
//! The header names the graph; the token comes next, the logits last. In between, the lines follow
//! the graph's tensor table: each state, constant and op appears where the first tensor it declares
//! sits in the table, and ops keep their order. A state line names the tensor that holds the state at
//! the end of the step (`-> %pos.next`), which the op writing it declares. An op line declares its
//! outputs with their types, then names the op with its attributes and its inputs
//! (`%a: [4], %b: [4] = gdn_gating %x, %y, %z, %w`). A tensor nothing writes is declared by an
//! `unwritten` line and an op that writes nothing prints `()` for its outputs, so that invalid graphs
//! have a listing too.
//!
//! Tensor and checkpoint names of letters, digits, `.`, `_` and `-` print bare; any other name prints
//! as a quoted string with escapes, so every name round-trips. Floats print in Rust's shortest form
//! that reads back to the same bits (`1e-6`, `0.17677669529663687`, `inf`, `-inf`, `NaN`).

use std::fmt;

use super::graph::Graph;
use super::op::{Fused as F, OpKind, TensorId};
use super::ty::Ty;

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "graph {}", Quoted(&self.name))?;
        write!(f, "token {}", self.tensor_ref(self.token))?;
        match self.tensors.get(self.token.0) {
            Some(d) if d.ty != Ty::Token => writeln!(f, ": {}", d.ty)?,
            _ => writeln!(f)?,
        }
        for line in self.lines() {
            match line {
                Line::State(i) => {
                    let s = &self.states[i];
                    write!(f, "state {}", s.kind.name())?;
                    if let Some(l) = s.layer {
                        write!(f, " layer {l}")?;
                    }
                    writeln!(f, " {} -> {}", self.typed(s.read), self.tensor_ref(s.write))?;
                }
                Line::Const(i) => {
                    let c = &self.consts[i];
                    writeln!(f, "const {} = {}{}", self.typed(c.tensor), Bare(&c.binding.tensor), c.binding.view)?;
                }
                Line::Unwritten(t) => writeln!(f, "unwritten {}", self.typed(t))?,
                Line::Op(i) => {
                    let op = &self.ops[i];
                    if op.outputs.is_empty() {
                        f.write_str("()")?;
                    }
                    for (j, &t) in op.outputs.iter().enumerate() {
                        let sep = if j == 0 { "" } else { ", " };
                        write!(f, "{sep}{}", self.typed(t))?;
                    }
                    write!(f, " = {}", op.kind)?;
                    for (j, &t) in op.inputs.iter().enumerate() {
                        let sep = if j == 0 { " " } else { ", " };
                        write!(f, "{sep}{}", self.tensor_ref(t))?;
                    }
                    writeln!(f)?;
                }
            }
        }
        writeln!(f, "logits {}", self.tensor_ref(self.logits))
    }
}

/// A line of the listing between the token and the logits.
#[derive(Clone, Copy)]
enum Line {
    State(usize),
    Const(usize),
    Unwritten(TensorId),
    Op(usize),
}

impl Graph {
    /// The lines between the token and the logits, in listing order: the states, the constants,
    /// the unwritten tensors and the ops, each in their own order, merged by the place in the tensor
    /// table of the first tensor each line declares. Where a later line of the same sequence has an
    /// earlier place (a fused op whose outputs were appended to the table), the earlier line takes
    /// that place too, so that one misplaced line does not drag the lines after it; an op that
    /// declares nothing follows the op before it. Parsing assigns ids in listing order, so a graph
    /// whose table is in listing order (every graph `GraphBuilder` makes) reads back equal.
    fn lines(&self) -> Vec<Line> {
        let mut written = vec![false; self.tensors.len()];
        let mut mark = |t: TensorId| {
            if let Some(w) = written.get_mut(t.0) {
                *w = true;
            }
        };
        mark(self.token);
        self.states.iter().for_each(|s| mark(s.read));
        self.consts.iter().for_each(|c| mark(c.tensor));
        self.ops.iter().flat_map(|op| &op.outputs).for_each(|&t| mark(t));
        let unwritten: Vec<TensorId> = (0..written.len()).filter(|&i| !written[i]).map(TensorId).collect();

        let mut queues: [Vec<(Option<usize>, Line)>; 4] = [
            self.states.iter().enumerate().map(|(i, s)| (Some(s.read.0), Line::State(i))).collect(),
            self.consts.iter().enumerate().map(|(i, c)| (Some(c.tensor.0), Line::Const(i))).collect(),
            unwritten.into_iter().map(|t| (Some(t.0), Line::Unwritten(t))).collect(),
            self.ops.iter().enumerate().map(|(i, op)| (op.outputs.first().map(|t| t.0), Line::Op(i))).collect(),
        ];
        for queue in &mut queues {
            let mut first = usize::MAX;
            for (key, _) in queue.iter_mut().rev() {
                if let Some(k) = key {
                    first = first.min(*k);
                    *k = first;
                }
            }
        }
        let mut next = [0usize; 4];
        let mut out = Vec::with_capacity(queues.iter().map(Vec::len).sum());
        loop {
            // The queue whose head comes first; an op declaring nothing comes at once.
            // (`None < Some(_)`, and on a tie the earlier queue wins.)
            let mut pick: Option<(usize, Option<usize>)> = None;
            for (q, queue) in queues.iter().enumerate() {
                let Some(&(key, _)) = queue.get(next[q]) else { continue };
                if pick.is_none_or(|(_, best)| key < best) {
                    pick = Some((q, key));
                }
            }
            let Some((q, _)) = pick else { break };
            out.push(queues[q][next[q]].1);
            next[q] += 1;
        }
        out
    }

    /// A reference to tensor `t`: `%name`, or `%?id` for an id the table does not have.
    fn tensor_ref(&self, t: TensorId) -> TensorRef<'_> {
        TensorRef { graph: self, t, typed: false }
    }

    /// A declaration of tensor `t`: `%name: type`.
    fn typed(&self, t: TensorId) -> TensorRef<'_> {
        TensorRef { graph: self, t, typed: true }
    }
}

struct TensorRef<'g> {
    graph: &'g Graph,
    t: TensorId,
    typed: bool,
}

impl fmt::Display for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.graph.tensors.get(self.t.0) {
            Some(d) if self.typed => write!(f, "%{}: {}", Bare(&d.name), d.ty),
            Some(d) => write!(f, "%{}", Bare(&d.name)),
            None if self.typed => write!(f, "%?{}: ?", self.t.0),
            None => write!(f, "%?{}", self.t.0),
        }
    }
}

/// The op's name and, in parentheses, its attributes: `rms_norm(eps=1e-6)`,
/// `attention(scale=0.125, window=none, head_map=grouped)`, `glu_act_mul(act=silu)`; a list of
/// floats prints in brackets, `rope_freqs(inv_freq=[1.0, 0.1], scale=1.0, style=neox)`.
impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use OpKind::*;
        f.write_str(self.name())?;
        match self {
            Embed | MatVec | Add | Mul | Act(_) | Softmax | Concat | ConvShift | DepthwiseConv | KvAppend | Advance => {
                Ok(())
            }
            Scale { factor } => write!(f, "(factor={factor:?})"),
            Offset { value } => write!(f, "(value={value:?})"),
            Clamp { min, max } => write!(f, "(min={min:?}, max={max:?})"),
            RmsNorm { eps } | LayerNorm { eps } | L2Norm { eps } => write!(f, "(eps={eps:?})"),
            Slice { start, end } => write!(f, "(start={start}, end={end})"),
            Reshape { shape } => write!(f, "(shape={})", Ty::tensor(shape)),
            Broadcast { rows } => write!(f, "(rows={rows})"),
            DeltaRule { head_map } => write!(f, "(head_map={})", head_map.name()),
            Rope { theta, rotary_dims, style } => {
                write!(f, "(theta={theta:?}, rotary_dims={rotary_dims}, style={})", style.name())
            }
            Attention { scale, window, head_map } => {
                write!(f, "(scale={scale:?}, window=")?;
                match window {
                    Some(w) => write!(f, "{w}")?,
                    None => f.write_str("none")?,
                }
                write!(f, ", head_map={})", head_map.name())
            }
            RopeFreqs { inv_freq, scale, style } => {
                f.write_str("(inv_freq=[")?;
                for (i, x) in inv_freq.iter().enumerate() {
                    write!(f, "{}{x:?}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, "], scale={scale:?}, style={})", style.name())
            }
            TopK { k, renormalize } => write!(f, "(k={k}, renormalize={renormalize})"),
            GroupLimit { groups, keep, top } => write!(f, "(groups={groups}, keep={keep}, top={top})"),
            Pick { index } => write!(f, "(index={index})"),
            Fused(F::GluActMul { act }) => write!(f, "(act={})", act.name()),
            Fused(F::MergedQkv | F::ConvBiasSilu | F::GdnGating) => Ok(()),
        }
    }
}

/// Whether `c` may appear in a name printed bare.
pub(super) fn is_bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// A name: bare when it is non-empty and every character may be bare, else quoted.
struct Bare<'a>(&'a str);

impl fmt::Display for Bare<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_empty() && self.0.chars().all(is_bare) { f.write_str(self.0) } else { Quoted(self.0).fmt(f) }
    }
}

/// A string in double quotes: `"` and `\` escaped, `\n`, `\r`, `\t` and other control characters as
/// escapes (`\u{7f}`), everything else as itself.
pub(super) struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

/// A name as the listing writes it (bare or quoted), for messages about it.
pub(super) fn listed_name(name: &str) -> String {
    Bare(name).to_string()
}
