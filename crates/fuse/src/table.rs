//! The shared fusion table: each fused symbol with the pattern of primitive ops it replaces and the
//! preconditions under which it may.

use ir::{Act, Def, Fused, Graph, Op, OpKind, TensorId};
use ir::{Binding, View};

/// A symbol of the shared table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Symbol {
    MergedQkv,
    ConvBiasSilu,
    GdnGating,
    GluActMul,
}

/// An entry of the table: a symbol, the pattern of primitive ops it replaces and its preconditions
/// (in words, for listings and errors), and the function that finds its instances in a graph.
pub struct Entry {
    pub symbol: Symbol,
    pub replaces: &'static str,
    pub preconditions: &'static str,
    find: fn(&Graph, &Uses) -> Vec<Rewrite>,
}

/// The table, in the order the shim applies it.
pub const TABLE: [Entry; 4] = [
    Entry {
        symbol: Symbol::MergedQkv,
        replaces: "matvecs of one input by constants bound to views of one checkpoint matrix",
        preconditions: "the views are row ranges that follow one another from the matrix's first row, \
                        or the two halves of each head of one head size",
        find: find_merged_qkv,
    },
    Entry {
        symbol: Symbol::ConvBiasSilu,
        replaces: "depthwise_conv [+ add bias] + silu",
        preconditions: "each intermediate is read only by the next op; the bias is a constant",
        find: find_conv_bias_silu,
    },
    Entry {
        symbol: Symbol::GdnGating,
        replaces: "sigmoid(b) and ssm_a · softplus(a + dt_bias), both read by one delta rule",
        preconditions: "each intermediate is read only by the next op; ssm_a and dt_bias are constants; \
                        the sigmoid is the delta rule's β and the product its g",
        find: find_gdn_gating,
    },
    Entry {
        symbol: Symbol::GluActMul,
        replaces: "act(gate) · value",
        preconditions: "the activation is read only by the product; value is another tensor of gate's shape",
        find: find_glu_act_mul,
    },
];

impl Symbol {
    pub const ALL: [Symbol; 4] = [Symbol::MergedQkv, Symbol::ConvBiasSilu, Symbol::GdnGating, Symbol::GluActMul];

    /// The symbol's name, as the shared table spells it.
    pub fn name(self) -> &'static str {
        match self {
            Symbol::MergedQkv => "merged_qkv",
            Symbol::ConvBiasSilu => "conv_bias_silu",
            Symbol::GdnGating => "gdn_gating",
            Symbol::GluActMul => "glu_act_mul",
        }
    }

    /// The symbol of a fused op kind.
    pub fn of(f: Fused) -> Symbol {
        match f {
            Fused::MergedQkv => Symbol::MergedQkv,
            Fused::ConvBiasSilu => Symbol::ConvBiasSilu,
            Fused::GdnGating => Symbol::GdnGating,
            Fused::GluActMul { .. } => Symbol::GluActMul,
        }
    }

    /// The table's entry for this symbol.
    pub fn entry(self) -> &'static Entry {
        &TABLE[self as usize]
    }

    /// Whether `kind` is the primitive op an unfused instance of this symbol starts from (the op a
    /// block finds where it expects the symbol).
    pub fn starts_with(self, kind: &OpKind) -> bool {
        match self {
            Symbol::MergedQkv => *kind == OpKind::MatVec,
            Symbol::ConvBiasSilu => *kind == OpKind::DepthwiseConv,
            Symbol::GdnGating => matches!(kind, OpKind::Act(Act::Sigmoid | Act::Softplus) | OpKind::Add | OpKind::Mul),
            Symbol::GluActMul => matches!(kind, OpKind::Act(_) | OpKind::Mul),
        }
    }
}

impl Entry {
    /// The rewrites this entry would make in `graph`.
    pub fn find(&self, graph: &Graph, uses: &Uses) -> Vec<Rewrite> {
        (self.find)(graph, uses)
    }
}

/// One instance of a pattern: the ops it removes and the fused op that replaces them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    pub removes: Vec<usize>,
    pub op: Op,
}

/// Who writes and who reads each tensor of a graph.
pub struct Uses {
    pub defs: Vec<Option<Def>>,
    /// The ops reading each tensor, in op order, each op once: tensor `t`'s are
    /// `reads[starts[t]..starts[t + 1]]` (one array for all, not a vector per tensor).
    starts: Vec<usize>,
    reads: Vec<usize>,
}

