//! Element-following's one shared step: the values a foreign graph's op reads, each named as a value
//! of an IR tensor, written as one IR tensor of the shape the op needs.
//!
//! An importer of another framework's graph (transformers' exported ATen graph in `aten`,
//! llama.cpp's recorded ggml graph in `ggml`) follows that graph's layout ops value by value, so
//! that a compute op's operand is a list saying which IR value sits at each of its indices. This
//! crate turns such a list into IR ops by exact rules only, tried in turn on the rows of the shape
//! (its last axis):
//!
//! | the values are | the IR ops |
//! |---|---|
//! | an IR tensor's values in order | the tensor (a `reshape` when its shape differs) |
//! | per row, runs of values of IR tensors, the same runs in every row | one piece per run, joined by `concat` |
//! | a run that is columns `c..c+L` of rows `m` apart, row after row | `slice(c, c+L)` of the tensor's values as `[rows, m]` (after a `slice` of its flat values when they are not all its rows) |
//! | a run whose rows repeat each source row `g` times in turn | `concat` of `g` copies, `reshape`d (`repeat_interleave`) |
//! | a run that is the same values in every row | `broadcast` |
//! | a conv window's newest `K−1` columns and then a vector | `conv_shift` of the window and the vector |
//!
//! Anything else (a transposed matrix, a gather) is refused with what the values are; the importer
//! names the node that needed them. [`prune`] then drops what the imported graph's outputs do not
//! read.

#![forbid(unsafe_code)]

mod materialise;
mod prune;

pub use materialise::{Emitter, Listed, materialise, reshaped};
pub use prune::prune;
