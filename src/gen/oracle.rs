//! The oracle: the two sentences the gate exists for, checked on one case.
//!
//! Every accepted program computes what its graph computes: when `lower_graph_with` accepts a
//! case's graph, both interpreters run it over the case's tokens on the seeded random checkpoint
//! of its spec ([`crate::check::compare`]: the structure exactly, then the numerics), and a
//! disagreement is a soundness failure with its worst witness. Every refused graph names the right
//! error: the `LowerError` variant and its place (block and layer) must be one the case allows
//! ([`super::Case::expected`]). For every case with a spec, accepted or refused, the graph the shim
//! was given and the graph it made run in the reference interpreter and must agree exactly
//! ([`crate::check::compare_graph_runs`]): a shim that mis-fuses is a failure with its witness. The
//! one exception: a proved program whose proof covers both stages is first compared end to end,
//! with the graph the shim was given, and agreement there is its verdict; anything else is judged
//! stage by stage ([`proves_every_stage`]). A comparison that concludes nothing is counted as
//! inconclusive, never passed as agreement, and only for a reason that cannot hide a wrong
//! structure ([`Inconclusive`]).

use std::fmt;
use std::rc::Rc;

use super::case::{Case, Drawn, Input};
use super::mutation::Stage;
use super::outcome::{Expected, Outcome};
pub use super::stats::Stats;
use crate::check::{Unjudged, Verdict, Witness, compare, compare_graph_runs, compare_with, reference_run_with};
use crate::engine::Program;
use crate::engine::lower::{LowerError, lower_graph_with};
use crate::interp::Decoded;
use crate::ir::Graph;
use crate::model::author::decode_step;
use crate::model::random::random_checkpoint;
use crate::prove::{ProofOutcome, ProofVerdict, prove};

/// Every stage of a case: the authored graph, the graph `lower_graph` reads, and what it made of it.
/// A stage that leaves its graph as it is shares it with the stage before (one `Rc`, not a copy).
#[derive(Clone, Debug)]
pub struct Trace {
    /// The step the author wrote (for a spec), before any mutation.
    pub authored: Option<Rc<Graph>>,
    /// The graph the engine's shim left and `lower_graph_with` read (mutated at its stage).
    pub fused: Rc<Graph>,
    /// The graph the shim was given (the authored step or the case's graph, mutated when the
    /// mutation is of the authored graph) and what the shim made of it, before any mutation of
    /// the fused graph: the pair [`crate::check::compare_graph_runs`] judges.
    pub shim: (Rc<Graph>, Rc<Graph>),
    pub lowered: Result<Program, LowerError>,
}

/// Runs a case up to the lowering: author (or take the graph), mutate before or after the shim as
/// the mutation says, apply the shim, lower. An error says why the case cannot be run at all.
pub fn trace(case: &Case) -> Result<Trace, String> {
    trace_from(case, None, None)
}

/// [`trace`], starting from what drawing the case made ([`Drawn`]): the step of its spec, and that
/// step as the engine's default shim leaves it.
fn trace_from(case: &Case, authored: Option<Graph>, fused: Option<Graph>) -> Result<Trace, String> {
    let shim = case.shim();
    let authored = match (&case.input, authored) {
        (Input::Spec(_), Some(g)) => Some(Rc::new(g)),
        (Input::Spec(spec), None) => {
            Some(Rc::new(decode_step(spec).map_err(|e| format!("the author refused the spec: {e}"))?))
        }
        (Input::Graph { .. }, _) => None,
    };
    let mutate = |g: &Rc<Graph>, at: Stage| match &case.mutation {
        Some(m) if m.stage() == at => {
            m.apply(g).map(Rc::new).ok_or_else(|| format!("the mutation `{m}` does not apply"))
        }
        _ => Ok(Rc::clone(g)),
    };
    let mutated_after_default_shim =
        case.without.is_none() && case.mutation.as_ref().is_some_and(|m| m.stage() == Stage::Fused);
    let input = match (&case.input, &authored) {
        (Input::Graph { graph, .. }, _) => Rc::new(graph.clone()),
        (_, Some(g)) => Rc::clone(g),
        (_, None) => return Err("no step to lower".into()),
    };
    let input = mutate(&input, Stage::Authored)?;
    let prepared = Rc::new(match fused {
        Some(f) if mutated_after_default_shim => f,
        _ => shim.prepare(&input),
    });
    let fused = mutate(&prepared, Stage::Fused)?;
    let lowered = lower_graph_with(&fused, case.numerics, &shim);
    Ok(Trace { authored, fused, shim: (input, prepared), lowered })
}

