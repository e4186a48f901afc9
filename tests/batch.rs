//! Batched decode with state slots, as a specification: a schedule is refused by name or every
//! sequence computes what it computes alone; every batch mutation modelled on a real engine bug is
//! refused by name or caught with a witness naming the sequence and step the symbolic run predicts.

use std::collections::{BTreeMap, BTreeSet};

use stepcheck::batch::check::{BatchVerdict, check};
use stepcheck::batch::r#gen::{
    BatchCase, BatchOutcome, CAPACITY, CHECK_SCHEDULES, CHECK_SNAPSHOTS, CaseFile, EVENT_KINDS, EventKind, Judged,
    KINDS, Mutation, MutationKind, check_cases, draw_case, draw_covering, expected, judge, kinds_of,
};
use stepcheck::batch::plan::lower_schedule;
use stepcheck::batch::prove::SlotVerdict;
use stepcheck::batch::schedule::Schedule;
use stepcheck::batch::{BatchProgram, StateIndex};
use stepcheck::check::Comparison;
use stepcheck::engine::run::{BatchRow, EngineRunner, RunnerState, StateValue};
use stepcheck::engine::{EngineState, KquantInputs, Numerics, Program, Storage, lower::lower_graph, shim::EngineShim};
use stepcheck::formats::gguf::GgmlType;
use stepcheck::r#gen::draw::{Draw, seeded_bytes};
use stepcheck::ir::Graph;
use stepcheck::model::random::{Weights, random_checkpoint_as};
use stepcheck::model::{Checkpoint, author::decode_step, presets, random::random_checkpoint};
use stepcheck::prove::prove;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The tiny preset's fused graph, its program (at f32) and a random checkpoint.
fn tiny() -> Result<(Graph, Program, Checkpoint)> {
    tiny_at(Numerics::F32)
}

/// The tiny preset's fused graph, its program at `numerics` and a random checkpoint.
fn tiny_at(numerics: Numerics) -> Result<(Graph, Program, Checkpoint)> {
    let spec = presets::preset("tiny").ok_or("no tiny preset")?;
    let graph = EngineShim::default().prepare(&decode_step(&spec)?);
    let program = lower_graph(&graph, numerics)?;
    Ok((graph, program, random_checkpoint(&spec, 7)))
}

/// The reduced numerics the batch is judged at besides f32: activations and KV cache in bf16, and
/// in f16 (the recurrent state stays f32, as lowering requires).
const REDUCED: [Numerics; 2] =
    [Numerics::BF16, Numerics { activations: Storage::F16, kv_cache: Storage::F16, ..Numerics::F32 }];

