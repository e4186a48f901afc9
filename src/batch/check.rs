//! The batched check: the engine interpreter runs the whole plan on its slot pool; the reference
//! interpreter runs each sequence alone, from the zero state, over the history the schedule gives
//! it (a fork's child continues its parent's history; a rollback drops the last `n` tokens).
//!
//! Every row of every step that belongs to a sequence is compared (its logits), then the state of
//! every sequence live at the end. The split is the single-sequence check's
//! ([`crate::check::compare_with`]), at every numerics, each comparison judging its worst value
//! ([`crate::check::tolerance`] has the reasoning):
//!
//! 1. the structure: the plan run in f64 with every stored value kept exactly
//!    ([`Rounding::Exact`]), against each sequence alone on the reference, mapped to the
//!    reference's layouts by [`crate::check::mapped`], within [`EXACT`] — no excuse;
//! 2. the numerics: the plan run as the engine runs it beside its f64 shadow ([`Shadowed`]), the
//!    engine's half against the shadow's in the engine's layouts, within the floor or the
//!    tolerance the f32-arithmetic model ([`Noisy`]) measures on the exact run, as
//!    [`judge_numerics`] says; at reduced storage a gap within [`MARGIN`] times what rounding flips
//!    do (an f64 run whose stores round, [`Rounding::ModelStored`]) is inconclusive, as is any gap
//!    when all is f32 (the f32-arithmetic model underestimated), and a tolerance beyond [`LIMIT`];
//! 3. the batched step: those runs step a batch's rows one after another, and the engine as it runs
//!    in f32 steps rows that share no storage as one batched step, whose every value must be the
//!    judged engine half's to the bit (a disagreement of tolerance 0 otherwise: the judged values
//!    would not be the ones the engine computes).
//!
//! A disagreement names the sequence, the step, the tensor, the index and both values of the first
//! tensor out of tolerance (its worst value); the refusal of an invalid schedule or plan is the
//! verdict too.

use std::collections::HashMap;
use std::fmt;

use super::plan::{Lowered, lower_schedule};
use super::run::{BatchArithmetic, BatchRunError, BatchRunner};
use super::schedule::{Schedule, Seq};
use super::{BatchError, BatchProgram};
use crate::check::{CheckError, EXACT, LIMIT, MARGIN, Stage, Unjudged, Witness, Worst, flat, judge_numerics, mapped};
use crate::engine::numerics::Numerics;
use crate::engine::run::{Noisy, Real, Rounding, Shadowed, StateData};
use crate::interp::{Runner, StateSnapshot};
use crate::ir::Graph;
use crate::model::Checkpoint;

/// What the batched check found.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchVerdict {
    /// Every compared value is within tolerance. `structure` is the largest error of the exact
    /// run against the reference (relative to its tensor's scale, within [`EXACT`]); `max_abs`
    /// and `max_rel` are the largest errors of the engine as it runs against its f64 shadow, and
    /// `tolerance` the numerics tolerance they are within (the floor, or the model's, as the
    /// single check's [`crate::check::Verdict::Agree`]).
    Agree { steps: usize, rows: usize, values: usize, structure: f64, max_abs: f64, max_rel: f64, tolerance: f64 },
    /// The schedule or the plan is refused by name, before anything runs.
    Refused(BatchError),
    /// The first tensor out of tolerance, at its worst value, in the first comparison that found
    /// one.
    Disagree(BatchWitness),
    /// Nothing can be concluded, for one of the single-sequence check's reasons; `seq` is the
    /// sequence its value belongs to (none for a tolerance beyond [`LIMIT`], which is the whole
    /// plan's).
    Inconclusive { seq: Option<Seq>, why: Unjudged },
}

