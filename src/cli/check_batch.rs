//! `stepcheck check --batch N`: batched decode on the models, apart from the single-sequence check
//! so that the two can change separately. Its rows go to `check`'s table ([`super::table`]): a row
//! per model, judged over its schedules, each schedule's line under it; the same summary, peak
//! memory and `--json` object, with the schedules' facts added.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::CliError;
use super::args::CheckArgs;
use super::check::rows;
use super::plural::plural;
use super::progress::Progress;
use super::table::{Addendum, Row};
use crate::batch::BatchProgram;
use crate::batch::check::{BatchVerdict, check_lowered};
use crate::batch::r#gen::{self as bgen, BatchCase, BatchOutcome, EVENT_KINDS, EventKind};
use crate::batch::plan::lower_schedule;
use crate::batch::prove::prove_batch;
use crate::check::CheckError;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::ir::Graph;
use crate::limits::{Budget, Need};
use crate::model::Checkpoint;
use crate::model::author::decode_step;
use crate::source::ModelSource;

/// What the legend says of a batched row, after `check`'s legend.
const BATCH_LEGEND: &str = "
with --batch: a row judges a model over its schedules, each schedule's line under it (its events
  and steps, the proof of the step and of the slots, what the symbolic slot run predicts, and the
  interpreters' verdict); the verdict is the worst of the schedules', the proof `proved` when every
  schedule's is, and structure, max rel and bound the largest over them.";

/// Per model (default: every preset), the schedules of [`bgen::check_cases`]: one on each of
/// [`bgen::CHECK_SCHEDULES`] seeds from `--seed`, on a pool of `n` slots (batches of up to `n`
/// rows, two snapshots), each holding every event kind the pool allows (admit, decode, finish,
/// reuse of a freed slot, fork, rollback, a partial batch, a prefill). Each schedule is judged by the plan's
/// validation, by the proof (the one-sequence step, authored ≡ fused ≡ program, and the slot
/// induction over the plan: `proved` when both hold), by the symbolic slot run (`slots isolated`
/// when every row reads its own sequence's state), and by the interpreters, which must give the
/// outcome validation and the symbolic run predict. The first line names the pool and the kinds;
/// then the table, a row per model and a line per schedule, the summary, and a line counting the
/// schedules.
///
/// A row asks for exit status 1 when a schedule's interpreters do not give the predicted outcome,
/// a schedule the pool runs is not proved, or the engine refuses the model; 2 when the model cannot
/// be read. A model too large for the memory is not run (its row says so; only its proofs are
/// checked) and is not counted as agreeing, as `check` does.
pub(crate) fn check_batch(a: &CheckArgs, n: usize) -> Result<ExitCode, CliError> {
    let n = n.max(1);
    let budget = Budget::new(a.max_gib);
    let mut tally = Tally::default();
    if !a.json {
        outln!("{}", header(a.seed, n));
    }
    let table = rows(a, BATCH_LEGEND, |source, explicit, p| {
        Model { a, n, budget: budget.as_ref(), explicit }.row(source, &mut tally, p)
    })?;
    let (can, _) = kinds(n);
    let mut more = Addendum { lines: vec![tally.line()], ..Addendum::default() };
    more.json.insert(
        "batch".into(),
        json!({
            "slots": n,
            "max_batch": n,
            "snapshots": bgen::CHECK_SNAPSHOTS,
            "seeds": (0..bgen::CHECK_SCHEDULES).map(|k| a.seed.wrapping_add(k)).collect::<Vec<_>>(),
            "kinds": can.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "schedules": tally.json(),
        }),
    );
    table.finish(more)
}

/// What every model of the command is judged with.
struct Model<'a> {
    a: &'a CheckArgs,
    /// The pool's slots and its largest batch.
    n: usize,
    budget: Option<&'a Budget>,
    explicit: bool,
}

