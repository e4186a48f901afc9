//! Built-in specs: the real sizes of Qwen3.5 models and small ones for tests.

use super::spec::{AttentionSpec, Constructs, DeltaNetSpec, Mixer, ModelSpec};
use ir::RopeStyle;

/// The names of the built-in presets, in the order `stepcheck check` runs them.
pub const PRESETS: [&str; 5] = ["tiny", "tiny-tied", "small", "qwen3.5-0.8b", "qwen3.5-9b-style"];

/// The preset named `name`.
pub fn preset(name: &str) -> Option<ModelSpec> {
    Some(match name {
        "qwen3.5-0.8b" => qwen35_08b(),
        "qwen3.5-9b-style" => qwen35_9b_style(),
        "tiny" => tiny(),
        "tiny-tied" => tiny_tied(),
        "small" => small(),
        _ => return None,
    })
}

fn qwen35(name: &str, hidden: usize, intermediate: usize, layers: usize, tied: bool) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        hidden,
        intermediate,
        vocab: 248_320,
        layers: ModelSpec::every_nth_attention(layers, 4),
        rms_eps: 1e-6,
        tied_embeddings: tied,
        attention: AttentionSpec {
            heads: 16,
            kv_heads: 4,
            head_dim: 256,
            rotary_dims: 64,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net: DeltaNetSpec { key_heads: 16, value_heads: 32, key_dim: 128, value_dim: 128, conv_kernel: 4 },
        constructs: Constructs::default(),
    }
}

/// Qwen3.5-0.8B: hidden 1024, 24 layers (every 4th attention), FFN 3584, 8 query and 2 KV heads of
/// 256, 16 key and 16 value heads of 128, conv kernel 4, tied embeddings, RoPE θ 1e7 on 25% of each
/// head, vocab 248320.
pub fn qwen35_08b() -> ModelSpec {
    let mut s = qwen35("qwen3.5-0.8b", 1024, 3584, 24, true);
    s.attention.heads = 8;
    s.attention.kv_heads = 2;
    s.attention.rope_theta = 1e7;
    s.delta_net.value_heads = 16;
    s
}

/// The transformers `Qwen3_5TextConfig()` class defaults ("Qwen3.5-9B style").
pub(crate) fn qwen35_9b_style() -> ModelSpec {
    qwen35("qwen3.5-9b-style", 4096, 12288, 32, false)
}

/// A tiny Qwen3.5 whose sizes make layout bugs show: 2 key heads ≠ 4 value heads, dk 8 ≠ dv 12,
/// GQA 4/2, head_dim 32 ≠ hidden/heads, 8 of 32 dims rotated, attention first and last.
pub fn tiny() -> ModelSpec {
    ModelSpec {
        name: "tiny".into(),
        hidden: 64,
        intermediate: 96,
        vocab: 97,
        layers: vec![Mixer::Attention, Mixer::DeltaNet, Mixer::DeltaNet, Mixer::Attention],
        rms_eps: 1e-6,
        tied_embeddings: false,
        attention: AttentionSpec {
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            rotary_dims: 8,
            rope_theta: 10_000.0,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net: DeltaNetSpec { key_heads: 2, value_heads: 4, key_dim: 8, value_dim: 12, conv_kernel: 4 },
        constructs: Constructs::default(),
    }
}

/// Tiny with tied embeddings, three value heads per key head and one KV head (MQA).
pub fn tiny_tied() -> ModelSpec {
    let mut s = tiny();
    s.name = "tiny-tied".into();
    s.hidden = 48;
    s.intermediate = 80;
    s.vocab = 101;
    s.tied_embeddings = true;
    s.layers = vec![Mixer::DeltaNet, Mixer::Attention, Mixer::DeltaNet, Mixer::DeltaNet, Mixer::Attention];
    s.attention.heads = 6;
    s.attention.kv_heads = 1;
    s.attention.head_dim = 16;
    s.attention.rotary_dims = 8;
    s.attention.rope_theta = 1e6;
    s.delta_net = DeltaNetSpec { key_heads: 2, value_heads: 6, key_dim: 16, value_dim: 8, conv_kernel: 4 };
    s
}

/// A small model with the 0.8B's proportions at a size a test can decode many steps of.
pub fn small() -> ModelSpec {
    let mut s = qwen35("small", 256, 768, 8, true);
    s.vocab = 4096;
    s.attention.heads = 4;
    s.attention.kv_heads = 2;
    s.attention.head_dim = 64;
    s.attention.rotary_dims = 16;
    s.attention.rope_theta = 1e7;
    s.delta_net = DeltaNetSpec { key_heads: 4, value_heads: 8, key_dim: 32, value_dim: 32, conv_kernel: 4 };
    s
}
