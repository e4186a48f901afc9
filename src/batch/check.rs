//! The batched check: the engine interpreter runs the whole plan on its slot pool; the reference
//! interpreter runs each sequence alone, from the zero state, over the history the schedule gives
//! it (a fork's child continues its parent's history; a rollback drops the last `n` tokens).
//!
//! Every row of every step that belongs to a sequence is compared (its logits), then the state of
//! every sequence live at the end. The split is the single-sequence check's
//! ([`crate::check::compare_with`]), at every numerics, each comparison judging its worst value:
//!
//! 1. the structure: the plan run in f64 with every stored value kept exactly
//!    ([`Rounding::Exact`]), against each sequence alone on the reference, mapped to the
//!    reference's layouts by [`crate::check::mapped`], within [`EXACT`] — no excuse;
//! 2. every Command where it runs: the plan run as the engine runs it, each sequence's row stepped
//!    alone and watched Command by Command ([`CommandCheck`]: each output against its Command's
//!    meaning on the inputs the engine read, within its bound, stored as the numerics say);
//! 3. the batched step: the engine as it runs steps rows that share no storage as one batched step,
//!    whose every value must be the watched run's to the bit (a disagreement of tolerance 0
//!    otherwise: the judged values would not be the ones the engine computes).
//!
//! A disagreement names the sequence, the step, the tensor, the index and both values of the first
//! tensor out of tolerance (its worst value; for a Command, the Command too); the refusal of an
//! invalid schedule or plan is the verdict too.

use std::collections::HashMap;
use std::fmt;

use super::plan::{Lowered, lower_schedule};
use super::run::{BatchArithmetic, BatchRunError, BatchRunner, RowObserver};
use super::schedule::{Schedule, Seq};
use super::{BatchError, BatchProgram};
use crate::check::weights::Weights;
use crate::check::{CheckError, CommandCheck, Comparison, EXACT, Found, Unjudged, Witness, Worst, flat, mapped};
use crate::engine::run::{Real, Rounding, StateData, StepObserver, StepView};
use crate::interp::{Runner, StateSnapshot};
use crate::ir::Graph;
use crate::model::Checkpoint;

/// What the batched check found.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchVerdict {
    /// Every compared value is within tolerance. `structure` is the largest error of the exact
    /// run against the reference (relative to its tensor's scale, within [`EXACT`]); `values`,
    /// `max_rel` and `widest` are the watched Commands' (as the single check's
    /// [`crate::check::Verdict::Agree`]).
    Agree { steps: usize, rows: usize, values: usize, structure: f64, max_rel: f64, widest: f64 },
    /// The schedule or the plan is refused by name, before anything runs.
    Refused(BatchError),
    /// The first tensor out of tolerance, at its worst value, in the first comparison that found
    /// one.
    Disagree(BatchWitness),
    /// Nothing can be concluded, for the single-sequence check's reason; `seq` is the sequence its
    /// value belongs to.
    Inconclusive { seq: Option<Seq>, why: Unjudged },
}

/// A value the batched engine computes differently from the sequence run alone (the structure),
/// or from its Command's meaning (a Command).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchWitness {
    pub seq: Seq,
    /// Which comparison found it.
    pub stage: Comparison,
    /// The Command that wrote the value ([`Comparison::Command`]).
    pub command: Option<String>,
    /// The step (0-based, counting the schedule's decodes); the number of steps for the end state.
    pub step: usize,
    /// `logits`, or the name of a piece of carried state.
    pub tensor: String,
    /// The index in the tensor, row-major in the reference's layout (the engine's for
    /// [`Comparison::Command`]).
    pub index: usize,
    /// The value judged against: the reference's (the meaning's midpoint for [`Comparison::Command`]).
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
            command: w.command.clone(),
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
            BatchVerdict::Agree { steps, rows, values, structure, max_rel, widest } => write!(
                f,
                "agree over {steps} steps ({rows} rows): structure within {structure:.2e}; every Command within its \
                 bound ({values} values, max rel error {max_rel:.2e}, widest bound {widest:.2e})"
            ),
            BatchVerdict::Refused(e) => write!(f, "refused ({}): {e}", e.name()),
            BatchVerdict::Disagree(w) => match &w.command {
                Some(command) => write!(
                    f,
                    "disagree (command): {} at step {} in {command}, {}[{}]: meaning {} ± {:.2e} engine {} (rel error \
                     {:.2e})",
                    w.seq, w.step, w.tensor, w.index, w.reference, w.tolerance, w.engine, w.relative
                ),
                None => write!(
                    f,
                    "disagree ({}): {} at step {} in {}[{}]: {} {} {} {} (rel error {:.2e}, tolerance {:.2e})",
                    if w.batched { "batched step" } else { w.stage.name() },
                    w.seq,
                    w.step,
                    w.tensor,
                    w.index,
                    if w.batched { "rows one by one" } else { "reference" },
                    w.reference,
                    if w.batched { "batched" } else { "engine" },
                    w.engine,
                    w.relative,
                    w.tolerance
                ),
            },
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
                why: Unjudged::NonFinite { step, tensor: tensor.to_string(), index, command: None },
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