impl Model<'_> {
    /// The row of one model: read its spec, lower it, admit its memory, load it, then judge each
    /// schedule and fold them into the row.
    fn row(&self, source: &ModelSource, tally: &mut Tally, p: &mut Progress) -> Row {
        let (a, n) = (self.a, self.n);
        let label = source.label();
        p.show(&format!("{label}: reading its spec"));
        let spec = match source.spec() {
            Ok(s) => s,
            Err(e) => return Row::error(e.name(), e.to_string()),
        };
        let authored = match decode_step(&spec) {
            Ok(g) => g,
            Err(e) => return Row::error("Author", e.to_string()),
        };
        let graph = EngineShim::default().prepare(&authored);
        let program = match lower_graph(&graph, a.numerics) {
            Ok(p) => p,
            Err(e) => return Row::refused(e.name(), e.to_string()),
        };
        let commands = Some(program.blocks.iter().map(|b| b.commands.len()).sum());
        let error = |name: &str, why: String| Row { commands, ..Row::error(name, why) };
        let pool = match BatchProgram::new(program, n, n, bgen::CHECK_SNAPSHOTS, bgen::CAPACITY) {
            Ok(pool) => pool,
            Err(e) => return error(e.name(), e.to_string()),
        };
        let bytes = match source.checkpoint_bytes(&spec) {
            Ok(b) => b,
            Err(e) => return error(e.name(), e.to_string()),
        };
        let skipped = self.budget.and_then(|b| b.admit(&label, &Need::of(&spec, case_steps(n), bytes)).err());
        let ckpt = match skipped {
            Some(_) => None,
            None => {
                p.show(&format!("{label}: loading its weights"));
                match source.load() {
                    Ok((_, c)) => Some(c),
                    Err(e) => return error(e.name(), e.to_string()),
                }
            }
        };
        let cases = bgen::check_cases(a.seed, n, spec.vocab);
        let judge = Judge { authored: &authored, graph: &graph, pool: &pool, n };
        let mut schedules = vec![];
        for (i, (seed, case)) in cases.iter().enumerate() {
            p.show(&format!("{label}: schedule {} of {} (seed {seed})", i + 1, cases.len()));
            match judge.schedule(*seed, case, ckpt.as_ref()) {
                Ok(s) => schedules.push(s),
                Err(e) => return error("Check", e.to_string()),
            }
        }
        tally.add(&schedules);
        let mut row = fold(&schedules);
        row.commands = commands;
        row.extra.insert("schedules".into(), serde_json::to_value(&schedules).unwrap_or_default());
        let lines: Vec<String> = schedules.iter().map(ScheduleLine::to_string).collect();
        match skipped {
            Some(e) => {
                let proved = schedules.iter().filter(|s| s.proof == Some("proved")).count();
                let unproved = schedules.iter().any(|s| !s.proved_if_run);
                Row {
                    verdict: "skipped",
                    refusal: None,
                    steps: None,
                    detail: format!(
                        "not run: {e}; only its proofs were checked ({proved} of {} proved)\n{}",
                        plural(schedules.len(), "schedule"),
                        lines.join("\n")
                    ),
                    // A model the user named must be checked: skipping it is a failure to check it.
                    exit: if self.explicit { 2 } else { u8::from(unproved) },
                    ..row
                }
            }
            None => Row { detail: lines.join("\n"), ..row },
        }
    }
}

/// What a schedule is judged against: the model's graphs and its pool.
struct Judge<'a> {
    authored: &'a Graph,
    graph: &'a Graph,
    pool: &'a BatchProgram,
    n: usize,
}

impl Judge<'_> {
    /// One schedule judged: lowered onto the pool, proved, and, when the model is run (`ckpt`),
    /// predicted by validation and the symbolic run and checked by the interpreters.
    fn schedule(&self, seed: u64, case: &BatchCase, ckpt: Option<&Checkpoint>) -> Result<ScheduleLine, CheckError> {
        let t0 = Instant::now();
        let pool = self.pool;
        let lowered = lower_schedule(&case.schedule, pool);
        // The proof needs no weights: a model not run for its size is still proved.
        let proof = (lowered.as_ref().ok())
            .filter(|l| l.plan.validate(pool).is_ok())
            .map(|l| prove_batch(self.authored, self.graph, pool, l));
        // A schedule the pool runs must be proved (one step, and every slot); a refused one has
        // nothing to prove.
        let proved_if_run = match &proof {
            Some(p) => p.word() == "proved",
            None => lowered.is_err(),
        };
        let mut line = ScheduleLine {
            seed,
            events: case.schedule.events.len(),
            steps: case.schedule.steps(),
            lacks: lacking(&bgen::kinds_of(&case.schedule, self.n), self.n).iter().map(|k| k.name()).collect(),
            proof: proof.as_ref().map(|p| p.word()),
            proof_detail: proof.as_ref().filter(|p| p.word() != "proved").map(ToString::to_string),
            symbolic: None,
            interpreters: None,
            as_predicted: proved_if_run,
            seconds: 0.0,
            proved_if_run,
            verdict: None,
            judged: None,
        };
        if let Some(ckpt) = ckpt {
            let (expected, verdict) = match &lowered {
                Ok(l) => (bgen::expected(pool, l), check_lowered(self.graph, pool, ckpt, l)?),
                Err(e) => (BatchOutcome::Refused(e.name()), BatchVerdict::Refused(e.clone())),
            };
            line.symbolic = Some(match &expected {
                BatchOutcome::Agree => "slots isolated".to_string(),
                other => other.to_string(),
            });
            // The interpreters must give the outcome validation and the symbolic run predict.
            line.as_predicted = BatchOutcome::of(&verdict) == expected
                && case.refusal.is_none_or(|r| expected == BatchOutcome::Refused(r))
                && proved_if_run;
            line.interpreters = Some(verdict.to_string());
            line.verdict = Some(verdict.name());
            line.judged = Some(verdict);
        }
        line.seconds = t0.elapsed().as_secs_f64();
        Ok(line)
    }
}

