use clap::Parser;

/// The allocator of the binary: mimalloc, which the check's many small allocations favour
/// (Cargo.toml's `mimalloc` feature says why).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A build with the `planted` feature plants the bug `STEPCHECK_PLANT` names, and says so.
    #[cfg(feature = "planted")]
    match stepcheck::planted::from_env() {
        Ok(Some(bug)) => eprintln!("stepcheck: the bug {bug:?} is planted (STEPCHECK_PLANT)"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("stepcheck: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    stepcheck::cli::main(stepcheck::cli::Cli::parse())
}
