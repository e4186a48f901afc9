use clap::Parser;

/// The allocator of the binary: mimalloc, which the check's many small allocations favour
/// (Cargo.toml's `mimalloc` feature says why).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stepcheck::cli::main(stepcheck::cli::Cli::parse())
}
