//! `stepcheck check`, the main job: author, fuse, lower and compare both interpreters, one row per
//! model.
//!
//! Every model gets its row, whatever happens to it: `agree`, `disagree`, `inconclusive`,
//! `refused NAME` (the engine's refusal, or the reader's, by name) or `skipped` (with why). One
//! refused or unreadable model does not stop the ones after it. The rows go to the table of
//! [`super::table`], shared with `check --batch`: a legend on a terminal or with `--legend`, a
//! summary line and the peak memory; `--json` prints the same rows as one JSON object. Before a
//! weight is made or read, the memory the model needs is estimated and compared with what the
//! command may use (`--max-gib`, or what the machine has).
//!
//! A skipped model is not run: its row says so, only its proof is checked, and the summary counts
//! it apart from the models judged, never as agreeing. Its exit status is 2 when the user named
//! it; a preset of the default list (every preset, which means every preset the machine can run)
//! leaves the status to the models judged, since a preset too large for the machine is no answer
//! about the engine, and a status that is never 0 on a machine below 34 GiB would answer nothing.
//! When no model is judged at all, the status is 2.
//!
//! With `--against GRAPH` (one model), transformers' own exported step is proved against the
//! model's authored graph too: a `transformers` column, and anything but `proved` fails the row;
//! with `--against-llama-graph GRAPH`, llama.cpp's own recorded step: a `llama.cpp` column.

use std::process::ExitCode;
use std::time::Instant;

use super::CliError;
use super::against::{Against, against, against_llama};
use super::args::CheckArgs;
use super::plural::plural;
use super::progress::Progress;
use super::table::{Addendum, Row, Table};
use crate::check::{Verdict, compare_reporting};
use crate::engine::program::prefill::Prefill;
use crate::engine::{lower::lower_graph, shim::EngineShim};
use crate::limits::{Budget, Need};
use crate::model::{author::decode_step, presets};
use crate::prefill::check::{PrefillCase, check_prefill};
use crate::prefill::prove::prove_prefill;
use crate::prove::prove;
use crate::source::ModelSource;

/// A model the command line names that cannot be read as one: its path, the error's name and its
/// message.
struct Unread {
    path: String,
    name: &'static str,
    why: String,
}

/// The models `check` judges, in order: the paths, then the presets named, or every preset when
/// none is; and whether the user named them.
fn sources(a: &CheckArgs) -> (Vec<Result<ModelSource, Unread>>, bool) {
    let explicit = !a.models.is_empty() || !a.preset.is_empty();
    if !explicit {
        return (presets::PRESETS.iter().map(|n| Ok(ModelSource::preset_as(n, a.seed, a.weights))).collect(), false);
    }
    let unread = |p: &std::path::PathBuf, e: crate::source::SourceError| Unread {
        path: p.display().to_string(),
        name: e.name(),
        why: e.to_string(),
    };
    let mut sources: Vec<_> = a.models.iter().map(|p| ModelSource::from_path(p).map_err(|e| unread(p, e))).collect();
    sources.extend(a.preset.iter().map(|n| Ok(ModelSource::preset_as(n, a.seed, a.weights))));
    (sources, true)
}

/// The table of `check` and `check --batch`, every row printed: each model `a` names gets the row
/// `row_of` gives it (told whether the user named the models), its label and its time; a model
/// that cannot be read gets its `refused` row (exit status 2). `legend_more` is what the command
/// adds to the legend. The caller ends the table.
pub(super) fn rows(
    a: &CheckArgs,
    legend_more: &str,
    mut row_of: impl FnMut(&ModelSource, bool, &mut Progress) -> Row,
) -> Result<Table, CliError> {
    let (sources, explicit) = sources(a);
    let labels: Vec<String> =
        sources.iter().map(|s| s.as_ref().map_or_else(|e| e.path.clone(), ModelSource::label)).collect();
    let mut progress = Progress::new();
    let mut table = Table::start(a, &labels, explicit, legend_more)?;
    for (source, label) in sources.iter().zip(labels) {
        let t0 = Instant::now();
        let mut row = match source {
            Ok(source) => row_of(source, explicit, &mut progress),
            Err(e) => Row::error(e.name, e.why.clone()),
        };
        row.model = label;
        row.seconds = t0.elapsed().as_secs_f64();
        progress.clear();
        table.push(row)?;
    }
    Ok(table)
}

