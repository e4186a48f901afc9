//! The prefill's check: a prompt run as a prefill on the engine interpreter, against the
//! reference's decode steps of the same tokens.
//!
//! The tokens are three runs of one sequence: decode steps before the prompt (so that the prefill
//! starts from a state that holds something), the prompt as one prefill, and decode steps after it
//! (so that what the prefill leaves is read). Three comparisons, as the batched check makes:
//!
//! 1. the structure: the engine's units in f64 with every stored value kept exactly, the prompt
//!    run by the prefill's meaning ([`EngineRunner::prefill_unbatched`]), against the reference's
//!    steps, every token's logits and the state after the last, within [`EXACT`];
//! 2. every Command where it runs: the engine's f32 prefill run token by token
//!    ([`EngineRunner::prefill_observed`]), each token a step watched Command by Command
//!    ([`CommandCheck`]), as the single check judges a step;
//! 3. the prefill as the engine runs it ([`EngineRunner::prefill`], each matrix read once per
//!    chunk) against the watched run, to the bit: every logit and the state after the last token.
//!    A correct prefill is its tokens' steps to the bit (a vector's sum has one order whatever its
//!    batch), so a difference is a prefill that computes something else than the run judged.

use crate::check::{
    CheckError, CommandCheck, Comparison, EXACT, Found, Verdict, Witness, mapped, non_finite, reference_run_with,
    weights::Weights,
};
use crate::engine::program::Program;
use crate::engine::program::prefill::Prefill;
use crate::engine::run::prefill::{Outputs, TokenObserver};
use crate::engine::run::{EngineRunner, Real, Rounding, StateValue, StepView};
use crate::interp::Decoded;
use crate::ir::Graph;
use crate::model::Checkpoint;

/// A sequence's tokens around its prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillCase {
    /// Decoded one step at a time before the prompt.
    pub before: Vec<u32>,
    /// Run as one prefill.
    pub prompt: Vec<u32>,
    /// Decoded one step at a time after it.
    pub after: Vec<u32>,
}

impl PrefillCase {
    /// `prompt` tokens between two decode steps on each side, the tokens spread over `vocab`.
    pub fn spread(prompt: usize, vocab: usize) -> PrefillCase {
        let token = |i: usize| ((i * 7919 + 11) % vocab.max(1)) as u32;
        PrefillCase {
            before: (0..2).map(token).collect(),
            prompt: (2..2 + prompt).map(token).collect(),
            after: (2 + prompt..4 + prompt).map(token).collect(),
        }
    }

    fn all(&self) -> Vec<u32> {
        [&self.before[..], &self.prompt, &self.after].concat()
    }
}

/// What one engine run of a case computes: every token's logits (in the order they came) and the
/// state after the last.
struct Ran<R> {
    logits: Vec<Vec<R>>,
    states: Vec<(String, StateValue<R>)>,
}

