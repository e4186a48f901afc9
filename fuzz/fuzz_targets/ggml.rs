//! llama.cpp's recorded compute graph (`reference/record_llama_graph.py`'s JSON): the reader, the
//! ops' shape rules and the translation into the IR never panic and never allocate from a size
//! they have not checked, whatever the bytes; what they cannot follow is a `GraphError`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(rec) = ggml::Recording::from_json(data) else { return };
    if ggml::ops::check_shapes(&rec).is_ok() {
        let _ = ggml::import(&rec, "fuzzed");
    }
});