/// The number of an environment variable's generated cases, else `default`.
fn count(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The number of generated cases at f32: `STEPCHECK_BATCH_CASES`, else 3000.
fn cases() -> usize {
    count("STEPCHECK_BATCH_CASES", 3000)
}

/// The number of generated cases at each reduced numerics: `STEPCHECK_BATCH_REDUCED_CASES`, else
/// 1500.
fn reduced_cases() -> usize {
    count("STEPCHECK_BATCH_REDUCED_CASES", 1500)
}

/// The verdict of `schedule` on a pool of `(slots, batch, snapshots)` at `numerics`.
fn verdict_at(
    numerics: Numerics,
    schedule: &str,
    (slots, batch, snapshots): (usize, usize, usize),
) -> Result<BatchVerdict> {
    let (graph, program, checkpoint) = tiny_at(numerics)?;
    let pool = BatchProgram::new(program, slots, batch, snapshots, 16)?;
    Ok(check(&graph, &pool, &checkpoint, &schedule.parse::<Schedule>()?)?)
}

/// The verdict of `schedule` on a pool of `(slots, batch, snapshots)` at f32.
fn verdict(schedule: &str, pool: (usize, usize, usize)) -> Result<BatchVerdict> {
    verdict_at(Numerics::F32, schedule, pool)
}

#[test]
fn a_schedule_the_pool_cannot_run_is_refused_by_name() -> Result<()> {
    // (schedule, pool, the error's name)
    let cases = [
        ("admit s0 @0\nadmit s1 @0", (2, 1, 1), "slot-in-use"),
        ("admit s0 @2", (2, 1, 1), "slot-out-of-range"),
        ("admit s0 @0\nfinish s0\nadmit s0 @1", (2, 1, 1), "seq-admitted-twice"),
        ("decode s0=1", (2, 1, 1), "seq-not-live"),
        ("admit s0 @0\nfinish s0\ndecode s0=1", (2, 1, 1), "seq-not-live"),
        ("admit s0 @0\ndecode s0=1 s0=2", (2, 2, 1), "seq-twice-in-step"),
        ("admit s0 @0\nadmit s1 @1\ndecode s0=1 s1=2", (2, 1, 1), "batch-too-large"),
        ("admit s0 @0\ndecode s0=1\nrollback s0 0", (2, 1, 2), "empty-rollback"),
        ("admit s0 @0\ndecode s0=1\ndecode s0=2\nrollback s0 2", (2, 1, 1), "rollback-beyond-snapshots"),
        ("admit s0 @0\ndecode s0=1\nrollback s0 1\nrollback s0 1", (2, 1, 2), "rollback-beyond-snapshots"),
        ("admit s0 @0\nfork s0 -> s1 @0", (2, 1, 1), "slot-in-use"),
        // A prefill keeps no snapshot per token: nothing before it can be rolled back to.
        ("admit s0 @0\ndecode s0=1\nprefill s0 2,3\nrollback s0 1", (2, 1, 2), "rollback-beyond-snapshots"),
        ("admit s0 @0\nprefill s0 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", (2, 1, 1), "capacity-exceeded"),
        ("prefill s0 1,2", (2, 1, 1), "seq-not-live"),
    ];
    for (schedule, pool, name) in cases {
        match verdict(schedule, pool)? {
            BatchVerdict::Refused(e) => assert_eq!(e.name(), name, "{schedule}: {e}"),
            v => panic!("{schedule}: expected {name}, got {v}"),
        }
    }
    Ok(())
}

#[test]
fn every_sequence_computes_what_it_computes_alone() -> Result<()> {
    // (schedule, pool): slot reuse, interleaving, a partial batch, a fork, rollbacks
    let cases = [
        ("admit s0 @1\ndecode s0=3\ndecode s0=5\n", (2, 1, 1)),
        (
            "admit s0 @0\nadmit s1 @2\ndecode s0=3 s1=9\nfinish s0\nadmit s2 @0\ndecode s2=4 s1=1\ndecode s1=8\n",
            (3, 2, 1),
        ),
        ("admit s0 @0\ndecode s0=3\nfork s0 -> s1 @1\ndecode s1=7 s0=2\ndecode s1=1\n", (2, 2, 1)),
        ("admit s0 @0\ndecode s0=3\ndecode s0=4\ndecode s0=5\nrollback s0 2\ndecode s0=6\n", (2, 1, 3)),
        ("admit s0 @0\ndecode s0=3\nfork s0 -> s1 @1\ndecode s1=4\nrollback s1 2\ndecode s1=9 s0=9\n", (2, 2, 2)),
        // Prefills: a prompt admitted, after a fork, after a rollback, across chunk boundaries,
        // each sequence then decoding beside the others.
        ("admit s0 @0\nprefill s0 3,1,4,1,5,9\ndecode s0=2\n", (2, 1, 1)),
        ("admit s0 @0\ndecode s0=3\nfork s0 -> s1 @1\nprefill s1 7,7,2,9,1\ndecode s1=4 s0=5\n", (2, 2, 1)),
        ("admit s0 @0\ndecode s0=3\ndecode s0=4\nrollback s0 1\nprefill s0 8,6,4,2\ndecode s0=6\n", (2, 1, 2)),
        ("admit s0 @1\nprefill s0 5\nfinish s0\nadmit s1 @1\nprefill s1 1,2,3,4,5,6,7,8,9\ndecode s1=2\n", (2, 1, 1)),
    ];
    for numerics in [Numerics::F32].into_iter().chain(REDUCED) {
        for (schedule, pool) in cases {
            let v = verdict_at(numerics, schedule, pool)?;
            assert!(matches!(v, BatchVerdict::Agree { .. }), "{numerics}: {schedule}: {v}");
        }
    }
    Ok(())
}

/// A preset's fused graph, its program at f32 and a random checkpoint whose matrices are stored
/// as `ty` (those whose rows are not whole blocks of it stay F32).
fn preset_in(name: &str, ty: GgmlType) -> Result<(Graph, Program, Checkpoint)> {
    let spec = presets::preset(name).ok_or("no such preset")?;
    let graph = EngineShim::default().prepare(&decode_step(&spec)?);
    let program = lower_graph(&graph, Numerics::F32)?;
    Ok((graph, program, random_checkpoint_as(&spec, 7, Weights(ty))?))
}

/// (preset, stored type): every type with a kernel of its own, on a preset whose rows are whole
/// blocks of it (`small`'s 256 and 768 for the k-quants).
const STORED: [(&str, GgmlType); 6] = [
    ("tiny", GgmlType::F16),
    ("tiny", GgmlType::BF16),
    ("tiny", GgmlType::Q8_0),
    ("small", GgmlType::Q4_K),
    ("small", GgmlType::Q5_K),
    ("small", GgmlType::Q6_K),
];

#[test]
fn every_sequence_computes_what_it_computes_alone_in_every_stored_type() -> Result<()> {
    // The batched check's last stage runs the batch through each type's kernels (`step_batch`)
    // and requires the values of its rows stepped one after another, to the bit.
    let schedule = "admit s0 @0\nadmit s1 @1\nadmit s2 @2\ndecode s0=3 s1=9 s2=4\nfork s0 -> s3 @3\n\
                    decode s3=7 s0=2 s1=1 s2=5\nrollback s1 1\ndecode s1=8 s3=6\n";
    for (preset, ty) in STORED {
        let (graph, program, checkpoint) = preset_in(preset, ty)?;
        assert!(checkpoint.tensors.values().any(|t| t.ty() == ty), "{preset} holds {ty} matrices");
        // The k-quants also with their inputs quantized to Q8_K, which their kernels then run.
        let quantized = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
            .then(|| lower_graph(&graph, Numerics::F32.with_kquant_inputs(KquantInputs::Q8K)))
            .transpose()?;
        for program in std::iter::once(program).chain(quantized) {
            let numerics = program.numerics;
            let pool = BatchProgram::new(program, 4, 4, 2, 16)?;
            let v = check(&graph, &pool, &checkpoint, &schedule.parse::<Schedule>()?)?;
            assert!(matches!(v, BatchVerdict::Agree { .. }), "{preset} in {ty} at {numerics}: {v}");
        }
    }
    Ok(())
}

#[test]
fn the_batched_program_reads_back_from_json() -> Result<()> {
    let (_, program, _) = tiny()?;
    let mut pool = BatchProgram::new(program, 4, 2, 3, 16)?;
    pool.conv_index = StateIndex::Row;
    let back: BatchProgram = serde_json::from_str(&serde_json::to_string(&pool)?)?;
    assert_eq!(back, pool);
    assert_eq!(pool.slot_state_name(stepcheck::engine::StateRef(0), 3).as_deref(), Some("l0.kcache@3"));
    Ok(())
}

#[test]
fn a_pool_without_room_is_refused_by_name() -> Result<()> {
    let (_, program, _) = tiny()?;
    // (slots, batch, capacity, name)
    let cases = [(0, 1, 4, "no-slots"), (2, 0, 4, "batch-size"), (2, 3, 4, "batch-size"), (2, 2, 0, "no-capacity")];
    for (slots, batch, capacity, name) in cases {
        let e = BatchProgram::new(program.clone(), slots, batch, 1, capacity).err();
        assert_eq!(e.map(|e| e.name()), Some(name), "{slots} slots, batch {batch}");
    }
    Ok(())
}

/// The outcome of a judged case as the tally counts it: `refused <name>`, or the slot proof's word
/// and the interpreters' (`refuted/witness`, `proved/agree`, `inconclusive/witness`, …).
fn label(j: &Judged) -> String {
    let check = match &j.actual {
        BatchOutcome::Refused(name) => return format!("refused {name}"),
        BatchOutcome::Agree => "agree",
        BatchOutcome::Disagree { .. } => "witness",
        BatchOutcome::Inconclusive => "inconclusive",
    };
    format!("{}/{check}", j.proof.as_ref().map_or("unproved", |p| p.word()))
}

/// What each mutation kind must come to over the generated cases, as `label`s: every outcome it
/// may have (a refusal by name; the slot proof's verdict with the interpreters'), and the outcomes
/// it must have at least once. A kind must occur; no kind may be proved and caught by the check,
/// or refuted and agreed with.
const KIND_OUTCOMES: [(MutationKind, &[&str], &[&str]); 9] = [
    (
        MutationKind::SlotOffByOne,
        &[
            "refused reads-unclaimed-slot",
            "refused reads-freed-slot",
            "refused slot-twice-in-step",
            "refused restore-beyond-snapshots",
            "refuted/witness",
            "proved/agree",
        ],
        &["refuted/witness"],
    ),
    (MutationKind::ResetSkipped, &["refuted/witness", "proved/agree"], &["refuted/witness"]),
    (MutationKind::ReadFreedSlot, &["refused reads-freed-slot"], &["refused reads-freed-slot"]),
    (MutationKind::ForkShares, &["refuted/witness", "proved/agree"], &["refuted/witness"]),
    (
        MutationKind::ForkSkipsCopy,
        &[
            "refused restore-beyond-snapshots",
            "refuted/witness",
            "inconclusive/witness",
            "inconclusive/agree",
            "proved/agree",
        ],
        &["refuted/witness", "inconclusive/witness"],
    ),
    (
        MutationKind::RollbackWrongSnapshot,
        &["refused restore-beyond-snapshots", "refuted/witness", "proved/agree"],
        &["refuted/witness"],
    ),
    (
        MutationKind::PaddingWrites,
        &[
            "refused reads-unclaimed-slot",
            "refused reads-freed-slot",
            "refused slot-twice-in-step",
            "refuted/witness",
            "proved/agree",
        ],
        &["refuted/witness"],
    ),
    (
        MutationKind::ConvByRow,
        &["refuted/witness", "inconclusive/witness", "inconclusive/agree", "proved/agree"],
        &["refuted/witness"],
    ),
    (MutationKind::ClaimLiveSlot, &["refused claim-of-live-slot"], &["refused claim-of-live-slot"]),
];

#[test]
fn generated_schedules_and_mutations_get_the_outcomes_they_must_have() -> Result<()> {
    generated(Numerics::F32, 0..cases() as u64)
}

/// The same at reduced storage, on other seeds (the draw does not depend on the numerics, so the
/// f32 test's seeds would repeat its schedules): the structure is judged exactly and the numerics
/// against the engine's shadow, so every kind must come to exactly what it comes to at f32.
#[test]
fn generated_schedules_and_mutations_get_the_outcomes_they_must_have_at_reduced_storage() -> Result<()> {
    for (i, numerics) in REDUCED.into_iter().enumerate() {
        let first = 1_000_000 * (i as u64 + 1);
        generated(numerics, first..first + reduced_cases() as u64)?;
    }
    Ok(())
}

/// Judges the generated cases of `seeds` on the tiny preset at `numerics`: every case gets exactly
/// the outcome validation and the symbolic run predict, the proof and the interpreters never
/// contradict each other, and every mutation kind gets only outcomes it may have and each it must.
fn generated(numerics: Numerics, seeds: std::ops::Range<u64>) -> Result<()> {
    let (graph, program, checkpoint) = tiny_at(numerics)?;
    let spec = presets::preset("tiny").ok_or("no tiny preset")?;
    let n = seeds.end - seeds.start;
    // The one-sequence step is proved once: it is the same program in every slot.
    let step = prove(&decode_step(&spec)?, &graph, &program);
    assert!(step.is_proved(), "{numerics}: {step}");
    let mut tally: BTreeMap<(Option<MutationKind>, String), usize> = BTreeMap::new();
    for seed in seeds {
        let bytes = seeded_bytes(seed, 256);
        let case: BatchCase = draw_case(&bytes, &program);
        let j = judge(&graph, &program, &checkpoint, &case)?;
        let what = || {
            format!(
                "{numerics}: seed {seed}, mutation {:?}\n{}verdict: {}",
                case.mutation.map(|m| m.to_string()),
                case.schedule,
                j.verdict
            )
        };
        // The interpreters give exactly the outcome validation and the symbolic run predict: a
        // witness names the sequence and the step where it first reads a state not its own.
        assert_eq!(j.actual, j.expected, "{}", what());
        if case.mutation.is_none() {
            let want = case.refusal.map_or(BatchOutcome::Agree, BatchOutcome::Refused);
            assert_eq!(j.actual, want, "{numerics}: seed {seed}: an unmutated schedule\n{}", case.schedule);
            if case.refusal.is_none() {
                assert!(matches!(j.proof, Some(SlotVerdict::Proved { .. })), "{}: {:?}", what(), j.proof);
            }
        }
        if let (BatchOutcome::Disagree { seq, step }, BatchVerdict::Disagree(w)) = (&j.actual, &j.verdict) {
            assert_eq!(
                (w.seq, w.step),
                (*seq, *step),
                "{numerics}: seed {seed}: the witness names the sequence and step"
            );
            // A state read from the wrong place is a wrong computation, which the exact run shows
            // whatever the storage: never a matter of the numerics' tolerance.
            assert_eq!(w.stage, Comparison::Structure, "{}", what());
        }
        // The proof and the interpreters never contradict each other: a proved plan agrees; a
        // refuted one is caught, at the proof's sequence and step unless an undecided difference
        // came first.
        match &j.proof {
            Some(SlotVerdict::Proved { .. }) => assert_eq!(j.actual, BatchOutcome::Agree, "proved: {}", what()),
            Some(p @ SlotVerdict::Refuted { undecided_before, .. }) => {
                assert!(matches!(j.actual, BatchOutcome::Disagree { .. }), "refuted, not caught: {p}\n{}", what());
                if !undecided_before {
                    let (seq, step) = p.refuted_at().ok_or("a refutation names where")?;
                    assert_eq!(j.actual, BatchOutcome::Disagree { seq, step }, "{p}\n{}", what());
                }
            }
            Some(SlotVerdict::Inconclusive { .. }) => {}
            None => assert!(matches!(j.actual, BatchOutcome::Refused(_)), "unproved: {}", what()),
        }
        *tally.entry((case.mutation.map(|m| m.kind()), label(&j))).or_default() += 1;
    }
    eprintln!("{numerics}, {n} cases: {tally:?}");
    assert_eq!(KIND_OUTCOMES.map(|k| k.0), KINDS, "every kind has its expected outcomes");
    for (kind, allowed, must) in KIND_OUTCOMES {
        let seen: Vec<(&str, usize)> =
            tally.iter().filter(|((m, _), _)| *m == Some(kind)).map(|((_, l), n)| (l.as_str(), *n)).collect();
        assert!(!seen.is_empty(), "{numerics}: {} never drawn in {n} cases", kind.name());
        for (l, _) in &seen {
            assert!(allowed.contains(l), "{numerics}: {}: outcome `{l}` is not one it may have: {seen:?}", kind.name());
        }
        for m in must {
            assert!(
                seen.iter().any(|(l, _)| l == m),
                "{numerics}: {}: never `{m}` in {n} cases: {seen:?}",
                kind.name()
            );
        }
    }
    assert!(tally.get(&(None, "proved/agree".into())).is_some_and(|&n| n > 0), "{numerics}: no clean schedule proved");
    assert!(
        tally.contains_key(&(None, "refused rollback-beyond-snapshots".into())),
        "{numerics}: no rollback past the snapshots drawn"
    );
    Ok(())
}

#[test]
fn a_mutation_names_its_site_and_reads_back() -> Result<()> {
    for text in ["slot-off-by-one op=3 row=1", "read-freed-slot op=7 row=0 slot=2", "conv-by-row", "fork-shares op=4"] {
        let m: Mutation = text.parse()?;
        assert_eq!(m.to_string(), text);
    }
    assert!("conv-by-row op=1".parse::<Mutation>().is_err());
    Ok(())
}

/// `check --batch`'s generator: every schedule it draws holds every event kind its pool allows,
/// as `kinds_of` counts them, and is one the pool runs and the symbolic run proves isolated, on
/// pools of 1 to 6 slots and vocabularies of 1 token to the 0.8B's.
#[test]
fn covering_schedules_hold_every_kind_the_pool_allows_and_run() -> Result<()> {
    let (_, program, _) = tiny()?;
    let mut sizes = (usize::MAX, 0);
    for n in 1..=6 {
        let pool = BatchProgram::new(program.clone(), n, n, CHECK_SNAPSHOTS, CAPACITY)?;
        let want: BTreeSet<EventKind> = EVENT_KINDS.into_iter().filter(|k| k.possible(n, n, CHECK_SNAPSHOTS)).collect();
        for vocab in [1, 2, 97, 248_320] {
            for seed in 0..200 {
                let case = draw_covering(&mut Draw::new(&seeded_bytes(seed, 1024)), n, n, CHECK_SNAPSHOTS, vocab);
                let at = format!("{n} slots, vocab {vocab}, seed {seed}:\n{}", case.schedule);
                let kinds = kinds_of(&case.schedule, n);
                assert!(want.is_subset(&kinds), "{at}holds {kinds:?}");
                let lowered = lower_schedule(&case.schedule, &pool).map_err(|e| format!("{at}{e}"))?;
                assert_eq!(expected(&pool, &lowered), BatchOutcome::Agree, "{at}");
                sizes = (sizes.0.min(case.schedule.events.len()), sizes.1.max(case.schedule.events.len()));
            }
        }
    }
    assert!(sizes.1 <= 40, "{sizes:?} events");
    // `check --batch` runs `CHECK_SCHEDULES` of them, on the seeds from `--seed`.
    let cases = check_cases(5, 3, 97);
    assert_eq!(cases.iter().map(|c| c.0).collect::<Vec<_>>(), (5..5 + CHECK_SCHEDULES).collect::<Vec<_>>());
    Ok(())
}

/// A kind counts only in the form in which a slot bug shows: a reuse of a slot left holding a
/// state, a fork of a state no other slot holds, a rollback, each followed by a decode of the
/// sequence; a partial batch is a decode of fewer rows than the batch.
#[test]
fn a_kind_counts_only_where_a_slot_bug_would_show() -> Result<()> {
    use EventKind::*;
    let kinds = |text: &str, max_batch: usize| -> Result<BTreeSet<EventKind>> {
        Ok(kinds_of(&text.parse::<Schedule>()?, max_batch))
    };
    let reuse = "admit s0 @0\ndecode s0=1\nfinish s0\nadmit s1 @0\ndecode s1=2\n";
    assert_eq!(kinds(reuse, 1)?, [Admit, Decode, Finish, Reuse].into());
    assert!(kinds(reuse, 2)?.contains(&Partial));
    // The old sequence never decoded: its slot holds the start state, a skipped reset changes nothing.
    assert!(!kinds("admit s0 @0\nfinish s0\nadmit s1 @0\ndecode s1=2\n", 1)?.contains(&Reuse));
    // The new sequence never decodes.
    assert!(!kinds("admit s0 @0\ndecode s0=1\nfinish s0\nadmit s1 @0\n", 1)?.contains(&Reuse));
    let fork = "admit s0 @0\ndecode s0=1\nfork s0 -> s1 @1\n";
    assert!(kinds(&format!("{fork}decode s1=2\n"), 2)?.contains(&Fork));
    // Rolled back before it decodes, the child reads its parent's snapshot, not the copy.
    let rolled = kinds(&format!("{fork}rollback s1 1\ndecode s1=2\n"), 2)?;
    assert!(rolled.contains(&Rollback) && !rolled.contains(&Fork), "{rolled:?}");
    // A fork of a sequence that never decoded copies the start state.
    assert!(!kinds("admit s0 @0\nfork s0 -> s1 @1\ndecode s1=2\n", 2)?.contains(&Fork));
    // Slot 1 still holds s0's state (s1 left it): a fork that copied slot 1 would not show.
    let twice = format!("{fork}finish s1\nfork s0 -> s2 @2\ndecode s2=3\n");
    assert!(!kinds(&twice, 3)?.contains(&Fork));
    assert!(!kinds("admit s0 @0\ndecode s0=1\nrollback s0 1\n", 1)?.contains(&Rollback));
    Ok(())
}

#[test]
fn the_lowering_pads_a_partial_batch_and_names_each_slot() -> Result<()> {
    let (_, program, _) = tiny()?;
    let pool = BatchProgram::new(program, 3, 3, 1, 16)?;
    let l = lower_schedule(&"admit s0 @2\ndecode s0=5".parse()?, &pool)?;
    let text = serde_json::to_string(&l.plan)?;
    assert_eq!(
        text,
        r#"{"ops":[{"Claim":{"slot":2}},{"Zero":{"slot":2}},{"Step":{"rows":[{"slot":2,"token":5},{"slot":null,"token":0},{"slot":null,"token":0}]}}]}"#
    );
    Ok(())
}

/// Replays `tests/corpus_batch/*.case`: each must have the outcome its `expect` line states, and
/// for a mutated plan, validation and the symbolic run must predict it before anything runs.
#[test]
fn the_batch_corpus_replays() -> Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus_batch");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "case"));
    files.sort();
    assert!(files.len() >= 8, "the corpus holds {} cases", files.len());
    // Every case at f32 and at each reduced numerics: a bug about state across sequences is one
    // of structure, caught exactly whatever the storage.
    let runs = files.iter().flat_map(|p| [Numerics::F32].into_iter().chain(REDUCED).map(move |n| (p, n)));
    for (path, numerics) in runs {
        let file: CaseFile = std::fs::read_to_string(path)?.parse().map_err(|e| format!("{}: {e}", path.display()))?;
        let spec = presets::preset(&file.preset).ok_or("no such preset")?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = lower_graph(&graph, numerics)?;
        let checkpoint = random_checkpoint(&spec, 7);
        let j = judge(&graph, &program, &checkpoint, &file.case())?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = format!("{name} at {numerics}");
        assert_eq!(j.actual.to_string(), file.expect, "{name}: {}", j.verdict);
        if file.mutation.is_some() {
            assert_eq!(j.expected.to_string(), file.expect, "{name}: validation and the symbolic run");
        }
        // The slot proof never contradicts the interpreters: proved where they agree, refuted at
        // their sequence and step where they disagree; undecided (a slot whose storage was never
        // zeroed or copied: modular #6681's fork) leaves the catch to them.
        match (&j.proof, &j.actual) {
            (None, BatchOutcome::Refused(_)) | (Some(SlotVerdict::Proved { .. }), BatchOutcome::Agree) => {}
            (Some(SlotVerdict::Inconclusive { .. }), BatchOutcome::Disagree { .. }) => {}
            (Some(p @ SlotVerdict::Refuted { .. }), BatchOutcome::Disagree { seq, step }) => {
                assert_eq!(p.refuted_at(), Some((*seq, *step)), "{name}: {p}")
            }
            (p, o) => panic!("{name}: the proof {p:?} against the interpreters' {o}"),
        }
    }
    Ok(())
}