/// The proof of an accepted case's program ([`crate::prove`]): the program against the graph the
/// lowering read, and that graph against the graph the shim read (the authored step, with a
/// mutation of the authored stage applied) where [`proves_every_stage`]. A mutation after the shim
/// has no authored graph to answer to, so then (and for a case given as a graph) the shim's stage
/// compares the fused graph with itself.
pub fn prove_trace(case: &Case, t: &Trace, program: &Program) -> ProofVerdict {
    let before_shim = if proves_every_stage(case) { &t.shim.0 } else { &t.fused };
    prove(before_shim, &t.fused, program)
}

/// What the oracle found on a case.
#[derive(Clone, Debug)]
pub enum Judgement {
    /// Accepted, as the case allows, and the interpreters agree; `proof` is the program's proof.
    Agreed { verdict: Verdict, proof: ProofOutcome },
    /// Refused, as the case allows.
    Refused { error: LowerError },
    /// Accepted, as the case allows, but the comparison concluded nothing, and why; `ProofOutcome`
    /// is the program's proof.
    Inconclusive(Inconclusive, ProofOutcome),
    /// A failure of the gate.
    Failure(Failure),
}

/// A failure of the gate on a case.
#[derive(Clone, Debug)]
pub enum Failure {
    /// Accepted, and the program computes something else than the graph: the worst witness, of
    /// the structure or of the numerics.
    Unsound { witness: Witness, program: String },
    /// The shim made a graph that computes something else than the graph it was given: the
    /// worst witness, and what `lower_graph` then did with the fused graph.
    MisFused { witness: Witness, found: Outcome },
    /// Accepted, and the proof refutes the program: the output and where its normal forms differ
    /// definitely ([`crate::prove`]).
    Refuted { refutation: String, program: String },
    /// An outcome the case does not allow (with the refusal's message when refused).
    WrongOutcome { expected: Expected, found: Outcome, message: String },
    /// The case could not be run: the author refused its spec, its mutation did not apply, or
    /// the interpreters could not start.
    Broken { why: String },
}

/// Runs `case` through the pipeline and judges it: see the module documentation.
pub fn judge(case: &Case) -> Judgement {
    judge_from(case, None, None)
}

/// [`judge`] of a drawn case, reusing the graphs its draw made.
pub fn judge_drawn(drawn: Drawn) -> Judgement {
    judge_from(&drawn.case, drawn.authored, drawn.fused)
}

