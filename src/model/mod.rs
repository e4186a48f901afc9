//! Models: specs, the author of their decode step, bindings and checkpoints.

pub mod author;
pub mod bind;
pub mod checkpoint;
pub mod config;
pub mod families;
pub mod gguf;
pub mod hf;
pub mod layout;
pub mod names;
pub mod presets;
pub mod random;
pub mod spec;

pub use checkpoint::{Checkpoint, Tensor};
pub use spec::{ModelSpec, SpecError};
