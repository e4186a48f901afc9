//! The families the reader knows, one row each, and the rules that turn a config's fields into the
//! constructs of its decode step.
//!
//! A row says how the family's config names its layers, what its attention and FFN are when its
//! config does not say otherwise, how it encodes a sliding window, and its own rules: each a
//! condition on the config's fields (or none, for what the family's code hard-codes) and the
//! construct it implies. [`COMMON`] holds the rules every family follows: fields that mean the same
//! wherever they appear. The facts behind each row, read from each family's transformers code, are in
//! `docs/FAMILIES.md`.

use super::construct::Construct;
use crate::spec::PostNorm;

/// A family the reader knows: a row of [`FAMILIES`].
pub struct Family {
    /// The `model_type` of its text config.
    pub model_type: &'static str,
    /// The `model_type`s of the wrappers that hold its text config in `text_config`.
    pub wrappers: &'static [&'static str],
    /// How the config names each layer's mixer.
    pub layers: Layers,
    /// The attention block, as the family's code writes it.
    pub attention: Attention,
    /// The FFN, as the family's code writes it.
    pub ffn: FfnForm,
    /// How the config encodes a sliding window.
    pub window: Window,
    /// Which attention projections have biases.
    pub bias: Bias,
    /// `tie_word_embeddings` when the config does not say.
    pub tied: bool,
    /// The norms' epsilon when the config does not say.
    pub eps: f64,
    /// The family's own rules, after [`COMMON`].
    pub rules: &'static [Rule],
}

/// How a config names each layer's mixer. Whatever the family, a `layer_types` list, when present,
/// names them; these say how its entries read and what holds without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layers {
    /// Gated-DeltaNet on `linear_attention` (legacy `mamba`) layers, attention on `full_attention`
    /// (legacy `attention`) ones; without `layer_types`, attention every
    /// `full_attention_interval`-th layer (default 4). `head_dim` and the `linear_*` sizes are
    /// required.
    DeltaNetHybrid,
    /// Attention on every layer; `layer_types` only says which slide.
    Attention,
    /// Mamba2 on `mamba`/`linear_attention` layers, attention on the others (Granite-4.0-H).
    Mamba2Hybrid,
    /// Mamba on every layer but each `attn_layer_period`-th from `attn_layer_offset` (Jamba).
    MambaPeriod,
    /// Mamba on every layer.
    Mamba,
    /// Mamba2 on every layer.
    Mamba2,
}

/// The attention block a family's code writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// A per-head sigmoid output gate, its rows interleaved per head with the queries'.
    pub output_gate: bool,
    /// Per-head RMS norms of queries and keys before RoPE.
    pub qk_norm: bool,
    /// `partial_rotary_factor` when the config does not say.
    pub partial_rotary: f64,
    /// The RoPE parameters of the family's config class, as JSON, for a config that gives none.
    pub rope: Option<&'static str>,
}

/// Which attention projections have biases: q/k/v (and o, when `output`) when boolean field `key`
/// is true, `default` when it is absent or the family has no such field (`key` `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bias {
    pub key: Option<&'static str>,
    pub default: bool,
    pub output: bool,
}

/// The FFN a family's code writes; its activation decides whether it is SwiGLU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnForm {
    /// `down(act(gate·x) · up·x)`, the activation read from the first of `keys` present.
    Gated { keys: &'static [&'static str], default: &'static str },
    /// `down(act(up·x))`, no gate.
    Plain { keys: &'static [&'static str], default: &'static str },
    /// No FFN (its rules name [`Construct::NoFfn`]).
    None,
}

/// How a config encodes a sliding window (docs/FAMILIES.md, "The config encodings that decide a verdict"). A `layer_types` list
/// decides in every family: its `sliding_attention` and `chunked_attention` entries slide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The family's code has none.
    None,
    /// `sliding_window`, when set, on every attention layer (Mistral, Mixtral, Phi-3, StarCoder2).
    Field,
    /// `sliding_window` only when `use_sliding_window` (default false), on the layers from
    /// `max_window_layers` (default 28) on (Qwen2, Qwen3). Hub Qwen2.5 configs carry a window with
    /// the flag off: they do not slide.
    UseFlag,
    /// Without `layer_types`, every layer slides but each `pattern`-th (read from the first of
    /// `keys` present, else `every`); the window is `sliding_window`, else `default`.
    Pattern { keys: &'static [&'static str], every: usize, default: usize },
}

/// A rule: when a condition on the config holds, the step has a construct.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    pub when: When,
    pub then: Then,
}