/// One schedule's facts: its line under the model's row, and its entry of the row's `schedules`
/// in JSON.
#[derive(Clone, Debug, Serialize)]
struct ScheduleLine {
    seed: u64,
    events: usize,
    steps: usize,
    /// The kinds the pool allows that the schedule lacks (none: every schedule covers them).
    lacks: Vec<&'static str>,
    /// `proved`, `refuted` or `inconclusive`; none when the pool refuses the schedule.
    proof: Option<&'static str>,
    /// The proof in full, when it is not `proved`.
    proof_detail: Option<String>,
    /// The outcome validation and the symbolic slot run predict (`slots isolated`); none when the
    /// model is not run.
    symbolic: Option<String>,
    /// The interpreters' verdict's word (`agree`, `disagree`, `inconclusive`, `refused`) and the
    /// verdict in full; none when the model is not run.
    verdict: Option<&'static str>,
    interpreters: Option<String>,
    /// Whether the schedule is as it must be: a schedule the pool runs is proved, and the
    /// interpreters give the outcome predicted.
    as_predicted: bool,
    seconds: f64,
    /// Whether the schedule is proved, or refused by the pool and so has nothing to prove.
    #[serde(skip)]
    proved_if_run: bool,
    /// The interpreters' verdict; none when the model is not run.
    #[serde(skip)]
    judged: Option<BatchVerdict>,
}

