//! What Cargo cannot say of the house's floors. Each floor is a crate whose dependencies are its
//! invariants (`crates/*/Cargo.toml`, docs/ARCHITECTURE.md): the IR imports nothing of the project,
//! the lowering never `model`, the engine never the IR or the reference, the prover neither
//! interpreter nor the lowering; a forbidden import does not build. What is left here is a rule
//! within this crate, where the check sits beside everything it judges.

use std::path::Path;

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
