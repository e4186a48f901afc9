//! Applying the table's rewrites to a graph while keeping it a valid graph.

use super::table::{Entry, Rewrite, Uses};
use crate::ir::Graph;

/// `graph` with every instance of `entry`'s pattern replaced by its fused op. Each fused op takes
/// the place of the first op it removes; ops are then put back in an order that reads every tensor
/// after it is written, keeping the author's order wherever it already does. A rewrite that would
/// leave no such order (a cycle) is not made.
pub fn apply(graph: &Graph, entry: &Entry) -> Graph {
    let mut g = graph.clone();
    loop {
        let uses = Uses::of(&g);
        let mut made = false;
        for rw in entry.find(&g, &uses) {
            if let Some(ops) = rewrite(&g, &rw) {
                g.ops = ops;
                made = true;
                break;
            }
        }
        if !made {
            g.compact();
            return g;
        }
    }
}

/// The ops of `graph` with one rewrite made, or `None` when it would leave a cycle.
fn rewrite(graph: &Graph, rw: &Rewrite) -> Option<Vec<crate::ir::Op>> {
    let first = *rw.removes.iter().min()?;
    let mut ops = vec![];
    for (i, op) in graph.ops.iter().enumerate() {
        if i == first {
            ops.push(rw.op.clone());
        }
        if !rw.removes.contains(&i) {
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
