//! `ModelSpec`: everything one decode step of a model depends on.

use serde::{Deserialize, Serialize};

use ir::RopeStyle;

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
    /// Biases on the query, key and value projections of the attention blocks (Qwen2, gpt-oss).
    #[serde(default)]
    pub qkv_bias: bool,
    /// A bias on the attention blocks' output projection (gpt-oss).
    #[serde(default)]
    pub output_bias: bool,
    /// The attention's score scale when it is not `1/√head_dim` (Gemma's `query_pre_attn_scalar^−½`;
    /// latent attention's default is `1/√(nope_dim + rope_dim)`).
    #[serde(default)]
    pub attention_scale: Option<f64>,
    /// A scaling of the attention layers' RoPE frequencies (transformers' `rope_type` other than
    /// `default`).
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// The RoPE of the sliding-window layers when it is not the other layers' (Gemma 3: θ 1e4,
    /// unscaled, while the full layers have θ 1e6 scaled linearly).
    #[serde(default)]
    pub sliding_rope: Option<LayerRope>,
}

/// A RoPE scheme's change to the default frequencies `θ^(−2i/d)`, as transformers'
/// `modeling_rope_utils` computes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (`linear`).
    Linear { factor: f64 },
    /// YaRN (`yarn`): each frequency blends its value divided by `factor` with its own value by a
    /// ramp between the dims whose wavelength fits `original_context / beta_fast` and
    /// `original_context / beta_slow` turns (floored and ceiled when `truncate`); the turned dims
    /// are multiplied by `attention_factor`.
    Yarn { factor: f64, original_context: usize, beta_fast: f64, beta_slow: f64, truncate: bool, attention_factor: f64 },
}

/// The RoPE of a kind of layer: its θ and its scaling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerRope {
    pub theta: f64,
    #[serde(default)]
    pub scaling: Option<RopeScaling>,
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

impl Ffn {
    /// Whether the FFN has a gate projection besides its up projection.
    pub fn gated(&self) -> bool {
        !matches!(self, Ffn::GeluMlp { .. } | Ffn::Relu2Mlp)
    }
}

/// A mixture of experts in place of the FFN: a router weighs `count` experts, of which the `top_k`
/// it weighs most are summed with their weights; a shared expert, if any, is added to every token's
/// output. Each expert is an FFN of the spec's kind (`Constructs::ffn`) and of width
/// `intermediate`. [`Experts::new`] gives the Qwen-style defaults of the optional parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Experts {
    pub count: usize,
    pub top_k: usize,
    pub intermediate: usize,
    /// Whether the top-k router weights are divided by their sum (always, with
    /// [`Routing::TopKSoftmax`]).
    pub renormalize: bool,
    /// A shared expert's intermediate size.
    pub shared_intermediate: Option<usize>,
    /// How the router's logits become the experts' weights.
    #[serde(default)]
    pub routing: Routing,
    /// A bias on the router's logits (gpt-oss).
    #[serde(default)]
    pub router_bias: bool,
    /// Biases on every expert's projections (gpt-oss).
    #[serde(default)]
    pub expert_bias: bool,
    /// Whether the shared expert's output is multiplied by a sigmoid gate of the input (Qwen2-MoE,
    /// Qwen3-Next, Qwen3.5-MoE) or added as it is (DeepSeek).
    #[serde(default = "yes")]
    pub shared_gate: bool,
    /// A factor the routed experts' weights are multiplied by (DeepSeek-V3's
    /// `routed_scaling_factor`).
    #[serde(default)]
    pub weight_scale: Option<f64>,
    /// The layers that keep a dense FFN of the spec's `intermediate` size (DeepSeek's first
    /// `first_k_dense_replace` layers).
    #[serde(default)]
    pub dense_layers: Vec<usize>,
}

fn yes() -> bool {
    true
}

impl Experts {
    /// `count` experts of width `intermediate`, `top_k` of them chosen by a softmax router and
    /// renormalised, no shared expert, no biases, every layer's FFN.
    pub fn new(count: usize, top_k: usize, intermediate: usize) -> Experts {
        Experts {
            count,
            top_k,
            intermediate,
            renormalize: true,
            shared_intermediate: None,
            routing: Routing::default(),
            router_bias: false,
            expert_bias: false,
            shared_gate: true,
            weight_scale: None,
            dense_layers: vec![],
        }
    }