/// A value the batched engine computes differently from the sequence run alone (the structure),
/// or from its own f64 shadow (the numerics).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchWitness {
    pub seq: Seq,
    /// Which comparison found it.
    pub stage: Stage,
    /// The step (0-based, counting the schedule's decodes); the number of steps for the end state.
    pub step: usize,
    /// `logits`, or the name of a piece of carried state.
    pub tensor: String,
    /// The index in the tensor, row-major in the reference's layout (the engine's for
    /// [`Stage::Numerics`]).
    pub index: usize,
    /// The value judged against: the reference's (the shadow's for [`Stage::Numerics`]).
    pub reference: f64,
    /// The value judged: the engine's.
    pub engine: f64,
    /// The tolerance it is out of, in absolute terms.
    pub tolerance: f64,
    /// The error relative to the tensor's scale.
    pub relative: f64,
    /// Whether it is the batched step's value (`engine`) against the same rows stepped one after
    /// another (`reference`), which must agree to the bit (tolerance 0).
    pub batched: bool,
}

impl BatchWitness {
    /// The single check's witness `w`, as a value of sequence `seq`.
    fn of(seq: Seq, w: &Witness) -> BatchWitness {
        BatchWitness {
            seq,
            stage: w.stage,
            step: w.step,
            tensor: w.tensor.clone(),
            index: w.index,
            reference: w.reference,
            engine: w.engine,
            tolerance: w.tolerance,
            relative: w.relative,
            batched: false,
        }
    }
}

impl BatchVerdict {
    /// The verdict's word, stable for counting and for the command line: `agree`, `refused`,
    /// `disagree`, `inconclusive`.
    pub fn name(&self) -> &'static str {
        match self {
            BatchVerdict::Agree { .. } => "agree",
            BatchVerdict::Refused(_) => "refused",
            BatchVerdict::Disagree(_) => "disagree",
            BatchVerdict::Inconclusive { .. } => "inconclusive",
        }
    }
}

impl fmt::Display for BatchVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchVerdict::Agree { steps, rows, values, structure, max_abs, max_rel, tolerance } => write!(
                f,
                "agree over {steps} steps ({rows} rows, {values} values): structure within {structure:.2e}; numerics \
                 max abs error {max_abs:.2e}, max rel error {max_rel:.2e} (tolerance {tolerance:.2e})"
            ),
            BatchVerdict::Refused(e) => write!(f, "refused ({}): {e}", e.name()),
            BatchVerdict::Disagree(w) => write!(
                f,
                "disagree ({}): {} at step {} in {}[{}]: {} {} {} {} (rel error {:.2e}, tolerance {:.2e})",
                if w.batched { "batched step" } else { w.stage.name() },
                w.seq,
                w.step,
                w.tensor,
                w.index,
                match (w.batched, w.stage) {
                    (true, _) => "rows one by one",
                    (false, Stage::Numerics) => "shadow",
                    (false, _) => "reference",
                },
                w.reference,
                if w.batched { "batched" } else { "engine" },
                w.engine,
                w.relative,
                w.tolerance
            ),
            BatchVerdict::Inconclusive { seq: Some(seq), why } => {
                write!(f, "inconclusive ({}): {seq}: {why}", why.kind())
            }
            BatchVerdict::Inconclusive { seq: None, why } => write!(f, "inconclusive ({}): {why}", why.kind()),
        }
    }
}

/// Lowers `schedule` onto `pool` and checks the plan; a schedule the pool refuses is the verdict.
pub fn check(
    graph: &Graph,
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    schedule: &Schedule,
) -> Result<BatchVerdict, CheckError> {
    match lower_schedule(schedule, pool) {
        Ok(lowered) => check_lowered(graph, pool, checkpoint, &lowered),
        Err(e) => Ok(BatchVerdict::Refused(e)),
    }
}

/// Each sequence's reference runner and the history it has been fed.
struct Reference<'c> {
    graph: &'c Graph,
    checkpoint: &'c Checkpoint,
    runners: HashMap<Seq, (Vec<u32>, Runner<'c>)>,
}

impl<'c> Reference<'c> {
    /// `seq`'s runner after feeding `history` from the zero state (replayed when the runner holds
    /// another history: after a fork or a rollback).
    fn at(&mut self, seq: Seq, history: &[u32]) -> Result<&mut (Vec<u32>, Runner<'c>), CheckError> {
        let fresh = self.runners.get(&seq).is_none_or(|(h, _)| h != history);
        if fresh {
            let mut runner = Runner::new(self.graph, self.checkpoint)?;
            for &t in history {
                runner.step(t)?;
            }
            self.runners.insert(seq, (history.to_vec(), runner));
        }
        self.runners.get_mut(&seq).ok_or_else(|| CheckError::UnmatchedState(seq.to_string()))
    }