impl std::fmt::Display for ScheduleLine {
    /// `seed 0: 14 events, 5 steps; proof: proved; symbolic: slots isolated; interpreters: agree
    /// over …`, then the proof in full when it is not proved.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lacks = match self.lacks.as_slice() {
            [] => String::new(),
            kinds => format!(" (no {})", prose(kinds)),
        };
        let proof = self.proof.unwrap_or("none (refused)");
        write!(
            f,
            "seed {}: {}, {}{lacks}; proof: {proof}",
            self.seed,
            plural(self.events, "event"),
            plural(self.steps, "step")
        )?;
        match (&self.symbolic, &self.interpreters) {
            (Some(symbolic), Some(verdict)) => write!(
                f,
                "; symbolic: {symbolic}; interpreters: {verdict} ({:.1?})",
                Duration::from_secs_f64(self.seconds)
            )?,
            _ => write!(f, "; interpreters: not run")?,
        }
        if let Some(p) = &self.proof_detail {
            for line in p.lines() {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

/// A model's row from its schedules: the worst verdict (disagree, inconclusive, refused, agree),
/// the proof `proved` when every schedule's is, the largest structure, max rel and bound when all
/// agree, the steps run, and exit status 1 when a schedule is not as it must be.
fn fold(schedules: &[ScheduleLine]) -> Row {
    let rank = |v: &BatchVerdict| ["agree", "refused", "inconclusive", "disagree"].iter().position(|w| *w == v.name());
    let worst = schedules.iter().filter_map(|s| s.judged.as_ref()).max_by_key(|v| rank(v));
    let proofs: Vec<&str> = schedules.iter().filter_map(|s| s.proof).collect();
    let proof = match () {
        _ if proofs.is_empty() => None,
        _ if proofs.iter().all(|p| *p == "proved") => Some("proved"),
        _ if proofs.contains(&"refuted") => Some("refuted"),
        _ => Some("inconclusive"),
    };
    let agree: Vec<(f64, f64, f64)> = (schedules.iter())
        .filter_map(|s| match s.judged {
            Some(BatchVerdict::Agree { structure, max_rel, widest, .. }) => Some((structure, max_rel, widest)),
            _ => None,
        })
        .collect();
    let largest = |f: fn(&(f64, f64, f64)) -> f64| {
        (worst.is_some_and(|v| v.name() == "agree")).then(|| agree.iter().map(f).fold(0.0, f64::max))
    };
    Row {
        verdict: worst.map_or("agree", BatchVerdict::name),
        refusal: match worst {
            Some(BatchVerdict::Refused(e)) => Some(e.name().to_string()),
            _ => None,
        },
        proof,
        structure: largest(|a| a.0),
        max_rel: largest(|a| a.1),
        widest: largest(|a| a.2),
        steps: Some(schedules.iter().map(|s| s.steps).sum()),
        exit: u8::from(schedules.iter().any(|s| !s.as_predicted)),
        ..Row::default()
    }
}

/// The schedules of every model, counted for the line under the summary.
#[derive(Default)]
struct Tally {
    /// The interpreters' verdict of every schedule run.
    verdicts: Vec<&'static str>,
    /// Schedules proved, of those judged.
    proved: usize,
    schedules: usize,
}

impl Tally {
    fn add(&mut self, schedules: &[ScheduleLine]) {
        self.verdicts.extend(schedules.iter().filter_map(|s| s.verdict));
        self.proved += schedules.iter().filter(|s| s.proof == Some("proved")).count();
        self.schedules += schedules.len();
    }

    fn count(&self, verdict: &str) -> usize {
        self.verdicts.iter().filter(|v| **v == verdict).count()
    }

    /// `3 schedules run: 3 agree, 0 disagree, 0 inconclusive, 0 refused; 3 of 3 schedules proved`.
    fn line(&self) -> String {
        format!(
            "{} run: {} agree, {} disagree, {} inconclusive, {} refused; {} of {} proved",
            plural(self.verdicts.len(), "schedule"),
            self.count("agree"),
            self.count("disagree"),
            self.count("inconclusive"),
            self.count("refused"),
            self.proved,
            plural(self.schedules, "schedule")
        )
    }

    /// The same counts as JSON.
    fn json(&self) -> serde_json::Value {
        json!({
            "run": self.verdicts.len(),
            "agree": self.count("agree"),
            "disagree": self.count("disagree"),
            "inconclusive": self.count("inconclusive"),
            "refused": self.count("refused"),
            "proved": self.proved,
            "judged": self.schedules,
        })
    }
}

/// The seeds of the schedules, as the first line names them.
fn seeds(seed: u64) -> String {
    let last = seed.wrapping_add(bgen::CHECK_SCHEDULES - 1);
    format!("{seed}–{last}")
}

/// The kinds a pool of `n` slots allows, and those it does not.
fn kinds(n: usize) -> (Vec<EventKind>, Vec<EventKind>) {
    EVENT_KINDS.into_iter().partition(|k| k.possible(n, n, bgen::CHECK_SNAPSHOTS))
}

/// The first line: what every model is run on, and the kinds every schedule holds.
fn header(seed: u64, n: usize) -> String {
    let (can, cannot) = kinds(n);
    let why = match cannot.as_slice() {
        [] => String::new(),
        _ => format!(" ({} need two slots)", prose(&names(&cannot))),
    };
    let pool = match n {
        1 => "1 slot, batches of 1 row".to_string(),
        _ => format!("{n} slots, batches of up to {n} rows"),
    };
    format!(
        "per model {} (seeds {}) on {pool}, {}; each holds {}{why}",
        plural(bgen::CHECK_SCHEDULES as usize, "schedule"),
        seeds(seed),
        plural(bgen::CHECK_SNAPSHOTS, "snapshot"),
        prose(&names(&can))
    )
}

fn names(kinds: &[EventKind]) -> Vec<&'static str> {
    kinds.iter().map(|k| k.name()).collect()
}

/// Names as a list in prose: `a, b and c`.
fn prose(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// What a schedule lacks of the kinds the pool allows (nothing when it has them all).
fn lacking(has: &std::collections::BTreeSet<EventKind>, n: usize) -> Vec<EventKind> {
    kinds(n).0.into_iter().filter(|k| !has.contains(k)).collect()
}

/// The most decode steps a drawn schedule of `n` slots holds, for the memory estimate: the KV cache
/// of a slot grows by one position a step.
fn case_steps(n: usize) -> usize {
    crate::batch::r#gen::CAPACITY.max(n)
}
