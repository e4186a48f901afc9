//! The command line: `graph`, `lower`, `run`, `check`, `verdict`, `corpus`, `explain` and `prove`.
//!
//! What a command answers goes to stdout; progress goes to stderr, as one updating line on a
//! terminal and as a plain line every few seconds otherwise (`progress`). A closed stdout (`stepcheck explain CASE | head -3`) ends the command
//! quietly with exit status 0: the reader has what it asked for, and no panic or error is shown.
//! Every size read from a flag is checked against its limit (`crate::limits`) while the flags are
//! parsed, before anything is allocated from it.

/// Writes to stdout, returning the error (a closed pipe ends the command quietly).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)?
    }};
}

/// Writes a line to stdout, returning the error (a closed pipe ends the command quietly).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

/// Writes a line to stderr, ignoring a closed stderr (`eprintln!` would panic on one).
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

mod against;
mod args;
mod bench;
mod check;
mod check_batch;
mod corpus;
mod explain;
mod explain_batch;
mod graph;
mod lower;
mod memory;
mod plural;
mod progress;
mod prove;
mod run;
mod table;
mod verdict;

use std::process::ExitCode;

pub use args::{Cli, ModelArgs, Subcommand, check_sizes};

/// Runs one command; what it prints goes to stdout, progress to stderr. A closed stdout ends it
/// with exit status 0; any other error is printed as `error: …` with exit status 2.
pub fn main(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Subcommand::Graph(a) => graph::graph(a),
        Subcommand::Lower(a) => lower::lower(a),
        Subcommand::Run(a) => run::run(a),
        Subcommand::Bench(a) => bench::bench(a),
        Subcommand::Check(a) if a.batch.is_some() => check_batch::check_batch(&a, a.batch.unwrap_or(1)),
        Subcommand::Check(a) => check::check(a),
        Subcommand::Verdict(a) => verdict::verdict(a),
        Subcommand::Corpus(a) => corpus::corpus(a),
        Subcommand::Explain(a) => explain::explain(a),
        Subcommand::Prove(a) => prove::prove_cmd(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Whether `e` is a write to a closed pipe.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// An error of a command, as the user reads it.
pub(crate) type CliError = Box<dyn std::error::Error>;