impl Uses {
    pub fn of(graph: &Graph) -> Uses {
        let n = graph.tensors.len();
        // Each (tensor, op) pair once: an op reading a tensor twice is one reader of it.
        let pairs = || {
            graph.ops.iter().enumerate().flat_map(|(i, op)| {
                op.inputs
                    .iter()
                    .enumerate()
                    .filter(move |&(k, t)| t.0 < n && !op.inputs[..k].contains(t))
                    .map(move |(_, t)| (t.0, i))
            })
        };
        let mut starts = vec![0; n + 1];
        for (t, _) in pairs() {
            starts[t + 1] += 1;
        }
        for t in 0..n {
            starts[t + 1] += starts[t];
        }
        let mut next = starts.clone();
        let mut reads = vec![0; starts[n]];
        for (t, i) in pairs() {
            reads[next[t]] = i;
            next[t] += 1;
        }
        Uses { defs: graph.defs(), starts, reads }
    }

    /// The op writing `t`, if an op does.
    pub fn producer(&self, t: TensorId) -> Option<usize> {
        match self.defs.get(t.0) {
            Some(Some(Def::Op(i, _))) => Some(*i),
            _ => None,
        }
    }

    /// The ops reading `t`.
    pub fn readers(&self, t: TensorId) -> &[usize] {
        match (self.starts.get(t.0), self.starts.get(t.0 + 1)) {
            (Some(&a), Some(&b)) => &self.reads[a..b],
            _ => &[],
        }
    }

    /// The one op reading `t`, when exactly one op does and reads it once, and `t` is not state.
    fn sole_reader(&self, graph: &Graph, t: TensorId) -> Option<usize> {
        let [r] = self.readers(t) else { return None };
        let once = graph.ops[*r].inputs.iter().filter(|&&i| i == t).count() == 1;
        let is_state = graph.states.iter().any(|s| s.write == t);
        (once && !is_state && t != graph.logits).then_some(*r)
    }
}

/// Why the views of one checkpoint matrix do not form a `merged_qkv`: they must be row ranges that
/// follow one another from row 0, or the two halves of each head of one head size.
pub fn merged_views_precondition(bindings: &[&Binding]) -> Result<(), String> {
    let Some(first) = bindings.first() else { return Err("no projections".into()) };
    if let Some(b) = bindings.iter().find(|b| b.tensor != first.tensor) {
        return Err(format!("{} and {} are different tensors", first.tensor, b.tensor));
    }
    let mut rows: Vec<(usize, usize)> = vec![];
    let mut halves: Vec<(usize, usize)> = vec![];
    for b in bindings {
        match b.view {
            View::Rows { start, end } => rows.push((start, end)),
            View::HeadHalf { head_dim, half } => halves.push((head_dim, half)),
            v => return Err(format!("{}{v} is neither a row range nor a head half", b.tensor)),
        }
    }
    if !rows.is_empty() && !halves.is_empty() {
        return Err(format!("{} is read both as row ranges and as head halves", first.tensor));
    }
    if !halves.is_empty() {
        return match halves.as_slice() {
            [(d0, 0), (d1, 1)] if d0 == d1 => Ok(()),
            _ => Err(format!(
                "the head halves {halves:?} of {} are not the first then the second of one head size",
                first.tensor
            )),
        };
    }
    let mut next = 0;
    for (start, end) in rows {
        if start != next {
            return Err(if next == 0 {
                format!("the first range of {} starts at row {start}, not row 0", first.tensor)
            } else {
                format!("rows {start}..{end} of {} do not follow row {next}", first.tensor)
            });
        }
        next = end;
    }
    Ok(())
}

/// The binding of `t` if it is a constant.
fn binding<'g>(graph: &'g Graph, uses: &Uses, t: TensorId) -> Option<&'g Binding> {
    match uses.defs.get(t.0) {
        Some(Some(Def::Const(i))) => graph.consts.get(*i).map(|c| &c.binding),
        _ => None,
    }
}

fn find_merged_qkv(graph: &Graph, uses: &Uses) -> Vec<Rewrite> {
    // Group the matvecs of constant matrices by (input, checkpoint tensor), in op order.
    type Group<'g> = ((TensorId, &'g str), Vec<(usize, &'g Binding)>);
    let mut groups: Vec<Group> = vec![];
    for (i, op) in graph.ops.iter().enumerate() {
        let (OpKind::MatVec, [w, x]) = (&op.kind, op.inputs.as_slice()) else { continue };
        let Some(b) = binding(graph, uses, *w) else { continue };
        if !matches!(b.view, View::Rows { .. } | View::HeadHalf { .. }) {
            continue;
        }
        match groups.iter_mut().find(|((gx, gt), _)| gx == x && *gt == b.tensor) {
            Some((_, members)) => members.push((i, b)),
            None => groups.push(((*x, &b.tensor), vec![(i, b)])),
        }
    }
    let mut rewrites = vec![];
    for ((x, _), mut members) in groups {
        if members.len() < 2 {
            continue;
        }
        members.sort_by_key(|(_, b)| match b.view {
            View::Rows { start, .. } => start,
            View::HeadHalf { half, .. } => half,
            _ => usize::MAX,
        });
        let bindings: Vec<&Binding> = members.iter().map(|(_, b)| *b).collect();
        if merged_views_precondition(&bindings).is_err() {
            continue;
        }
        let mut inputs = vec![x];
        inputs.extend(members.iter().map(|(i, _)| graph.ops[*i].inputs[0]));
        let outputs = members.iter().map(|(i, _)| graph.ops[*i].outputs[0]).collect();
        rewrites.push(Rewrite {
            removes: members.iter().map(|(i, _)| *i).collect(),
            op: Op { kind: OpKind::Fused(Fused::MergedQkv), inputs, outputs },
        });
    }
    rewrites
}