pub fn check(a: CheckArgs) -> Result<ExitCode, CliError> {
    if a.against.is_some() && a.models.len() + a.preset.len() != 1 {
        return Err("--against checks one model against transformers' graph: name exactly one model or preset".into());
    }
    if a.against_llama_graph.is_some() && a.models.len() + a.preset.len() != 1 {
        return Err("--against-llama-graph checks one model against llama.cpp's graph: name exactly one model".into());
    }
    let budget = Budget::new(a.max_gib);
    let table = rows(&a, "", |source, explicit, p| check_one(&a, source, budget.as_ref(), explicit, p))?;
    table.finish(Addendum::default())
}

/// The row of one model: read its spec, admit its memory, load, lower, compare.
fn check_one(a: &CheckArgs, source: &ModelSource, budget: Option<&Budget>, explicit: bool, p: &mut Progress) -> Row {
    let label = source.label();
    p.show(&format!("{label}: reading its spec"));
    let spec = match source.spec() {
        Ok(s) => s,
        Err(e) => return Row::error(e.name(), e.to_string()),
    };
    // The check reads one checkpoint: the exact run, the engine's run and the check's meanings all
    // read it in place.
    let bytes = match source.checkpoint_bytes(&spec) {
        Ok(b) => b,
        Err(e) => return Row::error(e.name(), e.to_string()),
    };
    if let Some(b) = budget
        && let Err(e) = b.admit(&label, &need(a, &spec, bytes))
    {
        // A model the user named must be checked: skipping it is a failure to check it.
        // The proof needs no weights: a model too large to run is still proved.
        // So is the prefill's induction, with `--prefill`: its column then shows the proof's word.
        let (proof, prefill) = proofs_without_weights(a, &spec).unzip();
        let prefill = prefill.flatten();
        let proved = |w: Option<&str>| w.is_none_or(|w| w == "proved");
        let exit = if explicit { 2 } else { u8::from(!proved(proof) || !proved(prefill)) };
        let checked = match (proof, prefill) {
            (Some(word), Some(p)) => format!("only its proofs were checked (the program's {word}, the prefill's {p})"),
            (Some(word), None) => format!("only its proof was checked ({word})"),
            (None, _) => "nothing was checked".to_string(),
        };
        let detail = format!("not run: {e}; {checked}");
        return Row { verdict: "skipped", proof, prefill, detail, exit, ..Row::default() };
    }
    p.show(&format!("{label}: loading its weights"));
    let (spec, ckpt) = match source.load() {
        Ok(x) => x,
        Err(e) => return Row::error(e.name(), e.to_string()),
    };
    p.show(&format!("{label}: lowering"));
    let authored = match decode_step(&spec) {
        Ok(g) => g,
        Err(e) => return Row::error("Author", e.to_string()),
    };
    let link = match &a.against {
        Some(path) => {
            p.show(&format!("{label}: proving transformers' step"));
            match against(path, &spec, &authored) {
                Ok(l) => Some(l),
                Err(e) => return Row::error("Against", e.to_string()),
            }
        }
        None => None,
    };
    let llama = match &a.against_llama_graph {
        Some(path) => {
            p.show(&format!("{label}: proving llama.cpp's step"));
            match against_llama(path, &spec, &authored) {
                Ok(l) => Some(l),
                Err(e) => return Row::error("Against", e.to_string()),
            }
        }
        None => None,
    };
    let graph = EngineShim::default().prepare(&authored);
    let program = match lower_graph(&graph, a.numerics) {
        Ok(p) => p,
        Err(e) => return Row::refused(e.name(), e.to_string()),
    };
    let commands = Some(program.blocks.iter().map(|b| b.commands.len()).sum());
    p.show(&format!("{label}: proving"));
    let proof = prove(&authored, &graph, &program);
    let (proof_word, proof_exit) = (Some(proof.word()), u8::from(!proof.is_proved()));
    let row = compared(a, label.clone(), &graph, &program, &ckpt, &spec, commands, p);
    let mut details = vec![row.detail.clone()];
    if !proof.is_proved() {
        details.push(proof.to_string());
    }
    let mut column = |link: Option<Against>, whose: &str| match link.map(|l| l.outcome) {
        Some(Ok(v)) if v.is_proved() => (Some("proved"), 0),
        Some(Ok(v)) => {
            details.push(format!("{whose} ≡ authored: {v}"));
            (Some(v.word()), 1)
        }
        Some(Err(why)) => {
            details.push(format!("{whose}' step not imported: {why}"));
            (Some("not imported"), 1)
        }
        None => (None, 0),
    };
    let (transformers, link_exit) = column(link, "transformers");
    let (llama_cpp, llama_exit) = column(llama, "llama.cpp");
    let (prefill, prefill_exit) = match a.prefill {
        Some(tokens) => {
            p.show(&format!("{label}: a prompt of {tokens} tokens as a prefill"));
            let (word, detail) = prefilled(a, tokens, &graph, &program, &ckpt, spec.vocab);
            details.extend(detail);
            (Some(word), u8::from(word != "agree"))
        }
        None => (None, 0),
    };
    details.retain(|d| !d.is_empty());
    Row {
        proof: proof_word,
        transformers,
        llama_cpp,
        prefill,
        exit: row.exit.max(proof_exit).max(link_exit).max(llama_exit).max(prefill_exit),
        detail: details.join("\n"),
        ..row
    }
}