/// A condition on a config's fields.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum When {
    /// Always: the family's code hard-codes it.
    Always,
    /// Boolean field `.0` is true (absent: `.1`, the class default).
    Flag(&'static str, bool),
    /// One of these numeric fields is present and positive (`0` means none in Qwen3-Next and
    /// Granite-4.0-H).
    Positive(&'static [&'static str]),
    /// Field `.0` is non-null; absent, `.1` (whether the class default is non-null).
    Set(&'static str, bool),
    /// Number `.0` is present and differs from 1.
    NotOne(&'static str),
    /// String field `.0` is not `.1` (absent counts as not).
    Not(&'static str, &'static str),
}

/// What a rule implies: a construct the spec states (and the lowering refuses from the graph) or
/// one it cannot state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Then {
    /// A mixture of experts in place of the FFN, sized by the experts' fields: a softmax router,
    /// a gated shared expert, on the layers the config gives them.
    Experts,
    /// The experts' routing, when it is not a softmax's.
    Routing(Routing),
    /// Latent attention, sized by its `*_lora_rank` and head fields.
    LatentAttention,
    /// A learned sink logit per head (gpt-oss's `self_attn.sinks`).
    Sinks,
    /// The embedding scaled by √hidden (the Gemma line).
    EmbeddingSqrtHidden,
    /// The embedding scaled by the rule's field.
    EmbeddingByField,
    /// Norms after the mixer and the FFN.
    PostNorm(PostNorm),
    /// gpt-oss's clamped SwiGLU, from `swiglu_alpha` (1.702) and `swiglu_limit` (7).
    ClampedSwiGlu,
    /// Scores scaled by `field^-1/2` (`query_pre_attn_scalar`, class default `.0`).
    ScaleInvSqrt(f64),
    /// Scores scaled by the rule's field (`attention_multiplier`).
    ScaleByField,
    /// RoPE on interleaved pairs.
    InterleavedRope,
    /// The sliding layers' own RoPE: θ `rope_local_base_freq` (default `.0`), unscaled, unless
    /// `rope_parameters` gives a `sliding_attention` entry.
    SlidingRope(f64),
    /// No RoPE: its rotary dims are 0.
    NoRope,
    /// A construct a spec cannot state.
    Unsupported(Construct),
}

/// The experts' routing and extras of a family, beyond a softmax router and a gated shared expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// gpt-oss: top-k of the logits then a softmax over them; biases on the router and every expert.
    TopKSoftmaxBiased,
    /// DeepSeek-V3: sigmoid scores limited to the best `topk_group` of `n_group` groups; an
    /// ungated shared expert; weights scaled by `routed_scaling_factor`.
    SigmoidGroupLimited,
    /// DeepSeek-V2: a softmax router; an ungated shared expert; weights scaled by
    /// `routed_scaling_factor`.
    SoftmaxUngatedShared,
}

const fn rule(when: When, then: Then) -> Rule {
    Rule { when, then }
}

const fn always(c: Construct) -> Rule {
    rule(When::Always, Then::Unsupported(c))
}

/// The rules of every family.
pub const COMMON: &[Rule] = &[
    rule(When::Positive(&["num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"]), Then::Experts),
    rule(When::Set("kv_lora_rank", false), Then::LatentAttention),
    rule(When::Flag("mlp_bias", false), Then::Unsupported(Construct::FfnBias)),
    rule(When::NotOne("embedding_multiplier"), Then::EmbeddingByField),
    rule(When::Set("attention_multiplier", false), Then::ScaleByField),
    rule(When::NotOne("residual_multiplier"), Then::Unsupported(Construct::ResidualMultiplier)),
    rule(When::NotOne("logits_scaling"), Then::Unsupported(Construct::LogitScale)),
    rule(When::NotOne("logit_scale"), Then::Unsupported(Construct::LogitScale)),
];

const PLAIN: Attention = Attention { output_gate: false, qk_norm: false, partial_rotary: 1.0, rope: None };
const QK_NORM: Attention = Attention { qk_norm: true, ..PLAIN };
const GATED: Attention = Attention { output_gate: true, qk_norm: true, partial_rotary: 0.25, rope: None };
const SILU: FfnForm = FfnForm::Gated { keys: &["hidden_act"], default: "silu" };
const GEGLU: FfnForm = FfnForm::Gated { keys: &["hidden_activation"], default: "gelu_pytorch_tanh" };
/// `attention_bias` (default false) biases q, k, v and o.
const ATTENTION_BIAS: Bias = Bias { key: Some("attention_bias"), default: false, output: true };
/// Biases on every projection, hard-coded.
const ALL_BIASES: Bias = Bias { key: None, default: true, output: true };
/// Biases on q, k and v, hard-coded (Qwen2's `q_proj … bias=True`, `o_proj … bias=False`).
const QKV_BIAS: Bias = Bias { key: None, default: true, output: false };