/// Runs `case` on `runner`: the steps before, the prompt by `prompt`, the steps after.
fn run_case<R: Real>(
    runner: &mut EngineRunner<'_, R>,
    case: &PrefillCase,
    prompt: impl FnOnce(&mut EngineRunner<'_, R>) -> Result<Vec<Vec<R>>, CheckError>,
) -> Result<Ran<R>, CheckError> {
    let mut logits = vec![];
    for &t in &case.before {
        logits.push(runner.step(t)?);
    }
    logits.extend(prompt(runner)?);
    for &t in &case.after {
        logits.push(runner.step(t)?);
    }
    let states = runner.state().states.into_iter().map(|s| (s.name, s.value)).collect();
    Ok(Ran { logits, states })
}

/// The watched run's observer: the Command check, told which token steps.
struct Watch<'p, 'c> {
    check: CommandCheck<'p, 'c>,
    before: usize,
}

impl crate::engine::run::StepObserver<f32> for Watch<'_, '_> {
    fn before(&mut self, command: usize, view: &StepView<'_, f32>) {
        self.check.before(command, view);
    }

    fn after(&mut self, command: usize, view: &StepView<'_, f32>) {
        self.check.after(command, view);
    }
}

impl TokenObserver<f32> for Watch<'_, '_> {
    fn token(&mut self, _: usize, _: usize, token: usize) {
        if self.check.found() == &Found::Admitted {
            self.check.at_step(self.before + token);
        }
    }
}

/// Checks `prefill` of `case.prompt` on `program` against the reference's steps of `graph` (see
/// the module documentation).
pub fn check_prefill(
    graph: &Graph,
    program: &Program,
    checkpoint: &Checkpoint,
    prefill: &Prefill,
    case: &PrefillCase,
) -> Result<Verdict, CheckError> {
    let all = case.all();
    let reference = reference_run_with(graph, checkpoint, &all, &Decoded::default())?;
    if let Some(why) = non_finite(&reference) {
        return Ok(Verdict::Inconclusive(why));
    }
    let last = all.len() - 1;
    let capacity = all.len();
    let mut exact = EngineRunner::<f64>::with_arithmetic(program, checkpoint, capacity, Rounding::Exact)?;
    let exact = run_case(&mut exact, case, |r| Ok(r.prefill_unbatched(prefill, &case.prompt, Outputs::All)?))?;
    let mut structure = crate::check::Worst::new(Comparison::Structure, EXACT);
    let wide = |l: &[f64]| l.to_vec();
    for (step, want) in reference.logits.iter().enumerate() {
        let got = exact.logits.get(step).map_or(vec![], |l| wide(l));
        structure.tensor(step, "logits", want, &got);
    }
    for (name, value) in &exact.states {
        let (want, got) =
            mapped(graph, &reference.state, name, value).ok_or_else(|| CheckError::UnmatchedState(name.clone()))?;
        structure.tensor(last, name, &want, &got);
    }
    if let Some(w) = structure.witness {
        return Ok(Verdict::Disagree(w));
    }
    let mut watch =
        Watch { check: CommandCheck::new(program, Weights::new(checkpoint), true), before: case.before.len() };
    let mut engine = EngineRunner::new(program, checkpoint, capacity)?;
    let mut logits = vec![];
    for (step, &t) in case.before.iter().enumerate() {
        watch.check.at_step(step);
        logits.push(engine.step_observed(t, &mut watch.check)?);
    }
    logits.extend(engine.prefill_observed(prefill, &case.prompt, &mut watch)?);
    for (k, &t) in case.after.iter().enumerate() {
        if watch.check.found() == &Found::Admitted {
            watch.check.at_step(case.before.len() + case.prompt.len() + k);
        }
        logits.push(engine.step_observed(t, &mut watch.check)?);
    }
    match watch.check.found() {
        Found::Admitted => {}
        Found::Failure(w) => return Ok(Verdict::Disagree(w.clone())),
        Found::Unjudged(why) => return Ok(Verdict::Inconclusive(why.clone())),
        Found::Broken(why) => return Err(CheckError::NotJudged(why.clone())),
    }
    let watched = Ran { logits, states: engine.state().states.into_iter().map(|s| (s.name, s.value)).collect() };
    let mut fast = EngineRunner::new(program, checkpoint, capacity)?;
    let fast = run_case(&mut fast, case, |r| Ok(r.prefill(prefill, &case.prompt, Outputs::All)?))?;
    if let Some(w) = first_difference(&watched, &fast) {
        return Ok(Verdict::Disagree(w));
    }
    let check = &watch.check;
    Ok(Verdict::Agree {
        steps: all.len(),
        values: check.values,
        structure: structure.max_rel,
        max_rel: check.max_rel,
        widest: check.widest,
    })
}

/// The first value where the engine's prefill differs from the watched run, to the bit.
fn first_difference(watched: &Ran<f32>, fast: &Ran<f32>) -> Option<Witness> {
    let witness = |step: usize, tensor: &str, index: usize, reference: f32, engine: f32| Witness {
        stage: Comparison::Command,
        step,
        command: Some("the prefill as the engine runs it, against the run judged token by token".into()),
        tensor: tensor.to_string(),
        index,
        reference: reference.into(),
        engine: engine.into(),
        tolerance: 0.0,
        relative: f64::INFINITY,
    };
    let differs = |a: &[f32], b: &[f32]| {
        (0..a.len().max(b.len())).find(|&i| a.get(i).map(|x| x.to_bits()) != b.get(i).map(|x| x.to_bits()))
    };
    let steps = watched.logits.len().max(fast.logits.len());
    for step in 0..steps {
        let (a, b) = (watched.logits.get(step).map_or(&[][..], |l| l), fast.logits.get(step).map_or(&[][..], |l| l));
        if let Some(i) = differs(a, b) {
            let at = |l: &[f32]| l.get(i).copied().unwrap_or(f32::NAN);
            return Some(witness(step, "logits", i, at(a), at(b)));
        }
    }
    let last = steps.saturating_sub(1);
    for ((name, a), (_, b)) in watched.states.iter().zip(&fast.states) {
        let (a, b) = (crate::check::flat(a), crate::check::flat(b));
        let (a, b): (Vec<f32>, Vec<f32>) =
            (a.iter().map(|&x| x as f32).collect(), b.iter().map(|&x| x as f32).collect());
        if let Some(i) = differs(&a, &b) {
            let at = |l: &[f32]| l.get(i).copied().unwrap_or(f32::NAN);
            return Some(witness(last, name, i, at(&a), at(&b)));
        }
    }
    None
}
