//! `stepcheck check`, the main job: author, fuse, lower and compare both interpreters, one row per
//! model.
//!
//! Every model gets its row, whatever happens to it: `agree`, `disagree`, `inconclusive`,
//! `refused NAME` (the engine's refusal, or the reader's, by name) or `skipped` (with why). One
//! refused or unreadable model does not stop the ones after it. The table is followed by a legend
//! (what each column measures, the tolerance that applied) and a summary line; `--json` prints the
//! same rows as one JSON object. Before a weight is made or read, the memory the model needs is
//! estimated and compared with what the command may use (`--max-gib`, or what the machine has).
//!
//! A skipped model is not run: its row says so, only its proof is checked, and the summary counts
//! it apart from the models judged, never as agreeing. Its exit status is 2 when the user named
//! it; a preset of the default list (every preset, which means every preset the machine can run)
//! leaves the status to the models judged, since a preset too large for the machine is no answer
//! about the engine, and a status that is never 0 on a machine below 34 GiB would answer nothing.
//! When no model is judged at all, the status is 2.

use std::process::ExitCode;
use std::time::Instant;

use serde::Serialize;

use super::CliError;
use super::args::CheckArgs;
use super::progress::Progress;
use crate::check::{Verdict, compare};
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::limits::{Budget, Need};
use crate::model::{author::decode_step, presets};
use crate::prove::{ProofVerdict, prove};
use crate::source::ModelSource;

/// One model's row. A column is a field here and an entry of [`COLUMNS`]; a new column takes one
/// of each.
#[derive(Clone, Debug, Default, Serialize)]
struct Row {
    model: String,
    /// `agree`, `disagree`, `inconclusive`, `refused` or `skipped`.
    verdict: &'static str,
    /// The refusal's name, for `refused`.
    refusal: Option<String>,
    /// The program's command count, once lowered.
    commands: Option<usize>,
    /// The proof of the program (`crate::prove`), once lowered: `proved`, `refuted` or
    /// `inconclusive`. A row whose proof is not `proved` asks for exit status 1.
    proof: Option<&'static str>,
    /// For `agree`: the largest error of the engine's exact run against the reference, relative
    /// to its tensor's scale.
    structure: Option<f64>,
    /// For `agree`: the largest distance of a value the engine's Commands stored from its
    /// Command's meaning, relative to its tensor's scale.
    max_rel: Option<f64>,
    /// For `agree`: the farthest such a value was allowed to be from its meaning (its bound and the
    /// rounding to its storage type), relative to its tensor's scale.
    widest: Option<f64>,
    /// The steps compared.
    steps: Option<usize>,
    seconds: f64,
    /// The witness, the refusal's message or why the model was skipped.
    detail: String,
    /// The exit status this row asks for (0, 1 or 2).
    #[serde(skip)]
    exit: u8,
}

