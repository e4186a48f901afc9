//! `cargo fuzz run lower`: the target the project names.
//!
//! With the `gen` feature (once `stepcheck::gen` is in the tree; `r#gen` in edition 2024) it drives the library's generators
//! and oracle: bytes → `Case::draw` → `judge_drawn`, and a failed judgement is a crash whose message is the
//! judgement. Every 10,000 inputs it prints the running statistics to stderr.
//!
//! Without it, it fuzzes `lower_graph` on graphs read from the bytes as IR text, as the engine's
//! shim leaves them and as they are: the shim and the lowering never panic on any graph, and an
//! accepted program prints its listing.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[cfg(feature = "gen")]
mod generated {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{LazyLock, Mutex};

    use stepcheck::r#gen::Case;
    use stepcheck::r#gen::oracle::{Stats, judge_drawn};

    /// How many inputs pass between two statistics lines.
    const EVERY: u64 = 10_000;

    static INPUTS: AtomicU64 = AtomicU64::new(0);
    static STATS: LazyLock<Mutex<Stats>> = LazyLock::new(|| Mutex::new(Stats::default()));

    pub fn run(data: &[u8]) {
        let n = INPUTS.fetch_add(1, Ordering::Relaxed) + 1;
        let judgement = Case::draw(data).map(judge_drawn);
        {
            let mut stats = STATS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(j) = &judgement {
                stats.record(j);
            }
            if n % EVERY == 0 {
                eprintln!("after {n} inputs: {stats}");
            }
        }
        if let Some(j) = judgement {
            assert!(!j.is_failure(), "{j}");
        }
    }
}

#[cfg(not(feature = "gen"))]
mod generated {
    use stepcheck::engine::Numerics;
    use stepcheck::engine::lower::lower_graph;
    use stepcheck::engine::shim::EngineShim;
    use stepcheck::ir::parse_graph;

    pub fn run(data: &[u8]) {
        let Ok(graph) = parse_graph(&String::from_utf8_lossy(data)) else { return };
        for g in [EngineShim::default().prepare(&graph), graph] {
            if let Ok(program) = lower_graph(&g, Numerics::F32) {
                let _ = program.to_string();
            }
        }
    }
}

/// AddressSanitizer's options for this target, which ASan reads when it starts: record no stack for
/// each allocation (`malloc_context_size=0`). A case makes thousands of small allocations, and
/// recording their stacks took a seventh of the target's time (docs/PERFORMANCE.md); a
/// use-after-free or overflow still aborts the run, with a shorter report. `ASAN_OPTIONS` overrides it.
#[unsafe(no_mangle)]
pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
    c"malloc_context_size=0".as_ptr()
}

fuzz_target!(|data: &[u8]| generated::run(data));
