//! Applying the table's rewrites to a graph while keeping it a valid graph.

use super::table::{Entry, Rewrite, Uses};
use crate::ir::Graph;

/// `graph` with every instance of `entry`'s pattern replaced by its fused op. Each fused op takes
/// the place of the first op it removes; ops are then put back in an order that reads every tensor
/// after it is written, keeping the author's order wherever it already does. The instances are
/// found once and made together; if together they would leave no such order (a cycle), they are
/// taken one at a time, each only if with those already taken it leaves none.
pub fn apply(mut graph: Graph, entry: &Entry) -> Graph {
    let rewrites = disjoint(entry.find(&graph, &Uses::of(&graph)));
    if rewrites.is_empty() {
        graph.compact();
        return graph;
    }
    let ops = rewritten_ops(&graph, &rewrites).or_else(|| {
        // Every rewrite names ops of `graph` by index, so each is tried on `graph` with those taken.
        let mut taken = Vec::with_capacity(rewrites.len());
        for rw in rewrites {
            taken.push(rw);
            if rewritten_ops(&graph, &taken).is_none() {
                taken.pop();
            }
        }
        rewritten_ops(&graph, &taken)
    });
    if let Some(ops) = ops {
        graph.ops = ops;
    }
    graph.compact();
    graph
}

/// The rewrites none of whose ops an earlier one removes.
fn disjoint(rewrites: Vec<Rewrite>) -> Vec<Rewrite> {
    let mut taken = foldhash::HashSet::default();
    rewrites.into_iter().filter(|rw| rw.removes.iter().all(|&i| taken.insert(i))).collect()
}

/// The ops of `graph` with `rewrites` made, or `None` when they would leave a cycle.
fn rewritten_ops(graph: &Graph, rewrites: &[Rewrite]) -> Option<Vec<crate::ir::Op>> {
    let mut at: foldhash::HashMap<usize, &Rewrite> = foldhash::HashMap::default();
    let mut removed = foldhash::HashSet::default();
    for rw in rewrites {
        at.insert(*rw.removes.iter().min()?, rw);
        removed.extend(rw.removes.iter().copied());
    }
    let mut ops = Vec::with_capacity(graph.ops.len());
    for (i, op) in graph.ops.iter().enumerate() {
        if let Some(rw) = at.get(&i) {
            ops.push(rw.op.clone());
        }
        if !removed.contains(&i) {
            ops.push(op.clone());
        }
    }
    topological(graph, ops)
}

/// The ops in an order that writes every tensor before reading it, taking at each point the first
/// op (in the given order) whose inputs are all written; `None` if there is none (a cycle).
fn topological(graph: &Graph, ops: Vec<crate::ir::Op>) -> Option<Vec<crate::ir::Op>> {
    let mut written = vec![false; graph.tensors.len()];
    written[graph.token.0] = true;
    for c in &graph.consts {
        written[c.tensor.0] = true;
    }
    for s in &graph.states {
        written[s.read.0] = true;
    }
    let mut pending: Vec<Option<crate::ir::Op>> = ops.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(pending.len());
    let mut start = 0;
    while out.len() < pending.len() {
        let ready = (start..pending.len()).find(|&i| {
            pending[i].as_ref().is_some_and(|op| op.inputs.iter().all(|t| written.get(t.0).copied().unwrap_or(false)))
        })?;
        let op = pending[ready].take()?;
        for t in &op.outputs {
            if let Some(w) = written.get_mut(t.0) {
                *w = true;
            }
        }
        out.push(op);
        while start < pending.len() && pending[start].is_none() {
            start += 1;
        }
    }
    Some(out)
}
