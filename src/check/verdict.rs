//! The verdict of a check: agree, disagree with a witness, or inconclusive.

use std::fmt;

/// What comparing the two interpreters found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every compared value is within tolerance: the largest absolute error, and the largest error
    /// relative to the scale of its tensor.
    Agree { steps: usize, values: usize, max_abs: f64, max_rel: f64, tolerance: f64 },
    /// The first value found out of tolerance.
    Disagree(Witness),
    /// The reference produced NaN or Inf, so nothing can be said: where it first did.
    Inconclusive { step: usize, tensor: String, index: usize },
}

/// A value the engine computes differently from the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Witness {
    /// The step (0-based) after which the value was read.
    pub step: usize,
    /// `logits`, or the name of a piece of carried state.
    pub tensor: String,
    /// The index in the tensor, row-major in the reference's layout.
    pub index: usize,
    pub reference: f64,
    pub engine: f64,
    /// The tolerance it is out of, in absolute terms (the relative tolerance times the tensor's
    /// scale).
    pub tolerance: f64,
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Agree { .. } => "agree",
            Verdict::Disagree(_) => "disagree",
            Verdict::Inconclusive { .. } => "inconclusive",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Agree { steps, values, max_abs, max_rel, tolerance } => write!(
                f,
                "agree over {steps} steps ({values} values): max abs error {max_abs:.2e}, max rel error {max_rel:.2e} \
                 (tolerance {tolerance:.2e})"
            ),
            Verdict::Disagree(w) => write!(
                f,
                "disagree at step {} in {}[{}]: reference {} engine {} (tolerance {:.2e})",
                w.step, w.tensor, w.index, w.reference, w.engine, w.tolerance
            ),
            Verdict::Inconclusive { step, tensor, index } => {
                write!(f, "inconclusive: the reference is not finite at step {step} in {tensor}[{index}]")
            }
        }
    }
}