#[test]
fn a_schedule_reads_as_a_table_of_steps_by_slots() -> Result<()> {
    let (_, program, _) = tiny()?;
    let pool = BatchProgram::new(program, 2, 2, 1, 16)?;
    let schedule = "admit s0 @0\nadmit s1 @1\ndecode s0=21 s1=22\nfinish s0\ndecode s1=23".parse()?;
    let want = "\
step  @0          @1
      claim @0, zero @0, claim @1, zero @1
0     s0=21 r0    s1=22 r1
      free @0
1                 s1=23 r0
";
    assert_eq!(stepcheck::batch::table::table(&pool, &lower_schedule(&schedule, &pool)?), want);
    Ok(())
}

/// Every value of a state, as bits: equal only when bit for bit equal (`-0.0` is not `0.0`).
fn state_bits(state: &EngineState) -> Vec<(String, Vec<u32>)> {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect();
    let value = |v: &StateValue| match v {
        StateValue::Position(p) => vec![*p as u32],
        StateValue::ConvWindow { values, .. }
        | StateValue::DeltaState { values, .. }
        | StateValue::KvCache { values, .. } => bits(values),
    };
    let mut out = vec![("position".to_string(), vec![state.position as u32])];
    out.extend(state.states.iter().map(|s| (s.name.clone(), value(&s.value))));
    out
}

