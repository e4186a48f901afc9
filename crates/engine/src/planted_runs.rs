//! What the engine's unit tests of planted storage bugs run: the tiny preset through the engine and
//! through its exact f64 run, with a bug planted or not.

use crate::{EngineRunner, EngineState, Rounding, StateValue};
use lower::{lower_graph, shim::EngineShim};
use model::{author::decode_step, presets, random::random_checkpoint};
use planted::{self, Bug};
use program::Numerics;

pub(super) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The engine's logits and state after a run, and the exact run's.
pub(super) type Runs = ((Vec<f32>, EngineState), (Vec<f64>, EngineState<f64>));

/// The tiny preset's logits and state after the tokens 3, 1, 4 at `numerics`, in f32 as the engine
/// stores and in f64 keeping every value exactly, with `bug` planted if any.
pub(super) fn runs(numerics: &str, bug: Option<Bug>) -> Result<Runs> {
    let spec = presets::preset("tiny").ok_or("no such preset")?;
    let graph = EngineShim::default().prepare(&decode_step(&spec)?);
    let program = lower_graph(&graph, Numerics::parse(numerics).ok_or("numerics")?)?;
    let ckpt = random_checkpoint(&spec, 2);
    let run = || -> Result<_> {
        let mut engine = EngineRunner::new(&program, &ckpt, 8)?;
        let mut exact = EngineRunner::<f64>::with_arithmetic(&program, &ckpt, 8, Rounding::Exact)?;
        let (mut logits, mut wide) = (vec![], vec![]);
        for token in [3, 1, 4] {
            logits = engine.step(token)?;
            wide = exact.step(token)?;
        }
        Ok(((logits, engine.state()), (wide, exact.state())))
    };
    match bug {
        Some(bug) => planted::with(bug, run),
        None => run(),
    }
}

/// The values of every state of `state` that `pick` takes (say, the KV caches), in order.
pub(super) fn values_of(state: &EngineState, pick: fn(&StateValue) -> Option<&Vec<f32>>) -> Vec<f32> {
    state.states.iter().filter_map(|s| pick(&s.value)).flatten().copied().collect()
}
