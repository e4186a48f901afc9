//! Binding constants to a checkpoint: each constant of a step graph reads a checkpoint tensor and a
//! view of it (the [`Binding`] and [`View`] types are the IR's, re-exported here), and [`check`]
//! says whether a checkpoint has them.

pub use ir::{Binding, View};

use super::checkpoint::Checkpoint;
use ir::Graph;

/// Why a constant of a graph cannot be read from a checkpoint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    #[error("constant %{constant} is bound to {tensor}, which the checkpoint does not have")]
    Missing { constant: String, tensor: String },
    #[error("constant %{constant}: the view does not fit: {why}")]
    ViewDoesNotFit { constant: String, why: String },
    #[error("constant %{constant} is {declared:?}, but {binding} is {found:?}")]
    Shape { constant: String, binding: String, declared: Vec<usize>, found: Vec<usize> },
}

/// Checks every constant of `graph` against `checkpoint`: the tensor exists, the view fits its
/// shape, and the view's shape is the constant's.
pub fn check(graph: &Graph, checkpoint: &Checkpoint) -> Result<(), BindError> {
    for c in &graph.consts {
        let constant = graph.name_of(c.tensor).to_string();
        let b = &c.binding;
        let Some(t) = checkpoint.get(&b.tensor) else {
            return Err(BindError::Missing { constant, tensor: b.tensor.clone() });
        };
        let found =
            b.view.shape(&t.shape).map_err(|why| BindError::ViewDoesNotFit { constant: constant.clone(), why })?;
        let declared = graph.ty(c.tensor).shape().unwrap_or(&[]).to_vec();
        if found != declared {
            return Err(BindError::Shape { constant, binding: b.to_string(), declared, found });
        }
    }
    Ok(())
}
