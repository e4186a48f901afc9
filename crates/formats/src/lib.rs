//! Checkpoints as files hold them, read without trusting their bytes: the GGUF reader, ggml's
//! quantized block formats, the checkpoint of named tensors in their stored types, the tensors'
//! names, how a graph's constants bind to them, and the scalar functions both interpreters share.
//!
//! It depends on the IR alone (a binding names a tensor and a view of it, the IR's types).

#![deny(unsafe_code)]

pub mod bind;
pub mod checkpoint;
pub mod convention;
pub mod finite;
pub mod gguf;
pub mod mapped;
pub mod names;
pub mod open;
pub mod quants;
pub mod scalar;