/// Runs the plan of `lowered` on `pool` in the arithmetic `R` with `rounding`, every sequence's
/// row stepped alone and shown to `observer` when one is given: what it computes, or the refusal
/// the runner met.
fn engine_run<R: BatchArithmetic, O: RowObserver<R>>(
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    lowered: &Lowered,
    rounding: Rounding,
    observer: Option<&mut O>,
) -> Result<Result<Ran<R>, BatchError>, CheckError> {
    let refused = |e: BatchRunError| match e {
        BatchRunError::Plan(e) => Ok(Err(e)),
        BatchRunError::Engine(e) => Err(CheckError::Engine(e)),
    };
    let mut engine = match BatchRunner::<R>::with_arithmetic(pool, checkpoint, rounding) {
        Ok(e) => e,
        Err(e) => return refused(e),
    };
    let run = match observer {
        Some(o) => engine.run_observed(&lowered.plan, o),
        None => engine.run(&lowered.plan),
    };
    let run = match run {
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
/// (its largest errors, its worst value out of tolerance) and the first tensor out of tolerance (at
/// its worst value), as a value of its sequence.
struct Judge {
    worst: Worst,
    first: Option<BatchWitness>,
}

impl Judge {
    fn new(stage: Comparison, tol: f64) -> Judge {
        Judge { worst: Worst::new(stage, tol), first: None }
    }

    /// Compares one tensor of sequence `seq`, `got` against `want`, on `want`'s scale.
    fn tensor(&mut self, seq: Seq, step: usize, name: &str, want: &[f64], got: &[f64]) {
        let before = self.worst.witness.as_ref().map(|w| w.relative);
        self.worst.tensor(step, name, want, got);
        // The worst value changes only to a strictly worse one: then it is this tensor's.
        if let Some(w) = &self.worst.witness
            && before != Some(w.relative)
            && self.first.is_none()
        {
            self.first = Some(BatchWitness::of(seq, w));
        }
    }
}

/// Checks a lowered schedule (its plan possibly written by hand or mutated; its trace the
/// schedule's meaning): the plan is validated, run on the engine, and compared row by row with
/// each sequence run alone on the reference, the structure first, then the numerics (see the module
/// documentation). A run the engine cannot start or finish on the plan's account is the refusal.
pub(crate) fn check_lowered(
    graph: &Graph,
    pool: &BatchProgram,
    checkpoint: &Checkpoint,
    lowered: &Lowered,
) -> Result<BatchVerdict, CheckError> {
    if let Err(e) = lowered.plan.validate(pool) {
        return Ok(BatchVerdict::Refused(e));
    }
    let exact = match engine_run::<f64, ()>(pool, checkpoint, lowered, Rounding::Exact, None)? {
        Ok(r) => r,
        Err(e) => return Ok(BatchVerdict::Refused(e)),
    };
    let steps = lowered.trace.steps.len();
    let reference = Expected::of(graph, checkpoint, lowered)?;
    if let Some(v) = reference.non_finite(graph, steps) {
        return Ok(v);
    }
    let mut structure = Judge::new(Comparison::Structure, EXACT);
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
    let mut watch = Watch {
        check: CommandCheck::new(&pool.program, Weights::new(checkpoint), false),
        trace: &lowered.trace,
        at: (0, 0),
    };
    let watched =
        engine_run::<f32, _>(pool, checkpoint, lowered, Rounding::Stored, Some(&mut watch))?.map_err(again)?;
    match watch.check.found() {
        Found::Admitted => {}
        Found::Failure(w) => return Ok(BatchVerdict::Disagree(BatchWitness::of(watch.seq(), w))),
        Found::Unjudged(why) => return Ok(BatchVerdict::Inconclusive { seq: Some(watch.seq()), why: why.clone() }),
        Found::Broken(why) => return Err(CheckError::NotJudged(why.clone())),
    }
    // The watched run steps a batch's rows one after another; the engine runs a step whose rows
    // share no storage as one batched step (`EngineRunner::step_batch`). Its values must be the
    // watched run's to the bit (the kernels' rule: a vector's sum has one order whatever its
    // batch), or the verdict above would be about another computation than the one the engine runs.
    let batched = engine_run::<f32, ()>(pool, checkpoint, lowered, Rounding::Stored, None)?.map_err(again)?;
    let mut same = Judge::new(Comparison::Command, 0.0);
    watched.map(f64::from).compare_with(&batched.map(f64::from), &mut same);
    if let Some(w) = same.first {
        return Ok(BatchVerdict::Disagree(BatchWitness { batched: true, ..w }));
    }
    Ok(BatchVerdict::Agree {
        steps,
        rows: reference.rows.len(),
        values: watch.check.values,
        structure: structure.worst.max_rel,
        max_rel: watch.check.max_rel,
        widest: watch.check.widest,
    })
}

/// The per-Command check of a batched run's sequence rows, and the row it is watching.
struct Watch<'p, 'c, 't> {
    check: CommandCheck<'p, 'c>,
    trace: &'t super::plan::Trace,
    /// The step and row running (or last run).
    at: (usize, usize),
}

impl Watch<'_, '_, '_> {
    /// The sequence of the row running: the trace's row at the plan's step and row.
    fn seq(&self) -> Seq {
        let (step, row) = self.at;
        self.trace.steps.get(step).and_then(|rows| rows.get(row)).map_or(Seq(u32::MAX), |r| r.seq)
    }
}

