//! `cargo fuzz run lower`: the target the project names. It drives the library's generators and
//! oracle: bytes → `Case::draw` → `judge_drawn`, and a failed judgement is a crash whose message is
//! the judgement. Every 10,000 inputs, and at least every 30 seconds (so that a short run under a
//! sanitizer, which may not reach 10,000, still shows them), it prints the running statistics to
//! stderr, with the inputs judged per second since the target started.
//!
//! Built without AddressSanitizer (the throughput build CI fuzzes it in, fuzz/README.md), it
//! allocates with mimalloc, as the `stepcheck` binary does: a case makes thousands of small
//! allocations. Under ASan it keeps the system allocator, whose every allocation ASan watches.
#![no_main]
#![feature(cfg_sanitize)]

#[cfg(not(sanitize = "address"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use stepcheck::r#gen::Case;
use stepcheck::r#gen::oracle::{Stats, judge_drawn};

/// How many inputs pass between two statistics lines.
const EVERY: u64 = 10_000;
/// The longest time between two statistics lines, in seconds.
const AT_LEAST_EVERY: f64 = 30.0;

static INPUTS: AtomicU64 = AtomicU64::new(0);
static STATS: LazyLock<Mutex<Stats>> = LazyLock::new(|| Mutex::new(Stats::default()));
static START: LazyLock<Instant> = LazyLock::new(Instant::now);
/// When the last statistics line was printed (or the target started).
static PRINTED: LazyLock<Mutex<Instant>> = LazyLock::new(|| Mutex::new(*START));

fuzz_target!(|data: &[u8]| {
    let start = *START;
    let n = INPUTS.fetch_add(1, Ordering::Relaxed) + 1;
    let judgement = Case::draw(data).map(judge_drawn);
    {
        let mut stats = STATS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(j) = &judgement {
            stats.record(j);
        }
        let mut printed = PRINTED.lock().unwrap_or_else(|e| e.into_inner());
        if n % EVERY == 0 || printed.elapsed().as_secs_f64() >= AT_LEAST_EVERY {
            let rate = n as f64 / start.elapsed().as_secs_f64();
            eprintln!("after {n} inputs ({rate:.0} exec/s): {stats}");
            *printed = Instant::now();
        }
    }
    if let Some(j) = judgement {
        assert!(!j.is_failure(), "{j}");
    }
});
