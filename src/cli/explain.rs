//! `stepcheck explain`: everything a reviewer needs to understand one case file.

use std::process::ExitCode;

use super::CliError;
use super::args::ExplainArgs;
use crate::r#gen::file::{CaseFile, outcome_kind};
use crate::r#gen::oracle::{judge, prove_trace, trace};
use crate::r#gen::{Input, Outcome};
use crate::limits::{MAX_CASE_FILE_BYTES, read_text};

/// Prints the case (its spec or given graph, mutation, shim, numerics), the authored graph, the
/// graph `lower_graph` reads (mutated and fused), the program and its proof (`crate::prove`: per
/// output the lemmas used, or where the normal forms differ) or the refusal, the outcomes the case
/// allows, and the oracle's judgement with its witness. Exits 1 when the judgement is a failure
/// or the outcome differs from the file's.
pub fn explain(a: ExplainArgs) -> Result<ExitCode, CliError> {
    let text = read_text(&a.case, MAX_CASE_FILE_BYTES)?;
    if let Ok(file) = text.parse::<crate::batch::r#gen::CaseFile>() {
        return super::explain_batch::explain_batch(&file);
    }
    let file = CaseFile::parse(&text).map_err(|e| format!("{}: {e}", a.case.display()))?;
    let case = &file.case;
    section("case")?;
    for c in &file.comment {
        outln!("; {c}");
    }
    match &case.input {
        Input::Spec(spec) => outln!("spec {}", serde_json::to_string_pretty(spec)?),
        Input::Graph { spec, .. } => {
            outln!("a graph, as given{}", if spec.is_some() { ", on the spec's checkpoint" } else { "" })
        }
    }
    if let Some(m) = &case.mutation {
        outln!("mutation {m}");
    }
    outln!("shim: {}", case.shim().symbols().map(|s| s.name()).collect::<Vec<_>>().join(", "));
    outln!("numerics {}, seed {}, tokens {:?}", case.numerics, case.seed, case.tokens());
    let t = trace(case)?;
    if let Some(g) = &t.authored {
        section("authored graph")?;
        out!("{g}");
    }
    section("graph lowered (mutated, fused)")?;
    out!("{}", t.fused);
    match &t.lowered {
        Ok(p) => {
            section("program")?;
            out!("{p}");
            section("proof")?;
            outln!("{}", prove_trace(case, &t, p));
        }
        Err(e) => {
            section("refused")?;
            outln!("{}: {e}", Outcome::refused(e));
        }
    }
    section("verdict")?;
    match case.expected() {
        Some(e) => outln!("the case allows: {e}"),
        None => outln!("the case allows any outcome (it states it in its outcome line)"),
    }
    let j = judge(case);
    outln!("{j}");
    let stated = file.outcome.as_deref().unwrap_or("(no outcome line)");
    let now = j.outcome_line();
    let same = outcome_kind(stated) == outcome_kind(&now);
    if same {
        outln!("the file's outcome: {stated} (unchanged)");
    } else {
        outln!("the file's outcome: {stated}\nnow:                {now}");
    }
    Ok(if j.is_failure() || !same { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub(super) fn section(title: &str) -> Result<(), CliError> {
    outln!("\n== {title}");
    Ok(())
}
