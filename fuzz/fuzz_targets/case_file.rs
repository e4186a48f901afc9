//! Case-file text (`tests/corpus/*.case`): the reader never panics and never allocates from a size
//! it has not checked; every case it accepts has its step count and its spec's sizes under the
//! limits of `stepcheck::limits`. Run with a low `-rss_limit_mb` (.ci/run), so that an allocation
//! bomb is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::r#gen::file::CaseFile;
use stepcheck::limits::{MAX_CASE_VALUES, MAX_STEPS, check_spec};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(file) = CaseFile::parse(&text) else { return };
    let case = &file.case;
    assert!(case.steps <= MAX_STEPS, "an accepted case decodes {} steps", case.steps);
    if let Some(spec) = case.spec() {
        if let Err(e) = check_spec(spec, MAX_CASE_VALUES) {
            panic!("an accepted case's spec is over a limit: {e}");
        }
    }
    // What the oracle draws from the case before running it: bounded by the step count.
    assert_eq!(case.tokens().len(), case.steps);
});