fn judge_from(case: &Case, authored: Option<Graph>, fused: Option<Graph>) -> Judgement {
    let expected = case.expected();
    let t = match trace_from(case, authored, fused) {
        Ok(t) => t,
        Err(why) => return Judgement::Failure(Failure::Broken { why }),
    };
    let outcome = Outcome::of(&t.lowered);
    let checkpoint = case.spec().map(|spec| random_checkpoint(spec, case.seed));
    let tokens = case.tokens();
    let wrong = |message: String| {
        expected
            .as_ref()
            .filter(|e| !e.admits(&outcome))
            .map(|e| Judgement::Failure(Failure::WrongOutcome { expected: e.clone(), found: outcome.clone(), message }))
    };
    let agreed = |verdict: Verdict, proof: ProofOutcome| {
        wrong(format!("the program was accepted ({verdict})")).unwrap_or(Judgement::Agreed { verdict, proof })
    };
    let decoded = Decoded::default();
    // The reference's run of the graph the shim was given, on every case with a checkpoint.
    let given_run = checkpoint.as_ref().map(|ckpt| reference_run_with(&t.shim.0, ckpt, &tokens, &decoded));
    // End to end, where the proof covers every stage ([`proves_every_stage`]): a proved program
    // that agrees with the reference's run of the graph the shim was given is agreed on, without
    // the reference's run of the fused graph. Anything else (not proved, a disagreement, nothing
    // concluded) is judged stage by stage below, which names the stage a disagreement comes from.
    let mut proof = None;
    if let (Ok(program), Some(ckpt), Some(Ok(given))) = (&t.lowered, &checkpoint, &given_run)
        && proves_every_stage(case)
    {
        let verdict = prove_trace(case, &t, program);
        if verdict.is_proved()
            && let Ok(v @ Verdict::Agree { .. }) = compare_with(&t.shim.0, given, program, ckpt, &tokens)
        {
            return agreed(v, verdict.outcome());
        }
        proof = Some(verdict);
    }
    // Each stage on its own. The shim, on every case with a checkpoint: both graphs must run for a
    // comparison (a mutation of the authored graph may leave one the reference cannot run, which
    // lowering refuses). The reference's run of the fused graph, kept for the comparison with the
    // program when the graph the lowering read is that graph (no mutation after the shim): the
    // same graph on the same checkpoint and tokens, run once.
    let mut fused_run = None;
    if let (Some(ckpt), Some(Ok(a))) = (&checkpoint, &given_run)
        && let Ok(f) = reference_run_with(&t.shim.1, ckpt, &tokens, &decoded)
    {
        if let Ok(Some(witness)) = compare_graph_runs(&t.shim.0, a, &t.shim.1, &f) {
            return Judgement::Failure(Failure::MisFused { witness, found: outcome });
        }
        fused_run = Some(f).filter(|_| Rc::ptr_eq(&t.fused, &t.shim.1) || t.fused == t.shim.1);
    }
    let program = match &t.lowered {
        Err(error) => return wrong(error.to_string()).unwrap_or(Judgement::Refused { error: error.clone() }),
        Ok(p) => p,
    };
    let proof = match proof.unwrap_or_else(|| prove_trace(case, &t, program)) {
        ProofVerdict::Refuted(r) => {
            let refutation = ProofVerdict::Refuted(r).to_string();
            return Judgement::Failure(Failure::Refuted { refutation, program: program.to_string() });
        }
        v => v.outcome(),
    };
    let Some(checkpoint) = checkpoint else {
        return Judgement::Failure(Failure::Broken {
            why: "the graph was accepted, but the case names no spec to make its checkpoint from".into(),
        });
    };
    let verdict = match fused_run {
        Some(reference) => compare_with(&t.fused, &reference, program, &checkpoint, &tokens),
        None => compare(&t.fused, program, &checkpoint, &tokens),
    };
    let verdict = match verdict {
        Ok(v) => v,
        Err(e) => return Judgement::Failure(Failure::Broken { why: format!("the check could not run: {e}") }),
    };
    match verdict {
        Verdict::Disagree(witness) => Judgement::Failure(Failure::Unsound { witness, program: program.to_string() }),
        Verdict::Inconclusive(why) => {
            let why = Inconclusive { why, numerics: case.numerics };
            wrong(format!("the program was accepted ({why})")).unwrap_or(Judgement::Inconclusive(why, proof))
        }
        v => agreed(v, proof),
    }
}

/// Whether the proof of the case's program covers every stage from the graph the shim was given
/// (the shim's graph ≡ the fused graph ≡ the program, [`prove_trace`]): a case of a spec with no
/// mutation after the shim. There a proved program that agrees end to end needs no sample of
/// each stage apart: what that leaves to the proof alone is a fused graph off the given one and a
/// program off the fused graph by amounts that cancel at the sample.
fn proves_every_stage(case: &Case) -> bool {
    matches!(case.input, Input::Spec(_)) && case.mutation.as_ref().is_none_or(|m| m.stage() != Stage::Fused)
}

/// Why an accepted case's comparison concluded nothing ([`Unjudged`]), at the case's numerics.
/// The structural comparison is exact and never excused, so neither reason can stand for a value
/// that is wrong at f64: the reference itself went NaN or Inf (nothing was compared), or the
/// structure agreed and rounding at every store moves the output as far as a wrong program would.
#[derive(Clone, Debug)]
pub struct Inconclusive {
    pub why: Unjudged,
    pub numerics: crate::engine::Numerics,
}

impl Inconclusive {
    /// The reason's kind: `non-finite`.
    pub fn kind(&self) -> &'static str {
        self.why.kind()
    }
}

impl fmt::Display for Inconclusive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inconclusive ({}) at {}: {}", self.kind(), self.numerics, self.why)
    }
}

impl Judgement {
    /// Whether the gate failed on the case: an unsound program, an outcome the case does not
    /// allow, or a case that could not run.
    pub fn is_failure(&self) -> bool {
        matches!(self, Judgement::Failure(_))
    }

