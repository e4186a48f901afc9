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