/// The first index where `a` and `b` differ (their shorter length when one is a prefix of the
/// other), or `None` when they are equal.
fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// A row of the engine's batched step (`EngineRunner::step_batch`) is that state's single step
/// (`EngineRunner::step`), to the bit: for batches of 1 to 9 rows (past the kernels' `MAX_BATCH`
/// of 8, so that a batch is split), at f32 and bf16, each row's logits and state equal, bit for
/// bit, those of the same state stepped alone, the rows at different positions fed different
/// tokens. The batched check judges the engine's rows as single steps (its shadowed run steps them
/// one after another, the engine's half by the engine's single-step code), so this is what carries
/// its verdict over to the engine's batched step. It needs the kernels' summation order of a
/// vector to be independent of the batch's size.
#[test]
fn a_row_of_a_batched_step_is_its_single_step_to_the_bit() -> Result<()> {
    // (numerics, the state values from which a step's per-row units split among threads: the
    // default, which tiny's rows never reach, and always)
    let cases = [(Numerics::F32, None), (Numerics::BF16, None), (Numerics::F32, Some(0)), (Numerics::BF16, Some(0))];
    for (numerics, split) in cases {
        let (_, program, checkpoint) = tiny_at(numerics)?;
        let token = |row: usize, step: usize| ((7 * row + 3 * step + 1) % program.vocab) as u32;
        for n in 1..=9 {
            let batched = EngineRunner::new(&program, &checkpoint, 8)?.with_threads(2);
            let mut batched = match split {
                Some(values) => batched.with_rows_split_from(values),
                None => batched,
            };
            let mut states: Vec<RunnerState> = (0..n).map(|_| batched.fresh_state()).collect();
            let mut alone = Vec::with_capacity(n);
            // Row i starts i mod 3 steps ahead, each of them a single step on both sides.
            for (i, state) in states.iter_mut().enumerate() {
                let mut runner = EngineRunner::new(&program, &checkpoint, 8)?;
                for k in 0..i % 3 {
                    batched.swap_state(state)?;
                    batched.step(token(i, 100 + k))?;
                    batched.swap_state(state)?;
                    runner.step(token(i, 100 + k))?;
                }
                alone.push(runner);
            }
            for step in 0..3 {
                let tokens: Vec<u32> = (0..n).map(|i| token(i, step + n)).collect();
                let mut rows: Vec<BatchRow> =
                    states.iter_mut().zip(&tokens).map(|(state, &token)| BatchRow { state, token }).collect();
                let got = batched.step_batch(&mut rows)?;
                for (i, runner) in alone.iter_mut().enumerate() {
                    let want = runner.step(tokens[i])?;
                    let at = format!(
                        "{numerics} (rows split from {split:?} values): a batch of {n}: row {i} at step {step}"
                    );
                    let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                    let got = got.get(i).ok_or(format!("{at}: no logits"))?;
                    if let Some(k) = first_difference(&bits(got), &bits(&want)) {
                        panic!("{at}: logits[{k}]: batched {:?}, alone {:?}", got.get(k), want.get(k));
                    }
                    for ((name, a), (_, b)) in state_bits(&states[i].snapshot()).iter().zip(state_bits(&runner.state()))
                    {
                        if let Some(k) = first_difference(a, &b) {
                            panic!("{at}: {name}[{k}]: batched bits {:?}, alone {:?}", a.get(k), b.get(k));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
