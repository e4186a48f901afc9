//! config.json text: the reader never panics, and every spec it accepts is authored into a step
//! graph that is well formed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::model::author::decode_step;
use stepcheck::model::config::spec_from_config_json;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(spec) = spec_from_config_json(&text, "fuzz") else { return };
    let graph = decode_step(&spec).unwrap_or_else(|e| panic!("an accepted config is not authored: {e}"));
    if let Err(e) = graph.validate() {
        panic!("the step graph of an accepted config is not well formed: {e}");
    }
});