    fn logits(&mut self, seq: Seq, before: &[u32], token: u32) -> Result<Vec<f64>, CheckError> {
        let (h, runner) = self.at(seq, before)?;
        let logits = runner.step(token)?;
        h.push(token);
        Ok(logits)
    }

    fn state(&mut self, seq: Seq, history: &[u32]) -> Result<StateSnapshot, CheckError> {
        Ok(self.at(seq, history)?.1.state())
    }
}

/// What the reference computes for a plan's trace: each row's logits, in the trace's order, and the
/// state of each sequence live at the end, in the trace's order of them.
struct Expected {
    rows: Vec<(Seq, usize, Vec<f64>)>,
    states: Vec<(Seq, StateSnapshot)>,
}

impl Expected {
    /// Each sequence alone on the reference, over the history the trace gives it.
    fn of(graph: &Graph, checkpoint: &Checkpoint, lowered: &Lowered) -> Result<Expected, CheckError> {
        let mut reference = Reference { graph, checkpoint, runners: HashMap::new() };
        let mut rows = vec![];
        for (step, meant) in lowered.trace.steps.iter().enumerate() {
            for row in meant {
                rows.push((row.seq, step, reference.logits(row.seq, &row.before, row.token)?));
            }
        }
        let mut states = vec![];
        for (seq, _, history) in &lowered.trace.live {
            states.push((*seq, reference.state(*seq, history)?));
        }
        Ok(Expected { rows, states })
    }

    /// Where the reference first went NaN or Inf (the end state counted at step `steps`), if it
    /// did.
    fn non_finite(&self, graph: &Graph, steps: usize) -> Option<BatchVerdict> {
        let at = |seq: Seq, step: usize, tensor: &str, values: &[f64]| {
            values.iter().position(|x| !x.is_finite()).map(|index| BatchVerdict::Inconclusive {
                seq: Some(seq),
                why: Unjudged::NonFinite { step, tensor: tensor.to_string(), index },
            })
        };
        let name = |index: usize| graph.states.get(index).map_or("state", |s| graph.name_of(s.read));
        self.rows.iter().find_map(|(seq, step, l)| at(*seq, *step, "logits", l)).or_else(|| {
            self.states
                .iter()
                .find_map(|(seq, snap)| snap.entries.iter().find_map(|e| at(*seq, steps, name(e.index), &e.values)))
        })
    }
}

/// What a batched engine run computes for a plan's trace, in the engine's layouts: each row's
/// logits, in the trace's order, and the state of each sequence live at the end (at step `steps`).
struct Ran<R> {
    rows: Vec<(Seq, usize, Vec<R>)>,
    states: Vec<(Seq, Vec<StateData<R>>)>,
    steps: usize,
}

/// Runs the plan of `lowered` on `pool` in the arithmetic `R` with `rounding`: what it computes,
/// or the refusal the runner met.
fn engine_run<R: BatchArithmetic>(
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    lowered: &Lowered,
    rounding: Rounding,
) -> Result<Result<Ran<R>, BatchError>, CheckError> {
    let refused = |e: BatchRunError| match e {
        BatchRunError::Plan(e) => Ok(Err(e)),
        BatchRunError::Engine(e) => Err(CheckError::Engine(e)),
    };
    let mut engine = match BatchRunner::<R>::with_arithmetic(pool, checkpoint, rounding) {
        Ok(e) => e,
        Err(e) => return refused(e),
    };
    let run = match engine.run(&lowered.plan) {
        Ok(r) => r,
        Err(e) => return refused(e),
    };
    let mut rows = vec![];
    for (step, meant) in lowered.trace.steps.iter().enumerate() {
        for (r, row) in meant.iter().enumerate() {
            // A row the plan did not run compares as an empty tensor: a witness at index 0.
            let logits = run.logits.get(step).and_then(|s| s.get(r)).cloned().unwrap_or_default();
            rows.push((row.seq, step, logits));
        }
    }
    let mut states = vec![];
    for (seq, slot, _) in &lowered.trace.live {
        let state = engine.slot_state(*slot).ok_or_else(|| CheckError::UnmatchedState(format!("slot {slot}")))?;
        states.push((*seq, state.states));
    }
    Ok(Ok(Ran { rows, states, steps: lowered.trace.steps.len() }))
}

