//! The table of `check` and `check --batch`: a row per model, the legend, the summary line and the
//! lines under it; with `--json`, the same rows and summary as one JSON object.
//!
//! The model column shows the model's file or folder name (a preset's name), or its whole path
//! where two models share that name; `--json`'s `model` is always the whole path. The legend is
//! printed when stdout is a terminal or `--legend` asks for it, never with `--json`. The exit
//! status is the worst a row asks for, and 2 when no model was judged at all.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::{Map, Value};

use super::CliError;
use super::args::CheckArgs;
use super::plural::plural;

/// One model's row. A column is a field here and an entry of [`COLUMNS`]; a new column takes one
/// of each.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Row {
    /// The model's whole path, or a preset's name.
    pub model: String,
    /// `agree`, `disagree`, `inconclusive`, `refused`, `error` or `skipped`.
    pub verdict: &'static str,
    /// The refusal's name, for `refused`; the error's, for `error`.
    pub refusal: Option<String>,
    /// The program's command count, once lowered.
    pub commands: Option<usize>,
    /// The proof of the program, once lowered: `proved`, `refuted` or `inconclusive`. A row whose
    /// proof is not `proved` asks for exit status 1.
    pub proof: Option<&'static str>,
    /// With `--against`: transformers' step against the authored graph, `proved`, `refuted`,
    /// `inconclusive` or `not imported`; not `proved` asks for exit status 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transformers: Option<&'static str>,
    /// With `--against-llama-graph`: llama.cpp's step against the authored graph, as
    /// `transformers` is.
    #[serde(rename = "llama.cpp", skip_serializing_if = "Option::is_none")]
    pub llama_cpp: Option<&'static str>,
    /// With `--prefill`: a prompt run as the engine's prefill, proved (every token on its own
    /// history's state) and checked against the reference's steps: `agree`, or the first of the
    /// proof's and the check's verdicts that is not `proved` / `agree`; anything but `agree` asks for
    /// exit status 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<&'static str>,
    /// For `agree`: the largest error of the engine's exact run against the reference, relative
    /// to its tensor's scale.
    pub structure: Option<f64>,
    /// For `agree`: the largest distance of a value the engine's Commands stored from its
    /// Command's meaning, relative to its tensor's scale.
    pub max_rel: Option<f64>,
    /// For `agree`: the farthest such a value was allowed to be from its meaning (its bound and the
    /// rounding to its storage type), relative to its tensor's scale.
    pub widest: Option<f64>,
    /// The steps compared.
    pub steps: Option<usize>,
    pub seconds: f64,
    /// The witness, the refusal's message or why the model was skipped; printed under the row.
    pub detail: String,
    /// Fields a command adds to its rows' JSON (`check --batch`: `schedules`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The exit status this row asks for (0, 1 or 2).
    #[serde(skip)]
    pub exit: u8,
}

impl Row {
    /// A `refused` row: what the engine has no unit for, by name, with its message (exit 1).
    pub fn refused(name: &str, detail: String) -> Row {
        Row { verdict: "refused", refusal: Some(name.to_string()), detail, exit: 1, ..Row::default() }
    }

    /// An `error` row: a model that could not be read or checked (an unreadable or invalid input,
    /// a check that could not run), by the error's name, with its message (exit 2). It is no
    /// answer about the engine, so it is not counted as judged.
    pub fn error(name: &str, detail: String) -> Row {
        Row { verdict: "error", refusal: Some(name.to_string()), detail, exit: 2, ..Row::default() }
    }
}

