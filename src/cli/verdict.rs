//! `stepcheck verdict`: whether the engine runs a model, and every construct it has no unit for.
//!
//! The model is read from its `config.json` (given, or in a model folder) or from a GGUF file's
//! metadata (a qwen35 file, or an attention-only `llama`, `qwen2` or `qwen3` one); no weights are
//! read. Exit status 0 means accepted, 1 refused, 2 not judged; with
//! `--json`, a model that cannot be judged still gets one JSON object, whose `error` is
//! `NotJudged` and whose `message` says why.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::CliError;
use super::args::VerdictArgs;
use super::plural::plural;
use crate::admission::{Admission, admit_config_json, admit_spec};
use crate::formats::gguf::GgufFile;
use crate::model::gguf::{GgufModel, read_gguf};
use crate::model::gguf_attention::{architecture_of, attention_spec_of_gguf};
use crate::model::hf::{MAX_CONFIG_BYTES, read_bounded};

pub fn verdict(a: VerdictArgs) -> Result<ExitCode, CliError> {
    match admission_of(&a) {
        Ok(admission) => Ok(if admission.accepted() { ExitCode::SUCCESS } else { ExitCode::from(1) }),
        Err(e) if a.json && !super::is_broken_pipe(e.as_ref()) => {
            let message = e.to_string();
            outln!("{}", json!({ "accepted": null, "error": "NotJudged", "reasons": [], "message": message }));
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e),
    }
}

fn admission_of(a: &VerdictArgs) -> Result<Admission, CliError> {
    let path: &Path = &a.model;
    let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
    let mut gguf = None;
    let admission = if path.extension().is_some_and(|e| e == "gguf") {
        let at = |e: &dyn std::fmt::Display| {
            let (p, e) = (path.display().to_string(), e.to_string());
            if e.contains(&p) { e } else { format!("{p}: {e}") }
        };
        let file = GgufFile::open(path).map_err(|e| at(&e))?;
        // An attention-only architecture (llama, qwen2, qwen3) is judged from its metadata alone.
        if architecture_of(file.info()).is_some() {
            let spec = attention_spec_of_gguf(file.info()).map_err(|e| at(&e))?;
            admit_spec(&spec, a.numerics).map_err(|e| at(&e))?
        } else {
            let model = read_gguf(file.info()).map_err(|e| at(&e))?;
            let admission = admit_spec(&model.spec, a.numerics).map_err(|e| at(&e))?;
            gguf = Some(model);
            admission
        }
    } else {
        let config = if path.is_dir() { path.join("config.json") } else { path.to_path_buf() };
        let text = read_bounded(&config, MAX_CONFIG_BYTES)?;
        let name =
            if path.is_dir() { path.file_name().map_or(name.clone(), |n| n.to_string_lossy().into()) } else { name };
        admit_config_json(&text, &name, a.numerics).map_err(|e| format!("{}: {e}", config.display()))?
    };
    if a.json {
        let mut v = json!({
            "accepted": admission.accepted(),
            "error": admission.refusal().map(|r| r.name()),
            "reasons": admission.names(),
        });
        if let Some(m) = &gguf {
            v["gguf"] = gguf_json(m);
        }
        outln!("{v}");
    } else {
        print(&admission)?;
        if let Some(m) = &gguf {
            print_gguf(m)?;
        }
    }
    Ok(admission)
}

/// What a GGUF file holds besides its decoder: its tensor types and its skipped MTP head.
fn print_gguf(m: &GgufModel) -> Result<(), CliError> {
    outln!("decoder: {}", plural(m.spec.layers.len(), "layer"));
    outln!("tensor types: {}", m.types);
    if let Some(mtp) = &m.mtp {
        outln!("{mtp}");
    }
    Ok(())
}

/// [`print_gguf`]'s facts as JSON: `decoder_layers`, `types` (`[[name, count], …]`) and `mtp`
/// (null, or its blocks and sizes, `skipped: true`).
fn gguf_json(m: &GgufModel) -> serde_json::Value {
    let types: Vec<serde_json::Value> = m.types.0.iter().map(|(t, n)| json!([t.to_string(), n])).collect();
    let mtp = m.mtp.as_ref().map(|b| {
        json!({ "first_block": b.first, "blocks": b.count, "tensors": b.tensors, "values": b.values, "skipped": true })
    });
    json!({ "decoder_layers": m.spec.layers.len(), "types": types, "mtp": mtp })
}

/// The verdict as a user reads it: `accepted` with the program's size, or the refusal, then each
/// construct the engine has no unit for, once, in reading order, with where it first occurs and
/// how often.
fn print(admission: &Admission) -> Result<(), CliError> {
    if let Some(p) = admission.program {
        outln!(
            "accepted: a program of {}, {}, {} and {} of state",
            plural(p.blocks, "block"),
            plural(p.commands, "command"),
            plural(p.buffers, "buffer"),
            plural(p.states, "piece")
        );
        return Ok(());
    }
    if let Some(r) = admission.refusal() {
        outln!("refused: {} — {r}", r.name());
    }
    outln!("every construct the engine has no unit for, in reading order:");
    for name in admission.names() {
        let mut of_name = admission.reasons.iter().filter(|r| r.name() == name);
        let first = of_name.next().map(ToString::to_string).unwrap_or_default();
        let more = of_name.count();
        let also = if more > 0 { format!(" (and {more} more)") } else { String::new() };
        outln!("  {name}{also}: {first}");
    }
    Ok(())
}