impl<R: Real> Ran<R> {
    /// The same run with `f` applied to every value.
    fn map<S>(&self, f: impl Fn(R) -> S + Copy) -> Ran<S> {
        Ran {
            rows: self.rows.iter().map(|(seq, step, l)| (*seq, *step, l.iter().map(|&x| f(x)).collect())).collect(),
            states: self
                .states
                .iter()
                .map(|(seq, states)| {
                    let states = states
                        .iter()
                        .map(|s| StateData { name: s.name.clone(), layer: s.layer, value: s.value.map(f) })
                        .collect();
                    (*seq, states)
                })
                .collect(),
            steps: self.steps,
        }
    }

    /// Compares `other`'s values with these, tensor by tensor in the trace's order, in the
    /// engine's layouts, into `judge`.
    fn compare_with<S: Real>(&self, other: &Ran<S>, judge: &mut Judge) {
        let wide = |l: &[R]| l.iter().map(|x| x.wide()).collect::<Vec<f64>>();
        for ((seq, step, x), (_, _, y)) in self.rows.iter().zip(&other.rows) {
            judge.tensor(*seq, *step, "logits", &wide(x), &y.iter().map(|v| v.wide()).collect::<Vec<f64>>());
        }
        for ((seq, xs), (_, ys)) in self.states.iter().zip(&other.states) {
            for (x, y) in xs.iter().zip(ys) {
                judge.tensor(*seq, self.steps, &x.name, &flat(&x.value), &flat(&y.value));
            }
        }
    }
}

/// A running comparison over a plan's tensors in the trace's order: the single check's [`Worst`]
/// (its largest errors, its worst value out of tolerance), the first tensor out of tolerance (at
/// its worst value), and the sequence the worst value belongs to.
struct Judge {
    worst: Worst,
    first: Option<BatchWitness>,
    worst_seq: Option<Seq>,
}

impl Judge {
    fn new(stage: Stage, tol: f64) -> Judge {
        Judge { worst: Worst::new(stage, tol), first: None, worst_seq: None }
    }

    /// Compares one tensor of sequence `seq`, `got` against `want`, on `want`'s scale.
    fn tensor(&mut self, seq: Seq, step: usize, name: &str, want: &[f64], got: &[f64]) {
        let before = self.worst.witness.as_ref().map(|w| w.relative);
        self.worst.tensor(step, name, want, got);
        // The worst value changes only to a strictly worse one: then it is this tensor's.
        if let Some(w) = &self.worst.witness
            && before != Some(w.relative)
        {
            self.worst_seq = Some(seq);
            if self.first.is_none() {
                self.first = Some(BatchWitness::of(seq, w));
            }
        }
    }

    /// The worst value out of tolerance, as a value of its sequence.
    fn worst(&self) -> Option<(Seq, Witness)> {
        Some((self.worst_seq?, self.worst.witness.clone()?))
    }
}