/// The table's columns after the model's: a header, its width, and the cell of a row.
type Column = (&'static str, usize, fn(&Row) -> String);

/// The header of the column `--against` adds; the table shows it only then.
const TRANSFORMERS: &str = "transformers";

/// The header of the column `--against-llama-graph` adds; the table shows it only then.
const LLAMA_CPP: &str = "llama.cpp";

/// What the `llama.cpp` column means, added to the legend with `--against-llama-graph`.
const LEGEND_AGAINST_LLAMA: &str = "
llama.cpp: llama.cpp's own compute graph for the step, recorded through its eval callback, proved to
  compute what the authored step computes (`proved`, its roundings stated), `refuted`,
  `inconclusive`, or `not imported` (a node the importer cannot follow); `stepcheck prove
  --against-llama-graph` prints it in full. Anything but `proved` fails the check (exit 1).";

/// The header of the column `--prefill` adds; the table shows it only then.
const PREFILL: &str = "prefill";

/// What the `prefill` column means, added to the legend with `--prefill`.
const LEGEND_PREFILL: &str = "
prefill: a prompt of --prefill tokens, between two decode steps on each side, run as the engine's
  prefill in chunks of --chunk: proved to run every token's step on its own history's state, and
  compared with the reference's steps as a decode is (the structure, every Command where it runs,
  and the engine's prefill to the bit against the run judged token by token): `agree`, or the
  proof's `refuted` / `inconclusive`, or the check's `disagree` / `inconclusive`. Anything but
  `agree` fails the check (exit 1).";

/// What the `transformers` column means, added to the legend with `--against`.
const LEGEND_AGAINST: &str = "
transformers: transformers' own exported step proved to compute what the authored step computes
  (`proved`), `refuted`, `inconclusive`, or `not imported` (a node the importer cannot follow);
  `stepcheck prove --against` prints it in full. Anything but `proved` fails the check (exit 1).";

const COLUMNS: &[Column] = &[
    ("verdict", 22, |r| match &r.refusal {
        Some(name) => format!("{} {name}", r.verdict),
        None => r.verdict.to_string(),
    }),
    ("commands", 8, |r| r.commands.map_or("-".into(), |c| c.to_string())),
    ("proof", 12, |r| r.proof.unwrap_or("-").to_string()),
    (TRANSFORMERS, 12, |r| r.transformers.unwrap_or("-").to_string()),
    (LLAMA_CPP, 12, |r| r.llama_cpp.unwrap_or("-").to_string()),
    (PREFILL, 12, |r| r.prefill.unwrap_or("-").to_string()),
    ("structure", 9, |r| r.structure.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("max rel", 9, |r| r.max_rel.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("bound", 9, |r| r.widest.map_or("-".into(), |x| format!("{x:.2e}"))),
    ("time", 8, |r| format!("{:.1}s", r.seconds)),
];

/// What the columns measure, printed under the table.
const LEGEND: &str = "\
verdicts: agree (every value within its bound), disagree (the worst value out of it: step, tensor,
  index, both values, and the Command that wrote it), inconclusive (nothing can be concluded, and
  why: a value that is not finite where a bound needs it), refused NAME (the engine has no unit for
  it), error NAME (the model could not be read or checked: not judged), skipped (not run: too
  large for the memory the check may use; only its proof is checked, and it is not counted as
  agreeing).
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

/// What a command adds at the table's end: fields of its JSON object, and lines under the summary.
#[derive(Default)]
pub(super) struct Addendum {
    pub json: Map<String, Value>,
    pub lines: Vec<String>,
}

/// A table being printed: its header is out, each row goes out as it is pushed.
pub(super) struct Table {
    /// The model column's cell of each model, in the order the rows come.
    names: Vec<String>,
    width: usize,
    json: bool,
    /// The legend to print, with what the command adds to it; `None` when it is not printed.
    legend: Option<String>,
    /// Whether the user named the models (a skipped one is then a failure to check it).
    explicit: bool,
    /// The columns shown: every one, the `transformers` column only with `--against`, the
    /// `llama.cpp` one only with `--against-llama-graph`.
    columns: Vec<Column>,
    rows: Vec<Row>,
}

impl Table {
    /// Starts the table of `models` (whole paths or preset names, in the order their rows will
    /// come) and prints its header; `legend_more` is what the command adds to the legend.
    pub fn start(a: &CheckArgs, models: &[String], explicit: bool, legend_more: &str) -> Result<Table, CliError> {
        let names = short_names(models);
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(5).max(5);
        let against = if a.against.is_some() { LEGEND_AGAINST } else { "" };
        let llama = if a.against_llama_graph.is_some() { LEGEND_AGAINST_LLAMA } else { "" };
        let prefill = if a.prefill.is_some() { LEGEND_PREFILL } else { "" };
        let legend = (!a.json && (a.legend || std::io::stdout().is_terminal()))
            .then(|| format!("{LEGEND}{against}{llama}{prefill}{legend_more}"));
        let columns: Vec<Column> = COLUMNS
            .iter()
            .copied()
            .filter(|(name, ..)| *name != TRANSFORMERS || a.against.is_some())
            .filter(|(name, ..)| *name != LLAMA_CPP || a.against_llama_graph.is_some())
            .filter(|(name, ..)| *name != PREFILL || a.prefill.is_some())
            .collect();
        if !a.json {
            let mut header = format!("{:<width$}", "model");
            for (name, w, _) in &columns {
                header += &format!("  {name:<w$}");
            }
            outln!("{}", header.trim_end());
        }
        Ok(Table { names, width, json: a.json, legend, explicit, columns, rows: vec![] })
    }

    /// Prints `row`, then its detail under it, line by line.
    pub fn push(&mut self, row: Row) -> Result<(), CliError> {
        if !self.json {
            let w = self.width;
            let name = self.names.get(self.rows.len()).unwrap_or(&row.model);
            let mut line = format!("{name:<w$}");
            for (_, width, cell) in &self.columns {
                line += &format!("  {:<width$}", cell(&row));
            }
            outln!("{}", line.trim_end());
            for detail in row.detail.lines() {
                outln!("{:<w$}  {detail}", "");
            }
        }
        self.rows.push(row);
        Ok(())
    }

    /// Ends the table: the legend, the summary line and `more`'s lines, the models not run, the
    /// peak memory and where to look next; or, with `--json`, one object of the rows, the summary
    /// and `more`'s fields. Returns the exit status the rows ask for.
    pub fn finish(self, more: Addendum) -> Result<ExitCode, CliError> {
        let rows = &self.rows;
        let count = |v: &str| rows.iter().filter(|r| r.verdict == v).count();
        let proved = rows.iter().filter(|r| r.proof == Some("proved")).count();
        let judged = rows.len() - count("skipped") - count("error");
        let mut exit = rows.iter().map(|r| r.exit).max().unwrap_or(0);
        // A command that judged no model answered nothing.
        if judged == 0 {
            exit = 2;
        }
        if self.json {
            let mut json = Map::new();
            json.insert("models".into(), serde_json::to_value(rows)?);
            json.insert(
                "summary".into(),
                serde_json::json!({
                    "models": rows.len(),
                    "judged": judged,
                    "agree": count("agree"),
                    "disagree": count("disagree"),
                    "inconclusive": count("inconclusive"),
                    "refused": count("refused"),
                    "error": count("error"),
                    "skipped": count("skipped"),
                    "proved": proved,
                    "exit": exit,
                    "peak_rss_bytes": super::memory::peak_rss(),
                }),
            );
            json.extend(more.json);
            outln!("{}", Value::Object(json));
            return Ok(ExitCode::from(exit));
        }
        if let Some(legend) = &self.legend {
            outln!("\n{legend}");
        }
        outln!(
            "\n{}: {judged} judged ({} agree, {} disagree, {} inconclusive, {} refused), {} (not judged), {} skipped \
             (not run, not counted as agreeing); {proved} proved",
            plural(rows.len(), "model"),
            count("agree"),
            count("disagree"),
            count("inconclusive"),
            count("refused"),
            plural(count("error"), "error"),
            count("skipped"),
        );
        for line in &more.lines {
            outln!("{line}");
        }
        let skipped: Vec<&str> = rows.iter().filter(|r| r.verdict == "skipped").map(|r| r.model.as_str()).collect();
        if !skipped.is_empty() && !self.explicit {
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
        Ok(ExitCode::from(exit))
    }
}

/// The model column's cell of each model: its last path component (a preset's name is one), or
/// the whole path where two models share that component.
fn short_names(models: &[String]) -> Vec<String> {
    let last = |m: &String| Path::new(m).file_name().map_or_else(|| m.clone(), |n| n.to_string_lossy().into_owned());
    let lasts: Vec<String> = models.iter().map(last).collect();
    let shared = |n: &String| lasts.iter().filter(|m| *m == n).count() > 1;
    models.iter().zip(&lasts).map(|(m, n)| if shared(n) { m.clone() } else { n.clone() }).collect()
}

#[cfg(test)]
mod tests {
    use super::short_names;

    #[test]
    fn a_model_is_named_by_its_last_path_component_unless_two_share_it() {
        let models = ["tiny", "reference/fixtures/qwen35-c", "a/model.gguf", "b/model.gguf", "c/x.gguf/"];
        let names = short_names(&models.map(String::from));
        assert_eq!(names, ["tiny", "qwen35-c", "a/model.gguf", "b/model.gguf", "x.gguf"]);
    }
}
