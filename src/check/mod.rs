//! The check: both interpreters on one checkpoint and one token sequence, compared step by step.
//!
//! The reference (`crate::interp`) runs the graph `lower_graph` read; the engine interpreter
//! (`engine::run`) runs the program it wrote. Two comparisons, each judging its worst value:
//!
//! 1. the structure: the engine's units over f64 with every stored value kept exactly, against the
//!    reference, mapped to the reference's layouts, within [`EXACT`] — no excuse
//!    ([`tolerance`](self::tolerance) has the reasoning). It judges the program: that its Commands,
//!    composed, compute what the graph says.
//! 2. every Command where it runs ([`command`]): the engine's f32 run watched Command by Command,
//!    each output against the Command's documented meaning ([`meaning`]) evaluated on the very
//!    inputs the engine's Command read, within a bound derived from the Command's arithmetic before
//!    looking ([`bound`]), stored where and in the type the program's numerics say ([`storage`]).
//!    It judges the engine: that it implements the Commands the proof reads, on every code path.
//!
//! [`compare_graph_runs`] judges the shim the same way: the authored graph against the graph the shim
//! fused, both in the reference interpreter, within [`EXACT`].

pub mod bound;
pub mod command;
pub mod meaning;
pub mod storage;
mod tolerance;
mod verdict;
pub mod weights;

pub use command::{CommandCheck, Found};
pub use tolerance::EXACT;
pub use verdict::{Comparison, Unjudged, Verdict, Witness};

use crate::engine::program::Program;
use crate::engine::run::{EngineRunner, Real, Rounding, RunError, StateValue};
use crate::interp::{Decoded, InterpError, Runner, StateSnapshot};
use crate::ir::Graph;
use crate::model::Checkpoint;
use weights::Weights;

/// The fewest steps a verdict is given on. At one step every state is read at its zero initial
/// value and RoPE runs only at position 0, where it is the identity: a program that carries state
/// wrongly, or rotates the wrong way, agrees. Two steps read every state once written and rotate
/// at position 1, where every rotated pair turns by a non-zero angle.
pub(crate) const MIN_STEPS: usize = 2;

/// Why the interpreters could not be compared at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the reference interpreter: {0}")]
    Reference(#[from] InterpError),
    #[error("the engine interpreter: {0}")]
    Engine(#[from] RunError),
    #[error("the engine's state {0} has no counterpart in the graph")]
    UnmatchedState(String),
    #[error("the fused graph's state {0} has no counterpart in the authored graph")]
    UnmatchedFusedState(String),
    #[error(
        "{steps} steps prove nothing: a verdict needs at least {MIN_STEPS} (state read once written, RoPE away from position 0)"
    )]
    TooFewSteps { steps: usize },
    /// A comparison this check does not make, named rather than given a tolerance that could
    /// excuse a wrong value.
    #[error("{0}")]
    NotJudged(String),
}

/// Runs `graph` and `program` on `checkpoint` over `tokens` (at least [`MIN_STEPS`]), and
/// compares the logits of every step and the state carried after the last one: the structure
/// first, then the numerics (see the module documentation).
pub fn compare(
    graph: &Graph,
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
) -> Result<Verdict, CheckError> {
    compare_reporting(graph, program, checkpoint, tokens, &mut |_, _| {})
}

