//! The oracle: the two sentences the gate exists for, checked on one case.
//!
//! Every accepted program computes what its graph computes: when `lower_graph_with` accepts a
//! case's graph, both interpreters run it over the case's tokens on the seeded random checkpoint
//! of its spec, and a disagreement is a soundness failure with its witness. Every refused graph
//! names the right error: the `LowerError` variant and its place (block and layer) must be one the
//! case allows ([`super::Case::expected`]). A comparison that concludes nothing is counted as
//! inconclusive, never passed as agreement: the reference went NaN or Inf; or the engine is off by
//! more than the tolerance in a way the program's structure does not explain ([`Inconclusive`]:
//! reduced storage where the same graph agrees at f32; an f32 graph that amplifies one ulp of its
//! weights beyond what an f32 comparison can bound).

use std::fmt;

use super::case::{Case, Drawn, Input};
use super::mutation::Stage;
use super::outcome::{Expected, Outcome};
pub use super::stats::Stats;
use crate::check::{Verdict, Witness, compare};
use crate::engine::lower::{LowerError, lower_graph_with};
use crate::engine::{Numerics, Program};
use crate::ir::Graph;
use crate::model::Checkpoint;
use crate::model::author::decode_step;
use crate::model::random::random_checkpoint;
use crate::prove::{ProofOutcome, ProofVerdict, prove};

/// Every stage of a case: the authored graph, the graph `lower_graph` reads, and what it made of it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The step the author wrote (for a spec), before any mutation.
    pub authored: Option<Graph>,
    /// The graph the engine's shim left and `lower_graph_with` read (mutated at its stage).
    pub fused: Graph,
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
        (Input::Spec(_), Some(g)) => Some(g),
        (Input::Spec(spec), None) => Some(decode_step(spec).map_err(|e| format!("the author refused the spec: {e}"))?),
        (Input::Graph { .. }, _) => None,
    };
    let mutate = |g: Graph, at: Stage| match &case.mutation {
        Some(m) if m.stage() == at => m.apply(&g).ok_or_else(|| format!("the mutation `{m}` does not apply")),
        _ => Ok(g),
    };
    let mutated_after_default_shim =
        case.without.is_none() && case.mutation.as_ref().is_some_and(|m| m.stage() == Stage::Fused);
    let prepared = match fused {
        Some(f) if mutated_after_default_shim => f,
        _ => {
            let graph = match (&case.input, &authored) {
                (Input::Graph { graph, .. }, _) => graph.clone(),
                (_, Some(g)) => g.clone(),
                (_, None) => return Err("no step to lower".into()),
            };
            shim.prepare(&mutate(graph, Stage::Authored)?)
        }
    };
    let fused = mutate(prepared, Stage::Fused)?;
    let lowered = lower_graph_with(&fused, case.numerics, &shim);
    Ok(Trace { authored, fused, lowered })
}

/// The proof of an accepted case's program ([`crate::prove`]): the program against the graph the
/// lowering read, and that graph against the graph the shim read: the authored step with a
/// mutation of the authored stage applied. A mutation after the shim has no authored graph to
/// answer to, so then (and for a case given as a graph) the shim's stage compares the fused graph
/// with itself.
pub fn prove_trace(case: &Case, authored: Option<&Graph>, fused: &Graph, program: &Program) -> ProofVerdict {
    let before_shim = match (authored, &case.mutation) {
        (Some(a), Some(m)) if m.stage() == Stage::Authored => m.apply(a),
        (Some(a), None) => Some(a.clone()),
        _ => None,
    };
    prove(before_shim.as_ref().unwrap_or(fused), fused, program)
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
    /// Accepted, and the program computes something else than the graph: the witness.
    Unsound { witness: Witness, program: String },
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
    let wrong = |message: String| {
        expected
            .as_ref()
            .filter(|e| !e.admits(&outcome))
            .map(|e| Judgement::Failure(Failure::WrongOutcome { expected: e.clone(), found: outcome.clone(), message }))
    };
    let program = match t.lowered {
        Err(error) => return wrong(error.to_string()).unwrap_or(Judgement::Refused { error }),
        Ok(p) => p,
    };
    let proof = match prove_trace(case, t.authored.as_ref(), &t.fused, &program) {
        ProofVerdict::Refuted(r) => {
            let refutation = ProofVerdict::Refuted(r).to_string();
            return Judgement::Failure(Failure::Refuted { refutation, program: program.to_string() });
        }
        v => v.outcome(),
    };
    let Some(spec) = case.spec() else {
        return Judgement::Failure(Failure::Broken {
            why: "the graph was accepted, but the case names no spec to make its checkpoint from".into(),
        });
    };
    let checkpoint = random_checkpoint(spec, case.seed);
    let verdict = match compare(&t.fused, &program, &checkpoint, &case.tokens()) {
        Ok(v) => v,
        Err(e) => return Judgement::Failure(Failure::Broken { why: format!("the check could not run: {e}") }),
    };
    let tokens = case.tokens();
    let settled = match verdict {
        Verdict::Disagree(witness) if case.numerics != Numerics::F32 => {
            // Reduced storage: the tolerance is measured, not proved. The same graph at f32 decides
            // whether the program computes what the graph says.
            let at_f32 = lower_graph_with(&t.fused, Numerics::F32, &case.shim())
                .map_err(|e| e.to_string())
                .and_then(|p| compare(&t.fused, &p, &checkpoint, &tokens).map(|v| (p, v)).map_err(|e| e.to_string()));
            match at_f32 {
                Ok((_, f32 @ Verdict::Agree { .. })) => {
                    Ok(Inconclusive::ReducedStorage { verdict: Verdict::Disagree(witness), at_f32: f32 })
                }
                Ok((p, Verdict::Disagree(w))) => at_f32_disagreement(w, p.to_string(), &t.fused, &checkpoint, &tokens),
                _ => Err(Failure::Unsound { witness, program: program.to_string() }),
            }
        }
        Verdict::Disagree(witness) => at_f32_disagreement(witness, program.to_string(), &t.fused, &checkpoint, &tokens),
        Verdict::Inconclusive { .. } => Ok(Inconclusive::NonFinite { verdict }),
        v => {
            return wrong(format!("the program was accepted ({v})")).unwrap_or(Judgement::Agreed { verdict: v, proof });
        }
    };
    match settled {
        Err(f) => Judgement::Failure(f),
        Ok(why) => wrong(format!("the program was accepted ({why})")).unwrap_or(Judgement::Inconclusive(why, proof)),
    }
}