/// The memory a row needs: its steps, and with `--prefill` the prompt's and the prefill's.
fn need(a: &CheckArgs, spec: &crate::model::ModelSpec, bytes: u128) -> Need {
    match a.prefill {
        Some(t) => Need::of(spec, a.steps.max(t + 4), bytes).with_prefill(spec, a.chunk.min(t)),
        None => Need::of(spec, a.steps, bytes),
    }
}

/// The `prefill` column of a row and its detail: a prompt of `tokens` proved and checked as the
/// engine's prefill in chunks of `a.chunk`.
fn prefilled(
    a: &CheckArgs,
    tokens: usize,
    graph: &crate::ir::Graph,
    program: &crate::engine::Program,
    ckpt: &crate::model::Checkpoint,
    vocab: usize,
) -> (&'static str, Option<String>) {
    let prefill = match Prefill::chunked(tokens, a.chunk) {
        Ok(p) => p,
        Err(e) => return ("error", Some(format!("prefill: {e}"))),
    };
    let proof = prove_prefill(program, &prefill);
    if !proof.is_proved() {
        return (proof.word(), Some(format!("prefill: {proof}")));
    }
    match check_prefill(graph, program, ckpt, &prefill, &PrefillCase::spread(tokens, vocab)) {
        Ok(Verdict::Agree { .. }) => ("agree", None),
        Ok(v) => (v.name(), Some(format!("prefill: {v}"))),
        Err(e) => ("error", Some(format!("prefill: {e}"))),
    }
}

/// The proofs of a model's program from its spec alone, when it is authored and lowered: the
/// program's, and with `--prefill` the prefill's induction.
fn proofs_without_weights(
    a: &CheckArgs,
    spec: &crate::model::ModelSpec,
) -> Option<(&'static str, Option<&'static str>)> {
    let authored = decode_step(spec).ok()?;
    let graph = EngineShim::default().prepare(&authored);
    let program = lower_graph(&graph, a.numerics).ok()?;
    let prefill = a.prefill.map(|t| match Prefill::chunked(t, a.chunk) {
        Ok(p) => prove_prefill(&program, &p).word(),
        Err(_) => "error",
    });
    Some((prove(&authored, &graph, &program).word(), prefill))
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
    let n = tokens.len();
    p.show(&format!("{label}: comparing {}", plural(n, "step")));
    let mut report = |run: &str, step: usize| p.show(&format!("{label}: comparing, {run} at step {step}/{n}"));
    let verdict = match compare_reporting(graph, program, ckpt, &tokens, &mut report) {
        Ok(v) => v,
        Err(e) => return Row { commands, ..Row::error("Check", e.to_string()) },
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