    /// What `lower_graph` did, when it ran.
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Judgement::Agreed { .. } | Judgement::Inconclusive(..) => Some(Outcome::Accepted),
            Judgement::Refused { error } => Some(Outcome::refused(error)),
            Judgement::Failure(Failure::Unsound { .. } | Failure::Refuted { .. }) => Some(Outcome::Accepted),
            Judgement::Failure(Failure::MisFused { found, .. }) => Some(found.clone()),
            Judgement::Failure(Failure::WrongOutcome { found, .. }) => Some(found.clone()),
            Judgement::Failure(Failure::Broken { .. }) => None,
        }
    }

    /// The line a corpus file states for this judgement: `accepted` only when the interpreters
    /// agree, else `accepted, but …`; a refusal as its outcome; a broken case as `broken: …`.
    pub fn outcome_line(&self) -> String {
        match self {
            Judgement::Agreed { .. } => "accepted".into(),
            Judgement::Inconclusive(why, _) => format!("accepted, but {why}"),
            Judgement::Failure(Failure::Unsound { witness, .. }) => {
                format!("accepted, but {}", Verdict::Disagree(witness.clone()))
            }
            Judgement::Failure(Failure::MisFused { witness, found }) => {
                format!("{found}, but {}", Verdict::Disagree(witness.clone()))
            }
            Judgement::Failure(Failure::Refuted { refutation, .. }) => format!("accepted, but {refutation}"),
            Judgement::Failure(Failure::Broken { why }) => format!("broken: {why}"),
            _ => self.outcome().map(|o| o.to_string()).unwrap_or_default(),
        }
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Judgement::Agreed { verdict, proof } => write!(f, "accepted: {verdict}; proof: {proof}"),
            Judgement::Refused { error } => write!(f, "{}: {error}", Outcome::refused(error)),
            Judgement::Inconclusive(why, _) => write!(f, "accepted: {why}"),
            Judgement::Failure(Failure::Unsound { witness, program }) => write!(
                f,
                "SOUNDNESS FAILURE: the program was accepted and computes something else than its graph: {}\n{program}",
                Verdict::Disagree(witness.clone())
            ),
            Judgement::Failure(Failure::MisFused { witness, found }) => write!(
                f,
                "SHIM FAILURE: the fused graph computes something else than the graph the shim was given ({found}): {}",
                Verdict::Disagree(witness.clone())
            ),
            Judgement::Failure(Failure::Refuted { refutation, program }) => {
                write!(f, "SOUNDNESS FAILURE: the program was accepted and its proof is {refutation}\n{program}")
            }
            Judgement::Failure(Failure::WrongOutcome { expected, found, message }) => {
                write!(f, "WRONG OUTCOME: expected {expected}, found {found}: {message}")
            }
            Judgement::Failure(Failure::Broken { why }) => write!(f, "BROKEN CASE: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The end-to-end path agrees only on agreement: a bug planted in either interpreter still
    //! reaches its stage-by-stage verdict, named at the stage that catches it.

    use super::*;
    use crate::check::Comparison;
    use crate::engine::{Numerics, Storage};
    use crate::model::presets::preset;
    use crate::planted::{self, Bug};

    /// The oracle's judgement of the tiny preset at `numerics`, with `bug` planted if any.
    fn judged(bug: Option<Bug>, numerics: Numerics) -> Judgement {
        let spec = preset("tiny").expect("the tiny preset");
        let case = Case { input: Input::Spec(spec), without: None, numerics, mutation: None, seed: 7, steps: 4 };
        match bug {
            Some(bug) => planted::with(bug, || judge(&case)),
            None => judge(&case),
        }
    }

    #[test]
    fn a_planted_bug_is_unsound_at_its_stage_and_the_clean_case_agrees() {
        let f16 = Numerics { activations: Storage::F16, kv_cache: Storage::F16, ..Numerics::F32 };
        let cases = [
            (Bug::EngineRopeBackwards, Numerics::F32, Comparison::Structure),
            (Bug::EngineL2EpsOutsideSqrt, Numerics::BF16, Comparison::Structure),
            (Bug::EngineGroupedValueHeads, Numerics::F32, Comparison::Structure),
            (Bug::ReferenceTiledKvHeads, Numerics::F32, Comparison::Structure),
            (Bug::EngineF16AsBf16, f16, Comparison::Command),
        ];
        for (bug, numerics, stage) in cases {
            let clean = judged(None, numerics);
            assert!(
                matches!(clean, Judgement::Agreed { proof: ProofOutcome::Proved, .. }),
                "{bug:?} unplanted: {clean}"
            );
            let planted = judged(Some(bug), numerics);
            assert!(
                matches!(&planted, Judgement::Failure(Failure::Unsound { witness, .. }) if witness.stage == stage),
                "{bug:?}: {planted}"
            );
        }
    }
}
