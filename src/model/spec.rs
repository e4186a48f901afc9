//! `ModelSpec`: everything one decode step of a model depends on.

use serde::{Deserialize, Serialize};

use crate::ir::RopeStyle;

/// Everything one decode step depends on: sizes, the mixer of each layer, the attention and
/// Gated-DeltaNet shapes, and the constructs of other families the engine has no unit for (all off
/// for the accepted Qwen3.5 family).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub name: String,
    pub hidden: usize,
    /// The SwiGLU FFN's intermediate size.
    pub intermediate: usize,
    pub vocab: usize,
    /// The mixer of each layer, first layer first.
    pub layers: Vec<Mixer>,
    pub rms_eps: f64,
    /// Whether the head reads the embedding table (`token_embd.weight`) instead of `output.weight`.
    pub tied_embeddings: bool,
    pub attention: AttentionSpec,
    pub delta_net: DeltaNetSpec,
    #[serde(default)]
    pub constructs: Constructs,
}

/// The mixer of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Mixer {
    /// A Gated-DeltaNet block (`linear_attention`).
    DeltaNet,
    /// An attention block (`full_attention`).
    Attention,
}

/// The shape of the attention blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionSpec {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The dims of each head RoPE rotates (the first ones), `head_dim · partial_rotary_factor`.
    pub rotary_dims: usize,
    pub rope_theta: f64,
    pub rope_style: RopeStyle,
    /// Whether `attn_q` holds each head's queries then its sigmoid output gate (Qwen3.5).
    pub output_gate: bool,
    /// Whether queries and keys are RMS-normed per head before RoPE.
    pub qk_norm: bool,
}

/// The shape of the Gated-DeltaNet blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeltaNetSpec {
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub conv_kernel: usize,
}

/// Constructs of other families that the engine has no unit for. The author writes each of them the
/// way the families that have it compute it, so that refused graphs are real graphs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Constructs {
    /// Norms placed after the mixer and the FFN, before their residual adds.
    #[serde(default)]
    pub post_norm: PostNorm,
    /// The FFN, when it is not SwiGLU.
    #[serde(default)]
    pub ffn: Ffn,
    /// A mixture of experts in place of the FFN.
    #[serde(default)]
    pub experts: Option<Experts>,
    /// Latent attention in place of the attention block.
    #[serde(default)]
    pub latent_attention: Option<LatentAttention>,
    /// A learned per-head sink logit in every attention block's softmax.
    #[serde(default)]
    pub attention_sinks: bool,
    /// A sliding window on some attention layers.
    #[serde(default)]
    pub sliding_window: Option<SlidingWindow>,
    /// A factor the embedding is multiplied by (√hidden in the Gemma line).
    #[serde(default)]
    pub embedding_scale: Option<f64>,
    /// The attention scores' scale when it is not 1/√head_dim (Gemma's
    /// `query_pre_attn_scalar^-1/2`, Granite's `attention_multiplier`).
    #[serde(default)]
    pub attention_scale: Option<f64>,
}

/// Where a layer normalises besides before the mixer and before the FFN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PostNorm {
    /// Pre-norms only (Qwen, Llama).
    #[default]
    None,
    /// Pre-norms and a norm after the mixer and after the FFN (Gemma 2/3).
    Sandwich,
    /// A norm after the mixer and after the FFN, no pre-norms (OLMo 2).
    PostOnly,
}

/// The FFN of a layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Ffn {
    /// `down(silu(gate·x) · up·x)`.
    #[default]
    SwiGlu,
    /// `down(gelu(up·x))`, no gate (GPT-2 style; `tanh` for the tanh approximation).
    GeluMlp { tanh: bool },
    /// `down(gelu_tanh(gate·x) · up·x)` (Gemma).
    GeGlu,
    /// `down(relu(up·x)²)` (Nemotron).
    Relu2Mlp,
    /// gpt-oss: gate clamped above at `limit`, up clamped to ±`limit`,
    /// `down((up + 1) · gate · sigmoid(alpha · gate))`.
    ClampedSwiGlu { alpha: f64, limit: f64 },
}

/// A mixture of experts in place of the FFN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Experts {
    pub count: usize,
    pub top_k: usize,
    pub intermediate: usize,
    /// Whether the top-k router weights are divided by their sum.
    pub renormalize: bool,
    /// A shared expert's intermediate size, with its sigmoid gate (Qwen3-Next, Qwen3.5-MoE).
    pub shared_intermediate: Option<usize>,
}

