//! The spec of an attention-only GGUF file (`llama`, `qwen2`, `qwen3`), read from its metadata so
//! that `verdict` judges it as it judges the same architecture's `config.json`: accepted, or
//! refused by name. Such a file is judged, never loaded to run (the loader reads `qwen35`).
//!
//! What the metadata does not say, the architecture does, as llama.cpp's code fixes it: one row per
//! architecture in [`ARCHITECTURES`]. The row that matters most is RoPE's: llama.cpp's converter
//! permutes a `llama` model's query and key rows so that its rope pairs adjacent dims (ggml's
//! normal mode, `LLAMA_ROPE_TYPE_NORM`), where transformers' rotates half against half; the Qwen
//! files keep transformers' order and llama.cpp ropes them in NeoX mode. So the same Llama model is
//! accepted from its `config.json` and refused from its GGUF as `InterleavedRope`: the engine's
//! rope unit is NeoX's. Every `{arch}.*` key the reader does not know is refused, as the qwen35
//! reader refuses one: it cannot tell what it would change.

use super::gguf::{ARCHITECTURE_KEY, LoadError, MAX_LAYERS, Meta, NAME_KEY, check_token_count, vocab};
use super::spec::{AttentionSpec, Constructs, DeltaNetSpec, Experts, Mixer, ModelSpec, RopeScaling};
use formats::gguf::GgufInfo;
use ir::RopeStyle;

/// An attention-only architecture: what llama.cpp's code fixes for it and its metadata does not say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Architecture {
    /// The `general.architecture` value.
    pub name: &'static str,
    /// The rope mode llama.cpp applies to the file's query and key rows.
    pub rope_style: RopeStyle,
    /// Per-head RMS norms of queries and keys (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// Biases on the query, key and value projections.
    pub qkv_bias: bool,
}

/// The attention-only architectures `verdict` judges from a GGUF file.
pub const ARCHITECTURES: &[Architecture] = &[
    Architecture { name: "llama", rope_style: RopeStyle::Interleaved, qk_norm: false, qkv_bias: false },
    Architecture { name: "qwen2", rope_style: RopeStyle::Neox, qk_norm: false, qkv_bias: true },
    Architecture { name: "qwen3", rope_style: RopeStyle::Neox, qk_norm: true, qkv_bias: false },
];

/// The `{arch}.*` keys the reader knows; `context_length` and the `expert_*` keys of a dense model
/// change nothing of a decode step's graph.
const KNOWN_KEYS: [&str; 16] = [
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "expert_count",
    "expert_used_count",
];

/// The architecture row of the file `info`, when it is an attention-only one this reader knows.
pub fn architecture_of(info: &GgufInfo) -> Option<&'static Architecture> {
    let name = info.get_str(ARCHITECTURE_KEY)?;
    ARCHITECTURES.iter().find(|a| a.name == name)
}

/// The spec the attention-only GGUF `info` describes, for `verdict`. Every layer is attention; the
/// head count defaults to none, the KV head count to the head count, the head dim to
/// `embedding_length / head_count`, the rotary dims to the head dim, θ to 10000 (llama.cpp's
/// defaults). Linear RoPE scaling is read; any other is an error naming the key. The embeddings are
/// tied iff there is no `output.weight`; `expert_count` above 0 gives the FFNs experts.
pub fn attention_spec_of_gguf(info: &GgufInfo) -> Result<ModelSpec, LoadError> {
    let arch = architecture_of(info).ok_or_else(|| LoadError::UnsupportedArchitecture {
        found: info.get_str(ARCHITECTURE_KEY).unwrap_or("(none)").to_owned(),
    })?;
    let m = Meta { info, arch: arch.name };
    let prefix = format!("{}.", arch.name);
    for (key, _) in info.metadata_entries() {
        if let Some(suffix) = key.strip_prefix(&prefix)
            && !KNOWN_KEYS.contains(&suffix)
        {
            return Err(LoadError::UnknownKey { key: key.clone() });
        }
    }
    let optional = |suffix: &str| info.metadata(&m.key(suffix)).is_some();
    let blocks_key = m.key("block_count");
    let blocks = m.usize(&blocks_key)?;
    if blocks > MAX_LAYERS {
        return Err(LoadError::BadValue { key: blocks_key, why: format!("{blocks} layers; at most {MAX_LAYERS}") });
    }
    let hidden = m.size(&m.key("embedding_length"))?;
    let heads = m.size(&m.key("attention.head_count"))?;
    let kv_heads = if optional("attention.head_count_kv") { m.size(&m.key("attention.head_count_kv"))? } else { heads };
    let head_dim = if optional("attention.key_length") {
        m.size(&m.key("attention.key_length"))?
    } else {
        hidden.checked_div(heads).unwrap_or(0)
    };
    let rotary_dims = if optional("rope.dimension_count") { m.size(&m.key("rope.dimension_count"))? } else { head_dim };
    let rope_theta = if optional("rope.freq_base") { m.f64(&m.key("rope.freq_base"))? } else { 10_000.0 };
    let rope_scaling = match optional("rope.scaling.type").then(|| m.str(&m.key("rope.scaling.type"))).transpose()? {
        None | Some("none") => None,
        Some("linear") => Some(RopeScaling::Linear { factor: m.f64(&m.key("rope.scaling.factor"))? }),
        Some(other) => {
            let why = format!("{other:?}; this reader knows linear scaling only");
            return Err(LoadError::BadValue { key: m.key("rope.scaling.type"), why });
        }
    };
    let intermediate = m.size(&m.key("feed_forward_length"))?;
    let experts = match optional("expert_count").then(|| m.size(&m.key("expert_count"))).transpose()? {
        None | Some(0) => None,
        Some(count) => Some(Experts::new(count, m.size(&m.key("expert_used_count"))?, intermediate)),
    };
    let spec = ModelSpec {
        name: info.get_str(NAME_KEY).unwrap_or(arch.name).to_owned(),
        hidden,
        intermediate,
        vocab: vocab(&m)?,
        layers: vec![Mixer::Attention; blocks],
        rms_eps: m.f64(&m.key("attention.layer_norm_rms_epsilon"))?,
        tied_embeddings: info.tensor(super::names::OUTPUT).is_none(),
        attention: AttentionSpec {
            heads,
            kv_heads,
            head_dim,
            rotary_dims,
            rope_theta,
            rope_style: arch.rope_style,
            output_gate: false,
            qk_norm: arch.qk_norm,
        },
        delta_net: DeltaNetSpec { key_heads: 0, value_heads: 0, key_dim: 0, value_dim: 0, conv_kernel: 0 },
        constructs: Constructs { experts, rope_scaling, qkv_bias: arch.qkv_bias, ..Constructs::default() },
    };
    spec.validate()?;
    check_token_count(info, spec.vocab)?;
    Ok(spec)
}
