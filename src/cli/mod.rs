//! The command line: `graph`, `lower`, `run`, `check`, `verdict`, `corpus`, `explain` and `prove`.

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

mod args;
mod check;
mod corpus;
mod explain;
mod graph;
mod lower;
mod prove;
mod run;
mod verdict;

use std::process::ExitCode;

pub use args::{Cli, Command, ModelArgs};

/// Runs one command; what it prints goes to stdout, progress and timings to stderr.
pub fn main(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Graph(a) => graph::graph(a),
        Command::Lower(a) => lower::lower(a),
        Command::Run(a) => run::run(a),
        Command::Check(a) => check::check(a),
        Command::Verdict(a) => verdict::verdict(a),
        Command::Corpus(a) => corpus::corpus(a),
        Command::Explain(a) => explain::explain(a),
        Command::Prove(a) => prove::prove_cmd(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// An error of a command, as the user reads it.
pub type CliError = Box<dyn std::error::Error>;
