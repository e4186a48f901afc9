//! Applying the table's rewrites to a graph while keeping it a valid graph.

use super::table::{Entry, Rewrite, Uses};
use ir::{Graph, Op};

/// `graph` with every instance of `entry`'s pattern replaced by its fused op. Each fused op takes
/// the place of the first op it removes; ops are then put back in an order that reads every tensor
/// after it is written, keeping the author's order wherever it already does. The instances are
/// found once and made together; if together they would leave no such order (a cycle), they are
/// taken one at a time, each only if with those already taken it leaves none.
pub fn apply(graph: Graph, entry: &Entry) -> Graph {
    let rewrites = disjoint(entry.find(&graph, &Uses::of(&graph)));
    made(graph, rewrites)
}

/// `graph` with `rewrites` (disjoint) made as [`apply`] makes them.
fn made(mut graph: Graph, rewrites: Vec<Rewrite>) -> Graph {
    if rewrites.is_empty() {
        graph.compact();
        return graph;
    }
    let (order, rewrites) = match order(&graph, &rewrites) {
        Some(order) => (order, rewrites),
        None => {
            // Every rewrite names ops of `graph` by index, so each is tried on `graph` with those taken.
            let mut taken = Vec::with_capacity(rewrites.len());
            for rw in rewrites {
                taken.push(rw);
                if order(&graph, &taken).is_none() {
                    taken.pop();
                }
            }
            match order(&graph, &taken) {
                Some(order) => (order, taken),
                None => (vec![], vec![]),
            }
        }
    };
    if !order.is_empty() {
        // Each op is moved into its place once: the graph's own, and the fused ones.
        let mut old: Vec<Option<Op>> = std::mem::take(&mut graph.ops).into_iter().map(Some).collect();
        let mut fused: Vec<Option<Op>> = rewrites.into_iter().map(|rw| Some(rw.op)).collect();
        graph.ops = order
            .into_iter()
            .filter_map(|at| match at {
                At::Old(i) => old[i].take(),
                At::Fused(j) => fused[j].take(),
            })
            .collect();
    }
    graph.compact();
    graph
}

/// Where an op of the rewritten graph comes from: the graph's op `i`, or rewrite `j`'s fused op.
#[derive(Clone, Copy)]
enum At {
    Old(usize),
    Fused(usize),
}

/// The rewrites none of whose ops an earlier one removes.
fn disjoint(rewrites: Vec<Rewrite>) -> Vec<Rewrite> {
    let mut taken = foldhash::HashSet::default();
    rewrites.into_iter().filter(|rw| rw.removes.iter().all(|&i| taken.insert(i))).collect()
}

/// The order of the ops of `graph` with `rewrites` made (each fused op in the place of the first op
/// it removes), or `None` when they would leave a cycle.
fn order(graph: &Graph, rewrites: &[Rewrite]) -> Option<Vec<At>> {
    let mut at: foldhash::HashMap<usize, usize> = foldhash::HashMap::default();
    let mut removed = foldhash::HashSet::default();
    for (j, rw) in rewrites.iter().enumerate() {
        at.insert(*rw.removes.iter().min()?, j);
        removed.extend(rw.removes.iter().copied());
    }
    let mut ops = Vec::with_capacity(graph.ops.len());
    for (i, op) in graph.ops.iter().enumerate() {
        if let Some(&j) = at.get(&i) {
            ops.push((At::Fused(j), &rewrites[j].op));
        }
        if !removed.contains(&i) {
            ops.push((At::Old(i), op));
        }
    }
    topological(graph, ops)
}

/// The ops in an order that writes every tensor before reading it, taking at each point the first
/// op (in the given order) whose inputs are all written; `None` if there is none (a cycle).
fn topological(graph: &Graph, ops: Vec<(At, &Op)>) -> Option<Vec<At>> {
    let mut written = vec![false; graph.tensors.len()];
    written[graph.token.0] = true;
    for c in &graph.consts {
        written[c.tensor.0] = true;
    }
    for s in &graph.states {
        written[s.read.0] = true;
    }
    let mut pending: Vec<Option<(At, &Op)>> = ops.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(pending.len());
    let mut start = 0;
    while out.len() < pending.len() {
        let ready = (start..pending.len()).find(|&i| {
            pending[i].is_some_and(|(_, op)| op.inputs.iter().all(|t| written.get(t.0).copied().unwrap_or(false)))
        })?;
        let (from, op) = pending[ready].take()?;
        for t in &op.outputs {
            if let Some(w) = written.get_mut(t.0) {
                *w = true;
            }
        }
        out.push(from);
        while start < pending.len() && pending[start].is_none() {
            start += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::{Act, OpKind, TensorDecl, TensorId, Ty};

    /// `token → t0 → [silu] → t1 → [sigmoid] → t2 → [silu] → t3 → [sigmoid] → logits`: op `i`
    /// reads tensor `i` and writes tensor `i + 1`.
    fn chain() -> Graph {
        let acts = [Act::Silu, Act::Sigmoid, Act::Silu, Act::Sigmoid];
        let tensors = (0..=acts.len()).map(|i| TensorDecl { name: format!("t{i}"), ty: Ty::tensor(&[2]) });
        let ops = acts.iter().enumerate().map(|(i, &a)| op(OpKind::Act(a), &[i], &[i + 1]));
        Graph {
            name: "chain".into(),
            tensors: tensors.collect(),
            token: TensorId(0),
            consts: vec![],
            states: vec![],
            ops: ops.collect(),
            logits: TensorId(acts.len()),
        }
    }

    fn op(kind: OpKind, inputs: &[usize], outputs: &[usize]) -> Op {
        Op {
            kind,
            inputs: inputs.iter().map(|&t| TensorId(t)).collect(),
            outputs: outputs.iter().map(|&t| TensorId(t)).collect(),
        }
    }

    fn kinds(graph: &Graph) -> Vec<OpKind> {
        graph.ops.iter().map(|o| o.kind.clone()).collect()
    }

    /// Rewrites that together leave an order are all made, each fused op where its first removed
    /// op was.
    #[test]
    fn rewrites_that_leave_an_order_are_made_in_place() {
        let fused = |at: usize| op(OpKind::Act(Act::Relu), &[at], &[at + 2]);
        let rewrites =
            vec![Rewrite { removes: vec![0, 1], op: fused(0) }, Rewrite { removes: vec![2, 3], op: fused(2) }];
        assert_eq!(kinds(&made(chain(), rewrites)), vec![OpKind::Act(Act::Relu); 2]);
    }

    /// A rewrite that would leave a cycle (op 1 reads what the fused op writes, and the fused op
    /// reads what op 1 writes) is not made; the others still are, and the graph keeps its order.
    #[test]
    fn a_rewrite_that_would_leave_a_cycle_is_dropped_and_the_others_are_made() {
        let cyclic = Rewrite { removes: vec![0, 2], op: op(OpKind::Act(Act::Relu), &[0, 2], &[1, 3]) };
        let fine = Rewrite { removes: vec![3], op: op(OpKind::Act(Act::Gelu), &[3], &[4]) };
        let got = made(chain(), vec![cyclic.clone(), fine]);
        assert_eq!(
            kinds(&got),
            vec![OpKind::Act(Act::Silu), OpKind::Act(Act::Sigmoid), OpKind::Act(Act::Silu), OpKind::Act(Act::Gelu)]
        );
        assert_eq!(kinds(&made(chain(), vec![cyclic])), kinds(&chain()));
    }
}
