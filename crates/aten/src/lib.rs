//! torch.export's serialized ATen graph, read without trusting it and translated into the one IR
//! ([`import`]): transformers' own decode step as a step graph (issue 30).
//!
//! A `.pt2` archive or its `models/model.json` is read into an [`Exported`] graph: its inputs
//! (parameters by their checkpoint names, buffers, the caller's inputs), its nodes with their ATen
//! targets, arguments and source lines, every tensor's sizes and strides, symbolic sizes as linear
//! forms in the graph's symbols. Every ATen target the importer reads has a row in [`ops::ROWS`]
//! with its meaning and its shape rule, and [`ops::check_shapes`] holds every node to its rule. An
//! op with no row, a size that is not linear, or sizes a rule does not give is an [`ImportError`]
//! naming the node, its target and the source line it was traced from — never a guess.
//! [`eval::evaluate`] runs a graph by the rows' meanings in f64, a semantics of its own that the
//! tests hold to transformers' rollout.
//!
//! It depends on the IR alone: what it reads is torch's, and no floor's reading of a model (the
//! authored step, a checkpoint convention, the fusion table) reaches it.

#![forbid(unsafe_code)]

pub mod archive;
pub mod error;
pub mod eval;
pub mod graph;
pub mod import;
pub mod ops;
pub mod size;

pub use archive::{read_buffers, read_program, read_step};
pub use error::ImportError;
pub use graph::Exported;
