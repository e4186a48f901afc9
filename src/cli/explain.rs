//! `stepcheck explain`: everything a reviewer needs to understand one case file.

use std::process::ExitCode;

use super::CliError;
use super::args::ExplainArgs;
use crate::r#gen::file::CaseFile;
use crate::r#gen::oracle::{judge, prove_trace, trace};
use crate::r#gen::{Input, Outcome};

/// Prints the case (its spec or given graph, mutation, shim, numerics), the authored graph, the
/// graph `lower_graph` reads (mutated and fused), the program and its proof (`crate::prove`: per
/// output the lemmas used, or where the normal forms differ) or the refusal, the outcomes the case
/// allows, and the oracle's judgement with its witness. Exits 1 when the judgement is a failure
/// or the outcome differs from the file's.
pub fn explain(a: ExplainArgs) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(&a.case).map_err(|e| format!("{}: {e}", a.case.display()))?;
    let file = CaseFile::parse(&text).map_err(|e| format!("{}: {e}", a.case.display()))?;
    let case = &file.case;
    section("case");
    for c in &file.comment {
        println!("; {c}");
    }
    match &case.input {
        Input::Spec(spec) => println!("spec {}", serde_json::to_string_pretty(spec)?),
        Input::Graph { spec, .. } => {
            println!("a graph, as given{}", if spec.is_some() { ", on the spec's checkpoint" } else { "" })
        }
    }
    if let Some(m) = &case.mutation {
        println!("mutation {m}");
    }
    println!("shim: {}", case.shim().symbols().map(|s| s.name()).collect::<Vec<_>>().join(", "));
    println!("numerics {}, seed {}, tokens {:?}", case.numerics, case.seed, case.tokens());
    let t = trace(case)?;
    if let Some(g) = &t.authored {
        section("authored graph");
        print!("{g}");
    }
    section("graph lowered (mutated, fused)");
    print!("{}", t.fused);
    match &t.lowered {
        Ok(p) => {
            section("program");
            print!("{p}");
            section("proof");
            println!("{}", prove_trace(case, t.authored.as_ref(), &t.fused, p));
        }
        Err(e) => {
            section("refused");
            println!("{}: {e}", Outcome::refused(e));
        }
    }
    section("verdict");
    match case.expected() {
        Some(e) => println!("the case allows: {e}"),
        None => println!("the case allows any outcome (it states it in its outcome line)"),
    }
    let j = judge(case);
    println!("{j}");
    let stated = file.outcome.as_deref().unwrap_or("(no outcome line)");
    let now = j.outcome_line();
    if stated == now {
        println!("the file's outcome: {stated} (unchanged)");
    } else {
        println!("the file's outcome: {stated}\nnow:                {now}");
    }
    Ok(if j.is_failure() || stated != now { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn section(title: &str) {
    println!("\n== {title}");
}
