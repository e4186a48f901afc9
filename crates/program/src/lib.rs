//! The engine's program: Commands, one per engine unit, grouped in blocks, reading and writing
//! named buffers and state.
//!
//! A weight is named by its checkpoint tensor and is always read whole: a unit that needs parts of
//! a tensor (the rows of a merged projection, the halves of each head) splits it itself. The JSON
//! form (serde) is what an engine implementation loads; docs/PROGRAM.md documents it. The crate
//! holds the program's types, its numerics and its listing: what the lowering writes, the engine
//! runs, the prover reads and the check judges, and nothing of any of them.

#![forbid(unsafe_code)]

mod listing;
pub mod numerics;
pub mod prefill;

use serde::{Deserialize, Serialize};

pub use numerics::{KquantInputs, Numerics, Storage};

/// The index of a buffer in [`Program::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Buf(pub usize);

/// The index of a piece of state in [`Program::states`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StateRef(pub usize);

/// A program: what one decode step runs, unit by unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub name: String,
    pub numerics: Numerics,
    pub hidden: usize,
    pub vocab: usize,
    /// The activation buffers, each written once per step.
    pub buffers: Vec<Buffer>,
    /// The state carried between steps.
    pub states: Vec<StateBuffer>,
    /// The blocks, in the order the engine runs them.
    pub blocks: Vec<Block>,
    /// The buffer holding the step's logits.
    pub logits: Buf,
}

/// An activation buffer: `len` values stored as `storage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    pub name: String,
    pub len: usize,
    pub storage: Storage,
}

/// A piece of state in the engine's own layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateBuffer {
    pub name: String,
    /// The layer it belongs to (`None`: the position).
    pub layer: Option<usize>,
    pub layout: StateLayout,
    /// The type it is stored as: the numerics' `activations` for a conv window, `kv_cache` for a KV
    /// cache, `recurrent_state` for a delta state.
    pub storage: Storage,
}

/// The engine's state layouts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StateLayout {
    /// The position of the next token.
    Position,
    /// The conv unit's window: per channel the `taps − 1` previous inputs, oldest first
    /// (`[channels][taps − 1]`); the current input is not stored.
    ConvWindow { channels: usize, taps: usize },
    /// The delta rule's state, per value head a `[value_dim][key_dim]` matrix (the transpose of the
    /// reference's `[key_dim][value_dim]`).
    DeltaState { value_heads: usize, key_dim: usize, value_dim: usize },
    /// A preallocated cache, `[heads][capacity][dim]`, filled up to the position.
    KvCache { heads: usize, dim: usize },
}

/// Where a block sits in the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BlockKind {
    Embedding,
    /// A layer's pre-mixer norm.
    MixerNorm,
    DeltaNet,
    Attention,
    /// The residual add after the mixer.
    MixerAdd,
    FfnNorm,
    Ffn,
    FfnAdd,
    Advance,
    FinalNorm,
    Head,
}

impl BlockKind {
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Embedding => "embedding",
            BlockKind::MixerNorm => "mixer norm",
            BlockKind::DeltaNet => "Gated-DeltaNet block",
            BlockKind::Attention => "attention block",
            BlockKind::MixerAdd => "mixer residual add",
            BlockKind::FfnNorm => "FFN norm",
            BlockKind::Ffn => "FFN",
            BlockKind::FfnAdd => "FFN residual add",
            BlockKind::Advance => "advance",
            BlockKind::FinalNorm => "final norm",
            BlockKind::Head => "head",
        }
    }
}

/// A block: the commands of one of the step's blocks, in the order the engine's units take them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub kind: BlockKind,
    pub layer: Option<usize>,
    pub commands: Vec<Command>,
}

/// RoPE as the attention unit applies it: NeoX pairing (dim `i` with `i + dims/2`) on the first
/// `dims` dims of each head, frequencies `theta^(−2i/dims)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    pub theta: f64,
    pub dims: usize,
}

