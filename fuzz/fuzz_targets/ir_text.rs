//! IR text: the parser never panics; a graph it reads prints to a listing that reads back to the same
//! listing; and validating it never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::ir::parse_graph;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(graph) = parse_graph(&text) else { return };
    let printed = graph.to_string();
    let again = parse_graph(&printed).unwrap_or_else(|e| panic!("a printed graph does not parse: {e}\n{printed}"));
    assert_eq!(again.to_string(), printed, "print → parse → print is not the identity");
    let _ = graph.validate();
});
