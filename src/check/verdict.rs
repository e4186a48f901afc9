//! The verdict of a check: agree, disagree with a witness, or inconclusive with the reason.

use std::fmt;

/// What comparing the two interpreters found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every compared value is within its bound. `structure` is the largest error of the exact run
    /// against the reference (relative to its tensor's scale, within [`super::EXACT`]); `values`
    /// counts the values the Commands of the engine's run stored, each admitted by its Command's
    /// bound; `max_rel` is the largest distance of one from its midpoint and `widest` the farthest
    /// one was allowed to be (its bound and the rounding to its storage type), each relative to its
    /// tensor's scale.
    Agree { steps: usize, values: usize, structure: f64, max_rel: f64, widest: f64 },
    /// The value furthest out of tolerance, in the first comparison that found one.
    Disagree(Witness),
    /// Nothing can be concluded, and why.
    Inconclusive(Unjudged),
}

/// Which comparison a witness comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The authored graph against the graph the shim fused, both in the reference interpreter.
    Shim,
    /// The engine's units over f64, every stored value kept exactly, against the reference: the
    /// program's structure.
    Structure,
    /// A Command of the engine as it runs against its documented meaning on the inputs it read,
    /// within the bound of f32 arithmetic, stored as the numerics say (`check::command`).
    Command,
}

/// A value computed differently by the two sides of a comparison: the worst one.
#[derive(Clone, Debug, PartialEq)]
pub struct Witness {
    pub stage: Comparison,
    /// The step (0-based) after which the value was read (during which, for [`Comparison::Command`]).
    pub step: usize,
    /// The Command that wrote the value ([`Comparison::Command`]): where it sits in the program.
    pub command: Option<String>,
    /// `logits`, the name of a piece of carried state, or a buffer's name.
    pub tensor: String,
    /// The index in the tensor, row-major in the reference's layout (the engine's for
    /// [`Comparison::Command`]).
    pub index: usize,
    /// The value judged against: the reference's (the meaning's midpoint for [`Comparison::Command`],
    /// the authored graph's for [`Comparison::Shim`]).
    pub reference: f64,
    /// The value judged: the engine's (the fused graph's for [`Comparison::Shim`]).
    pub engine: f64,
    /// The tolerance it is out of, in absolute terms (the relative tolerance times the tensor's
    /// scale; the distance its bound allows from the midpoint for [`Comparison::Command`]).
    pub tolerance: f64,
    /// The error relative to the tensor's scale.
    pub relative: f64,
}

/// Why a comparison concluded nothing.
#[derive(Clone, Debug, PartialEq)]
pub enum Unjudged {
    /// A value was NaN or Inf where a bound needs it finite: the reference's output (no
    /// `command`), or a Command's input or the bound of its output (`command` names it).
    NonFinite { step: usize, tensor: String, index: usize, command: Option<String> },
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

impl Comparison {
    pub fn name(self) -> &'static str {
        match self {
            Comparison::Shim => "shim",
            Comparison::Structure => "structure",
            Comparison::Command => "command",
        }
    }
}

impl Unjudged {
    /// The reason's kind, stable for counting and for corpus files: `non-finite`.
    pub fn kind(&self) -> &'static str {
        match self {
            Unjudged::NonFinite { .. } => "non-finite",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Agree { steps, values, structure, max_rel, widest } => write!(
                f,
                "agree over {steps} steps: structure within {structure:.2e}; every Command within its bound ({values} \
                 values, max rel error {max_rel:.2e}, widest bound {widest:.2e})"
            ),
            Verdict::Disagree(w) => write!(f, "disagree ({}) {w}", w.stage.name()),
            Verdict::Inconclusive(why) => write!(f, "inconclusive ({}): {why}", why.kind()),
        }
    }
}

impl fmt::Display for Witness {
    /// Where the value is and both sides of it: `at step 1 in logits[3]: reference … engine …`, or
    /// for a Command `at step 1 in block 5 (…) command 2 (delta_rule), l1.delta[37]: meaning … ±
    /// … engine …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (step, tensor, index) = (self.step, &self.tensor, self.index);
        match (&self.command, self.stage) {
            (Some(command), _) => write!(
                f,
                "at step {step} in {command}, {tensor}[{index}]: meaning {} ± {:.2e} engine {} (rel error {:.2e})",
                self.reference, self.tolerance, self.engine, self.relative
            ),
            (None, stage) => write!(
                f,
                "at step {step} in {tensor}[{index}]: {} {} {} {} (rel error {:.2e}, tolerance {:.2e})",
                if stage == Comparison::Shim { "authored" } else { "reference" },
                self.reference,
                if stage == Comparison::Shim { "fused" } else { "engine" },
                self.engine,
                self.relative,
                self.tolerance
            ),
        }
    }
}

impl fmt::Display for Unjudged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unjudged::NonFinite { step, tensor, index, command: None } => {
                write!(f, "the reference is not finite at step {step} in {tensor}[{index}]")
            }
            Unjudged::NonFinite { step, tensor, index, command: Some(command) } => {
                write!(f, "no bound can be formed at step {step} in {command}: {tensor}[{index}] is not finite")
            }
        }
    }
}