/// DeepSeek-V2/V3 latent attention.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatentAttention {
    /// The query's compressed rank, or `None` for a direct query projection.
    pub q_rank: Option<usize>,
    /// The compressed key-value rank (`kv_lora_rank`).
    pub kv_rank: usize,
    /// The per-head dims without RoPE (`qk_nope_head_dim`).
    pub nope_dim: usize,
    /// The per-head dims with RoPE, shared by all heads for keys (`qk_rope_head_dim`).
    pub rope_dim: usize,
    /// The per-head value dims (`v_head_dim`).
    pub value_dim: usize,
}

/// A sliding window: attention layers in `layers` see only the newest `window` positions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlidingWindow {
    pub window: usize,
    pub layers: Vec<usize>,
}

/// Why a spec does not describe a decode step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("spec {spec}: {why}")]
pub struct SpecError {
    pub spec: String,
    pub why: String,
}

impl ModelSpec {
    /// The layers whose mixer is attention when every `interval`-th layer is (layers `interval−1`,
    /// `2·interval−1`, …), as transformers' default `layer_types`.
    pub fn every_nth_attention(layers: usize, interval: usize) -> Vec<Mixer> {
        (0..layers)
            .map(|i| if interval > 0 && (i + 1) % interval == 0 { Mixer::Attention } else { Mixer::DeltaNet })
            .collect()
    }

    /// The conv channels of a Gated-DeltaNet block: queries, keys and values.
    pub fn conv_channels(&self) -> usize {
        let d = &self.delta_net;
        2 * d.key_heads * d.key_dim + d.value_heads * d.value_dim
    }

    /// Checks the sizes describe a decode step: nothing zero that counts, heads that divide, RoPE
    /// dims that fit, constructs that agree with the layers.
    pub fn validate(&self) -> Result<(), SpecError> {
        let a = &self.attention;
        let d = &self.delta_net;
        let has = |m: Mixer| self.layers.contains(&m);
        let rules: Vec<(bool, String)> = vec![
            (
                self.hidden > 0 && self.vocab > 0 && self.intermediate > 0,
                "hidden, vocab and intermediate sizes must be > 0".into(),
            ),
            (!self.layers.is_empty(), "a model needs at least one layer".into()),
            (self.rms_eps > 0.0 && self.rms_eps.is_finite(), format!("rms_norm_eps {} must be > 0", self.rms_eps)),
            (
                !has(Mixer::Attention)
                    || (a.heads > 0 && a.kv_heads > 0 && a.head_dim > 0 && a.heads.is_multiple_of(a.kv_heads)),
                format!("{} query heads cannot share {} KV heads", a.heads, a.kv_heads),
            ),
            (
                !has(Mixer::Attention) || (a.rotary_dims <= a.head_dim && a.rotary_dims.is_multiple_of(2)),
                format!("{} rotary dims on heads of {}", a.rotary_dims, a.head_dim),
            ),
            (
                !has(Mixer::Attention) || (a.rope_theta > 0.0 && a.rope_theta.is_finite()),
                format!("rope theta {}", a.rope_theta),
            ),
            (
                !has(Mixer::DeltaNet)
                    || (d.key_heads > 0
                        && d.value_heads > 0
                        && d.key_dim > 0
                        && d.value_dim > 0
                        && d.value_heads.is_multiple_of(d.key_heads)),
                format!("{} value heads cannot share {} key heads", d.value_heads, d.key_heads),
            ),
            (!has(Mixer::DeltaNet) || d.conv_kernel >= 1, "a conv kernel needs at least one tap".into()),
        ];
        let mut rules = rules;
        let c = &self.constructs;
        if let Some(e) = &c.experts {
            rules.push((
                e.count > 0 && e.top_k > 0 && e.top_k <= e.count && e.intermediate > 0,
                format!("top-{} of {} experts", e.top_k, e.count),
            ));
        }
        if let Some(l) = &c.latent_attention {
            rules.push((
                l.kv_rank > 0 && l.rope_dim % 2 == 0 && l.value_dim > 0 && l.q_rank != Some(0),
                "latent attention sizes".into(),
            ));
        }
        if let Some(w) = &c.sliding_window {
            rules.push((w.window > 0, "a sliding window of 0".into()));
            rules.push((
                w.layers.iter().all(|&l| self.layers.get(l) == Some(&Mixer::Attention)),
                "a sliding window on a layer that is not attention".into(),
            ));
        }
        if let Some(s) = c.embedding_scale {
            rules.push((s.is_finite(), format!("embedding scale {s}")));
        }
        if let Some(s) = c.attention_scale {
            rules.push((s.is_finite() && s > 0.0, format!("attention scale {s}")));
        }
        match rules.into_iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err(SpecError { spec: self.name.clone(), why }),
            None => Ok(()),
        }
    }
}
