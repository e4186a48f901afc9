//! The house's floors: the IR is the ground floor and imports nothing else of the crate.

use std::path::Path;

/// Every `crate::…` path a file under `dir` names outside comments, with the file.
fn crate_paths(dir: &Path) -> Vec<(String, String)> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(crate_paths(&path));
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let rest: String = line[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.push((path.display().to_string(), rest));
            }
        }
    }
    found
}

#[test]
fn the_ir_imports_nothing_of_the_crate_but_itself() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ir");
    let above: Vec<_> = crate_paths(&dir).into_iter().filter(|(_, m)| m != "ir").collect();
    assert!(above.is_empty(), "src/ir imports floors above it: {above:?}");
}

/// Every `crate::…` path a file names outside comments and before its `#[cfg(test)]` module, a
/// grouped import (`crate::a::{b, c}`) as one path per member.
fn crate_paths_outside_tests(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a source file");
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = vec![];
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let path: String =
                line[i + 7..].chars().take_while(|c| c.is_alphanumeric() || "_:{}, ".contains(*c)).collect();
            let path = path.replace(' ', "");
            match path.split_once('{') {
                Some((head, members)) => {
                    let members = members.split('}').next().unwrap_or_default();
                    found.extend(members.split(',').filter(|m| !m.is_empty()).map(|m| format!("{head}{m}")));
                }
                None => found.push(path),
            }
        }
    }
    found
}

#[test]
fn the_checks_meaning_of_the_commands_shares_no_code_with_the_engine_the_reference_or_the_prover() {
    // The check's reading of each Command and its bounds are a third semantics (invariant 3): of
    // the engine they may name only the program, its numerics and what a step shows
    // (`StepView`), never its units or kernels; nothing of the reference interpreter or the prover.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/check");
    for file in ["meaning.rs", "bound.rs", "storage.rs", "weights.rs", "command.rs"] {
        for path in crate_paths_outside_tests(&dir.join(file)) {
            let allowed = ["engine::program", "engine::numerics", "engine::run::StepView", "engine::run::StepObserver"]
                .iter()
                .any(|p| path.starts_with(p))
                || ["formats::", "model::checkpoint", "scalar::"].iter().any(|p| path.starts_with(p));
            assert!(allowed, "src/check/{file} names crate::{path}");
        }
    }
}
