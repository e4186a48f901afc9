//! `stepcheck run`: decode tokens one by one and print the logits of every step.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::args::{Interp, RunArgs};
use crate::engine::{EngineRunner, lower::lower_graph, shim::EngineShim};
use crate::ir::interp::Runner;
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

pub fn run(a: RunArgs) -> Result<ExitCode, CliError> {
    let t0 = Instant::now();
    let source = a.model.source()?;
    let (spec, ckpt) = source.load()?;
    eprintln!("checkpoint: {} values in {:.2?}", ckpt.numel(), t0.elapsed());
    if let ModelSource::Gguf(path) = &source {
        let m = gguf_model(path)?;
        eprintln!("tensor types: {}", m.types);
        if let Some(mtp) = &m.mtp {
            eprintln!("{mtp}");
        }
    }
    let graph = decode_step(&spec)?;
    let mut runner = match a.interp {
        Interp::Reference => Stepper::Reference(Box::new(Runner::new(&graph, &ckpt)?)),
        Interp::Engine => {
            let program = lower_graph(&EngineShim::default().prepare(&graph), a.numerics)?;
            Stepper::Engine(Box::new(EngineRunner::new(&program, &ckpt, a.tokens.len().max(1))?))
        }
    };
    let mut logits = vec![];
    for (i, &t) in a.tokens.iter().enumerate() {
        let t1 = Instant::now();
        let l = runner.step(t)?;
        eprintln!("step {i} (token {t}): {:.2?}", t1.elapsed());
        logits.push(l);
    }
    if a.json {
        outln!("{}", serde_json::json!({ "tokens": a.tokens, "logits": logits }));
    } else {
        for (t, l) in a.tokens.iter().zip(&logits) {
            let shown: Vec<String> = l.iter().take(8).map(|x| format!("{x:.6}")).collect();
            outln!("token {t}: [{}{}]", shown.join(", "), if l.len() > 8 { ", …" } else { "" });
        }
    }
    Ok(ExitCode::SUCCESS)
}
