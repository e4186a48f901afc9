//! The text form of a case: a corpus file, in the manner of Cranelift's filetests.
//!
//! ```text
//! ; What the case caught and why, in prose (any number of lines).
//! ; outcome: refused WrongBinding at DeltaNet layer 1
//! spec {
//!   "name": "gen",
//!   …
//! }
//! mutation rebind %blk.1.ssm_out = blk.2.ssm_out.weight at DeltaNet layer 1
//! shim without merged_qkv
//! numerics bf16/bf16/f32
//! seed 3
//! steps 4
//! ```
//!
//! Lines starting with `;` are comments; the one starting `; outcome:` is the outcome the case must
//! have, exactly (an `accepted` case must also agree). `spec` is followed by the `ModelSpec` as
//! JSON, over as many lines as it takes. Instead of (or after) the spec, `graph` starts a step graph
//! in the IR's text form, which runs to its `logits` line; a spec next to a graph only makes the
//! checkpoint. A graph must be well formed, its attributes as a config's (`Graph::validate`,
//! `Graph::validate_attributes`): an ill-formed one is an error of the file. `mutation` takes the mutation's one-line text form. `shim without SYMBOL`,
//! `numerics ACT[/KV[/STATE]]`, `seed N` and `steps N` default to the engine's shim, f32, 0 and 4.
//! Blank lines are skipped.
//!
//! Every size is checked before anything is made from it (`crate::limits`): `steps` is at most
//! `MAX_STEPS`, and a spec's sizes, layer count and checkpoint are under their limits, so a case
//! file cannot make the oracle allocate without bound.

use std::fmt;

use super::case::{Case, Input, STEPS};
use super::mutation::Mutation;
use crate::engine::Numerics;
use crate::fuse::Symbol;
use crate::ir::parse_graph;
use crate::limits;
use crate::model::ModelSpec;

/// The comment `stepcheck corpus import` writes where the reviewer's prose goes; the corpus test
/// refuses a file that still holds it.
pub const PLACEHOLDER: &str = "TODO(review): say what this case caught and why, in prose.";

/// A case with its prose and the outcome it must have.
#[derive(Clone, Debug)]
pub struct CaseFile {
    /// The comment lines, without their `; `.
    pub comment: Vec<String>,
    /// The outcome line's outcome, as written (see [`super::oracle::Judgement::outcome_line`]).
    pub outcome: Option<String>,
    pub case: Case,
}

/// Why a text is not a case file: the line and what is wrong there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct FileError {
    pub line: usize,
    pub why: String,
}

