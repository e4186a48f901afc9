//! The checkpoint convention: how a GGUF tensor's values follow from the Hugging Face tensor it is
//! converted from, as llama.cpp's converter (`convert_hf_to_gguf.py`) computes them for qwen35.
//!
//! Each [`Rule`] is one equation between a GGUF leaf and an HF leaf. It has two readings, and both
//! are of this one enum: the loader applies it to values (`model::hf::transform`), and the prover
//! states it as a term over the HF leaf (`prove::source`), so that a proof from transformers' own
//! graph to the authored one reads the checkpoint exactly as the loader does. A test holds the two
//! readings to each other on random values.

/// How a tensor's values go from the HF checkpoint to the GGUF one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// `gguf = hf` (matrices, `linear_attn.norm`, and `attn_q` with its per-head `[q | gate]` rows).
    Copy,
    /// `gguf = 1 + hf`: a zero-centred norm weight, stored as its multiplier.
    Norm,
    /// `gguf = −exp(hf)` with its value heads tiled: `ssm_a` from `A_log`.
    Decay,
    /// `gguf = hf` squeezed from `[C, 1, K]` to `[C, K]`, the value channels' heads tiled.
    Conv,
    /// `in_proj_qkv` `[C, H]`: the value rows' heads tiled, query and key rows unchanged.
    QkvValueRows,
    /// A tensor whose rows are value heads (`in_proj_z`, `in_proj_b`, `in_proj_a`, `dt_bias`):
    /// its heads tiled.
    ValueRows,
    /// `out_proj` `[H, Hv·dv]`: the value heads of its columns tiled.
    ValueColumns,
}

impl Rule {
    /// The HF shape of a tensor whose GGUF shape is `shape`.
    pub fn source_shape(self, shape: &[usize]) -> Vec<usize> {
        match (self, shape) {
            (Rule::Conv, &[c, k]) => vec![c, 1, k],
            _ => shape.to_vec(),
        }
    }

    /// Whether the rule computes new values (`1 + w`, `−exp(A_log)`), which are then stored as
    /// F32 as the converter stores them, rather than only moving values, which keeps them in
    /// their stored type.
    pub fn computes(self) -> bool {
        matches!(self, Rule::Norm | Rule::Decay)
    }

    /// Whether the rule moves value heads from HF's grouped order to the tiled one.
    pub fn moves_heads(self) -> bool {
        !matches!(self, Rule::Copy | Rule::Norm)
    }
}

/// Whether tiling `value_heads` grouped over `key_heads` moves any head: not when each key head has
/// one value head, nor when there is one key head (the tiled and the grouped order agree).
pub fn tiling_moves(key_heads: usize, value_heads: usize) -> bool {
    key_heads > 1 && key_heads != value_heads
}

/// One equation of a model's checkpoint: the GGUF tensor `gguf` is `rule` of the HF tensor
/// `source`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Equation {
    pub gguf: String,
    pub source: String,
    pub rule: Rule,
}

/// A model's checkpoint convention: an equation per GGUF tensor, whether its rules' head moves are
/// the identity for this model, the HF tensors that are one tensor (a tied head), and the rotary
/// base the HF rotary buffers are computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Convention {
    pub equations: Vec<Equation>,
    /// Whether the value heads' tiling moves any head for this model ([`tiling_moves`]).
    pub tiling_moves: bool,
    /// The Gated-DeltaNet heads the tiling moves: key heads, value heads, key and value head dims.
    pub delta_heads: [usize; 4],
    /// `(alias, tensor)`: the HF tensor `alias` is the tensor `tensor` (`lm_head.weight` of a tied
    /// model is `model.embed_tokens.weight`).
    pub aliases: Vec<(String, String)>,
    /// The rotary base θ: the HF model's rotary buffer is `θ^(−2i/d)`, computed in f32.
    pub rope_theta: f64,
}

impl Convention {
    /// The equation of GGUF tensor `gguf`, if any.
    pub fn of(&self, gguf: &str) -> Option<&Equation> {
        self.equations.iter().find(|e| e.gguf == gguf)
    }

    /// The HF tensor `name` is, its aliases resolved.
    pub fn resolve<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.iter().find(|(a, _)| a == name).map_or(name, |(_, t)| t.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_moves_heads_only_with_several_key_heads_each_shared() {
        assert!(!tiling_moves(16, 16));
        assert!(!tiling_moves(1, 4));
        assert!(tiling_moves(2, 4));
        assert!(tiling_moves(16, 32));
    }
}
