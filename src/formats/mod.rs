//! Checkpoint file formats, read without trusting their bytes.

pub mod gguf;
pub mod quants;
