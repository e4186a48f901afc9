//! `stepcheck run`: decode tokens one by one and print, for every step, the argmax and the top 5
//! logits (`--json`: every logit), then the peak memory the run used.
//!
//! Each step's line is printed as soon as it is decoded (with `--json`, everything at the end), so
//! whatever ends the run, what was decoded stays printed. A step whose logits or carried state hold
//! a value that is not finite ends the run with an error naming the step, the tensor and the index:
//! no argmax is shown for it or after it.
//!
//! Before a weight is made or read, the memory the run needs is estimated and compared with what it
//! may use (`--max-gib`, or what the machine has), as `check` does: a model too large is refused
//! with what it needs, never by an allocation that aborts.

use std::process::ExitCode;

use super::CliError;
use super::args::{Interp, RunArgs};
use super::progress::Progress;
use crate::engine::run::StateValue;
use crate::engine::{EngineRunner, lower::lower_graph, shim::EngineShim};
use crate::interp::Runner;
use crate::limits::{Budget, Need};
use crate::model::author::decode_step;
use crate::model::gguf::gguf_model;
use crate::source::ModelSource;

/// One interpreter, stepping.
enum Stepper<'c> {
    Reference(Box<Runner<'c>>),
    Engine(Box<EngineRunner<'c>>),
}

impl Stepper<'_> {
    fn step(&mut self, token: u32) -> Result<Vec<f64>, CliError> {
        Ok(match self {
            Stepper::Reference(r) => r.step(token)?,
            Stepper::Engine(e) => e.step(token)?.into_iter().map(f64::from).collect(),
        })
    }

    /// The first value of the carried state that is not finite: the state's name and the index.
    fn non_finite_state(&self) -> Option<(String, usize)> {
        match self {
            Stepper::Reference(r) => r.state().entries.into_iter().find_map(|e| {
                let at = e.values.iter().position(|x| !x.is_finite())?;
                let layer = e.layer.map_or(String::new(), |l| format!(" of layer {l}"));
                Some((format!("the {:?} state{layer}", e.kind), at))
            }),
            Stepper::Engine(e) => e.state().states.into_iter().find_map(|s| {
                let values = match &s.value {
                    StateValue::Position(_) => return None,
                    StateValue::ConvWindow { values, .. }
                    | StateValue::DeltaState { values, .. }
                    | StateValue::KvCache { values, .. } => values,
                };
                let at = values.iter().position(|x| !x.is_finite())?;
                Some((format!("state {}", s.name), at))
            }),
        }
    }
}

/// How many of the largest logits a step's line shows.
const TOP: usize = 5;

pub fn run(a: RunArgs) -> Result<ExitCode, CliError> {
    let tokens = &a.tokens.0;
    let mut progress = Progress::new();
    let source = a.model.source_as(a.weights)?;
    progress.show(&format!("{}: loading", source.label()));
    let budget = Budget::new(a.max_gib);
    let (spec, ckpt) = source.load_within(budget.as_ref(), |spec, bytes| Need::of(spec, tokens.len(), bytes))?;
    if let ModelSource::Gguf(path) = &source {
        let m = gguf_model(path)?;
        progress.clear();
        errln!("tensor types: {}", m.types);
        if let Some(mtp) = &m.mtp {
            errln!("{mtp}");
        }
    }
    let graph = decode_step(&spec)?;
    let mut runner = match a.interp {
        Interp::Reference => Stepper::Reference(Box::new(Runner::new(&graph, &ckpt)?)),
        Interp::Engine => {
            let program = lower_graph(&EngineShim::default().prepare(&graph), a.numerics)?;
            Stepper::Engine(Box::new(EngineRunner::new(&program, &ckpt, tokens.len().max(1))?))
        }
    };
    // A step's line is printed as soon as it is decoded (all at the end with --json), so that
    // what was decoded stays printed whatever ends the run.
    let mut logits = vec![];
    for (i, &t) in tokens.iter().enumerate() {
        progress.show(&format!("step {}/{} (token {t})", i + 1, tokens.len()));
        let l = runner.step(t)?;
        // A state that is not finite makes this step's logits and every later step's meaningless;
        // a logit that is not a number has no order. No argmax is shown past either.
        if let Some((state, at)) = runner.non_finite_state() {
            return Err(format!(
                "step {i}, token {t}: {state} holds a value that is not finite at index {at}; no argmax is shown for \
                 this step or after it"
            )
            .into());
        }
        if let Some((j, x)) = l.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            return Err(
                format!("step {i}, token {t}: logits[{j}] is {x}; no argmax is shown for it or after it").into()
            );
        }
        if a.json {
            logits.push(l);
        } else {
            progress.clear();
            let top = top_k(&l, TOP);
            let shown: Vec<String> = top.iter().map(|&(i, x)| format!("{i} ({x:.6})")).collect();
            let argmax = top.first().map_or("-".into(), |(i, _)| i.to_string());
            outln!("step {i}, token {t}: argmax {argmax}; top {}: {}", top.len(), shown.join(", "));
        }
    }
    progress.clear();
    let peak = super::memory::peak_rss();
    if a.json {
        outln!("{}", serde_json::json!({ "tokens": tokens, "logits": logits, "peak_rss_bytes": peak }));
    } else if let Some(peak) = peak {
        outln!("{}", super::memory::describe(peak));
    }
    Ok(ExitCode::SUCCESS)
}

/// The `k` largest logits with their indices, largest first; ties go to the lower index, and NaN
/// sorts below every number.
fn top_k(logits: &[f64], k: usize) -> Vec<(usize, f64)> {
    let mut all: Vec<(usize, f64)> = logits.iter().copied().enumerate().collect();
    let key = |x: f64| if x.is_nan() { f64::NEG_INFINITY } else { x };
    let order = |a: &(usize, f64), b: &(usize, f64)| key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(&b.0));
    // The k first in order, found without sorting the whole vocabulary, then sorted.
    if k < all.len() {
        all.select_nth_unstable_by(k, order);
        all.truncate(k);
    }
    all.sort_by(order);
    all
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn top_k_is_largest_first_with_ties_to_the_lower_index() {
        assert_eq!(top_k(&[1.0, 3.0, f64::NAN, 3.0, -1.0], 3), vec![(1, 3.0), (3, 3.0), (0, 1.0)]);
        assert_eq!(top_k(&[2.0], 5), vec![(0, 2.0)]);
        assert_eq!(top_k(&[0.5, 2.0, 1.0, 2.0], 0), vec![]);
        assert_eq!(top_k(&[0.5, 2.0, 1.0, 2.0, 7.0, -1.0], 2), vec![(4, 7.0), (1, 2.0)]);
    }
}
