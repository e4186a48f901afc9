//! The command line's parsing of flags and sizes: the bytes, split at NUL bytes, are the arguments
//! after `stepcheck`. Parsing never panics, and a command line it accepts passes its size checks
//! (`stepcheck::cli::check_sizes`: a preset's memory against `--max-gib`) without a panic or an
//! allocation from a size; no command is run and no file is read. Run with a low `-rss_limit_mb`
//! (.ci/run), so that an allocation bomb is a crash.
#![no_main]

use clap::Parser as _;
use libfuzzer_sys::fuzz_target;
use stepcheck::cli::{Cli, Subcommand, check_sizes};
use stepcheck::limits::MAX_STEPS;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args = std::iter::once("stepcheck").chain(text.split('\0'));
    let Ok(cli) = Cli::try_parse_from(args) else { return };
    match &cli.command {
        Subcommand::Check(a) => assert!(a.steps <= MAX_STEPS, "--steps {} accepted", a.steps),
        Subcommand::Run(a) => assert!(a.tokens.0.len() <= MAX_STEPS, "{} tokens accepted", a.tokens.0.len()),
        _ => {}
    }
    let _ = check_sizes(&cli);
});