/// A row of every default: attention on every layer, plain attention, SwiGLU, no window,
/// `attention_bias`, untied, ε 1e-6.
const DECODER: Family = Family {
    model_type: "",
    wrappers: &[],
    layers: Layers::Attention,
    attention: PLAIN,
    ffn: SILU,
    window: Window::None,
    bias: ATTENTION_BIAS,
    tied: false,
    eps: 1e-6,
    rules: &[],
};

/// The Qwen3.5 line: Gated-DeltaNet and gated attention.
const QWEN35: Family = Family { layers: Layers::DeltaNetHybrid, attention: GATED, ..DECODER };

/// The families the reader knows.
pub const FAMILIES: &[Family] = &[
    Family { model_type: "qwen3_5_text", wrappers: &["qwen3_5"], ..QWEN35 },
    Family { model_type: "qwen3_5_moe_text", wrappers: &["qwen3_5_moe"], ..QWEN35 },
    Family { model_type: "qwen3_next", ..QWEN35 },
    Family { model_type: "qwen3", attention: QK_NORM, window: Window::UseFlag, ..DECODER },
    Family { model_type: "qwen3_moe", attention: QK_NORM, window: Window::UseFlag, ..DECODER },
    Family { model_type: "qwen2", window: Window::UseFlag, bias: QKV_BIAS, ..DECODER },
    Family { model_type: "qwen2_moe", window: Window::UseFlag, bias: QKV_BIAS, ..DECODER },
    Family { model_type: "llama", ..DECODER },
    Family { model_type: "mistral", wrappers: &["mistral3"], window: Window::Field, ..DECODER },
    Family { model_type: "mixtral", window: Window::Field, ..DECODER },
    Family { model_type: "phi3", window: Window::Field, ..DECODER },
    Family { model_type: "granite", ..DECODER },
    Family {
        model_type: "gemma",
        ffn: FfnForm::Gated { keys: &["hidden_activation", "hidden_act"], default: "gelu_pytorch_tanh" },
        tied: true,
        rules: &[rule(When::Always, Then::EmbeddingSqrtHidden)],
        ..DECODER
    },
    Family {
        model_type: "gemma2",
        ffn: GEGLU,
        window: Window::Pattern { keys: &[], every: 2, default: 4096 },
        tied: true,
        rules: &[
            rule(When::Always, Then::EmbeddingSqrtHidden),
            rule(When::Always, Then::PostNorm(PostNorm::Sandwich)),
            rule(When::Always, Then::ScaleInvSqrt(256.0)),
            rule(When::Set("attn_logit_softcapping", true), Then::Unsupported(Construct::AttentionSoftcap)),
            rule(When::Set("final_logit_softcapping", true), Then::Unsupported(Construct::LogitSoftcap)),
        ],
        ..DECODER
    },
    Family {
        model_type: "gemma3_text",
        wrappers: &["gemma3"],
        attention: QK_NORM,
        ffn: GEGLU,
        window: Window::Pattern {
            keys: &["sliding_window_pattern", "_sliding_window_pattern"],
            every: 6,
            default: 4096,
        },
        tied: true,
        rules: &[
            rule(When::Always, Then::EmbeddingSqrtHidden),
            rule(When::Always, Then::PostNorm(PostNorm::Sandwich)),
            rule(When::Always, Then::ScaleInvSqrt(256.0)),
            rule(When::Set("attn_logit_softcapping", false), Then::Unsupported(Construct::AttentionSoftcap)),
            rule(When::Set("final_logit_softcapping", false), Then::Unsupported(Construct::LogitSoftcap)),
            rule(When::Always, Then::SlidingRope(10_000.0)),
        ],
        ..DECODER
    },
    Family {
        model_type: "olmo2",
        rules: &[rule(When::Always, Then::PostNorm(PostNorm::PostOnly)), always(Construct::FullWidthQkNorm)],
        ..DECODER
    },
    Family {
        model_type: "olmo3",
        window: Window::Pattern { keys: &[], every: 4, default: 4096 },
        rules: &[rule(When::Always, Then::PostNorm(PostNorm::PostOnly)), always(Construct::FullWidthQkNorm)],
        ..DECODER
    },
    Family {
        model_type: "exaone4",
        attention: QK_NORM,
        window: Window::Field,
        rules: &[rule(When::Always, Then::PostNorm(PostNorm::PostOnly))],
        ..DECODER
    },
    Family {
        model_type: "glm4",
        attention: Attention { partial_rotary: 0.5, ..PLAIN },
        bias: Bias { key: Some("attention_bias"), default: true, output: false },
        rules: &[rule(When::Always, Then::PostNorm(PostNorm::Sandwich)), rule(When::Always, Then::InterleavedRope)],
        ..DECODER
    },
    Family {
        model_type: "deepseek_v2",
        rules: &[rule(When::Always, Then::Routing(Routing::SoftmaxUngatedShared))],
        ..DECODER
    },
    Family {
        model_type: "deepseek_v3",
        rules: &[
            rule(When::Flag("rope_interleave", true), Then::InterleavedRope),
            rule(When::Always, Then::Routing(Routing::SigmoidGroupLimited)),
        ],
        ..DECODER
    },
    Family {
        model_type: "gpt_oss",
        attention: Attention {
            rope: Some(
                r#"{"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                    "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": false}"#,
            ),
            ..PLAIN
        },
        window: Window::Pattern { keys: &[], every: 2, default: 128 },
        bias: Bias { key: Some("attention_bias"), default: true, output: true },
        eps: 1e-5,
        rules: &[
            rule(When::Always, Then::Sinks),
            rule(When::Always, Then::ClampedSwiGlu),
            rule(When::Always, Then::Routing(Routing::TopKSoftmaxBiased)),
        ],
        ..DECODER
    },
    Family {
        model_type: "phi",
        attention: Attention { partial_rotary: 0.5, ..PLAIN },
        ffn: FfnForm::Plain { keys: &["hidden_act"], default: "gelu_new" },
        bias: ALL_BIASES,
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            always(Construct::ParallelBlock),
            always(Construct::FfnBias),
            always(Construct::HeadBias),
        ],
        ..DECODER
    },
    Family {
        model_type: "gpt2",
        ffn: FfnForm::Plain { keys: &["activation_function"], default: "gelu_new" },
        bias: ALL_BIASES,
        tied: true,
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            always(Construct::LearnedPositions),
            rule(When::Always, Then::NoRope),
            always(Construct::FfnBias),
        ],
        ..DECODER
    },
    Family {
        model_type: "starcoder2",
        ffn: FfnForm::Plain { keys: &["hidden_act"], default: "gelu_pytorch_tanh" },
        window: Window::Field,
        bias: Bias { key: Some("use_bias"), default: true, output: true },
        tied: true,
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            rule(When::Flag("use_bias", true), Then::Unsupported(Construct::FfnBias)),
        ],
        ..DECODER
    },
    Family {
        model_type: "falcon",
        ffn: FfnForm::Plain { keys: &["activation"], default: "gelu" },
        bias: Bias { key: Some("bias"), default: false, output: true },
        tied: true,
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            rule(When::Flag("parallel_attn", true), Then::Unsupported(Construct::ParallelBlock)),
            rule(When::Flag("new_decoder_architecture", false), Then::Unsupported(Construct::ParallelBlock)),
            rule(When::Flag("alibi", false), Then::Unsupported(Construct::Alibi)),
            rule(When::Flag("alibi", false), Then::NoRope),
            rule(When::Flag("bias", false), Then::Unsupported(Construct::FfnBias)),
        ],
        ..DECODER
    },
    Family {
        model_type: "cohere",
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            always(Construct::ParallelBlock),
            rule(When::Always, Then::InterleavedRope),
        ],
        ..DECODER
    },
    Family {
        model_type: "cohere2",
        window: Window::Pattern { keys: &["sliding_window_pattern"], every: 4, default: 4096 },
        eps: 1e-5,
        rules: &[
            always(Construct::LayerNorm),
            always(Construct::ParallelBlock),
            rule(When::Always, Then::InterleavedRope),
        ],
        ..DECODER
    },
    Family {
        model_type: "granitemoehybrid",
        layers: Layers::Mamba2Hybrid,
        rules: &[rule(When::Not("position_embedding_type", "rope"), Then::NoRope)],
        ..DECODER
    },
    Family {
        model_type: "falcon_h1",
        rules: &[always(Construct::Mamba2Mixer), always(Construct::ParallelBlock), always(Construct::MupMultipliers)],
        ..DECODER
    },
    Family { model_type: "jamba", layers: Layers::MambaPeriod, rules: &[rule(When::Always, Then::NoRope)], ..DECODER },
    Family {
        model_type: "mamba",
        layers: Layers::Mamba,
        ffn: FfnForm::None,
        rules: &[always(Construct::NoFfn)],
        ..DECODER
    },
    Family {
        model_type: "falcon_mamba",
        layers: Layers::Mamba,
        ffn: FfnForm::None,
        rules: &[always(Construct::NoFfn)],
        ..DECODER
    },
    Family {
        model_type: "mamba2",
        layers: Layers::Mamba2,
        ffn: FfnForm::None,
        rules: &[always(Construct::NoFfn)],
        ..DECODER
    },
];

impl When {
    /// The field the condition reads (`model_type` for what the family's code hard-codes).
    pub fn field(&self) -> &'static str {
        match *self {
            When::Always => "model_type",
            When::Flag(k, _) | When::Set(k, _) | When::NotOne(k) | When::Not(k, _) => k,
            When::Positive(keys) => keys.first().copied().unwrap_or("model_type"),
        }
    }
}
