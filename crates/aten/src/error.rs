//! `ImportError`: why a serialized graph is not imported, naming the node, its target and the
//! source line it was traced from.

/// Why an exported program cannot be read, or a node of it cannot be followed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    Archive(String),
    #[error("not torch's export schema as this reader knows it: {0}")]
    Schema(String),
    #[error("node {node} ({target}, traced at {traced}): {why}")]
    Node { node: String, target: String, traced: String, why: String },
    #[error("node {node} calls {target}, which the importer has no row for (traced at {traced})")]
    NoRow { node: String, target: String, traced: String },
}
