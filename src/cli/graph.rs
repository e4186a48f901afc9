//! `stepcheck graph`: the step graph of a model.

use std::process::ExitCode;

use super::CliError;
use super::args::GraphArgs;
use crate::engine::shim::EngineShim;
use crate::model::author::decode_step;

/// Prints the step graph of the model's spec, read without a weight (a folder's `config.json`, a
/// GGUF's metadata): the graph says which tensors it reads, not what they hold.
pub fn graph(a: GraphArgs) -> Result<ExitCode, CliError> {
    let spec = a.model.source()?.spec()?;
    let g = decode_step(&spec)?;
    let g = if a.fused { EngineShim::default().prepare(&g) } else { g };
    out!("{g}");
    Ok(ExitCode::SUCCESS)
}