impl CaseFile {
    /// Reads a case file.
    pub fn parse(text: &str) -> Result<CaseFile, FileError> {
        let mut comment = vec![];
        let mut outcome = None;
        let (mut spec, mut graph) = (None, None);
        let (mut mutation, mut without, mut numerics, mut seed, mut steps) = (None, None, Numerics::F32, 0, STEPS);
        let mut rest = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut line = 0;
        while !rest.is_empty() {
            line += 1;
            let (this, next) = rest.split_once('\n').unwrap_or((rest, ""));
            let l = this.trim();
            let here = line;
            let err = |why: String| FileError { line: here, why };
            let (word, arg) = l.split_once(char::is_whitespace).map_or((l, ""), |(w, a)| (w, a.trim()));
            if let Some(c) = l.strip_prefix(';') {
                let c = c.strip_prefix(' ').unwrap_or(c);
                match c.strip_prefix("outcome:") {
                    Some(o) if outcome.is_none() => outcome = Some(o.trim().to_string()),
                    Some(_) => return Err(err("a second outcome line".into())),
                    None => comment.push(c.trim_end().to_string()),
                }
            } else if l.is_empty() {
            } else if word == "spec" {
                // The JSON runs from after `spec` for as many lines as it takes.
                let from = this.find("spec").unwrap_or(0) + 4;
                let json = &rest[from..];
                let mut values = serde_json::Deserializer::from_str(json).into_iter::<ModelSpec>();
                let s = values.next().ok_or_else(|| err("'spec' without a spec".into()))?;
                let s = s.map_err(|e| err(format!("the spec: {e}")))?;
                limits::check_spec(&s, limits::MAX_CASE_VALUES).map_err(|e| err(format!("the spec: {e}")))?;
                spec = Some(s);
                let used = &json[..values.byte_offset()];
                line += used.matches('\n').count();
                let after = &json[values.byte_offset()..];
                let (tail, next) = after.split_once('\n').unwrap_or((after, ""));
                if !tail.trim().is_empty() {
                    return Err(err(format!("{:?} after the spec", tail.trim())));
                }
                rest = next;
                continue;
            } else if word == "graph" {
                let mut end = 0;
                let mut lines = 0;
                for l in rest.split_inclusive('\n') {
                    end += l.len();
                    lines += 1;
                    if l.trim_start().starts_with("logits") {
                        break;
                    }
                }
                let g = parse_graph(&rest[..end])
                    .map_err(|e| FileError { line: line + e.line() - 1, why: e.to_string() })?;
                graph = Some((g, line));
                line += lines - 1;
                rest = &rest[end..];
                continue;
            } else if word == "mutation" {
                mutation = Some(arg.parse::<Mutation>().map_err(|e| err(format!("the mutation: {e}")))?);
            } else if word == "shim" {
                let sym =
                    arg.strip_prefix("without").map(str::trim).ok_or_else(|| err("shim without SYMBOL".into()))?;
                without = Some(
                    Symbol::ALL
                        .into_iter()
                        .find(|s| s.name() == sym)
                        .ok_or_else(|| err(format!("{sym:?} is not a symbol of the fusion table")))?,
                );
            } else if word == "numerics" {
                numerics = Numerics::parse(arg)
                    .ok_or_else(|| err(format!("{arg:?} is not act[/kv[/state[/kquant-inputs]]]")))?;
            } else if word == "seed" {
                seed = arg.parse().map_err(|_| err(format!("{arg:?} is not a seed")))?;
            } else if word == "steps" {
                steps = limits::parse_count("field `steps`", arg, limits::MAX_STEPS).map_err(err)?;
                if steps < crate::check::MIN_STEPS {
                    return Err(err(format!(
                        "steps {steps}: a verdict needs at least {} steps (state read once written, RoPE away \
                         from position 0)",
                        crate::check::MIN_STEPS
                    )));
                }
            } else {
                return Err(err(format!("{word:?} is not spec, graph, mutation, shim, numerics, seed or steps")));
            }
            rest = next;
        }
        if let Some((g, line)) = &graph {
            let line = *line;
            limits::check_graph(g, steps, limits::MAX_CASE_VALUES)
                .map_err(|e| FileError { line, why: e.to_string() })?;
            // An ill-formed graph is an input that cannot be read, not a construct the engine
            // refuses: what a mutation makes ill-formed is the lowering's to refuse.
            g.validate()
                .and_then(|()| g.validate_attributes())
                .map_err(|e| FileError { line, why: format!("the graph is not well formed: {e}") })?;
        }
        let input = match (spec, graph.map(|(g, _)| g)) {
            (Some(spec), None) => Input::Spec(spec),
            (spec, Some(graph)) => Input::Graph { graph, spec },
            (None, None) => return Err(FileError { line, why: "no spec and no graph".into() }),
        };
        Ok(CaseFile { comment, outcome, case: Case { input, without, numerics, mutation, seed, steps } })
    }
}

impl fmt::Display for CaseFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.comment.iter().flat_map(|c| c.split('\n')) {
            if c.is_empty() { writeln!(f, ";")? } else { writeln!(f, "; {c}")? }
        }
        if let Some(o) = &self.outcome {
            writeln!(f, "; outcome: {o}")?;
        }
        let c = &self.case;
        let json = |s: &ModelSpec| serde_json::to_string_pretty(s).map_err(|_| fmt::Error);
        match &c.input {
            Input::Spec(s) => writeln!(f, "spec {}", json(s)?)?,
            Input::Graph { graph, spec } => {
                if let Some(s) = spec {
                    writeln!(f, "spec {}", json(s)?)?;
                }
                write!(f, "{graph}")?;
            }
        }
        if let Some(m) = &c.mutation {
            writeln!(f, "mutation {m}")?;
        }
        if let Some(s) = c.without {
            writeln!(f, "shim without {}", s.name())?;
        }
        if c.numerics != Numerics::F32 {
            writeln!(f, "numerics {}", c.numerics)?;
        }
        writeln!(f, "seed {}", c.seed)?;
        if c.steps != STEPS {
            writeln!(f, "steps {}", c.steps)?;
        }
        Ok(())
    }
}

/// What of an outcome line a case must keep: all of a refusal or of `accepted`; of `…, but
/// VERDICT: details` the part before the details (the verdict's kind and reason, with the numerics,
/// or the witness's stage, step and place), never the figures after it.
pub fn outcome_kind(line: &str) -> &str {
    match line.split_once(", but ") {
        Some((_, verdict)) => {
            let end = verdict.find(": ").map_or(line.len(), |i| line.len() - verdict.len() + i);
            &line[..end]
        }
        None => line,
    }
}