impl StepObserver<f32> for Watch<'_, '_, '_> {
    fn before(&mut self, command: usize, view: &StepView<'_, f32>) {
        self.check.before(command, view);
    }

    fn after(&mut self, command: usize, view: &StepView<'_, f32>) {
        self.check.after(command, view);
    }
}

impl RowObserver<f32> for Watch<'_, '_, '_> {
    fn row(&mut self, step: usize, row: usize) {
        if self.check.found() == &Found::Admitted {
            self.at = (step, row);
            self.check.at_step(step);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The batched check catches what the single check catches, at the stage that must catch it,
    //! at every numerics: a bug planted in the engine's units is a disagreement of the sequence and
    //! step that first runs it, and the check agrees once it is gone.

    use super::*;
    use crate::batch::r#gen as bgen;
    use crate::engine::Numerics;
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
        type Case = (Bug, Edit, Numerics, Comparison, (Seq, usize));
        let (s0, s2) = (Seq(0), Seq(2));
        let cases: [Case; 5] = [
            (Bug::EngineGatedNormEpsFixed, large_eps, Numerics::F32, Comparison::Structure, (s0, 0)),
            (Bug::EngineL2EpsOutsideSqrt, |_| {}, Numerics::BF16, Comparison::Structure, (s0, 0)),
            (Bug::EngineRopeBackwards, |_| {}, Numerics::F32, Comparison::Structure, (s2, 1)),
            (Bug::EngineGroupedValueHeads, |_| {}, f16, Comparison::Structure, (s0, 0)),
            (Bug::EngineF16AsBf16, |_| {}, f16, Comparison::Command, (s0, 0)),
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

    /// The verdict of every schedule `check --batch n` runs ([`crate::batch::gen::check_cases`],
    /// from seed 0, as the command line's default) on the tiny preset with the command line's
    /// weights (seed 0), at `numerics`, for `n` of 1 to 4 slots: `(n, seed, verdict)`.
    fn default_batch_verdicts(numerics: Numerics) -> Result<Vec<(usize, u64, BatchVerdict)>> {
        let spec = presets::preset("tiny").ok_or("no such preset")?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = lower_graph(&graph, numerics)?;
        let checkpoint = random_checkpoint(&spec, 0);
        let mut out = vec![];
        for n in 1..=4 {
            let pool = BatchProgram::new(program.clone(), n, n, bgen::CHECK_SNAPSHOTS, bgen::CAPACITY)?;
            for (seed, case) in bgen::check_cases(0, n, spec.vocab) {
                out.push((n, seed, check(&graph, &pool, &checkpoint, &case.schedule)?));
            }
        }
        Ok(out)
    }

    #[test]
    fn the_default_batch_schedules_catch_a_reset_skipped_on_reuse_and_a_fork_copying_another_slot() -> Result<()> {
        // Every schedule holds a reuse of a slot left holding a state and a fork of a state no
        // other slot holds, each then decoded: each planted bug is a disagreement on every
        // schedule (a fork needs two slots: on one, the fork bug has nothing to act on).
        for numerics in [Numerics::F32, Numerics::BF16] {
            for (n, seed, v) in default_batch_verdicts(numerics)? {
                assert!(matches!(v, BatchVerdict::Agree { .. }), "clean, {numerics}, {n} slots, seed {seed}: {v}");
            }
            for bug in [Bug::BatchResetSkippedOnReuse, Bug::BatchForkCopiesWrongConv] {
                for (n, seed, v) in planted::with(bug, || default_batch_verdicts(numerics))? {
                    let reached = bug == Bug::BatchResetSkippedOnReuse || n >= 2;
                    let caught = matches!(v, BatchVerdict::Disagree(_));
                    let agree = matches!(v, BatchVerdict::Agree { .. });
                    assert!(if reached { caught } else { agree }, "{bug:?}, {numerics}, {n} slots, seed {seed}: {v}");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_reduced_numerics_is_judged_not_refused() -> Result<()> {
        for numerics in [Numerics::BF16, Numerics::parse("f16/bf16").ok_or("numerics")?] {
            let v = verdict_of(|_| {}, numerics)?;
            let BatchVerdict::Agree { structure, values, .. } = v else {
                return Err(format!("{numerics}: {v}").into());
            };
            assert!(structure <= EXACT && values > 0, "{numerics}: {v}");
        }
        Ok(())
    }
}