/// What a comparison reports as it goes, for a progress line: the run it is in and the steps that
/// run has taken. It is told after every step of each of the three runs (the reference, the
/// engine's exact units, the engine's checked run) and judges nothing.
pub type Report<'r> = &'r mut dyn FnMut(&'static str, usize);

/// [`compare`], telling `report` after every step of each run.
pub fn compare_reporting(
    graph: &Graph,
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
    report: Report,
) -> Result<Verdict, CheckError> {
    let reference = reference_run_reporting(graph, checkpoint, tokens, &Decoded::default(), report)?;
    compare_with_reporting(graph, &reference, program, checkpoint, tokens, report)
}

/// [`compare`], given what the reference computes for `graph` over `tokens` ([`reference_run_with`]):
/// an oracle that has already run the graph (to judge the shim) runs it once.
pub fn compare_with(
    graph: &Graph,
    reference: &ReferenceRun,
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
) -> Result<Verdict, CheckError> {
    compare_with_reporting(graph, reference, program, checkpoint, tokens, &mut |_, _| {})
}

/// [`compare_with`], telling `report` after every step of the engine's two runs.
fn compare_with_reporting(
    graph: &Graph,
    reference: &ReferenceRun,
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
    report: Report,
) -> Result<Verdict, CheckError> {
    if tokens.len() < MIN_STEPS || reference.logits.len() != tokens.len() {
        return Err(CheckError::TooFewSteps { steps: tokens.len().min(reference.logits.len()) });
    }
    if let Some(why) = non_finite(reference) {
        return Ok(Verdict::Inconclusive(why));
    }
    let last = tokens.len() - 1;
    let exact = engine_run::<f64>(program, checkpoint, tokens, Rounding::Exact, report)?;
    let mut structure = Worst::new(Comparison::Structure, EXACT);
    for (step, (r, e)) in reference.logits.iter().zip(&exact.logits).enumerate() {
        structure.tensor(step, "logits", r, e);
    }
    for (name, value) in &exact.states {
        let (want, got) =
            mapped(graph, &reference.state, name, value).ok_or_else(|| CheckError::UnmatchedState(name.clone()))?;
        structure.tensor(last, name, &want, &got);
    }
    if let Some(w) = structure.witness {
        return Ok(Verdict::Disagree(w));
    }
    let mut check = CommandCheck::new(program, Weights::new(checkpoint), true);
    let mut engine = EngineRunner::new(program, checkpoint, tokens.len())?;
    for (step, &token) in tokens.iter().enumerate() {
        check.at_step(step);
        engine.step_observed(token, &mut check)?;
        report("the engine, checked", step + 1);
        if check.found() != &Found::Admitted {
            break;
        }
    }
    match check.found() {
        Found::Admitted => Ok(Verdict::Agree {
            steps: tokens.len(),
            values: check.values,
            structure: structure.max_rel,
            max_rel: check.max_rel,
            widest: check.widest,
        }),
        Found::Failure(w) => Ok(Verdict::Disagree(w.clone())),
        Found::Unjudged(why) => Ok(Verdict::Inconclusive(why.clone())),
        Found::Broken(why) => Err(CheckError::NotJudged(why.clone())),
    }
}

/// Compares what the reference computed for `authored` and for `fused` (what the shim made of it)
/// over the same tokens (at least [`MIN_STEPS`]): the logits of every step and the state after the
/// last, matched by name, within [`EXACT`]. The worst value out of it, or `None` when the fused graph
/// computes what the authored one does; values both graphs leave non-finite at the same place are
/// equal.
pub(crate) fn compare_graph_runs(
    authored: &Graph,
    a: &ReferenceRun,
    fused: &Graph,
    f: &ReferenceRun,
) -> Result<Option<Witness>, CheckError> {
    let steps = a.logits.len();
    if steps < MIN_STEPS || f.logits.len() != steps {
        return Err(CheckError::TooFewSteps { steps: steps.min(f.logits.len()) });
    }
    let mut worst = Worst::new(Comparison::Shim, EXACT);
    for (step, (x, y)) in a.logits.iter().zip(&f.logits).enumerate() {
        worst.tensor(step, "logits", x, y);
    }
    let name = |g: &Graph, index: usize| g.states.get(index).map(|s| g.name_of(s.read).to_string());
    for e in &f.state.entries {
        let n = name(fused, e.index).unwrap_or_default();
        let want = a
            .state
            .entries
            .iter()
            .find(|x| name(authored, x.index).as_deref() == Some(n.as_str()))
            .ok_or_else(|| CheckError::UnmatchedFusedState(n.clone()))?;
        worst.tensor(steps - 1, &n, &want.values, &e.values);
    }
    Ok(worst.witness)
}

/// What the reference computes: the logits of every step and the state after the last.
#[derive(Clone, Debug)]
pub struct ReferenceRun {
    pub(crate) logits: Vec<Vec<f64>>,
    pub(crate) state: StateSnapshot,
}

/// Runs `graph` in the reference interpreter on `checkpoint` over `tokens` (at least
/// [`MIN_STEPS`]), sharing the small constants' decoded values with the other runs on
/// `checkpoint` that `decoded` served ([`Runner::with_decoded`]).
pub fn reference_run_with<'c>(
    graph: &'c Graph,
    checkpoint: &'c Checkpoint,
    tokens: &[u32],
    decoded: &Decoded<'c>,
) -> Result<ReferenceRun, CheckError> {
    reference_run_reporting(graph, checkpoint, tokens, decoded, &mut |_, _| {})
}