/// A command: one engine unit and the buffers, state and weights it reads and writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// `out = table[token]`.
    Embed { table: String, out: Buf },
    /// `out = x · rsqrt(mean(x²) + eps) · weight`.
    RmsNorm { x: Buf, weight: String, eps: f64, out: Buf },
    /// `out = weight · x`.
    MatVec { weight: String, x: Buf, out: Buf },
    /// One matvec over the first `Σ len(outs)` rows of `weight`, split into consecutive row ranges,
    /// one per output, in order (`merged_qkv` of row ranges).
    MergedRows { weight: String, x: Buf, outs: Vec<Buf> },
    /// One matvec over all rows of `weight`, whose rows hold head after head `2·head_dim` rows:
    /// `first` gets the first `head_dim` of each head, `second` the last (`merged_qkv` of head
    /// halves).
    MergedHeadHalves { weight: String, head_dim: usize, x: Buf, first: Buf, second: Buf },
    /// The conv unit (`conv_bias_silu`): the channels are the inputs' values concatenated in order;
    /// per channel `silu(Σ_{j<K−1} w[c,j]·window[c,j] + w[c,K−1]·x[c] (+ bias[c]))`, then the window
    /// shifts in `x`. The outputs split the channels as the inputs do.
    Conv { ins: Vec<Buf>, window: StateRef, weight: String, bias: Option<String>, outs: Vec<Buf> },
    /// The gates (`gdn_gating`): `beta = sigmoid(b)`, `g = decay · softplus(a + dt_bias)`.
    Gates { b: Buf, a: Buf, decay: String, dt_bias: String, beta: Buf, g: Buf },
    /// The delta rule: per value head `h` with key head `h mod key_heads`, queries and keys
    /// l2-normed (eps 1e-6), queries scaled by `1/√key_dim`; `S ← e^g S; S ← S + β k (v − Sk)ᵀ`;
    /// `out = S q` (in the engine's `[dv][dk]` orientation).
    DeltaRule { state: StateRef, q: Buf, k: Buf, v: Buf, g: Buf, beta: Buf, out: Buf, key_heads: usize },
    /// The gated norm: per head of `dim` values, `rms_norm(x, weight) · silu(z)`.
    GatedNorm { x: Buf, z: Buf, weight: String, eps: f64, dim: usize, out: Buf },
    /// The attention unit: queries and keys RMS-normed per head (when the norms are given), RoPE at
    /// the position (the program's one `Position` state), key and value appended to the caches at
    /// that position, softmax attention with `scale` of each query head over positions `0..=position`
    /// of KV head `h / (heads / kv_heads)`.
    Attention {
        q: Buf,
        k: Buf,
        v: Buf,
        q_norm: Option<String>,
        k_norm: Option<String>,
        eps: f64,
        rope: Rope,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        scale: f64,
        k_cache: StateRef,
        v_cache: StateRef,
        out: Buf,
    },
    /// The sigmoid gate (`glu_act_mul` of sigmoid): `out = sigmoid(gate) · x`.
    SigmoidGate { x: Buf, gate: Buf, out: Buf },
    /// The SwiGLU FFN: `out = down · (silu(gate · x) ⊙ (up · x))`.
    SwiGlu { x: Buf, gate: String, up: String, down: String, out: Buf },
    /// The residual add: `out = residual + x`.
    Add { residual: Buf, x: Buf, out: Buf },
    /// The step's advance: the position moves to the next token.
    Advance { position: StateRef },
}

impl Command {
    /// The buffers the command reads, in its fields' order.
    pub fn reads(&self) -> Vec<Buf> {
        match self {
            Command::Embed { .. } | Command::Advance { .. } => vec![],
            Command::RmsNorm { x, .. }
            | Command::MatVec { x, .. }
            | Command::MergedRows { x, .. }
            | Command::MergedHeadHalves { x, .. }
            | Command::SwiGlu { x, .. } => vec![*x],
            Command::Conv { ins, .. } => ins.clone(),
            Command::Gates { b, a, .. } => vec![*b, *a],
            Command::DeltaRule { q, k, v, g, beta, .. } => vec![*q, *k, *v, *g, *beta],
            Command::GatedNorm { x, z, .. } => vec![*x, *z],
            Command::Attention { q, k, v, .. } => vec![*q, *k, *v],
            Command::SigmoidGate { x, gate, .. } => vec![*x, *gate],
            Command::Add { residual, x, .. } => vec![*residual, *x],
        }
    }

    /// The buffers the command writes, in its fields' order.
    pub fn writes(&self) -> Vec<Buf> {
        match self {
            Command::Embed { out, .. }
            | Command::RmsNorm { out, .. }
            | Command::MatVec { out, .. }
            | Command::DeltaRule { out, .. }
            | Command::GatedNorm { out, .. }
            | Command::Attention { out, .. }
            | Command::SigmoidGate { out, .. }
            | Command::SwiGlu { out, .. }
            | Command::Add { out, .. } => vec![*out],
            Command::MergedRows { outs, .. } | Command::Conv { outs, .. } => outs.clone(),
            Command::MergedHeadHalves { first, second, .. } => vec![*first, *second],
            Command::Gates { beta, g, .. } => vec![*beta, *g],
            Command::Advance { .. } => vec![],
        }
    }

    /// The states the command reads and writes (the position an attention reads is the program's
    /// one `Position` state, not named here).
    pub fn states(&self) -> Vec<StateRef> {
        match self {
            Command::Conv { window, .. } => vec![*window],
            Command::DeltaRule { state, .. } => vec![*state],
            Command::Attention { k_cache, v_cache, .. } => vec![*k_cache, *v_cache],
            Command::Advance { position } => vec![*position],
            _ => vec![],
        }
    }
}
