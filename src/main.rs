use clap::Parser;

fn main() -> std::process::ExitCode {
    stepcheck::cli::main(stepcheck::cli::Cli::parse())
}
