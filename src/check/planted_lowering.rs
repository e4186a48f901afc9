//! The lowering's planted bugs against the gate: an advance written before the layers is refuted by
//! the prover with the Commands named; a sigmoid gate swapped in the lowering and, to match, in the
//! prover's meaning is proved (by design) and caught by the numeric check alone.

use crate::check::{Comparison, Verdict, compare};
use crate::engine::{BlockKind, Command, Numerics, Program, lower::lower_graph, shim::EngineShim};
use crate::ir::Graph;
use crate::model::{author::decode_step, presets, random::random_checkpoint};
use crate::planted::{self, Bug};
use crate::prove::{ProofVerdict, prove};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The tiny preset's authored step, its fused graph and its program, lowered with whatever bug is
/// planted on this thread.
fn tiny() -> Result<(Graph, Graph, Program)> {
    let spec = presets::preset("tiny").ok_or("no tiny preset")?;
    let authored = decode_step(&spec)?;
    let fused = EngineShim::default().prepare(&authored);
    let program = lower_graph(&fused, Numerics::F32)?;
    Ok((authored, fused, program))
}

/// The numeric check of `program` against `fused` on the tiny preset's seeded checkpoint, over
/// five steps from position 0, as a verdict or the engine's refusal in words.
fn numeric(fused: &Graph, program: &Program) -> Result<std::result::Result<Verdict, String>> {
    let spec = presets::preset("tiny").ok_or("no tiny preset")?;
    Ok(compare(fused, program, &random_checkpoint(&spec, 1), &[3, 1, 4, 1, 5]).map_err(|e| e.to_string()))
}

#[test]
fn an_advance_written_before_the_layers_is_refuted_naming_the_advance_and_an_attention() -> Result<()> {
    let (authored, fused, program) = tiny()?;
    let clean = prove(&authored, &fused, &program);
    assert!(clean.is_proved(), "not planted: {clean}");

    let (authored, fused, program) = planted::with(Bug::LowerAdvanceFirst, tiny)?;
    let kinds: Vec<BlockKind> = program.blocks.iter().map(|b| b.kind).collect();
    assert_eq!(kinds[..2], [BlockKind::Embedding, BlockKind::Advance], "the bug is planted");
    assert_eq!(kinds.iter().filter(|&&k| k == BlockKind::Advance).count(), 1, "one advance");
    let v = prove(&authored, &fused, &program);
    let ProofVerdict::Refuted(r) = &v else { panic!("an advance before the layers is not refuted: {v}") };
    assert!(r.why.contains("different positions"), "{v}");
    let shown = v.to_string();
    assert!(shown.contains("block 1 (advance) command 0 (advance)"), "the advance is not named: {shown}");
    assert!(shown.contains("(layer 0 attention block) command 3 (attention)"), "the attention is not named: {shown}");

    // The engine runs it at the wrong position until its caches have no room: with capacity as many
    // positions as steps, the last step's attention is refused.
    let clean = numeric(&fused, &tiny()?.2)?;
    assert!(matches!(clean, Ok(Verdict::Agree { .. })), "not planted: {clean:?}");
    let planted = numeric(&fused, &program)?;
    if std::env::var("SHOW").is_ok() {
        println!("{v}\nthe numeric check: {planted:?}");
    }
    assert!(!matches!(planted, Ok(Verdict::Agree { .. } | Verdict::Inconclusive(_))), "{planted:?}");
    Ok(())
}

#[test]
fn a_prover_meaning_that_matches_a_swapped_gate_is_proved_and_the_numeric_check_disagrees() -> Result<()> {
    let (authored, fused, program) = tiny()?;
    assert!(prove(&authored, &fused, &program).is_proved());
    assert!(matches!(numeric(&fused, &program)?, Ok(Verdict::Agree { .. })));

    // Planted in both the lowering and the prover's meaning of `SigmoidGate`: the two wrong in the
    // same way prove each other, and only the engine's run against the reference tells.
    let (v, program) = planted::with(Bug::ProverMatchesSwappedGate, || -> Result<_> {
        let (authored, fused, program) = tiny()?;
        Ok((prove(&authored, &fused, &program), program))
    })?;
    let gates = |p: &Program| -> Vec<_> {
        let commands = p.blocks.iter().flat_map(|b| &b.commands);
        commands
            .filter_map(|c| match c {
                Command::SigmoidGate { x, gate, .. } => Some((*x, *gate)),
                _ => None,
            })
            .collect()
    };
    let clean: Vec<_> = gates(&tiny()?.2).into_iter().map(|(x, gate)| (gate, x)).collect();
    assert!(!clean.is_empty() && gates(&program) == clean, "the lowering's half of the bug is planted");
    assert!(v.is_proved(), "a prover meaning written to match the lowering proves it: {v}");
    let planted = numeric(&fused, &program)?;
    assert!(matches!(&planted, Ok(Verdict::Disagree(w)) if w.stage == Comparison::Structure), "{planted:?}");
    Ok(())
}
