//! `stepcheck graph`: the step graph of a model.

use std::process::ExitCode;

use super::CliError;
use super::args::GraphArgs;
use crate::engine::shim::EngineShim;
use crate::model::author::decode_step;

pub fn graph(a: GraphArgs) -> Result<ExitCode, CliError> {
    let spec = a.model.source()?.spec()?;
    let g = decode_step(&spec)?;
    let g = if a.fused { EngineShim::default().prepare(&g) } else { g };
    out!("{g}");
    Ok(ExitCode::SUCCESS)
}