/// Checks a lowered schedule (its plan possibly written by hand or mutated; its trace the
/// schedule's meaning): the plan is validated, run on the engine, and compared row by row with
/// each sequence run alone on the reference, the structure first, then the numerics (see the module
/// documentation). A run the engine cannot start or finish on the plan's account is the refusal.
pub fn check_lowered(
    graph: &Graph,
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    lowered: &Lowered,
) -> Result<BatchVerdict, CheckError> {
    if let Err(e) = lowered.plan.validate(pool) {
        return Ok(BatchVerdict::Refused(e));
    }
    let exact = match engine_run::<f64>(pool, checkpoint, lowered, Rounding::Exact)? {
        Ok(r) => r,
        Err(e) => return Ok(BatchVerdict::Refused(e)),
    };
    let steps = lowered.trace.steps.len();
    let reference = Expected::of(graph, checkpoint, lowered)?;
    if let Some(v) = reference.non_finite(graph, steps) {
        return Ok(v);
    }
    let mut structure = Judge::new(Stage::Structure, EXACT);
    for ((seq, step, want), (_, _, got)) in reference.rows.iter().zip(&exact.rows) {
        structure.tensor(*seq, *step, "logits", want, got);
    }
    for ((seq, snapshot), (_, states)) in reference.states.iter().zip(&exact.states) {
        for s in states {
            let (want, got) =
                mapped(graph, snapshot, &s.name, &s.value).ok_or_else(|| CheckError::UnmatchedState(s.name.clone()))?;
            structure.tensor(*seq, steps, &s.name, &want, &got);
        }
    }
    if let Some(w) = structure.first {
        return Ok(BatchVerdict::Disagree(w));
    }
    // Every later run follows the plan the exact run followed, so none meets a refusal it did not.
    let again = |e: BatchError| CheckError::NotJudged(format!("a run refused the plan the exact run ran: {e}"));
    let shadowed = engine_run::<Shadowed>(pool, checkpoint, lowered, Rounding::Stored)?.map_err(again)?;
    let (engine, shadow) = (shadowed.map(|x| f64::from(x.lo)), shadowed.map(|x| x.hi));
    let (numerics, tol) = judge_numerics(
        |tol| {
            let mut numerics = Judge::new(Stage::Numerics, tol);
            shadow.compare_with(&engine, &mut numerics);
            numerics
        },
        |numerics| numerics.first.is_some(),
        || {
            let model = engine_run::<Noisy>(pool, checkpoint, lowered, Rounding::Model)?.map_err(again)?;
            let mut effect = Judge::new(Stage::Numerics, f64::INFINITY);
            exact.compare_with(&model, &mut effect);
            Ok::<_, CheckError>(effect.worst.max_rel)
        },
    )?;
    if let (Some(first), Some((seq, worst))) = (numerics.first.clone(), numerics.worst()) {
        if pool.program.numerics != Numerics::F32 {
            // Flips: the engine's f32 arithmetic put a value on the other side of a rounding
            // boundary than the shadow's f64 did, and the two runs went apart from there. Judged on
            // the worst value, as the single check judges it.
            let flipped = engine_run::<f64>(pool, checkpoint, lowered, Rounding::ModelStored)?.map_err(again)?;
            let mut flips = Judge::new(Stage::Numerics, f64::INFINITY);
            shadow.compare_with(&flipped, &mut flips);
            let bound = MARGIN * flips.worst.max_rel;
            if worst.relative <= bound {
                return Ok(BatchVerdict::Inconclusive {
                    seq: Some(seq),
                    why: Unjudged::RoundingFlips { witness: worst, bound },
                });
            }
        } else {
            // All f32: nothing is stored below it, and the exact run of the same units matched the
            // reference, so the gap is f32 rounding beyond its model (`Unjudged::F32BeyondModel`).
            return Ok(BatchVerdict::Inconclusive { seq: Some(seq), why: Unjudged::F32BeyondModel { witness: worst } });
        }
        return Ok(BatchVerdict::Disagree(first));
    }
    // The runs above step rows one after another; the engine runs a step whose rows share no
    // storage as one batched step (`EngineRunner::step_batch`). Its values must be the judged
    // engine half's to the bit (the kernels' rule: a vector's sum has one order whatever its
    // batch), or the verdict above would be about another computation than the one the engine runs.
    let batched = engine_run::<f32>(pool, checkpoint, lowered, Rounding::Stored)?.map_err(again)?;
    let mut same = Judge::new(Stage::Numerics, 0.0);
    engine.compare_with(&batched.map(f64::from), &mut same);
    if let Some(w) = same.first {
        return Ok(BatchVerdict::Disagree(BatchWitness { batched: true, ..w }));
    }
    if tol > LIMIT {
        return Ok(BatchVerdict::Inconclusive {
            seq: None,
            why: Unjudged::RoundingDominates { structure: structure.worst.max_rel, tolerance: tol },
        });
    }
    Ok(BatchVerdict::Agree {
        steps,
        rows: reference.rows.len(),
        values: numerics.worst.values,
        structure: structure.worst.max_rel,
        max_abs: numerics.worst.max_abs,
        max_rel: numerics.worst.max_rel,
        tolerance: tol,
    })
}

