//! `stepcheck prove … --against GRAPH`: the transformers link, transformers' own exported step
//! proved equal to the authored graph before the rest of the chain is proved.

use std::path::Path;
use std::time::{Duration, Instant};

use super::CliError;
use crate::aten::ImportError;
use crate::aten::import::import;
use crate::aten::read_step;
use crate::ir::Graph;
use crate::model::hf::names::convention;
use crate::model::spec::ModelSpec;
use crate::prove::ProofVerdict;
use crate::prove::source::prove_source;

/// The transformers link's outcome: its verdict, or the reason the graph could not be followed;
/// with the exported graph's nodes and the imported ops, and the time of each part.
pub(crate) struct Against {
    pub outcome: Result<ProofVerdict, String>,
    pub nodes: usize,
    pub ops: usize,
    pub import: Duration,
    pub proof: Duration,
}

/// Imports the step at `path` and proves it equal to `authored`, the authored graph of `spec`. A
/// file that cannot be read is an error (exit 2); a graph the importer cannot follow, or a model
/// with no checkpoint convention, is an outcome that fails the link (exit 1), named.
pub(crate) fn against(path: &Path, spec: &ModelSpec, authored: &Graph) -> Result<Against, CliError> {
    let start = Instant::now();
    let (program, buffers) = read_step(path)?;
    let nodes = program.nodes.len();
    let imported = match import(&program, &buffers, &spec.name) {
        Ok(i) => i,
        Err(e @ (ImportError::Node { .. } | ImportError::NoRow { .. })) => {
            let import = start.elapsed();
            return Ok(Against { outcome: Err(e.to_string()), nodes, ops: 0, import, proof: Duration::ZERO });
        }
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let import_took = start.elapsed();
    let labels: Vec<String> = imported
        .origin
        .iter()
        .map(|name| match program.nodes.iter().find(|n| &n.name == name) {
            Some(n) => format!("node {} ({}, traced at {})", n.name, n.target, n.source),
            None => name.clone(),
        })
        .collect();
    let start = Instant::now();
    let outcome = convention(spec)
        .map(|c| prove_source(&imported.graph, &labels, authored, &c))
        .map_err(|e| format!("{} has no checkpoint convention: {e}", spec.name));
    Ok(Against { outcome, nodes, ops: imported.graph.ops.len(), import: import_took, proof: start.elapsed() })
}
