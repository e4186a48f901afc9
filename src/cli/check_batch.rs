//! `stepcheck check --batch N`: batched decode on the models, apart from the single-sequence check
//! so that the two can change separately.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::args::CheckArgs;
use crate::batch::BatchProgram;
use crate::batch::check::{BatchVerdict, check_lowered};
use crate::batch::r#gen::{self as bgen, Outcome};
use crate::batch::plan::lower_schedule;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::r#gen::draw::{Draw, seeded_bytes};
use crate::limits::{Budget, Need};
use crate::model::{author::decode_step, presets};
use crate::source::ModelSource;

/// Per model (default: every preset), a schedule drawn from `--seed` on a pool of `n` slots
/// (batches of up to `n` rows, two snapshots), judged first by the plan's validation and the
/// symbolic slot run (`slots isolated` when every row reads its own sequence's state), then by the
/// interpreters, which must give the outcome those predict. Exits 1 when they do not.
pub fn check_batch(a: &CheckArgs, n: usize) -> Result<ExitCode, CliError> {
    let mut sources: Vec<ModelSource> = a.models.iter().map(|p| ModelSource::from_path(p)).collect::<Result<_, _>>()?;
    sources.extend(a.preset.iter().map(|n| ModelSource::preset_as(n, a.seed, a.weights)));
    if sources.is_empty() {
        sources = presets::PRESETS.iter().map(|n| ModelSource::preset_as(n, a.seed, a.weights)).collect();
    }
    let n = n.max(1);
    let budget = Budget::new(a.max_gib);
    let mut failed = false;
    for source in &sources {
        let t0 = Instant::now();
        let label = source.label();
        let spec = source.spec()?;
        if let Some(b) = &budget
            && let Err(e) = b.admit(&label, &Need::of(&spec, case_steps(n), source.checkpoint_bytes(&spec)?))
        {
            outln!("{label}: skipped: {e}");
            continue;
        }
        let (spec, ckpt) = source.load()?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = match lower_graph(&graph, a.numerics) {
            Ok(p) => p,
            Err(e) => {
                outln!("{label}: refused:{}: {e}", e.name());
                failed = true;
                continue;
            }
        };
        let bytes = seeded_bytes(a.seed, 256);
        let case = bgen::draw_events(&mut Draw::new(&bytes), n, n, 2, spec.vocab);
        let pool = BatchProgram::new(program, n, n, 2, bgen::CAPACITY)?;
        let (expected, verdict) = match lower_schedule(&case.schedule, &pool) {
            Ok(lowered) => (bgen::expected(&pool, &lowered), check_lowered(&graph, &pool, &ckpt, &lowered)?),
            Err(e) => (Outcome::Refused(e.name()), BatchVerdict::Refused(e)),
        };
        let symbolic = match &expected {
            Outcome::Agree => "slots isolated".to_string(),
            other => other.to_string(),
        };
        let ok = Outcome::of(&verdict) == expected && case.refusal.is_none_or(|r| expected == Outcome::Refused(r));
        failed |= !ok;
        outln!(
            "{label}: {} events, {} steps on {n} slots; symbolic: {symbolic}; interpreters: {verdict} ({:.1?})",
            case.schedule.events.len(),
            case.schedule.steps(),
            t0.elapsed()
        );
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The most decode steps a drawn schedule of `n` slots holds, for the memory estimate: the KV cache
/// of a slot grows by one position a step.
fn case_steps(n: usize) -> usize {
    crate::batch::r#gen::CAPACITY.max(n)
}
