//! Checkpoints: named tensors in the canonical GGUF conventions.
//!
//! Whatever the source, a checkpoint holds its tensors under GGUF names with GGUF conventions: norm
//! weights hold the final multiplier, `ssm_a = −exp(A_log)`, `ssm_dt.bias` is the decay bias, the
//! convolution weight is `[C, K]`, and a qwen35 Gated-DeltaNet's value heads are in llama.cpp's tiled
//! order (value head `h` uses key head `h mod Hk`). Shapes are in row-major order, outermost first
//! (HF order: `[out, in]`).

use std::collections::BTreeMap;

/// A tensor of a checkpoint: its shape and its values, row-major, widened to f32.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A checkpoint: tensors by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    pub tensors: BTreeMap<String, Tensor>,
}

impl Checkpoint {
    /// The tensor named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name)
    }

    /// Adds (or replaces) a tensor.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        self.tensors.insert(name.into(), tensor);
    }

    /// The number of values it holds.
    pub fn numel(&self) -> usize {
        self.tensors.values().map(|t| t.data.len()).sum()
    }

    /// The bytes its values take in memory.
    pub fn bytes(&self) -> usize {
        self.numel() * std::mem::size_of::<f32>()
    }
}