/// Why an accepted case's comparison concluded nothing.
#[derive(Clone, Debug)]
pub enum Inconclusive {
    /// The reference went NaN or Inf.
    NonFinite { verdict: Verdict },
    /// At reduced storage the engine is off the reference by more than the tolerance measured on
    /// the reference, while the same graph lowered at f32 agrees: the program's structure is right,
    /// and the divergence is rounding the measured tolerance did not bound.
    ReducedStorage { verdict: Verdict, at_f32: Verdict },
    /// At f32 the engine is off by more than the fixed f32 tolerance, but by less than
    /// [`ILL_CONDITIONED`] times what the reference itself moves when every weight moves by one
    /// unit roundoff (`per_ulp`, relative to the tensor's scale): the graph amplifies rounding
    /// beyond what an f32 comparison can bound (tiny heads, a norm of a near-zero vector).
    IllConditioned { verdict: Verdict, per_ulp: f64 },
}

/// How many times the reference's own sensitivity to a one-ulp change of every weight an f32
/// disagreement must exceed to be a soundness failure. The engine rounds every value it computes
/// by up to one ulp, many times along each path, which the weight perturbation does not model; a
/// well-conditioned graph moves by about one ulp of its scale per ulp, so the bound (≈ 6·10⁻⁵ of
/// the scale) stays under the fixed f32 tolerance and never excuses it. A wrong program is off by
/// 0.1–1 of the scale (every bug class the gate is meant to catch), which exceeds the bound
/// unless one ulp on every weight moves the reference by 10⁻⁴ of its scale: a graph no f32
/// comparison can judge.
pub const ILL_CONDITIONED: f64 = 1024.0;

/// A disagreement at f32: unsound, unless the graph is ill-conditioned enough to explain it.
fn at_f32_disagreement(
    witness: Witness,
    program: String,
    graph: &Graph,
    checkpoint: &Checkpoint,
    tokens: &[u32],
) -> Result<Inconclusive, Failure> {
    let scale = witness.tolerance / crate::check::tolerance(None);
    let error = (witness.engine - witness.reference).abs() / scale;
    match sensitivity_per_ulp(graph, checkpoint, tokens) {
        Some(per_ulp) if error <= ILL_CONDITIONED * per_ulp * F32_U => {
            Ok(Inconclusive::IllConditioned { verdict: Verdict::Disagree(witness), per_ulp })
        }
        _ => Err(Failure::Unsound { witness, program }),
    }
}

/// The unit roundoff of f32, 2⁻²⁴.
const F32_U: f64 = 1.0 / 16_777_216.0;

/// How far the reference moves, relative to each tensor's scale, when every checkpoint value moves
/// by `2⁻²⁰` of itself, per unit of that ([`crate::check::sensitivity_per_unit`]).
fn sensitivity_per_ulp(graph: &Graph, checkpoint: &Checkpoint, tokens: &[u32]) -> Option<f64> {
    crate::check::sensitivity_per_unit(graph, checkpoint, tokens, 2f64.powi(-20)).ok()
}

impl fmt::Display for Inconclusive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inconclusive::NonFinite { verdict } => write!(f, "{verdict}"),
            Inconclusive::ReducedStorage { verdict, at_f32 } => write!(
                f,
                "inconclusive at reduced storage: {verdict}, beyond the tolerance measured on the reference, \
                 while at f32 the program agrees ({at_f32})"
            ),
            Inconclusive::IllConditioned { verdict, per_ulp } => write!(
                f,
                "inconclusive, ill-conditioned: {verdict}, while one ulp on every weight moves the reference by \
                 {per_ulp:.2e} ulp of its scale"
            ),
        }
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