/// [`reference_run_with`], telling `report` after every step.
fn reference_run_reporting<'c>(
    graph: &'c Graph,
    checkpoint: &'c Checkpoint,
    tokens: &[u32],
    decoded: &Decoded<'c>,
    report: Report,
) -> Result<ReferenceRun, CheckError> {
    if tokens.len() < MIN_STEPS {
        return Err(CheckError::TooFewSteps { steps: tokens.len() });
    }
    let mut runner = Runner::with_decoded(graph, checkpoint, decoded)?;
    let mut logits = Vec::with_capacity(tokens.len());
    for (step, &t) in tokens.iter().enumerate() {
        logits.push(runner.step(t)?);
        report("the reference", step + 1);
    }
    Ok(ReferenceRun { logits, state: runner.state() })
}

/// Where the reference first went NaN or Inf, if it did.
pub(crate) fn non_finite(r: &ReferenceRun) -> Option<Unjudged> {
    let at = |step: usize, tensor: &str, values: &[f64]| {
        values.iter().position(|x| !x.is_finite()).map(|index| Unjudged::NonFinite {
            step,
            tensor: tensor.to_string(),
            index,
            command: None,
        })
    };
    let last = r.logits.len().saturating_sub(1);
    r.logits
        .iter()
        .enumerate()
        .find_map(|(step, l)| at(step, "logits", l))
        .or_else(|| r.state.entries.iter().find_map(|e| at(last, "state", &e.values)))
}

/// What an engine run computes: the logits of every step and the state after the last, by name,
/// in the engine's layouts.
struct EngineRun<R> {
    logits: Vec<Vec<f64>>,
    states: Vec<(String, StateValue<R>)>,
}

fn engine_run<R: Real>(
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
    rounding: Rounding,
    report: Report,
) -> Result<EngineRun<R>, CheckError> {
    let mut engine = EngineRunner::<R>::with_arithmetic(program, checkpoint, tokens.len(), rounding)?;
    let mut raw = Vec::with_capacity(tokens.len());
    for (step, &t) in tokens.iter().enumerate() {
        raw.push(engine.step(t)?);
        report("the engine's exact units", step + 1);
    }
    let logits = raw.iter().map(|l| l.iter().map(|x| x.wide()).collect()).collect();
    let states = engine.state().states.into_iter().map(|s| (s.name, s.value)).collect();
    Ok(EngineRun { logits, states })
}

/// A state's values in the engine's layout, in f64.
pub(crate) fn flat<R: Real>(value: &StateValue<R>) -> Vec<f64> {
    match value {
        StateValue::Position(p) => vec![*p as f64],
        StateValue::ConvWindow { values, .. }
        | StateValue::DeltaState { values, .. }
        | StateValue::KvCache { values, .. } => values.iter().map(|x| x.wide()).collect(),
    }
}