    /// Whether layer `l` has the experts (not a dense FFN).
    pub fn in_layer(&self, l: usize) -> bool {
        !self.dense_layers.contains(&l)
    }
}

/// How a router turns its logits into the experts' weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Routing {
    /// A softmax over every expert, then the top k (Mixtral, Qwen-MoE).
    #[default]
    SoftmaxTopK,
    /// The top k of the logits, then a softmax over those k (gpt-oss): the same weights as a
    /// renormalised [`Routing::SoftmaxTopK`].
    TopKSoftmax,
    /// DeepSeek-V3: sigmoid scores; experts are chosen by the scores plus a learned correction bias
    /// (`exp_probs_b`), only from the `keep_groups` best of `groups` contiguous groups (each scored by
    /// the sum of its two best); their weights are their scores without the bias.
    SigmoidGroupLimited { groups: usize, keep_groups: usize },
}

/// DeepSeek-V2/V3 latent attention, in place of the attention blocks. Of the spec's attention it
/// uses the head count, RoPE θ and style (interleaved for DeepSeek-V3), and of its constructs the
/// RoPE scaling, the score scale, the sliding window and the sinks.
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

impl RopeScaling {
    /// Whether its factors are positive and finite and YaRN's ramp has an original context.
    pub(crate) fn is_valid(&self) -> bool {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        match *self {
            RopeScaling::Linear { factor } => ok(factor),
            RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor, .. } => {
                ok(factor) && original_context > 0 && ok(beta_fast) && ok(beta_slow) && attention_factor.is_finite()
            }
        }
    }
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
            rules.push((e.shared_intermediate != Some(0), "a shared expert of width 0".into()));
            rules.push((
                e.dense_layers.iter().all(|&l| l < self.layers.len()),
                "a dense FFN in a layer the model does not have".into(),
            ));
            if let Routing::SigmoidGroupLimited { groups, keep_groups } = e.routing {
                let fits = groups > 0
                    && e.count.is_multiple_of(groups)
                    && e.count / groups >= 2
                    && (1..=groups).contains(&keep_groups)
                    && e.top_k <= keep_groups * (e.count / groups);
                rules.push((
                    fits,
                    format!("top-{} of {} experts from {keep_groups} of {groups} groups", e.top_k, e.count),
                ));
            }
            if let Some(s) = e.weight_scale {
                rules.push((s.is_finite(), format!("expert weight scale {s}")));
            }
        }
        if let Some(l) = &c.latent_attention {
            rules.push((
                l.kv_rank > 0
                    && l.nope_dim > 0
                    && l.rope_dim > 0
                    && l.rope_dim % 2 == 0
                    && l.value_dim > 0
                    && l.q_rank != Some(0),
                "latent attention sizes".into(),
            ));
            rules.push((!c.qkv_bias && !c.output_bias, "latent attention with projection biases".into()));
            rules.push((
                !has(Mixer::Attention) || (a.heads > 0 && a.rope_theta > 0.0),
                "latent attention needs heads and a RoPE θ".into(),
            ));
        }
        if c.qkv_bias && c.latent_attention.is_none() {
            rules.push((!a.output_gate, "q/k/v biases with an output gate in attn_q".into()));
        }
        if let Some(s) = c.attention_scale {
            rules.push((s.is_finite() && s > 0.0, format!("attention scale {s}")));
        }
        for scaling in c.rope_scaling.iter().chain(c.sliding_rope.as_ref().and_then(|r| r.scaling.as_ref())) {
            rules.push((scaling.is_valid(), format!("RoPE scaling {scaling:?}")));
        }
        if let Some(r) = &c.sliding_rope {
            rules.push((r.theta > 0.0 && r.theta.is_finite(), format!("sliding-window rope theta {}", r.theta)));
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
        match rules.into_iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err(SpecError { spec: self.name.clone(), why }),
            None => Ok(()),
        }
    }
}
