//! Checkpoint file formats, read without trusting their bytes.

pub mod gguf;
