//! `Construct`: what a config describes that a `ModelSpec` cannot state, by name.

use std::fmt;

/// A construct of a model's decode step that a `ModelSpec` (and so the author) cannot state. A
/// config holding one is refused by [`super::ConfigError::Unsupported`], naming it; the constructs
/// a spec can state are refused by the lowering instead, from the step graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Construct {
    /// LayerNorm (mean-centred, with a bias) in place of RMSNorm.
    LayerNorm,
    /// Attention and FFN read the same input and add into the residual together.
    ParallelBlock,
    /// Biases on the FFN projections.
    FfnBias,
    /// A bias on the head.
    HeadBias,
    /// Learned absolute position embeddings added to the token's (GPT-2's `wpe`).
    LearnedPositions,
    /// ALiBi: a linear per-head bias of the scores by distance, in place of RoPE.
    Alibi,
    /// RoPE whose frequencies are rescaled in a way a spec cannot state (linear and YaRN scaling it
    /// can: the lowering refuses them as `ScaledRope`).
    ScaledRope(RopeKind),
    /// Queries and keys RMS-normed over all heads at once (OLMo 2), not per head.
    FullWidthQkNorm,
    /// `tanh` soft-capping of the attention scores.
    AttentionSoftcap,
    /// `tanh` soft-capping of the logits.
    LogitSoftcap,
    /// A factor on each block's output before its residual add (Granite's `residual_multiplier`).
    ResidualMultiplier,
    /// A factor on the logits (Granite's `logits_scaling`, Cohere's `logit_scale`).
    LogitScale,
    /// muP multipliers on the blocks' inputs and outputs (Falcon-H1).
    MupMultipliers,
    /// A Mamba (selective state space) mixer.
    MambaMixer,
    /// A Mamba2 (state space duality) mixer.
    Mamba2Mixer,
    /// Layers without an FFN.
    NoFfn,
    /// An FFN activation, or an activation with an FFN shape, that the graph has no op for.
    Activation,
}

/// A rescaling of RoPE's frequencies (`rope_type`) that a spec cannot state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeKind {
    /// NTK scaling that grows with the sequence (`dynamic`).
    Dynamic,
    /// Per-dimension factors for short and long contexts (`longrope`, `su`).
    LongRope,
    /// Llama 3.1's piecewise rescaling (`llama3`).
    Llama3,
}

/// Where in a decode step a construct sits: what orders it among a step's refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Embedding,
    /// A layer's norms.
    Norms,
    /// A layer's mixer, whatever it is.
    Mixer,
    /// A layer's attention block.
    Attention,
    /// A layer's residual adds.
    ResidualAdd,
    Ffn,
    Head,
}

impl Construct {
    /// The construct's name: what `stepcheck verdict --json` lists.
    pub fn name(self) -> &'static str {
        match self {
            Construct::LayerNorm => "LayerNorm",
            Construct::ParallelBlock => "ParallelBlock",
            Construct::FfnBias => "FfnBias",
            Construct::HeadBias => "HeadBias",
            Construct::LearnedPositions => "LearnedPositions",
            Construct::Alibi => "Alibi",
            Construct::ScaledRope(RopeKind::Dynamic) => "DynamicRope",
            Construct::ScaledRope(RopeKind::LongRope) => "LongRope",
            Construct::ScaledRope(RopeKind::Llama3) => "Llama3Rope",
            Construct::FullWidthQkNorm => "FullWidthQkNorm",
            Construct::AttentionSoftcap => "AttentionSoftcap",
            Construct::LogitSoftcap => "LogitSoftcap",
            Construct::ResidualMultiplier => "ResidualMultiplier",
            Construct::LogitScale => "LogitScale",
            Construct::MupMultipliers => "MupMultipliers",
            Construct::MambaMixer => "MambaMixer",
            Construct::Mamba2Mixer => "Mamba2Mixer",
            Construct::NoFfn => "NoFfn",
            Construct::Activation => "Activation",
        }
    }

    /// Where in the step it sits.
    pub fn part(self) -> Part {
        match self {
            Construct::LearnedPositions => Part::Embedding,
            Construct::LayerNorm => Part::Norms,
            Construct::MambaMixer | Construct::Mamba2Mixer => Part::Mixer,
            Construct::Alibi | Construct::ScaledRope(_) | Construct::FullWidthQkNorm | Construct::AttentionSoftcap => {
                Part::Attention
            }
            Construct::ParallelBlock | Construct::ResidualMultiplier | Construct::MupMultipliers => Part::ResidualAdd,
            Construct::FfnBias | Construct::NoFfn | Construct::Activation => Part::Ffn,
            Construct::HeadBias | Construct::LogitSoftcap | Construct::LogitScale => Part::Head,
        }
    }
}

impl fmt::Display for Construct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            Construct::LayerNorm => "LayerNorm in place of RMSNorm",
            Construct::ParallelBlock => "attention and FFN in parallel, from one input",
            Construct::FfnBias => "biases on the FFN projections",
            Construct::HeadBias => "a bias on the head",
            Construct::LearnedPositions => "learned absolute position embeddings",
            Construct::Alibi => "ALiBi position biases",
            Construct::ScaledRope(RopeKind::Dynamic) => "dynamic NTK-scaled RoPE",
            Construct::ScaledRope(RopeKind::LongRope) => "LongRoPE-scaled RoPE",
            Construct::ScaledRope(RopeKind::Llama3) => "Llama 3.1-scaled RoPE",
            Construct::FullWidthQkNorm => "q/k norms over all heads at once",
            Construct::AttentionSoftcap => "soft-capped attention scores",
            Construct::LogitSoftcap => "soft-capped logits",
            Construct::ResidualMultiplier => "a multiplier on each block's output",
            Construct::LogitScale => "a factor on the logits",
            Construct::MupMultipliers => "muP multipliers",
            Construct::MambaMixer => "a Mamba mixer",
            Construct::Mamba2Mixer => "a Mamba2 mixer",
            Construct::NoFfn => "layers without an FFN",
            Construct::Activation => "an activation the step graph has no op for",
        };
        f.write_str(what)
    }
}
