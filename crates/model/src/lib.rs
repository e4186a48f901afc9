//! Models: specs, the author of their decode step, their checkpoints' layouts, readers of real
//! configs and checkpoints, seeded random checkpoints, and the families the engine refuses.
//!
//! `model::author::decode_step` writes the step graph a spec means; nothing below this crate reads a
//! `ModelSpec` (the lowering never does: invariant 2). The checkpoint, its tensors' names and the
//! bindings are the formats crate's, re-exported here under their old names.

#![forbid(unsafe_code)]

pub use formats::{bind, checkpoint, names};

pub mod author;
pub mod config;
pub mod families;
pub mod gguf;
pub mod gguf_attention;
pub mod hf;
pub mod layout;
pub mod presets;
pub mod random;
pub mod spec;

pub use checkpoint::{Checkpoint, Tensor};
pub use spec::{ModelSpec, SpecError};
