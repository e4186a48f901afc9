//! `stepcheck prove`: the proof that a model's program computes what its step graph computes, for
//! every checkpoint and every step, printed per output with the lemmas it used.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::args::ProveArgs;
use super::plural::plural;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::model::author::decode_step;
use crate::model::spec::ModelSpec;
use crate::prove::{ProofVerdict, prove};

/// Authors, fuses and lowers the model, then proves the program; exit 0 when proved, 1 when
/// refuted or inconclusive (or the lowering refuses).
pub(crate) fn prove_cmd(a: ProveArgs) -> Result<ExitCode, CliError> {
    let mut spec = a.model.source()?.spec()?;
    if let Some(n) = a.layers {
        spec.layers = ModelSpec::every_nth_attention(n, a.interval);
    }
    let authored = decode_step(&spec)?;
    let fused = EngineShim::default().prepare(&authored);
    let program = match lower_graph(&fused, a.numerics) {
        Ok(p) => p,
        Err(e) => {
            outln!("refused: {} — {e}", e.name());
            return Ok(ExitCode::from(1));
        }
    };
    let start = Instant::now();
    let verdict = prove(&authored, &fused, &program);
    let took = start.elapsed();
    outln!("{} ({}, numerics {})", spec.name, plural(spec.layers.len(), "layer"), a.numerics);
    outln!("{verdict}");
    eprintln!("proof took {:.1} ms", took.as_secs_f64() * 1e3);
    Ok(if matches!(verdict, ProofVerdict::Proved(_)) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
