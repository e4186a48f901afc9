//! `stepcheck run`: process a prompt and generate tokens greedily, printing for every prompt token
//! and every generated one the argmax and the top 5 logits (`--json`: every prompt token's
//! logits), the rates of both, then the peak memory the run used.
//!
//! The engine processes the prompt as one prefill (`engine::run::prefill`, in chunks of
//! `--chunk` tokens, each matrix read once per chunk) and then decodes `-n` tokens one by one, each
//! the argmax of the logits before it; the reference steps every token. Each line is printed as
//! soon as it is known (with `--json`, everything at the end), so whatever ends the run, what was
//! decoded stays printed. Logits or a carried state holding a value that is not finite end the run
//! with an error naming the token, the tensor and the index: no argmax is shown for it or after it
//! (after a prefill, a state is looked at once the prompt is through).
//!
//! Before a weight is made or read, the memory the run needs is estimated and compared with what it
//! may use (`--max-gib`, or what the machine has), as `check` does: a model too large is refused
//! with what it needs, never by an allocation that aborts.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::CliError;
use super::args::{Interp, RunArgs};
use super::progress::Progress;
use crate::engine::program::prefill::Prefill;
use crate::engine::run::StateValue;
use crate::engine::run::prefill::Outputs;
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

    /// Every prompt token's logits: the engine's prefill in chunks of `chunk`, the reference's
    /// steps one by one.
    fn prompt(&mut self, tokens: &[u32], chunk: usize) -> Result<Vec<Vec<f64>>, CliError> {
        match self {
            Stepper::Reference(_) => {
                let mut logits = vec![];
                for &t in tokens {
                    logits.push(self.step(t)?);
                    if self.non_finite_state().is_some() {
                        break;
                    }
                }
                Ok(logits)
            }
            Stepper::Engine(e) => {
                let prefill = Prefill::chunked(tokens.len(), chunk).map_err(|e| format!("--chunk: {e}"))?;
                let logits = e.prefill(&prefill, tokens, Outputs::All)?;
                Ok(logits.into_iter().map(|l| l.into_iter().map(f64::from).collect()).collect())
            }
        }
    }

    /// The first prompt token whose carried state holds a value that is not finite (its index,
    /// the state and the index in it). The engine ran the prompt as one prefill, so its tokens
    /// are stepped again from the start state, one by one; the reference stepped them so.
    fn first_non_finite(&mut self, tokens: &[u32]) -> Result<Option<(usize, String, usize)>, CliError> {
        if self.non_finite_state().is_none() {
            return Ok(None);
        }
        let Stepper::Engine(e) = self else { return Ok(None) };
        let mut fresh = e.fresh_state();
        e.swap_state(&mut fresh)?;
        for (i, &t) in tokens.iter().enumerate() {
            self.step(t)?;
            if let Some((state, at)) = self.non_finite_state() {
                return Ok(Some((i, state, at)));
            }
        }
        Err(format!("the prompt's prefill left a state that is not finite, which its {} steps do not", tokens.len())
            .into())
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
    let (spec, ckpt) = source.load_within(budget.as_ref(), |spec, bytes| {
        Need::of(spec, tokens.len() + a.generate, bytes).with_prefill(spec, a.chunk.min(tokens.len()))
    })?;
    if let ModelSource::Gguf(path) = &source {
        let m = gguf_model(path)?;
        progress.clear();
        errln!("tensor types: {}", m.types);
        if let Some(mtp) = &m.mtp {
            errln!("{mtp}");
        }
    }
    let graph = decode_step(&spec)?;
    let positions = tokens.len() + a.generate;
    let mut runner = match a.interp {
        Interp::Reference => Stepper::Reference(Box::new(Runner::new(&graph, &ckpt)?)),
        Interp::Engine => {
            let program = lower_graph(&EngineShim::default().prepare(&graph), a.numerics)?;
            Stepper::Engine(Box::new(EngineRunner::new(&program, &ckpt, positions.max(1))?))
        }
    };
    progress.show(&format!("prompt of {} tokens", tokens.len()));
    let start = Instant::now();
    let prompt = runner.prompt(tokens, a.chunk)?;
    let prompt_time = start.elapsed();
    progress.clear();
    // A state that is not finite makes the logits after it meaningless; a logit that is not a
    // number has no order. No argmax is shown past either.
    let non_finite = match runner.non_finite_state() {
        None => None,
        Some((state, at)) => Some(runner.first_non_finite(tokens)?.unwrap_or((prompt.len() - 1, state, at))),
    };
    if let Some((i, state, at)) = non_finite {
        return Err(format!(
            "step {i}, token {}: {state} holds a value that is not finite at index {at}; no argmax is shown for \
             it or after it",
            tokens[i]
        )
        .into());
    }
    for (i, l) in prompt.iter().enumerate() {
        finite(l, &format!("step {i}, token {}", tokens[i]))?;
        if !a.json {
            outln!("step {i}, token {}: {}", tokens[i], shown(l));
        }
    }
    let mut generated = vec![];
    let mut gen_time = Duration::ZERO;
    let mut last = prompt.last().cloned();
    for i in 0..a.generate {
        let Some(next) = last.as_deref().and_then(|l| top_k(l, 1).first().map(|&(t, _)| t as u32)) else { break };
        progress.show(&format!("generating {}/{}", i + 1, a.generate));
        let start = Instant::now();
        let l = runner.step(next)?;
        gen_time += start.elapsed();
        progress.clear();
        if let Some((state, at)) = runner.non_finite_state() {
            return Err(format!(
                "step {}, token {next} (generated): {state} holds a value that is not finite at index {at}; no \
                 argmax is shown for it or after it",
                tokens.len() + i
            )
            .into());
        }
        finite(&l, &format!("step {}, token {next} (generated)", tokens.len() + i))?;
        if !a.json {
            outln!("step {}, token {next} (generated): {}", tokens.len() + i, shown(&l));
        }
        generated.push(next);
        last = Some(l);
    }
    let rate = |n: usize, t: Duration| if n == 0 { 0.0 } else { n as f64 / t.as_secs_f64().max(1e-9) };
    let (pp, tg) = (rate(tokens.len(), prompt_time), rate(generated.len(), gen_time));
    let peak = super::memory::peak_rss();
    if a.json {
        let json = serde_json::json!({
            "tokens": tokens,
            "logits": prompt,
            "generated": generated,
            "prompt_tokens_per_s": pp,
            "generated_tokens_per_s": tg,
            "peak_rss_bytes": peak,
        });
        outln!("{json}");
    } else {
        let n = |k: usize| super::plural::plural(k, "token");
        outln!("prompt: {} in {:.1} ms, {pp:.2} tokens/s", n(tokens.len()), prompt_time.as_secs_f64() * 1e3);
        if a.generate > 0 {
            outln!("generation: {} in {:.1} ms, {tg:.2} tokens/s", n(generated.len()), gen_time.as_secs_f64() * 1e3);
        }
        if let Some(peak) = peak {
            outln!("{}", super::memory::describe(peak));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses logits holding a value that is not finite, naming `what` and the index.
fn finite(logits: &[f64], what: &str) -> Result<(), CliError> {
    match logits.iter().enumerate().find(|(_, x)| !x.is_finite()) {
        Some((j, x)) => Err(format!("{what}: logits[{j}] is {x}; no argmax is shown for it or after it").into()),
        None => Ok(()),
    }
}

/// A line's argmax and top logits.
fn shown(logits: &[f64]) -> String {
    let top = top_k(logits, TOP);
    let listed: Vec<String> = top.iter().map(|&(i, x)| format!("{i} ({x:.6})")).collect();
    let argmax = top.first().map_or("-".into(), |(i, _)| i.to_string());
    format!("argmax {argmax}; top {}: {}", top.len(), listed.join(", "))
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
