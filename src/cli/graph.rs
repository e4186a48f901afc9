//! `stepcheck graph`: the step graph of a model, in its text form or as JSON.

use std::process::ExitCode;

use super::CliError;
use super::args::GraphArgs;
use crate::engine::shim::EngineShim;
use crate::model::author::decode_step;

/// Prints the step graph of the model's spec, read without a weight (a folder's `config.json`, a
/// GGUF's metadata): the graph says which tensors it reads, not what they hold.
///
/// `--json` prints one object: `model` (the graph's name), `fused`, the counts `tensors` and
/// `ops`, and `text`, the graph's text form. The text form is the graph's one serialization (the
/// corpus's case files and the IR's parser read it back), so the JSON carries it whole rather than
/// a second form of the same nodes.
pub fn graph(a: GraphArgs) -> Result<ExitCode, CliError> {
    let spec = a.model.source()?.spec()?;
    let g = decode_step(&spec)?;
    let g = if a.fused { EngineShim::default().prepare(&g) } else { g };
    if a.json {
        let json = serde_json::json!({
            "model": g.name,
            "fused": a.fused,
            "tensors": g.tensors.len(),
            "ops": g.ops.len(),
            "text": g.to_string(),
        });
        outln!("{json}");
    } else {
        out!("{g}");
    }
    Ok(ExitCode::SUCCESS)
}