fn find_conv_bias_silu(graph: &Graph, uses: &Uses) -> Vec<Rewrite> {
    let mut rewrites = vec![];
    for (i, op) in graph.ops.iter().enumerate() {
        if op.kind != OpKind::DepthwiseConv {
            continue;
        }
        let Some(mut next) = uses.sole_reader(graph, op.outputs[0]) else { continue };
        let mut removes = vec![i];
        let mut inputs = op.inputs.clone();
        let bias_add = &graph.ops[next];
        if bias_add.kind == OpKind::Add && bias_add.inputs[0] == op.outputs[0] {
            let bias = bias_add.inputs[1];
            let Some(after) = uses.sole_reader(graph, bias_add.outputs[0]) else { continue };
            if binding(graph, uses, bias).is_none() {
                continue;
            }
            inputs.push(bias);
            removes.push(next);
            next = after;
        }
        let silu = &graph.ops[next];
        if silu.kind != OpKind::Act(Act::Silu) {
            continue;
        }
        removes.push(next);
        rewrites.push(Rewrite {
            removes,
            op: Op { kind: OpKind::Fused(Fused::ConvBiasSilu), inputs, outputs: silu.outputs.clone() },
        });
    }
    rewrites
}

fn find_gdn_gating(graph: &Graph, uses: &Uses) -> Vec<Rewrite> {
    let mut rewrites = vec![];
    for op in &graph.ops {
        let (OpKind::DeltaRule { .. }, [_, _, _, _, g, beta]) = (&op.kind, op.inputs.as_slice()) else { continue };
        let found = (|| {
            let sig = uses.producer(*beta)?;
            let mul = uses.producer(*g)?;
            uses.sole_reader(graph, *beta)?;
            uses.sole_reader(graph, *g)?;
            let (sig_op, mul_op) = (&graph.ops[sig], &graph.ops[mul]);
            (sig_op.kind == OpKind::Act(Act::Sigmoid) && mul_op.kind == OpKind::Mul).then_some(())?;
            // ssm_a · softplus(..), either operand order.
            let (decay, sp) = match mul_op.inputs.as_slice() {
                [a, b] if binding(graph, uses, *a).is_some() => (*a, *b),
                [a, b] if binding(graph, uses, *b).is_some() => (*b, *a),
                _ => return None,
            };
            let softplus = uses.producer(sp)?;
            (graph.ops[softplus].kind == OpKind::Act(Act::Softplus)).then_some(())?;
            uses.sole_reader(graph, sp)?;
            let add = uses.producer(graph.ops[softplus].inputs[0])?;
            uses.sole_reader(graph, graph.ops[add].outputs[0])?;
            let [a, dt] = graph.ops[add].inputs.as_slice() else { return None };
            (graph.ops[add].kind == OpKind::Add && binding(graph, uses, *dt).is_some()).then_some(())?;
            Some(Rewrite {
                removes: vec![sig, add, softplus, mul],
                op: Op {
                    kind: OpKind::Fused(Fused::GdnGating),
                    inputs: vec![sig_op.inputs[0], *a, decay, *dt],
                    outputs: vec![*beta, *g],
                },
            })
        })();
        rewrites.extend(found);
    }
    rewrites
}

fn find_glu_act_mul(graph: &Graph, uses: &Uses) -> Vec<Rewrite> {
    let mut rewrites = vec![];
    for (i, op) in graph.ops.iter().enumerate() {
        let OpKind::Act(act) = op.kind else { continue };
        let Some(m) = uses.sole_reader(graph, op.outputs[0]) else { continue };
        let mul = &graph.ops[m];
        // The product reads the activation, so its value is the other operand.
        let value = match mul.inputs.as_slice() {
            [a, v] if *a == op.outputs[0] => *v,
            [v, _] => *v,
            _ => continue,
        };
        if mul.kind != OpKind::Mul || graph.ty(value) != graph.ty(op.inputs[0]) {
            continue;
        }
        rewrites.push(Rewrite {
            removes: vec![i, m],
            op: Op {
                kind: OpKind::Fused(Fused::GluActMul { act }),
                inputs: vec![op.inputs[0], value],
                outputs: mul.outputs.clone(),
            },
        });
    }
    rewrites
}