#[cfg(test)]
mod tests {
    //! The batched check catches what the single check catches, at the stage that must catch it,
    //! at every numerics: a bug planted in the engine's units is a disagreement of the sequence and
    //! step that first runs it, and the check agrees once it is gone.

    use super::*;
    use crate::engine::{Storage, lower::lower_graph, shim::EngineShim};
    use crate::model::{author::decode_step, presets, random::random_checkpoint};
    use crate::planted::{self, Bug};

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    /// Two sequences in a batch of two, a fork and a rollback: every way a state moves.
    const SCHEDULE: &str = "admit s0 @0\nadmit s1 @1\ndecode s0=3 s1=9\nfork s0 -> s2 @2\ndecode s2=1 s1=4\n\
                            decode s0=5 s2=2\nrollback s2 1\ndecode s2=7 s1=6\n";

    /// The batched check's verdict on the tiny preset, changed by `edit`, at `numerics`.
    fn verdict_of(edit: fn(&mut crate::model::ModelSpec), numerics: Numerics) -> Result<BatchVerdict> {
        let mut spec = presets::preset("tiny").ok_or("no such preset")?;
        edit(&mut spec);
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let pool = BatchProgram::new(lower_graph(&graph, numerics)?, 3, 2, 2, 16)?;
        Ok(check(&graph, &pool, &random_checkpoint(&spec, 1), &SCHEDULE.parse()?)?)
    }

    #[test]
    fn every_planted_engine_bug_is_a_disagreement_at_its_stage_at_its_numerics() -> Result<()> {
        let f16 = Numerics { activations: Storage::F16, kv_cache: Storage::F16, ..Numerics::F32 };
        let large_eps: fn(&mut crate::model::ModelSpec) = |s| s.rms_eps = 1e-3;
        // (bug, spec edit, numerics, the stage that must catch it, the first row it shows in):
        // the single check's table (`check::tests`), run through the pool. Every bug but RoPE's
        // shows in the first row that runs; RoPE is the identity at position 0, so it shows first
        // in s2's row at step 1, the first row at position 1. The last bug is invisible to the
        // structure, which keeps every stored value exactly; the old batched check refused to
        // judge it at all.
        type Edit = fn(&mut crate::model::ModelSpec);
        type Case = (Bug, Edit, Numerics, Stage, (Seq, usize));
        let (s0, s2) = (Seq(0), Seq(2));
        let cases: [Case; 5] = [
            (Bug::EngineGatedNormEpsFixed, large_eps, Numerics::F32, Stage::Structure, (s0, 0)),
            (Bug::EngineL2EpsOutsideSqrt, |_| {}, Numerics::BF16, Stage::Structure, (s0, 0)),
            (Bug::EngineRopeBackwards, |_| {}, Numerics::F32, Stage::Structure, (s2, 1)),
            (Bug::EngineGroupedValueHeads, |_| {}, f16, Stage::Structure, (s0, 0)),
            (Bug::EngineF16AsBf16, |_| {}, f16, Stage::Numerics, (s0, 0)),
        ];
        for (bug, edit, numerics, stage, at) in cases {
            let clean = verdict_of(edit, numerics)?;
            assert!(matches!(clean, BatchVerdict::Agree { .. }), "{bug:?} at {numerics}, not planted: {clean}");
            let planted = planted::with(bug, || verdict_of(edit, numerics))?;
            let caught = matches!(&planted, BatchVerdict::Disagree(w) if w.stage == stage && (w.seq, w.step) == at);
            assert!(caught, "{bug:?} at {numerics}: {planted}");
        }
        Ok(())
    }

    #[test]
    fn a_reduced_numerics_is_judged_not_refused() -> Result<()> {
        for numerics in [Numerics::BF16, Numerics::parse("f16/bf16").ok_or("numerics")?] {
            let v = verdict_of(|_| {}, numerics)?;
            let BatchVerdict::Agree { structure, max_rel, tolerance, .. } = v else {
                return Err(format!("{numerics}: {v}").into());
            };
            assert!(structure <= EXACT && max_rel <= tolerance, "{numerics}: {v}");
        }
        Ok(())
    }
}
