//! `stepcheck check --batch N`: batched decode on the models, apart from the single-sequence check
//! so that the two can change separately.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::args::CheckArgs;
use crate::batch::BatchProgram;
use crate::batch::check::{BatchVerdict, check_lowered};
use crate::batch::r#gen::{self as bgen, BatchOutcome, EVENT_KINDS, EventKind};
use crate::batch::plan::lower_schedule;
use crate::batch::prove::prove_batch;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::limits::{Budget, Need};
use crate::model::{author::decode_step, presets};
use crate::source::ModelSource;

/// Per model (default: every preset), the schedules of [`bgen::check_cases`]: one on each of
/// [`bgen::CHECK_SCHEDULES`] seeds from `--seed`, on a pool of `n` slots (batches of up to `n`
/// rows, two snapshots), each holding every event kind the pool allows (admit, decode, finish,
/// reuse of a freed slot, fork, rollback, a partial batch). Each schedule is judged by the plan's
/// validation, by the proof (the one-sequence step, authored ≡ fused ≡ program, and the slot
/// induction over the plan: `proved` when both hold), by the symbolic slot run (`slots isolated`
/// when every row reads its own sequence's state), and by the interpreters, which must give the
/// outcome validation and the symbolic run predict; one line per schedule, then a summary.
///
/// Exits 1 when a schedule's interpreters do not give the predicted outcome, a schedule the pool
/// runs is not proved, or the engine refuses a model. A model too large for the memory is not run
/// (its line says so; only its proofs are checked) and is not counted as agreeing: a model named
/// on the command line exits 2, a preset of the default list is left to the summary, as `check`
/// does; a command that ran no model exits 2.
pub(crate) fn check_batch(a: &CheckArgs, n: usize) -> Result<ExitCode, CliError> {
    let explicit = !a.models.is_empty() || !a.preset.is_empty();
    let mut sources: Vec<ModelSource> = a.models.iter().map(|p| ModelSource::from_path(p)).collect::<Result<_, _>>()?;
    sources.extend(a.preset.iter().map(|n| ModelSource::preset_as(n, a.seed, a.weights)));
    if sources.is_empty() {
        sources = presets::PRESETS.iter().map(|n| ModelSource::preset_as(n, a.seed, a.weights)).collect();
    }
    let n = n.max(1);
    let budget = Budget::new(a.max_gib);
    let mut tally = Tally::default();
    let mut not_run = vec![];
    outln!("{}", header(a.seed, n));
    for source in &sources {
        let label = source.label();
        let spec = source.spec()?;
        let authored = decode_step(&spec)?;
        let graph = EngineShim::default().prepare(&authored);
        let program = match lower_graph(&graph, a.numerics) {
            Ok(p) => p,
            Err(e) => {
                outln!("{label}: refused:{}: {e}", e.name());
                tally.refused += 1;
                tally.exit = tally.exit.max(1);
                continue;
            }
        };
        let pool = BatchProgram::new(program, n, n, bgen::CHECK_SNAPSHOTS, bgen::CAPACITY)?;
        let skipped = match &budget {
            Some(b) => b.admit(&label, &Need::of(&spec, case_steps(n), source.checkpoint_bytes(&spec)?)).err(),
            None => None,
        };
        let ckpt = match skipped {
            Some(_) => None,
            None => Some(source.load()?.1),
        };
        let cases = bgen::check_cases(a.seed, n, spec.vocab);
        let mut proofs = (0, 0);
        for (seed, case) in &cases {
            let t0 = Instant::now();
            let lowered = lower_schedule(&case.schedule, &pool);
            // The proof needs no weights: a model not run for its size is still proved.
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
            proofs.0 += usize::from(proof_word == "proved");
            proofs.1 += 1;
            if !proved_if_run {
                tally.exit = tally.exit.max(1);
            }
            let Some(ckpt) = &ckpt else {
                if let Some(p) = proof.as_ref().filter(|p| p.word() != "proved") {
                    outln!("{label}, seed {seed}: proof: {proof_word}\n  {p}");
                }
                continue;
            };
            let (expected, verdict) = match &lowered {
                Ok(l) => (bgen::expected(&pool, l), check_lowered(&graph, &pool, ckpt, l)?),
                Err(e) => (BatchOutcome::Refused(e.name()), BatchVerdict::Refused(e.clone())),
            };
            let symbolic = match &expected {
                BatchOutcome::Agree => "slots isolated".to_string(),
                other => other.to_string(),
            };
            // The interpreters must give the outcome validation and the symbolic run predict.
            let ok = BatchOutcome::of(&verdict) == expected
                && case.refusal.is_none_or(|r| expected == BatchOutcome::Refused(r))
                && proved_if_run;
            if !ok {
                tally.exit = tally.exit.max(1);
            }
            tally.verdicts.push(verdict.name());
            let lacks = lacking(&bgen::kinds_of(&case.schedule, n), n);
            outln!(
                "{label}, seed {seed}: {} events, {} steps{lacks}; proof: {proof_word}; symbolic: {symbolic}; \
                 interpreters: {verdict} ({:.1?})",
                case.schedule.events.len(),
                case.schedule.steps(),
                t0.elapsed()
            );
            if let Some(p) = proof.as_ref().filter(|p| p.word() != "proved") {
                outln!("  {p}");
            }
        }
        tally.proved += proofs.0;
        tally.schedules += proofs.1;
        match skipped {
            Some(e) => {
                tally.skipped += 1;
                not_run.push(label.clone());
                if explicit {
                    tally.exit = 2;
                }
                outln!(
                    "{label}, seeds {}: proof: {} of {} schedules proved; interpreters: not run: {e}; only its proofs \
                     were checked",
                    seeds(a.seed),
                    proofs.0,
                    proofs.1
                );
            }
            None => tally.run += 1,
        }
    }
    outln!("\n{}", tally.summary(sources.len()));
    if !not_run.is_empty() && !explicit {
        outln!(
            "not run: {}; the exit status answers for the models run (a preset named with --preset is run or exits \
             2; --weights bf16 or --max-gib may let it run)",
            not_run.join(", ")
        );
    }
    // A command that ran no model answered nothing.
    if tally.run == 0 && tally.skipped > 0 {
        tally.exit = 2;
    }
    Ok(ExitCode::from(tally.exit))
}