/// The reference's values of the state named `name` and the engine's, in the reference's layout.
pub fn mapped<R: Real>(
    graph: &Graph,
    snapshot: &StateSnapshot,
    name: &str,
    value: &StateValue<R>,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let entry =
        snapshot.entries.iter().find(|e| graph.states.get(e.index).is_some_and(|s| graph.name_of(s.read) == name))?;
    let widen = |v: Vec<R>| v.into_iter().map(Real::wide).collect::<Vec<f64>>();
    let engine = match value {
        StateValue::Position(p) => vec![*p as f64],
        StateValue::ConvWindow { values, .. } => widen(values.clone()),
        StateValue::DeltaState { .. } => widen(value.delta_key_major()?),
        StateValue::KvCache { .. } => widen(value.kv_filled()?),
    };
    let reference = match value {
        // The engine keeps the window without its oldest column, which no later step reads.
        StateValue::ConvWindow { .. } => {
            let [c, k] = <[usize; 2]>::try_from(entry.shape.as_slice()).ok()?;
            (0..c).flat_map(|ch| entry.values[ch * k + 1..(ch + 1) * k].iter().copied()).collect()
        }
        _ => entry.values.clone(),
    };
    Some((reference, engine))
}

/// A running comparison: its tolerance, the largest errors seen, and the worst value out of
/// tolerance (the largest error relative to its tensor's scale), never merely the first. The
/// batched check (`crate::batch::check`) keeps one per comparison too.
pub(crate) struct Worst {
    stage: Comparison,
    tol: f64,
    /// How many values were compared.
    pub(crate) values: usize,
    /// The largest finite error seen, absolute.
    pub(crate) max_abs: f64,
    /// The largest finite error seen, relative to its tensor's scale.
    pub(crate) max_rel: f64,
    /// The worst value out of tolerance so far.
    pub(crate) witness: Option<Witness>,
}

impl Worst {
    /// A comparison of `stage` within `tol` of each tensor's scale, nothing compared yet.
    pub(crate) fn new(stage: Comparison, tol: f64) -> Worst {
        Worst { stage, tol, values: 0, max_abs: 0.0, max_rel: 0.0, witness: None }
    }

    /// Compares one tensor, `got` against `want`, on `want`'s scale.
    pub(crate) fn tensor(&mut self, step: usize, name: &str, want: &[f64], got: &[f64]) {
        let scale = want.iter().filter(|x| x.is_finite()).fold(1f64, |m, x| m.max(x.abs()));
        if want.len() != got.len() {
            let i = want.len().min(got.len());
            let (r, e) = (want.get(i).copied().unwrap_or(f64::NAN), got.get(i).copied().unwrap_or(f64::NAN));
            self.out(step, name, i, r, e, scale, f64::INFINITY);
            return;
        }
        for (i, (&r, &e)) in want.iter().zip(got).enumerate() {
            if !r.is_finite() && r.to_bits() == e.to_bits() || r.is_nan() && e.is_nan() {
                continue;
            }
            let d = (e - r).abs();
            let rel = if d.is_nan() { f64::INFINITY } else { d / scale };
            if rel > self.tol {
                self.out(step, name, i, r, e, scale, rel);
            }
            if rel.is_finite() {
                self.max_abs = self.max_abs.max(d);
                self.max_rel = self.max_rel.max(rel);
            }
        }
        self.values += want.len();
    }

    /// Records a value out of tolerance, kept when it is the worst so far.
    #[allow(clippy::too_many_arguments)]
    fn out(&mut self, step: usize, tensor: &str, index: usize, reference: f64, engine: f64, scale: f64, rel: f64) {
        if self.witness.as_ref().is_some_and(|w| w.relative >= rel) {
            return;
        }
        self.witness = Some(Witness {
            stage: self.stage,
            step,
            command: None,
            tensor: tensor.to_string(),
            index,
            reference,
            engine,
            tolerance: self.tol * scale,
            relative: rel,
        });
    }
}

#[cfg(test)]
mod planted_lowering;
#[cfg(test)]
mod tests;
