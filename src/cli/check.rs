//! `stepcheck check`, the main job: author, fuse, lower and compare both interpreters, one line per
//! model.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::args::CheckArgs;
use crate::check::{Verdict, compare};
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::model::{author::decode_step, layout::layout, presets};
use crate::source::ModelSource;

pub fn check(a: CheckArgs) -> Result<ExitCode, CliError> {
    let mut sources: Vec<ModelSource> = a.models.iter().map(|p| ModelSource::from_path(p)).collect::<Result<_, _>>()?;
    sources.extend(a.preset.iter().map(|n| ModelSource::preset(n, a.seed)));
    if sources.is_empty() {
        sources = presets::PRESETS.iter().map(|n| ModelSource::preset(n, a.seed)).collect();
    }
    let w = sources.iter().map(|s| s.label().len()).max().unwrap_or(5).max(5);
    outln!("{:<w$} {:<13} {:>8}  {:>9}  {:>9}  {:>8}", "model", "verdict", "commands", "max abs", "max rel", "time");
    let mut failed = false;
    for source in &sources {
        let t0 = Instant::now();
        let label = source.label();
        if let ModelSource::Preset { name, .. } = source {
            let spec = source.spec()?;
            let gib = layout(&spec).iter().map(|t| t.shape.iter().product::<usize>()).sum::<usize>() as f64 * 4.0
                / (1u64 << 30) as f64;
            if gib > a.max_gib {
                outln!(
                    "{name:<w$} {:<13} skipped: its random checkpoint takes {gib:.1} GiB (--max-gib {})",
                    "-",
                    a.max_gib
                );
                continue;
            }
        }
        eprintln!("{label}: loading");
        let (spec, ckpt) = source.load()?;
        eprintln!("{label}: {} values in {:.1?}; lowering", ckpt.numel(), t0.elapsed());
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = match lower_graph(&graph, a.numerics) {
            Ok(p) => p,
            Err(e) => {
                outln!("{label:<w$} {:<13} {e}", format!("refused:{}", e.name()));
                failed = true;
                continue;
            }
        };
        let commands: usize = program.blocks.iter().map(|b| b.commands.len()).sum();
        let tokens: Vec<u32> = (0..a.steps).map(|i| ((i * 7919 + 11) % spec.vocab.max(1)) as u32).collect();
        eprintln!("{label}: comparing {} steps", tokens.len());
        let verdict = compare(&graph, &program, &ckpt, &tokens)?;
        let time = format!("{:.1?}", t0.elapsed());
        match &verdict {
            Verdict::Agree { max_abs, max_rel, .. } => {
                outln!("{label:<w$} {:<13} {commands:>8}  {max_abs:>9.2e}  {max_rel:>9.2e}  {time:>8}", "agree")
            }
            other => {
                failed = true;
                outln!("{label:<w$} {:<13} {commands:>8}  {other}  {time}", other.name())
            }
        }
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
