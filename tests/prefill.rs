//! The prefill, judged both ways: generated prompts of many lengths (one token, below, at and
//! across the chunk size) are proved to run every token's step on its own history's state and
//! checked against the reference's decode steps; each mutation modelled on a real prefill bug is
//! refuted by the proof at its token and layer, and is a disagreement of the check.

use stepcheck::check::{Comparison, Verdict};
use stepcheck::engine::program::prefill::Prefill;
use stepcheck::engine::{Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::model::{author::decode_step, presets, random::random_checkpoint};
use stepcheck::prefill::Mutation;
use stepcheck::prefill::check::{PrefillCase, check_prefill};
use stepcheck::prefill::prove::prove_prefill;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The chunk the generated prompts are cut into.
const CHUNK: usize = 4;

#[test]
fn prompts_of_every_length_around_the_chunk_are_proved_and_agree() -> Result<()> {
    for (preset, numerics) in [("tiny", Numerics::F32), ("tiny", Numerics::BF16), ("small", Numerics::F32)] {
        let spec = presets::preset(preset).ok_or("a preset")?;
        let authored = decode_step(&spec)?;
        let graph = EngineShim::default().prepare(&authored);
        let program = lower_graph(&graph, numerics)?;
        let ckpt = random_checkpoint(&spec, 7);
        for len in [1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 3] {
            let prefill = Prefill::chunked(len, CHUNK)?;
            let proof = prove_prefill(&program, &prefill);
            assert!(proof.is_proved(), "{preset} {numerics}, {len} tokens: {proof}");
            let case = PrefillCase::spread(len, spec.vocab);
            let v = check_prefill(&graph, &program, &ckpt, &prefill, &case)?;
            assert!(matches!(v, Verdict::Agree { .. }), "{preset} {numerics}, {len} tokens: {v}");
        }
    }
    Ok(())
}

#[test]
fn each_prefill_mutation_is_refuted_at_its_token_and_layer_and_disagrees() -> Result<()> {
    let spec = presets::preset("tiny").ok_or("a preset")?;
    let graph = EngineShim::default().prepare(&decode_step(&spec)?);
    let program = lower_graph(&graph, Numerics::F32)?;
    let ckpt = random_checkpoint(&spec, 7);
    let len = 2 * CHUNK + 2;
    let prefill = Prefill::chunked(len, CHUNK)?;
    let case = PrefillCase::spread(len, spec.vocab);
    for m in Mutation::ALL {
        let mutated = m.apply(&prefill).ok_or("a place for the mutation")?;
        let proof = prove_prefill(&program, &mutated);
        let at = proof.refuted_at().ok_or_else(|| format!("{}: {proof}", m.name()))?;
        // The token the mistake first changes, and whether it sits in a layer's state.
        let (token, layered) = match m {
            Mutation::MaskOffByOne => (0, true),
            Mutation::WindowNotCarried | Mutation::KeptFromWrongToken => (CHUNK, true),
            Mutation::PartialBlockDropped => (2 * CHUNK, false),
        };
        assert_eq!(at.token, Some(token), "{}: {proof}", m.name());
        assert_eq!(at.layer.is_some(), layered, "{}: {proof}", m.name());
        let v = check_prefill(&graph, &program, &ckpt, &mutated, &case)?;
        let Verdict::Disagree(w) = &v else { return Err(format!("{}: the check says {v}", m.name()).into()) };
        // The structure's witness is the worst value, at the mutated token or one that reads it.
        assert_eq!(w.stage, Comparison::Structure, "{}: {v}", m.name());
        assert!(w.step >= case.before.len() + token, "{}: {v}", m.name());
    }
    Ok(())
}
