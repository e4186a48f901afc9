//! The corpus's review commands, run as a reviewer runs them: `stepcheck corpus import`,
//! `stepcheck corpus review` and `stepcheck explain`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stepcheck::r#gen::file::{CaseFile, PLACEHOLDER};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

fn stepcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepcheck")).args(args).output().expect("the stepcheck binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

#[test]
fn review_passes_on_the_corpus_and_shows_a_changed_case_expected_next_to_now() {
    let o = stepcheck(&["corpus", "review", path(&corpus())]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).ends_with(" changed\n") && stdout(&o).contains(", 0 changed"), "{}", stdout(&o));

    let dir = scratch("review");
    let name = "value-heads-grouped.case";
    let text = std::fs::read_to_string(corpus().join(name)).expect("a corpus case");
    let edited = text.replace("; outcome: refused WrongAttribute at DeltaNet layer 1", "; outcome: accepted");
    assert_ne!(edited, text);
    std::fs::write(dir.join(name), edited).expect("write");
    let o = stepcheck(&["corpus", "review", path(&dir)]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains(name) && out.contains("accepted") && out.contains("refused WrongAttribute at DeltaNet layer 1")
    );
    assert!(out.ends_with("1 case, 1 changed\n"), "{out}");
}

#[test]
fn import_writes_a_case_file_with_its_outcome_and_a_placeholder_for_the_reviewer() {
    let dir = scratch("import");
    let artifact = dir.join("crash-1");
    std::fs::write(&artifact, [9u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]).expect("write");
    let out = dir.join("imported.case");
    let o = stepcheck(&["corpus", "import", path(&artifact), "--out", path(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = CaseFile::parse(&std::fs::read_to_string(&out).expect("the case file")).expect("a case file");
    assert_eq!(file.comment.first().map(String::as_str), Some(PLACEHOLDER));
    assert!(file.outcome.is_some());
    // The imported file reviews as unchanged.
    let o = stepcheck(&["corpus", "review", path(&dir)]);
    assert!(o.status.success(), "{}", stdout(&o));
}

#[test]
fn explain_shows_every_stage_of_a_case() {
    let o = stepcheck(&["explain", path(&corpus().join("head-bound-to-embedding.case"))]);
    assert!(o.status.success(), "{}", stdout(&o));
    let out = stdout(&o);
    for section in ["== case", "== authored graph", "== graph lowered (mutated, fused)", "== program", "== verdict"] {
        assert!(out.contains(section), "no {section}:\n{out}");
    }
    assert!(out.contains("accepted: agree over 4 steps"), "{out}");
    let o = stepcheck(&["explain", path(&corpus().join("stale-kv-cache.case"))]);
    assert!(o.status.success() && stdout(&o).contains("== refused"), "{}", stdout(&o));
}
