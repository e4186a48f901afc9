//! The command line: `graph`, `lower`, `run`, `check`, `corpus` and `explain`.

mod args;
mod check;
mod corpus;
mod explain;
mod graph;
mod lower;
mod run;

use std::process::ExitCode;

pub use args::{Cli, Command, ModelArgs};

/// Runs one command; what it prints goes to stdout, progress and timings to stderr.
pub fn main(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Graph(a) => graph::graph(a),
        Command::Lower(a) => lower::lower(a),
        Command::Run(a) => run::run(a),
        Command::Check(a) => check::check(a),
        Command::Corpus(a) => corpus::corpus(a),
        Command::Explain(a) => explain::explain(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// An error of a command, as the user reads it.
pub type CliError = Box<dyn std::error::Error>;
