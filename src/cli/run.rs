//! `stepcheck run`: decode tokens one by one and print, for every step, the argmax and the top 5
//! logits (`--json`: every logit), then the peak memory the run used.
//!
//! Before a weight is made or read, the memory the run needs is estimated and compared with what it
//! may use (`--max-gib`, or what the machine has), as `check` does: a model too large is refused
//! with what it needs, never by an allocation that aborts.

use std::process::ExitCode;

use super::CliError;
use super::args::{Interp, RunArgs};
use super::progress::Progress;
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
    let mut logits = vec![];
    let mut not_finite = None;
    for (i, &t) in tokens.iter().enumerate() {
        progress.show(&format!("step {}/{} (token {t})", i + 1, tokens.len()));
        let l = runner.step(t)?;
        // A logit that is not a number has no order: no argmax is shown past it.
        if let Some((j, x)) = l.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            not_finite =
                Some(format!("step {i}, token {t}: logits[{j}] is {x}; no argmax is shown for it or after it"));
            break;
        }
        logits.push(l);
    }
    progress.clear();
    if let (Some(why), true) = (&not_finite, a.json) {
        return Err(why.clone().into());
    }
    let peak = super::memory::peak_rss();
    if a.json {
        outln!("{}", serde_json::json!({ "tokens": tokens, "logits": logits, "peak_rss_bytes": peak }));
    } else {
        for (step, (t, l)) in tokens.iter().zip(&logits).enumerate() {
            let top = top_k(l, TOP);
            let shown: Vec<String> = top.iter().map(|&(i, x)| format!("{i} ({x:.6})")).collect();
            let argmax = top.first().map_or("-".into(), |(i, _)| i.to_string());
            outln!("step {step}, token {t}: argmax {argmax}; top {}: {}", top.len(), shown.join(", "));
        }
        if let Some(why) = not_finite {
            return Err(why.into());
        }
        if let Some(peak) = peak {
            outln!("{}", super::memory::describe(peak));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `k` largest logits with their indices, largest first; ties go to the lower index, and NaN
/// sorts below every number.
fn top_k(logits: &[f64], k: usize) -> Vec<(usize, f64)> {
    let mut all: Vec<(usize, f64)> = logits.iter().copied().enumerate().collect();
    let key = |x: f64| if x.is_nan() { f64::NEG_INFINITY } else { x };
    all.sort_by(|a, b| key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn top_k_is_largest_first_with_ties_to_the_lower_index() {
        assert_eq!(top_k(&[1.0, 3.0, f64::NAN, 3.0, -1.0], 3), vec![(1, 3.0), (3, 3.0), (0, 1.0)]);
        assert_eq!(top_k(&[2.0], 5), vec![(0, 2.0)]);
    }
}
