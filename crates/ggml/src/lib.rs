//! llama.cpp's compute graph for one decode step, as `reference/record_llama_graph.py` records it
//! through llama.cpp's eval callback, read without trusting it: the first floor of the importer of
//! llama.cpp's own graph (issue 31).
//!
//! A recording is read into a [`Recording`]: its leaves (weights by their GGUF names, the caches by
//! their slots, the inputs) and its nodes in the order llama.cpp computes them, each with its
//! ggml op, type, sizes `ne`, strides `nb` in bytes, op params, view source and offset, and
//! sources. Every op the importer reads has a row in [`ops::ROWS`] with its meaning as ggml
//! defines it and its shape rule, and [`ops::check_shapes`] holds every node to its rule. An op with
//! no row, a source that is not an earlier tensor, or sizes a rule does not give is a
//! [`GraphError`] naming the node — never a guess.
//!
//! [`import()`] translates a recording into the one IR, following every storage element by element
//! (`follow`'s materialisation, shared with the importer of transformers' graph). The crate
//! depends on the IR and `follow` alone: what it reads is llama.cpp's.

#![forbid(unsafe_code)]

pub mod error;
pub mod graph;
pub mod import;
pub mod ops;

pub use error::GraphError;
pub use graph::{Recording, Tensor, read_recording};
pub use import::{Imported, Place, Traced, import, trace};
