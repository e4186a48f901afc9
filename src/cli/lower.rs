//! `stepcheck lower`: the engine's program of a model, or why it is refused.

use std::process::ExitCode;

use super::CliError;
use super::args::LowerArgs;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::model::author::decode_step;

pub fn lower(a: LowerArgs) -> Result<ExitCode, CliError> {
    let spec = a.model.source()?.spec()?;
    let g = EngineShim::default().prepare(&decode_step(&spec)?);
    match lower_graph(&g, a.numerics) {
        Ok(p) if a.json => outln!("{}", serde_json::to_string_pretty(&p)?),
        Ok(p) => out!("{p}"),
        Err(e) => {
            outln!("refused: {} — {e}", e.name());
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
