//! `stepcheck explain` of a batched case file (`tests/corpus_batch/*.case`), apart from the
//! single-sequence explain so that the two can change separately.

use std::process::ExitCode;

use super::CliError;
use super::plural::plural;

/// `stepcheck explain` of a batched case (`tests/corpus_batch/*.case`): the schedule, the slot plan
/// (mutated), the table step × slot, the outcome validation and the symbolic run predict, the
/// proof (the one-sequence step and the slot induction), and the interpreters' verdict. Exits 1 when either differs from the file's `expect`.
pub(crate) fn explain_batch(file: &crate::batch::r#gen::CaseFile) -> Result<ExitCode, CliError> {
    use crate::batch::r#gen::{expected, judge, pool_of};
    use crate::engine::{Numerics, lower::lower_graph, shim::EngineShim};
    use crate::model::{author::decode_step, presets, random::random_checkpoint};
    let spec = presets::preset(&file.preset).ok_or_else(|| format!("no preset {}", file.preset))?;
    let authored = decode_step(&spec)?;
    let graph = EngineShim::default().prepare(&authored);
    let program = lower_graph(&graph, Numerics::F32).map_err(|e| e.to_string())?;
    let case = file.case();
    super::explain::section("schedule")?;
    outln!("pool: {}, batch {}, {}", plural(case.slots, "slot"), case.max_batch, plural(case.snapshots, "snapshot"));
    print!("{}", case.schedule);
    let mut pool = pool_of(&case, &program).map_err(|e| e.to_string())?;
    if let Ok(mut lowered) = crate::batch::plan::lower_schedule(&case.schedule, &pool) {
        if let Some(m) = &case.mutation {
            outln!("mutation {m}");
            m.apply(&mut pool, &mut lowered);
        }
        super::explain::section("slot plan")?;
        print!("{}", lowered.plan);
        super::explain::section("step × slot")?;
        print!("{}", crate::batch::table::table(&pool, &lowered));
        outln!("predicted (validation, symbolic run): {}", expected(&pool, &lowered));
        super::explain::section("proof")?;
        match lowered.plan.validate(&pool) {
            Ok(()) => outln!("{}", crate::batch::prove::prove_batch(&authored, &graph, &pool, &lowered)),
            Err(e) => outln!("nothing to prove: the plan is refused ({})", e.name()),
        }
    }
    let j = judge(&graph, &program, &random_checkpoint(&spec, 7), &case).map_err(|e| e.to_string())?;
    super::explain::section("verdict")?;
    outln!("{}", j.verdict);
    outln!("expect {}", file.expect);
    let ok = j.actual.to_string() == file.expect && (case.mutation.is_none() || j.expected.to_string() == file.expect);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
