//! The check: both interpreters on one checkpoint and one token sequence, compared step by step.
//!
//! The reference (`ir::interp`) runs the graph `lower_graph` read; the engine interpreter
//! (`engine::run`) runs the program it wrote. The logits of every step are compared, then the state
//! carried after the last step, mapped from the engine's layouts to the reference's.

mod tolerance;
mod verdict;

pub use tolerance::{MARGIN, perturbation, tolerance};
pub use verdict::{Verdict, Witness};

use crate::engine::program::Program;
use crate::engine::run::{EngineRunner, RunError, StateValue};
use crate::ir::Graph;
use crate::ir::interp::{InterpError, Runner, StateSnapshot};
use crate::model::Checkpoint;

/// Why the interpreters could not be compared at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the reference interpreter: {0}")]
    Reference(#[from] InterpError),
    #[error("the engine interpreter: {0}")]
    Engine(#[from] RunError),
    #[error("the engine's state {0} has no counterpart in the graph")]
    UnmatchedState(String),
}

/// Runs `graph` and `program` on `checkpoint` over `tokens`, and compares the logits of every step
/// and the state carried after the last one.
pub fn compare(
    graph: &Graph,
    program: &Program,
    checkpoint: &Checkpoint,
    tokens: &[u32],
) -> Result<Verdict, CheckError> {
    let reference = reference_run(graph, checkpoint, tokens)?;
    let sensitivity = match perturbation(program.numerics) {
        Some(u) => Some(sensitivity(&reference, &reference_run(graph, &perturbed(checkpoint, u), tokens)?)),
        None => None,
    };
    let mut engine = EngineRunner::new(program, checkpoint, tokens.len().max(1))?;
    let mut c = Comparison::new(tolerance(sensitivity));
    for (step, (&token, r)) in tokens.iter().zip(&reference.logits).enumerate() {
        let e: Vec<f64> = engine.step(token)?.into_iter().map(f64::from).collect();
        if let Some(v) = c.tensor(step, "logits", r, &e) {
            return Ok(v);
        }
    }
    let last = tokens.len().saturating_sub(1);
    for s in engine.state().states {
        let (want, got) = mapped(graph, &reference.state, &s.name, &s.value)
            .ok_or_else(|| CheckError::UnmatchedState(s.name.clone()))?;
        if let Some(v) = c.tensor(last, &s.name, &want, &got) {
            return Ok(v);
        }
    }
    Ok(Verdict::Agree {
        steps: tokens.len(),
        values: c.values,
        max_abs: c.max_abs,
        max_rel: c.max_rel,
        tolerance: c.tol,
    })
}

/// What the reference computes: the logits of every step and the state after the last.
struct ReferenceRun {
    logits: Vec<Vec<f64>>,
    state: StateSnapshot,
}

fn reference_run(graph: &Graph, checkpoint: &Checkpoint, tokens: &[u32]) -> Result<ReferenceRun, CheckError> {
    let mut runner = Runner::new(graph, checkpoint)?;
    let logits = tokens.iter().map(|&t| runner.step(t)).collect::<Result<Vec<_>, _>>()?;
    Ok(ReferenceRun { logits, state: runner.state() })
}

/// How far the reference moves when every checkpoint value `x` becomes `x·(1 ± u)` (signs from a
/// fixed sequence): the largest change over the logits of every step and the final state, relative
/// to each tensor's scale (`max(1, max |x|)`), per unit of `u`.
pub fn sensitivity_per_unit(graph: &Graph, checkpoint: &Checkpoint, tokens: &[u32], u: f64) -> Result<f64, CheckError> {
    let a = reference_run(graph, checkpoint, tokens)?;
    let b = reference_run(graph, &perturbed(checkpoint, u), tokens)?;
    Ok(sensitivity(&a, &b) / u)
}

/// `checkpoint` with every value `x` made `x·(1 ± u)`, the sign drawn from a fixed sequence.
fn perturbed(checkpoint: &Checkpoint, u: f64) -> Checkpoint {
    let mut out = checkpoint.clone();
    let mut bits = 0x9E37_79B9_7F4A_7C15u64;
    for t in out.tensors.values_mut() {
        for x in &mut t.data {
            bits ^= bits << 13;
            bits ^= bits >> 7;
            bits ^= bits << 17;
            let sign = if bits & 1 == 0 { 1.0 } else { -1.0 };
            *x = (f64::from(*x) * (1.0 + sign * u)) as f32;
        }
    }
    out
}

/// The largest change between two reference runs, relative to the scale of each tensor.
fn sensitivity(a: &ReferenceRun, b: &ReferenceRun) -> f64 {
    let rel = |x: &[f64], y: &[f64]| {
        let scale = x.iter().fold(1f64, |m, v| m.max(v.abs()));
        x.iter().zip(y).map(|(p, q)| (p - q).abs() / scale).filter(|d| d.is_finite()).fold(0f64, f64::max)
    };
    let logits = a.logits.iter().zip(&b.logits).map(|(x, y)| rel(x, y)).fold(0f64, f64::max);
    let state =
        a.state.entries.iter().zip(&b.state.entries).map(|(x, y)| rel(&x.values, &y.values)).fold(0f64, f64::max);
    logits.max(state)
}

/// The reference's values of the state named `name` and the engine's, in the reference's layout.
pub fn mapped(graph: &Graph, snapshot: &StateSnapshot, name: &str, value: &StateValue) -> Option<(Vec<f64>, Vec<f64>)> {
    let entry =
        snapshot.entries.iter().find(|e| graph.states.get(e.index).is_some_and(|s| graph.name_of(s.read) == name))?;
    let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
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

/// The running comparison: the tolerance and the largest errors seen.
struct Comparison {
    tol: f64,
    values: usize,
    max_abs: f64,
    max_rel: f64,
}

impl Comparison {
    fn new(tol: f64) -> Comparison {
        Comparison { tol, values: 0, max_abs: 0.0, max_rel: 0.0 }
    }

    /// Compares one tensor; a verdict when it settles the check.
    fn tensor(&mut self, step: usize, name: &str, reference: &[f64], engine: &[f64]) -> Option<Verdict> {
        if let Some(index) = reference.iter().position(|x| !x.is_finite()) {
            return Some(Verdict::Inconclusive { step, tensor: name.into(), index });
        }
        let scale = reference.iter().fold(1f64, |m, x| m.max(x.abs()));
        let witness = |index: usize, r: f64, e: f64| {
            Some(Verdict::Disagree(Witness {
                step,
                tensor: name.into(),
                index,
                reference: r,
                engine: e,
                tolerance: self.tol * scale,
            }))
        };
        if reference.len() != engine.len() {
            let i = reference.len().min(engine.len());
            return witness(
                i,
                reference.get(i).copied().unwrap_or(f64::NAN),
                engine.get(i).copied().unwrap_or(f64::NAN),
            );
        }
        for (i, (&r, &e)) in reference.iter().zip(engine).enumerate() {
            let d = (e - r).abs();
            if d.is_nan() || d > self.tol * scale {
                return witness(i, r, e);
            }
            self.max_abs = self.max_abs.max(d);
            self.max_rel = self.max_rel.max(d / scale);
        }
        self.values += reference.len();
        None
    }
}

#[cfg(test)]
mod tests {
    //! The two interpreters are independent in the way that matters: a bug planted in either one is
    //! caught by the check, and the check agrees once it is gone.

    use super::*;
    use crate::engine::{Numerics, lower::lower_graph, shim::EngineShim};
    use crate::model::{author::decode_step, presets, random::random_checkpoint};
    use crate::planted::{self, Bug};

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn verdict(name: &str) -> Result<Verdict> {
        let spec = presets::preset(name).ok_or("no such preset")?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = lower_graph(&graph, Numerics::F32)?;
        Ok(compare(&graph, &program, &random_checkpoint(&spec, 1), &[3, 1, 4, 1, 5])?)
    }

    #[test]
    fn a_bug_planted_in_either_interpreter_is_caught() -> Result<()> {
        // (bug, preset whose shapes expose it: value heads ≠ key heads / query heads ≠ KV heads)
        for (bug, preset) in [(Bug::EngineGroupedValueHeads, "tiny"), (Bug::ReferenceTiledKvHeads, "tiny")] {
            let clean = verdict(preset)?;
            assert!(matches!(clean, Verdict::Agree { .. }), "{preset} without {bug:?}: {clean}");
            let planted = planted::with(bug, || verdict(preset))?;
            assert!(matches!(planted, Verdict::Disagree(_)), "{bug:?} not caught: {planted}");
        }
        Ok(())
    }
}
