//! `stepcheck corpus`: the regression corpus's two review commands.
//!
//! `import` turns a fuzz artifact into a case file that states the case's current outcome and
//! leaves the reviewer a placeholder for the prose; `review` re-runs every case file of a folder
//! and shows each one whose outcome is not the one it states, expected next to now.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::CliError;
use super::args::{CorpusArgs, CorpusSubcommand};
use super::plural::plural;
use crate::r#gen::Case;
use crate::r#gen::file::{CaseFile, PLACEHOLDER, outcome_kind};
use crate::r#gen::oracle::judge;
use crate::limits::{MAX_CASE_FILE_BYTES, read_text};

pub fn corpus(a: CorpusArgs) -> Result<ExitCode, CliError> {
    match a.command {
        CorpusSubcommand::Import { artifact, out } => import(&artifact, out.as_deref()),
        CorpusSubcommand::Review { dir } => review(&dir),
    }
}

fn import(artifact: &Path, out: Option<&Path>) -> Result<ExitCode, CliError> {
    let size = std::fs::metadata(artifact).map_err(|e| format!("{}: {e}", artifact.display()))?.len();
    if size > MAX_CASE_FILE_BYTES {
        return Err(format!(
            "{}: {size} bytes; the limit for an artifact is {MAX_CASE_FILE_BYTES}",
            artifact.display()
        )
        .into());
    }
    let bytes = std::fs::read(artifact).map_err(|e| format!("{}: {e}", artifact.display()))?;
    let case = Case::from_bytes(&bytes).ok_or_else(|| format!("{}: empty input, no case", artifact.display()))?;
    let j = judge(&case);
    let said = j.to_string();
    let file = CaseFile {
        comment: vec![
            PLACEHOLDER.into(),
            format!("Imported from the fuzz artifact {}.", artifact.display()),
            format!("The oracle said: {}", said.lines().next().unwrap_or_default()),
        ],
        outcome: Some(j.outcome_line()),
        case,
    };
    match out {
        Some(path) => {
            std::fs::write(path, file.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
            errln!("{}: {}", path.display(), j.outcome_line());
        }
        None => out!("{file}"),
    }
    Ok(if j.is_failure() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// A case file whose outcome is not the one it states.
struct Changed {
    path: PathBuf,
    expected: String,
    now: String,
}

fn review(dir: &Path) -> Result<ExitCode, CliError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "case"))
        .collect();
    paths.sort();
    let mut changed = vec![];
    for path in &paths {
        // A file that cannot be read or parsed gets its row; the files after it are still run.
        let (expected, now) =
            match read_text(path, MAX_CASE_FILE_BYTES).and_then(|t| CaseFile::parse(&t).map_err(|e| e.to_string())) {
                Err(e) => ("a case file".to_string(), format!("unreadable: {e}")),
                Ok(file) => {
                    let j = judge(&file.case);
                    let mut now = j.outcome_line();
                    let same = file.outcome.as_deref().map(outcome_kind) == Some(outcome_kind(&now));
                    if same && !j.is_failure() {
                        // A case keeps its outcome's kind and reason, not the figures after them.
                        now = file.outcome.clone().unwrap_or_default();
                    } else if j.is_failure() && same {
                        now = format!("{now} ({})", j.to_string().lines().next().unwrap_or_default());
                    }
                    (file.outcome.unwrap_or_else(|| "(no outcome line)".into()), now)
                }
            };
        if expected != now {
            changed.push(Changed { path: path.clone(), expected, now });
        }
    }
    for c in &changed {
        outln!("{}", c.path.display());
        out!("{}", side_by_side(&c.expected, &c.now));
    }
    outln!("{}, {} changed", plural(paths.len(), "case"), changed.len());
    Ok(if changed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `expected` and `now` in two columns, or one under the other when they do not fit in 120.
fn side_by_side(expected: &str, now: &str) -> String {
    let width = expected.chars().count().max("expected".len());
    if width + now.chars().count() + 6 <= 120 {
        format!("  {:<width$}  |  {}\n  {:<width$}  |  {}\n", "expected", "now", expected, now)
    } else {
        format!("  expected  {expected}\n  now       {now}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::side_by_side;

    #[test]
    fn short_outcomes_sit_side_by_side_and_long_ones_stack() {
        assert_eq!(
            side_by_side("accepted", "refused WrongOp at Ffn layer 0"),
            "  expected  |  now\n  accepted  |  refused WrongOp at Ffn layer 0\n"
        );
        let long = "x".repeat(100);
        assert!(side_by_side(&long, &long).starts_with("  expected  x"));
    }
}