/// What the command did, model by model and schedule by schedule.
#[derive(Default)]
struct Tally {
    /// Models whose schedules ran on the interpreters.
    run: usize,
    /// Models not run for their size (only proved).
    skipped: usize,
    /// Models whose program the engine refuses.
    refused: usize,
    /// The interpreters' verdict of every schedule run.
    verdicts: Vec<&'static str>,
    /// Schedules proved, of those proved or not.
    proved: usize,
    schedules: usize,
    exit: u8,
}

impl Tally {
    /// The summary line: the models run, not run and refused, then the schedules' verdicts. A model
    /// not run is counted apart, never as agreeing.
    fn summary(&self, models: usize) -> String {
        let count = |v: &str| self.verdicts.iter().filter(|x| **x == v).count();
        format!(
            "{models} models: {} run, {} skipped (not run, not counted as agreeing), {} refused by the engine; {} \
             schedules run: {} agree, {} disagree, {} inconclusive, {} refused; {} of {} schedules proved",
            self.run,
            self.skipped,
            self.refused,
            self.verdicts.len(),
            count("agree"),
            count("disagree"),
            count("inconclusive"),
            count("refused"),
            self.proved,
            self.schedules
        )
    }
}

/// The seeds of the schedules, as the lines name them.
fn seeds(seed: u64) -> String {
    let last = seed.wrapping_add(bgen::CHECK_SCHEDULES - 1);
    format!("{seed}–{last}")
}

/// The first line: what every model is run on, and the kinds every schedule holds.
fn header(seed: u64, n: usize) -> String {
    let (can, cannot): (Vec<EventKind>, Vec<EventKind>) =
        EVENT_KINDS.into_iter().partition(|k| k.possible(n, n, bgen::CHECK_SNAPSHOTS));
    let why = match cannot.as_slice() {
        [] => String::new(),
        _ => format!(" ({} need two slots)", names(&cannot)),
    };
    let pool = match n {
        1 => "1 slot, batches of 1 row".to_string(),
        _ => format!("{n} slots, batches of up to {n} rows"),
    };
    format!(
        "per model {} schedules (seeds {}) on {pool}, {} snapshots; each holds {}{why}",
        bgen::CHECK_SCHEDULES,
        seeds(seed),
        bgen::CHECK_SNAPSHOTS,
        names(&can)
    )
}

/// The kinds' names, as a list in prose.
fn names(kinds: &[EventKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// What a schedule lacks of the kinds the pool allows, for its line (nothing when it has them all).
fn lacking(has: &std::collections::BTreeSet<EventKind>, n: usize) -> String {
    let lacks: Vec<EventKind> =
        EVENT_KINDS.into_iter().filter(|k| k.possible(n, n, bgen::CHECK_SNAPSHOTS) && !has.contains(k)).collect();
    if lacks.is_empty() { String::new() } else { format!(" (no {})", names(&lacks)) }
}

/// The most decode steps a drawn schedule of `n` slots holds, for the memory estimate: the KV cache
/// of a slot grows by one position a step.
fn case_steps(n: usize) -> usize {
    crate::batch::r#gen::CAPACITY.max(n)
}
