//! The verdict of a check: agree, disagree with a witness, or inconclusive with the reason.

use std::fmt;

/// What comparing the two interpreters found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every compared value is within tolerance. `structure` is the largest error of the exact run
    /// against the reference (relative to its tensor's scale, within [`super::EXACT`]); `max_abs`
    /// and `max_rel` are the largest errors of the engine as it runs against its exact run, and
    /// `tolerance` the numerics tolerance they are within: the floor [`super::F32`] when every
    /// value is within it, else the tolerance the f32-arithmetic model measured.
    Agree { steps: usize, values: usize, structure: f64, max_abs: f64, max_rel: f64, tolerance: f64 },
    /// The value furthest out of tolerance, in the first comparison that found one.
    Disagree(Witness),
    /// Nothing can be concluded, and why.
    Inconclusive(Unjudged),
}

/// Which comparison a witness comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The authored graph against the graph the shim fused, both in the reference interpreter.
    Shim,
    /// The engine's units over f64, every stored value kept exactly, against the reference: the
    /// program's structure.
    Structure,
    /// The engine as it runs against its exact run: the program's numerics.
    Numerics,
}

/// A value computed differently by the two sides of a comparison: the worst one.
#[derive(Clone, Debug, PartialEq)]
pub struct Witness {
    pub stage: Stage,
    /// The step (0-based) after which the value was read.
    pub step: usize,
    /// `logits`, or the name of a piece of carried state.
    pub tensor: String,
    /// The index in the tensor, row-major in the reference's layout (the engine's for
    /// [`Stage::Numerics`]).
    pub index: usize,
    /// The value judged against: the reference's (the exact run's for [`Stage::Numerics`], the
    /// authored graph's for [`Stage::Shim`]).
    pub reference: f64,
    /// The value judged: the engine's (the fused graph's for [`Stage::Shim`]).
    pub engine: f64,
    /// The tolerance it is out of, in absolute terms (the relative tolerance times the tensor's
    /// scale).
    pub tolerance: f64,
    /// The error relative to the tensor's scale.
    pub relative: f64,
}

/// Why a comparison concluded nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum Unjudged {
    /// The reference produced NaN or Inf: where it first did.
    NonFinite { step: usize, tensor: String, index: usize },
    /// The structure agrees within [`super::EXACT`], but f32 arithmetic modelled at every operation
    /// moves the output by more than [`super::LIMIT`] of its scale (with the margin): rounding
    /// alone can do what a wrong program does, so the numerics cannot be judged. `structure` is the exact run's
    /// largest relative error and `tolerance` the numerics tolerance the model gave.
    RoundingDominates { structure: f64, tolerance: f64 },
    /// The structure agrees within [`super::EXACT`], and at reduced storage (or with k-quant
    /// inputs quantized to Q8_K) the engine is off its shadow by more than f32 arithmetic
    /// explains, but by no more than [`super::MARGIN`] times what rounding flips do (every value
    /// moved by an f32 unit roundoff, then rounded to its storage and quantized where the
    /// numerics say: `bound`, relative to the scale). An engine that rounds to the wrong type is
    /// off by more at its first store.
    RoundingFlips { witness: Witness, bound: f64 },
    /// The structure agrees within [`super::EXACT`], nothing stored below f32 is apart from its
    /// shadow (the numerics are all f32, or below it only in KV caches whose every value ends its
    /// shadow's to the bit), and the engine is off its f64 shadow by more than the f32-arithmetic
    /// model measured (and, with caches below f32, than rounding flips do). The engine runs the
    /// same unit code over f32 as over the f64 that matched the reference exactly, so the gap is
    /// f32 rounding on an ill-conditioned graph that the model's one sign pattern of 2⁻²⁴ moves
    /// underestimated, not a different computation. It would stand for a wrong value only in code
    /// the engine runs over f32 alone, of which it has none (an f32-only kernel must be
    /// property-tested against the generic path before this reason may stay).
    F32BeyondModel { witness: Witness },
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Agree { .. } => "agree",
            Verdict::Disagree(_) => "disagree",
            Verdict::Inconclusive(_) => "inconclusive",
        }
    }
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Shim => "shim",
            Stage::Structure => "structure",
            Stage::Numerics => "numerics",
        }
    }
}

impl Unjudged {
    /// The reason's kind, stable for counting and for corpus files: `non-finite`,
    /// `rounding-dominates`, `rounding-flips`, `f32-beyond-model`.
    pub fn kind(&self) -> &'static str {
        match self {
            Unjudged::NonFinite { .. } => "non-finite",
            Unjudged::RoundingDominates { .. } => "rounding-dominates",
            Unjudged::RoundingFlips { .. } => "rounding-flips",
            Unjudged::F32BeyondModel { .. } => "f32-beyond-model",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Agree { steps, values, structure, max_abs, max_rel, tolerance } => write!(
                f,
                "agree over {steps} steps ({values} values): structure within {structure:.2e}; numerics max abs \
                 error {max_abs:.2e}, max rel error {max_rel:.2e} (tolerance {tolerance:.2e})"
            ),
            Verdict::Disagree(w) => write!(
                f,
                "disagree ({}) at step {} in {}[{}]: {} {} {} {} (rel error {:.2e}, tolerance {:.2e})",
                w.stage.name(),
                w.step,
                w.tensor,
                w.index,
                if w.stage == Stage::Shim { "authored" } else { "reference" },
                w.reference,
                if w.stage == Stage::Shim { "fused" } else { "engine" },
                w.engine,
                w.relative,
                w.tolerance
            ),
            Verdict::Inconclusive(why) => write!(f, "inconclusive ({}): {why}", why.kind()),
        }
    }
}

impl fmt::Display for Unjudged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unjudged::NonFinite { step, tensor, index } => {
                write!(f, "the reference is not finite at step {step} in {tensor}[{index}]")
            }
            Unjudged::RoundingDominates { structure, tolerance } => write!(
                f,
                "the structure agrees within {structure:.2e}, but f32 arithmetic (every operation moved by 2^-24) \
                 moves the output by {tolerance:.2e} of its scale (with the margin), beyond the limit {:.2e}",
                super::LIMIT
            ),
            Unjudged::RoundingFlips { witness, bound } => write!(
                f,
                "the structure agrees; where values are rounded below f32 the engine is {:.2e} of the scale off its shadow at step {} \
                 in {}[{}] (reference {} engine {}), beyond f32 arithmetic ({:.2e}) but within what rounding flips do \
                 ({bound:.2e})",
                witness.relative,
                witness.step,
                witness.tensor,
                witness.index,
                witness.reference,
                witness.engine,
                witness.tolerance
            ),
            Unjudged::F32BeyondModel { witness } => write!(
                f,
                "the structure agrees exactly; with nothing stored below f32 apart from its shadow, the engine is {:.2e} \
                 of the scale off its f64 shadow at step {} \
                 in {}[{}] (reference {} engine {}), beyond the f32-arithmetic model's {:.2e}: f32 rounding on an \
                 ill-conditioned graph, in the same unit code",
                witness.relative,
                witness.step,
                witness.tensor,
                witness.index,
                witness.reference,
                witness.engine,
                witness.tolerance
            ),
        }
    }
}
