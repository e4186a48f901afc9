//! Runs the oracle over generated cases without libFuzzer: `cargo run --release --example gen_run
//! -- [CASES] [FIRST]`. Each case is drawn from 256 pseudo-random bytes of its index; statistics
//! print every 10,000 cases; each failure (and the first two inconclusive cases of each kind)
//! prints as a case file, ready for the corpus.

use std::collections::BTreeMap;
use std::time::Instant;

use stepcheck::r#gen::Case;
use stepcheck::r#gen::draw::measured_case_bytes;
use stepcheck::r#gen::file::CaseFile;
use stepcheck::r#gen::oracle::{Judgement, Stats, judge_drawn};

/// mimalloc, as the `stepcheck` binary has it (Cargo.toml's `mimalloc` feature says why).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // A build with the `planted` feature plants the bug `STEPCHECK_PLANT` names, and says so.
    #[cfg(feature = "planted")]
    match stepcheck::planted::from_env() {
        Ok(Some(bug)) => eprintln!("gen_run: the bug {bug:?} is planted (STEPCHECK_PLANT)"),
        Ok(None) => {}
        Err(e) => panic!("{e}"),
    }
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (cases, first) = (args.first().copied().unwrap_or(10_000), args.get(1).copied().unwrap_or(0));
    let mut stats = Stats::default();
    let mut failures_by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut inconclusive: BTreeMap<&str, usize> = BTreeMap::new();
    let mut reduced_accepted = 0;
    let t0 = Instant::now();
    for i in first..first + cases {
        let Some(drawn) = Case::draw(&measured_case_bytes(i)) else { continue };
        let case = drawn.case.clone();
        let j = judge_drawn(drawn);
        stats.record_at(&j, case.numerics);
        if matches!(j, Judgement::Agreed { .. } | Judgement::Inconclusive(..)) && case.numerics != Default::default() {
            reduced_accepted += 1;
        }
        if let Judgement::Inconclusive(why, _) = &j {
            let kind = why.kind();
            let n = inconclusive.entry(kind).or_default();
            *n += 1;
            if *n <= 2 {
                let file = CaseFile {
                    comment: vec![format!("case {i}: {j}")],
                    outcome: Some(j.outcome_line()),
                    case: case.clone(),
                };
                println!("{file}");
            }
        }
        if j.is_failure() {
            let kind = case.mutation.as_ref().map_or("none", |m| m.kind_name()).to_string();
            let n = failures_by_kind.entry(kind).or_default();
            *n += 1;
            if *n <= 3 {
                let file = CaseFile { comment: vec![format!("case {i}: {j}")], outcome: Some(j.outcome_line()), case };
                println!("{file}");
            }
        }
        if stats.cases % 10_000 == 0 {
            eprintln!("{stats} ({:.1?})", t0.elapsed());
        }
    }
    eprintln!("{stats} in {:.1?} ({:.0} µs a case)", t0.elapsed(), t0.elapsed().as_secs_f64() * 1e6 / cases as f64);
    eprintln!("failures by mutation kind: {failures_by_kind:?}");
    eprintln!("inconclusive: {inconclusive:?}, of {reduced_accepted} accepted at reduced storage");
    eprintln!("by numerics (compared, inconclusive): {:?}", stats.by_numerics);
}