/// The table's columns: a header, its width, and the cell of a row.
type Column = (&'static str, usize, fn(&Row) -> String);

const COLUMNS: &[Column] = &[
    ("verdict", 22, |r| match &r.refusal {
        Some(name) => format!("{} {name}", r.verdict),
        None => r.verdict.to_string(),
    }),
    ("commands", 8, |r| r.commands.map_or("-".into(), |c| c.to_string())),
    ("proof", 12, |r| r.proof.unwrap_or("-").to_string()),
    ("structure", 9, |r| r.structure.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("max rel", 9, |r| r.max_rel.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("bound", 9, |r| r.widest.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("time", 8, |r| format!("{:.1}s", r.seconds)),
];

/// What the columns measure, printed under the table.
const LEGEND: &str = "\
verdicts: agree (every value within its bound), disagree (the worst value out of it: step, tensor,
  index, both values, and the Command that wrote it), inconclusive (nothing can be concluded, and
  why: a value that is not finite where a bound needs it), refused NAME (the engine, or the reader of
  the model, refuses it by name), skipped (not run: too large for the memory the check may use;
  only its proof is checked, and it is not counted as agreeing).
structure: the engine's units in f64 against the reference, over the logits of every step and the
  state after the last, the largest error relative to each tensor's scale, max(1, max |reference|);
  within 1e-9, with no excuse.
max rel, bound: every Command of the engine's f32 run against its documented meaning on the very
  inputs it read, each value within the bound of f32 arithmetic derived from the Command before
  looking and stored in the type the numerics say: the largest distance from the meaning relative
  to its tensor's scale, and the widest a value was allowed (its bound and the rounding to its
  storage type), relative to its tensor's scale (docs/SOUNDNESS.md).
proof: the program proved to compute what the authored step computes, for every checkpoint and
  every step (`proved`), `refuted` with where the two differ, or `inconclusive`; `stepcheck prove`
  prints it in full. A proof that is not `proved` fails the check (exit 1).";

pub fn check(a: CheckArgs) -> Result<ExitCode, CliError> {
    let explicit = !a.models.is_empty() || !a.preset.is_empty();
    let mut sources: Vec<Result<ModelSource, (String, String, String)>> = (a.models.iter())
        .map(|p| ModelSource::from_path(p).map_err(|e| (p.display().to_string(), e.name().to_string(), e.to_string())))
        .collect();
    sources.extend(a.preset.iter().map(|n| Ok(ModelSource::preset_as(n, a.seed, a.weights))));
    if !explicit {
        sources = presets::PRESETS.iter().map(|n| Ok(ModelSource::preset_as(n, a.seed, a.weights))).collect();
    }
    let labels: Vec<String> = sources.iter().map(|s| s.as_ref().map_or_else(|e| e.0.clone(), |s| s.label())).collect();
    let w = labels.iter().map(String::len).max().unwrap_or(5).max(5);
    let budget = Budget::new(a.max_gib);
    let mut progress = Progress::new();
    if !a.json {
        let mut header = format!("{:<w$}", "model");
        for (name, width, _) in COLUMNS {
            header += &format!("  {name:<width$}");
        }
        outln!("{}", header.trim_end());
    }
    let mut rows = vec![];
    for (source, label) in sources.iter().zip(&labels) {
        let t0 = Instant::now();
        let mut row = match source {
            Ok(source) => check_one(&a, source, budget.as_ref(), explicit, &mut progress),
            Err((_, name, why)) => refused(name, why.clone(), 2),
        };
        row.model = label.clone();
        row.seconds = t0.elapsed().as_secs_f64();
        progress.clear();
        if !a.json {
            let mut line = format!("{:<w$}", row.model);
            for (_, width, cell) in COLUMNS {
                line += &format!("  {:<width$}", cell(&row));
            }
            outln!("{}", line.trim_end());
            if !row.detail.is_empty() && row.verdict != "agree" {
                outln!("{:<w$}  {}", "", row.detail);
            }
        }
        rows.push(row);
    }
    let count = |v: &str| rows.iter().filter(|r| r.verdict == v).count();
    let proved = rows.iter().filter(|r| r.proof == Some("proved")).count();
    let judged = rows.len() - count("skipped");
    let summary = format!(
        "{} models: {judged} judged ({} agree, {} disagree, {} inconclusive, {} refused), {} skipped (not run, not \
         counted as agreeing); {} proved",
        rows.len(),
        count("agree"),
        count("disagree"),
        count("inconclusive"),
        count("refused"),
        count("skipped"),
        proved
    );
    let mut exit = rows.iter().map(|r| r.exit).max().unwrap_or(0);
    // A command that judged no model answered nothing.
    if judged == 0 && count("skipped") > 0 {
        exit = 2;
    }
    if a.json {
        let json = serde_json::json!({
            "models": rows,
            "summary": {
                "models": rows.len(),
                "judged": judged,
                "agree": count("agree"),
                "disagree": count("disagree"),
                "inconclusive": count("inconclusive"),
                "refused": count("refused"),
                "skipped": count("skipped"),
                "proved": proved,
                "exit": exit,
                "peak_rss_bytes": super::memory::peak_rss(),
            },
        });
        outln!("{json}");
    } else {
        outln!("\n{LEGEND}\n\n{summary}");
        let skipped: Vec<&str> = rows.iter().filter(|r| r.verdict == "skipped").map(|r| r.model.as_str()).collect();
        if !skipped.is_empty() && !explicit {
            outln!(
                "not run: {}; the exit status answers for the models judged (a preset named with --preset is run or \
                 exits 2; --weights bf16 or --max-gib may let it run)",
                skipped.join(", ")
            );
        }
        if let Some(peak) = super::memory::peak_rss() {
            outln!("{}", super::memory::describe(peak));
        }
        if exit != 0 {
            outln!(
                "next: `stepcheck lower MODEL` shows a refusal in full; `stepcheck run MODEL --tokens …` the logits; \
                 `--max-gib` lets a skipped model run"
            );
        }
    }
    Ok(ExitCode::from(exit))
}

/// A `refused` row: the refusal's name and message, and its exit status.
fn refused(name: &str, detail: String, exit: u8) -> Row {
    Row { verdict: "refused", refusal: Some(name.to_string()), detail, exit, ..Row::default() }
}

/// The row of one model: read its spec, admit its memory, load, lower, compare.
fn check_one(a: &CheckArgs, source: &ModelSource, budget: Option<&Budget>, explicit: bool, p: &mut Progress) -> Row {
    let label = source.label();
    p.show(&format!("{label}: reading its spec"));
    let spec = match source.spec() {
        Ok(s) => s,
        Err(e) => return refused(e.name(), e.to_string(), 2),
    };
    // The check reads one checkpoint: the exact run, the engine's run and the check's meanings all
    // read it in place.
    let bytes = match source.checkpoint_bytes(&spec) {
        Ok(b) => b,
        Err(e) => return refused(e.name(), e.to_string(), 2),
    };
    if let Some(b) = budget
        && let Err(e) = b.admit(&label, &Need::of(&spec, a.steps, bytes))
    {
        // A model the user named must be checked: skipping it is a failure to check it.
        // The proof needs no weights: a model too large to run is still proved.
        let proof = proof_without_weights(&spec, a.numerics);
        let exit = if explicit { 2 } else { u8::from(proof.is_some_and(|w| w != "proved")) };
        let checked = match proof {
            Some(word) => format!("only its proof was checked ({word})"),
            None => "nothing was checked".to_string(),
        };
        let detail = format!("not run: {e}; {checked}");
        return Row { verdict: "skipped", proof, detail, exit, ..Row::default() };
    }
    p.show(&format!("{label}: loading its weights"));
    let (spec, ckpt) = match source.load() {
        Ok(x) => x,
        Err(e) => return refused(e.name(), e.to_string(), 2),
    };
    p.show(&format!("{label}: lowering"));
    let authored = match decode_step(&spec) {
        Ok(g) => g,
        Err(e) => return refused("Author", e.to_string(), 2),
    };
    let graph = EngineShim::default().prepare(&authored);
    let program = match lower_graph(&graph, a.numerics) {
        Ok(p) => p,
        Err(e) => return refused(e.name(), e.to_string(), 1),
    };
    let commands = Some(program.blocks.iter().map(|b| b.commands.len()).sum());
    p.show(&format!("{label}: proving"));
    let proof = prove(&authored, &graph, &program);
    let (proof_word, proof_exit) = (Some(proof.word()), u8::from(!proof.is_proved()));
    let row = compared(a, label, &graph, &program, &ckpt, &spec, commands, p);
    Row {
        proof: proof_word,
        exit: row.exit.max(proof_exit),
        detail: match &proof {
            ProofVerdict::Proved(_) => row.detail,
            unproved if row.detail.is_empty() => unproved.to_string(),
            unproved => format!("{}\n{unproved}", row.detail),
        },
        ..row
    }
}

/// The proof of a model's program from its spec alone, when it is authored and lowered.
fn proof_without_weights(spec: &crate::model::ModelSpec, numerics: crate::engine::Numerics) -> Option<&'static str> {
    let authored = decode_step(spec).ok()?;
    let graph = EngineShim::default().prepare(&authored);
    let program = lower_graph(&graph, numerics).ok()?;
    Some(prove(&authored, &graph, &program).word())
}

/// The interpreters' half of a row: both run over `a.steps` tokens and compared.
#[allow(clippy::too_many_arguments)]
fn compared(
    a: &CheckArgs,
    label: String,
    graph: &crate::ir::Graph,
    program: &crate::engine::Program,
    ckpt: &crate::model::Checkpoint,
    spec: &crate::model::ModelSpec,
    commands: Option<usize>,
    p: &mut Progress,
) -> Row {
    let tokens: Vec<u32> = (0..a.steps).map(|i| ((i * 7919 + 11) % spec.vocab.max(1)) as u32).collect();
    p.show(&format!("{label}: comparing {} steps", tokens.len()));
    let verdict = match compare(graph, program, ckpt, &tokens) {
        Ok(v) => v,
        Err(e) => return Row { commands, ..refused("Check", e.to_string(), 2) },
    };
    let steps = Some(tokens.len());
    match verdict {
        Verdict::Agree { structure, max_rel, widest, steps, .. } => Row {
            verdict: "agree",
            commands,
            structure: Some(structure),
            max_rel: Some(max_rel),
            widest: Some(widest),
            steps: Some(steps),
            ..Row::default()
        },
        other => Row {
            verdict: other.name(),
            commands,
            steps,
            // A witness carries the bound it is out of.
            detail: other.to_string(),
            exit: 1,
            ..Row::default()
        },
    }
}
