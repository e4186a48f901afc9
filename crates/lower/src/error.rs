//! `LowerError`: why a step graph is not a program the engine runs.

use std::fmt;

use ir::GraphError;
use program::BlockKind;
use program::numerics::Storage;

/// Where in the step the lowering was: the block it was reading, the layer, and the graph op (by
/// index in the graph's op list) when one is at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub block: BlockKind,
    pub layer: Option<usize>,
    pub op: Option<usize>,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layer {
            Some(l) => write!(f, "layer {l}'s {}", self.block.name())?,
            None => write!(f, "the {}", self.block.name())?,
        }
        match self.op {
            Some(op) => write!(f, " (op {op})"),
            None => Ok(()),
        }
    }
}

/// Why a step graph is not a program the engine runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("the graph is not well formed: {0}")]
    InvalidGraph(#[from] GraphError),
    #[error("the recurrent state must be stored in f32, not {found}: a delta rule accumulates into it every step")]
    RecurrentStateBelowF32 { found: Storage },
    #[error("{at}: expected {what} ({expected}) reading %{reading}, found {}", list(found))]
    WrongOp { at: Site, what: &'static str, expected: &'static str, reading: String, found: Vec<String> },
    #[error("{at}: more than one op could be {what}: {}", list(found))]
    AmbiguousOp { at: Site, what: &'static str, found: Vec<String> },
    #[error("{at}: {what} reads %{found} as operand {operand}, expected %{expected}")]
    WrongTensor { at: Site, what: &'static str, operand: usize, expected: String, found: String },
    #[error("{at}: {what} reads {found}, expected a constant bound to {expected}")]
    WrongBinding { at: Site, what: &'static str, expected: String, found: String },
    #[error("{at}: {what} has {attribute} {found}, the engine's unit takes {expected}")]
    WrongAttribute { at: Site, what: &'static str, attribute: &'static str, expected: String, found: String },
    #[error("{at}: {what} reads {found} operands, expected {expected}")]
    WrongArity { at: Site, what: &'static str, expected: usize, found: usize },
    #[error("{at}: the step's {state} state of this layer is missing")]
    MissingState { at: Site, state: &'static str },
    #[error("{at}: the {state} state is written as %{found}, expected %{expected}")]
    WrongStateWrite { at: Site, state: &'static str, expected: String, found: String },
    #[error("{at}: %{tensor}, which the block computes for its own units, is also read by op {reader} ({kind})")]
    StrayRead { at: Site, tensor: String, reader: usize, kind: &'static str },
    #[error("op {op} ({kind}) writing %{writes} belongs to no block the engine has a unit for")]
    UnreadOp { op: usize, kind: &'static str, writes: String },
    #[error(
        "{at}: the layer has no state of a Gated-DeltaNet or an attention block, so its mixer is not one the engine has a unit for"
    )]
    UnknownMixer { at: Site },
    #[error("{at}: {what} is not fused as {symbol}, and this engine's shim does not take {symbol}")]
    Unfused { at: Site, what: &'static str, symbol: &'static str },
    #[error("{at}: {what} could not be fused as {symbol}: {why}")]
    NotFusable { at: Site, what: &'static str, symbol: &'static str, why: String },
    #[error("{at}: a merged_qkv whose views the unit cannot run as one matvec: {why}")]
    MergedNotContiguous { at: Site, why: String },
    // The constructs the engine has no unit for, each by name: the seven of the design, then those
    // of the attention families beyond the accepted one that a step graph can state.
    #[error("{at}: a norm after the mixer or the FFN, before the residual add: the engine has no unit for it")]
    NormAfterMixer { at: Site },
    #[error("{at}: the FFN is not SwiGLU ({found}): the engine's FFN unit is SwiGLU only")]
    NotSwiGlu { at: Site, found: String },
    #[error("{at}: a mixture of experts (a router with top-k): the engine has no unit for experts")]
    Experts { at: Site },
    #[error(
        "{at}: latent attention (keys and values projected from a compressed latent): the engine has no unit for it"
    )]
    LatentAttention { at: Site },
    #[error("{at}: attention sinks (a learned logit per head joins the softmax): the engine's attention unit has none")]
    AttentionSinks { at: Site },
    #[error("{at}: a sliding window of {window} positions: the engine's attention unit attends to every position")]
    SlidingWindow { at: Site, window: usize },
    #[error("{at}: the embedding is scaled by {factor}: the engine's embedding unit does not scale")]
    ScaledEmbedding { at: Site, factor: f64 },
    #[error("{at}: RoPE rotates interleaved pairs (dims 2i and 2i+1): the engine's attention unit rotates NeoX halves")]
    InterleavedRope { at: Site },
    #[error(
        "{at}: the attention scores are scaled by {found}, not by 1/√head_dim = {expected}: the engine's attention unit scales by 1/√head_dim"
    )]
    AttentionScale { at: Site, found: f64, expected: f64 },
    #[error(
        "{at}: RoPE with frequencies other than θ^(−2i/d) (a scaled RoPE): the engine's attention unit turns by θ's"
    )]
    ScaledRope { at: Site },
    #[error("{at}: a bias added to an attention projection: the engine's projections have none")]
    AttentionBias { at: Site },
}

