//! The regression corpus: every `tests/corpus/*.case` file, replayed. Each states, in prose, what
//! it caught and why, and the outcome it must have; the outcome must be that (a case stated
//! `accepted` must also agree; one accepted but not agreeing is compared by its verdict's kind and
//! reason, or its witness's place, not by the figures of its text), and the oracle must not fail
//! on it. The format is in
//! docs/SOUNDNESS.md ("Corpus format") and `stepcheck::gen::file`.

use std::path::PathBuf;

use stepcheck::r#gen::file::{CaseFile, PLACEHOLDER, outcome_kind};
use stepcheck::r#gen::oracle::judge;

/// Every case file, with its name and text.
fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("tests/corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "case"))
        .map(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            (name, std::fs::read_to_string(&p).expect("a readable case file"))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn an_outcome_is_compared_by_its_kind_and_reason() {
    // (line, what must be kept)
    let cases = [
        ("accepted", "accepted"),
        ("refused WrongOp at DeltaNet layer 1", "refused WrongOp at DeltaNet layer 1"),
        (
            "accepted, but inconclusive (rounding-flips) at bf16/bf16/f32: the structure agrees; 6.15e-4",
            "accepted, but inconclusive (rounding-flips) at bf16/bf16/f32",
        ),
        (
            "accepted, but disagree (numerics) at step 3 in l1.kcache[108]: reference -0.92 engine -0.93",
            "accepted, but disagree (numerics) at step 3 in l1.kcache[108]",
        ),
    ];
    for (line, want) in cases {
        assert_eq!(outcome_kind(line), want);
    }
}

#[test]
fn a_case_of_fewer_than_two_steps_is_refused() {
    for steps in [0, 1] {
        let text = format!("; a\n; b\n; outcome: accepted\nsteps {steps}\n");
        let e = CaseFile::parse(&text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with(&format!("line 4: steps {steps}: a verdict needs at least 2")), "steps {steps}: {e:?}");
    }
}

fn read(name: &str, text: &str) -> CaseFile {
    CaseFile::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_case_has_the_outcome_it_states() {
    let mut wrong = vec![];
    for (name, text) in corpus() {
        let file = read(&name, &text);
        let j = judge(&file.case);
        let stated = file.outcome.clone().unwrap_or_default();
        if outcome_kind(&j.outcome_line()) != outcome_kind(&stated) || j.is_failure() {
            wrong.push(format!("{name}\n  stated  {stated}\n  now     {j}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cases changed (`stepcheck corpus review` shows them):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_case_says_what_it_caught_and_is_written_as_import_writes_it() {
    let files = corpus();
    assert!(files.len() >= 20, "the corpus has {} cases", files.len());
    for (name, text) in files {
        let file = read(&name, &text);
        let prose: Vec<&String> = file.comment.iter().filter(|c| !c.trim().is_empty()).collect();
        assert!(prose.len() >= 2, "{name}: say what the case caught and why, in a few lines of prose");
        assert!(!file.comment.iter().any(|c| c.contains(PLACEHOLDER)), "{name}: still holds the import placeholder");
        assert!(file.outcome.is_some(), "{name}: no '; outcome:' line");
        assert_eq!(file.to_string(), text, "{name}: not in the canonical form (parse and print it)");
    }
}
