//! IR text: the parser never panics; a graph it reads prints to a listing that reads back to the same
//! listing; and validating it, the engine's shim and `lower_graph` (on the graph as the shim leaves
//! it and as it is) never panic, and an accepted program prints its listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::engine::Numerics;
use stepcheck::engine::lower::lower_graph;
use stepcheck::engine::shim::EngineShim;
use stepcheck::ir::parse_graph;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(graph) = parse_graph(&text) else { return };
    let printed = graph.to_string();
    let again = parse_graph(&printed).unwrap_or_else(|e| panic!("a printed graph does not parse: {e}\n{printed}"));
    assert_eq!(again.to_string(), printed, "print → parse → print is not the identity");
    let _ = graph.validate();
    for g in [EngineShim::default().prepare(&graph), graph] {
        if let Ok(program) = lower_graph(&g, Numerics::F32) {
            let _ = program.to_string();
        }
    }
});