impl LowerError {
    /// The variant's name: what `stepcheck verdict --json` and the corpus files name.
    pub fn name(&self) -> &'static str {
        match self {
            LowerError::InvalidGraph(_) => "InvalidGraph",
            LowerError::RecurrentStateBelowF32 { .. } => "RecurrentStateBelowF32",
            LowerError::WrongOp { .. } => "WrongOp",
            LowerError::AmbiguousOp { .. } => "AmbiguousOp",
            LowerError::WrongTensor { .. } => "WrongTensor",
            LowerError::WrongBinding { .. } => "WrongBinding",
            LowerError::WrongAttribute { .. } => "WrongAttribute",
            LowerError::WrongArity { .. } => "WrongArity",
            LowerError::MissingState { .. } => "MissingState",
            LowerError::WrongStateWrite { .. } => "WrongStateWrite",
            LowerError::StrayRead { .. } => "StrayRead",
            LowerError::UnreadOp { .. } => "UnreadOp",
            LowerError::UnknownMixer { .. } => "UnknownMixer",
            LowerError::Unfused { .. } => "Unfused",
            LowerError::NotFusable { .. } => "NotFusable",
            LowerError::MergedNotContiguous { .. } => "MergedNotContiguous",
            LowerError::NormAfterMixer { .. } => "NormAfterMixer",
            LowerError::NotSwiGlu { .. } => "NotSwiGlu",
            LowerError::Experts { .. } => "Experts",
            LowerError::LatentAttention { .. } => "LatentAttention",
            LowerError::AttentionSinks { .. } => "AttentionSinks",
            LowerError::SlidingWindow { .. } => "SlidingWindow",
            LowerError::ScaledEmbedding { .. } => "ScaledEmbedding",
            LowerError::InterleavedRope { .. } => "InterleavedRope",
            LowerError::AttentionScale { .. } => "AttentionScale",
            LowerError::ScaledRope { .. } => "ScaledRope",
            LowerError::AttentionBias { .. } => "AttentionBias",
        }
    }

    /// Where it was found, when the error is about a place in the step.
    pub fn site(&self) -> Option<Site> {
        self.clone().site_mut().copied()
    }

    /// Where it was found, to renumber: a config's layers may not all be the spec's.
    pub fn site_mut(&mut self) -> Option<&mut Site> {
        use LowerError::*;
        match self {
            InvalidGraph(_) | RecurrentStateBelowF32 { .. } | UnreadOp { .. } => None,
            WrongOp { at, .. }
            | AmbiguousOp { at, .. }
            | WrongTensor { at, .. }
            | WrongBinding { at, .. }
            | WrongAttribute { at, .. }
            | WrongArity { at, .. }
            | MissingState { at, .. }
            | WrongStateWrite { at, .. }
            | StrayRead { at, .. }
            | UnknownMixer { at }
            | Unfused { at, .. }
            | NotFusable { at, .. }
            | MergedNotContiguous { at, .. }
            | NormAfterMixer { at }
            | NotSwiGlu { at, .. }
            | Experts { at }
            | LatentAttention { at }
            | AttentionSinks { at }
            | SlidingWindow { at, .. }
            | ScaledEmbedding { at, .. }
            | InterleavedRope { at }
            | AttentionScale { at, .. }
            | ScaledRope { at }
            | AttentionBias { at } => Some(at),
        }
    }

    /// Whether this is one of the constructs the engine refuses by name (not a malformed or
    /// mis-bound graph).
    pub fn is_refused_construct(&self) -> bool {
        matches!(
            self,
            LowerError::NormAfterMixer { .. }
                | LowerError::NotSwiGlu { .. }
                | LowerError::Experts { .. }
                | LowerError::LatentAttention { .. }
                | LowerError::AttentionSinks { .. }
                | LowerError::SlidingWindow { .. }
                | LowerError::ScaledEmbedding { .. }
                | LowerError::InterleavedRope { .. }
                | LowerError::AttentionScale { .. }
                | LowerError::ScaledRope { .. }
                | LowerError::AttentionBias { .. }
        )
    }
}

fn list(found: &[String]) -> String {
    if found.is_empty() { "nothing".into() } else { found.join(", ") }
}
