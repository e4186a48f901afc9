//! Pruning an imported graph: the ops whose outputs nothing reads (the eager translations a
//! composite row replaced), and the constants no op reads, are dropped.

use ir::Graph;

/// Drops from `graph` every op none of whose outputs the logits or a state's end reads, and every
/// constant no op reads; `origin` (one label per op) keeps the labels of the ops kept. Returns each
/// op's index after the pruning (`None` for one dropped).
pub fn prune(graph: &mut Graph, origin: &mut Vec<String>) -> Vec<Option<usize>> {
    let mut live = vec![false; graph.tensors.len()];
    live[graph.logits.0] = true;
    for s in &graph.states {
        live[s.write.0] = true;
    }
    let mut keep = vec![false; graph.ops.len()];
    for (i, op) in graph.ops.iter().enumerate().rev() {
        if op.outputs.iter().any(|t| live[t.0]) {
            keep[i] = true;
            for t in &op.inputs {
                live[t.0] = true;
            }
        }
    }
    let mut kept = 0;
    let moved = keep
        .iter()
        .map(|&k| {
            kept += usize::from(k);
            k.then(|| kept - 1)
        })
        .collect();
    let mut k = keep.iter();
    graph.ops.retain(|_| *k.next().unwrap_or(&false));
    let mut k = keep.iter();
    origin.retain(|_| *k.next().unwrap_or(&false));
    graph.consts.retain(|c| live[c.tensor.0]);
    graph.compact();
    moved
}
