//! `Store`: what each element of one ggml storage holds while the importer follows the graph.

use ir::TensorId;

/// One element of a storage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elem {
    /// Value `index` (row-major) of an IR tensor.
    Ir(TensorId, usize),
    /// Element `offset` of KV cache `cache` as it was when the step began: a value of an earlier
    /// position, or a cell not yet written.
    Cell { cache: usize, offset: usize },
    /// Element `index` of part `part` of a delta rule composed of primitive ops (`delta.rs`).
    Part(usize, usize),
    /// Nothing written yet.
    Unset,
}

impl Elem {
    /// The IR value it is, if it is one.
    pub fn ir(self) -> Option<(TensorId, usize)> {
        match self {
            Elem::Ir(t, i) => Some((t, i)),
            _ => None,
        }
    }
}

/// A storage: its elements by offset (its byte offset over the element size).
#[derive(Clone, Debug)]
pub struct Store {
    pub elems: Vec<Elem>,
    /// The bytes of one element.
    pub bytes: usize,
}

impl Store {
    pub fn new(elems: Vec<Elem>, bytes: usize) -> Store {
        Store { elems, bytes }
    }
}
