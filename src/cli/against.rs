//! `stepcheck prove … --against GRAPH` and `--against-llama-graph GRAPH`: the links from another
//! framework's own step — transformers' exported graph, llama.cpp's recorded one — proved equal to
//! the authored graph before the rest of the chain is proved.

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
use crate::prove::engine::prove_engine;
use crate::prove::source::prove_source;

/// A link's outcome: its verdict, or the reason the graph could not be followed;
/// with the foreign graph's nodes and the imported ops, and the time of each part.
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

/// Imports llama.cpp's recorded step at `path` and proves it equal to `authored`. A file that
/// cannot be read is an error (exit 2); a graph the importer cannot follow is an outcome that fails
/// the link (exit 1), with the node named.
pub(crate) fn against_llama(path: &Path, spec: &ModelSpec, authored: &Graph) -> Result<Against, CliError> {
    use crate::ggml::GraphError;
    let start = Instant::now();
    let rec = crate::ggml::read_recording(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let nodes = rec.nodes.len();
    let imported = match crate::ggml::import(&rec, &spec.name) {
        Ok(i) => i,
        Err(e @ (GraphError::Node { .. } | GraphError::NoRow { .. })) => {
            let import = start.elapsed();
            return Ok(Against { outcome: Err(e.to_string()), nodes, ops: 0, import, proof: Duration::ZERO });
        }
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    let import_took = start.elapsed();
    let start = Instant::now();
    let verdict = prove_engine(&imported.graph, &imported.origin, authored, &imported.numerics);
    Ok(Against {
        outcome: Ok(verdict),
        nodes,
        ops: imported.graph.ops.len(),
        import: import_took,
        proof: start.elapsed(),
    })
}
