//! `GraphError`: why a recorded graph is not read, naming the node and its op.

/// Why a recording cannot be read, or a node of it cannot be followed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("{0}")]
    File(String),
    #[error("not a recording of llama.cpp's graph as this reader knows it: {0}")]
    Schema(String),
    #[error("node {id} `{name}` ({op}): {why}")]
    Node { id: String, name: String, op: String, why: String },
    #[error("node {id} `{name}` is a {op}, which the importer has no row for")]
    NoRow { id: String, name: String, op: String },
}
