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
use crate::batch::prove::prove_batch;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::r#gen::draw::{Draw, seeded_bytes};
use crate::limits::{Budget, Need};
use crate::model::{author::decode_step, presets};
use crate::source::ModelSource;

/// Per model (default: every preset), a schedule drawn from `--seed` on a pool of `n` slots
/// (batches of up to `n` rows, two snapshots), judged by the plan's validation, by the proof (the
/// one-sequence step, authored ≡ fused ≡ program, and the slot induction over the plan: `proved`
/// when both hold), by the symbolic slot run (`slots isolated` when every row reads its own
/// sequence's state), and by the interpreters, which must give the outcome validation and the
/// symbolic run predict. Exits 1 when they do not, or when a schedule the pool runs is not proved.
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
        let authored = decode_step(&spec)?;
        let graph = EngineShim::default().prepare(&authored);
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
        let lowered = lower_schedule(&case.schedule, &pool);
        // The proof needs no weights: a model skipped for its size is still proved.
        let proof = lowered
            .as_ref()
            .ok()
            .filter(|l| l.plan.validate(&pool).is_ok())
            .map(|l| prove_batch(&authored, &graph, &pool, l));
        let proof_word = proof.as_ref().map_or("none (refused)", |p| p.word());
        // A schedule the pool runs must be proved (one step, and every slot); a refused one has
        // nothing to prove.
        let proved_if_run = match &proof {
            Some(p) => p.word() == "proved",
            None => lowered.is_err(),
        };
        let events = format!("{} events, {} steps on {n} slots", case.schedule.events.len(), case.schedule.steps());
        let interpreters = match &budget {
            Some(b) => b.admit(&label, &Need::of(&spec, case_steps(n), source.checkpoint_bytes(&spec)?)).err(),
            None => None,
        };
        let line = if let Some(e) = interpreters {
            failed |= !proved_if_run;
            format!("{events}; proof: {proof_word}; interpreters: skipped: {e}")
        } else {
            let (_, ckpt) = source.load()?;
            let (expected, verdict) = match &lowered {
                Ok(l) => (bgen::expected(&pool, l), check_lowered(&graph, &pool, &ckpt, l)?),
                Err(e) => (Outcome::Refused(e.name()), BatchVerdict::Refused(e.clone())),
            };
            let symbolic = match &expected {
                Outcome::Agree => "slots isolated".to_string(),
                other => other.to_string(),
            };
            // The interpreters must give the outcome validation and the symbolic run predict.
            let ok = Outcome::of(&verdict) == expected
                && case.refusal.is_none_or(|r| expected == Outcome::Refused(r))
                && proved_if_run;
            failed |= !ok;
            format!(
                "{events}; proof: {proof_word}; symbolic: {symbolic}; interpreters: {verdict} ({:.1?})",
                t0.elapsed()
            )
        };
        outln!("{label}: {line}");
        if let Some(p) = proof.as_ref().filter(|p| p.word() != "proved") {
            outln!("  {p}");
        }
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The most decode steps a drawn schedule of `n` slots holds, for the memory estimate: the KV cache
/// of a slot grows by one position a step.
fn case_steps(n: usize) -> usize {
    crate::batch::r#gen::CAPACITY.max(n)
}
