//! The gate's two sentences over generated cases: every accepted program computes what its graph
//! computes, and every refused graph names the right error at the right place.
//!
//! Cases come from `stepcheck::gen` (the generator the fuzz target drives too): specs of every
//! shape the engine accepts, the constructs it refuses alone and mixed, shims without a fusion
//! symbol, reduced numerics, and mutations of the step graph, each with the outcome it must have.
//! `cargo test --release` runs 11,500 of them (4,000 judged by proptest, 5,000 in the coverage
//! sweep, 1,500 round trips, 1,000 mixed-construct orders); `STEPCHECK_CASES=N` runs N in each
//! for long runs. Debug builds run a tenth of the default.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use stepcheck::engine::Numerics;
use stepcheck::engine::lower::lower_graph_with;
use stepcheck::engine::shim::EngineShim;
use stepcheck::fuse::Symbol;
use stepcheck::r#gen::draw::{Draw, seeded_bytes};
use stepcheck::r#gen::file::CaseFile;
use stepcheck::r#gen::oracle::{Judgement, Stats, judge, judge_drawn, trace};
use stepcheck::r#gen::spec::construct_names;
use stepcheck::r#gen::{Case, Input, Mutation, Outcome, spec as gen_spec};
use stepcheck::ir::RopeStyle;
use stepcheck::ir::parse_graph;
use stepcheck::model::author::decode_step;
use stepcheck::model::spec::{Ffn, ModelSpec, PostNorm};

// ---- Budgets. ----

/// How many cases a property runs: `STEPCHECK_CASES` when set, else `release` in a release build
/// and a tenth of it in a debug build.
fn budget(release: u32) -> u32 {
    match std::env::var("STEPCHECK_CASES").ok().and_then(|v| v.parse().ok()) {
        Some(n) => n,
        None if cfg!(debug_assertions) => (release / 10).max(1),
        None => release,
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel("proptest-regressions"))),
        ..Config::default()
    }
}

// ---- The boundary: bytes to a case, a case to its judgement. ----

/// Cases drawn from byte strings: the one generator, shrunk by shrinking its bytes.
fn case() -> impl Strategy<Value = Case> {
    proptest::collection::vec(any::<u8>(), 1..160).prop_filter_map("bytes that make a case", |b| Case::from_bytes(&b))
}

/// The case as a corpus file would hold it, for failure messages.
fn listing(case: &Case) -> String {
    CaseFile { comment: vec![], outcome: None, case: case.clone() }.to_string()
}

/// The bytes of case `i` of a deterministic sweep: 160 pseudo-random bytes.
fn sweep_bytes(i: u64) -> Vec<u8> {
    seeded_bytes(i.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0xE703_7ED1_A0B4_28DB, 160)
}

// ---- The oracle. ----

proptest! {
    #![proptest_config(config(budget(4000)))]

    /// Every generated case is judged right: accepted and agreeing where it must be accepted,
    /// refused with the right variant at the right place where it must be refused; and judged,
    /// never inconclusive (a generated case's values are finite, so every bound can be formed).
    #[test]
    fn every_generated_case_is_judged_right(case in case()) {
        let j = judge(&case);
        prop_assert!(!j.is_failure(), "{j}\n{}", listing(&case));
        prop_assert!(!matches!(j, Judgement::Inconclusive(..)), "{j}\n{}", listing(&case));
    }
}

/// Counts over a sweep of generated cases: mutation kinds, constructs, shims, numerics, and the
/// outcome of each.
#[derive(Default)]
struct Coverage {
    stats: Stats,
    mutations: BTreeMap<&'static str, u32>,
    constructs: BTreeMap<String, u32>,
    shims: BTreeSet<&'static str>,
    numerics: BTreeSet<String>,
    layer_patterns: BTreeSet<&'static str>,
    /// (output gate, q/k norms) of specs with attention layers.
    attention_variants: BTreeSet<(bool, bool)>,
    failures: Vec<String>,
}

/// The layer patterns a spec has: attention first, last, adjacent, absent, all.
fn patterns(spec: &ModelSpec) -> Vec<&'static str> {
    use stepcheck::model::spec::Mixer::Attention;
    let l = &spec.layers;
    let mut out = vec![];
    if l.first() == Some(&Attention) {
        out.push("attention first");
    }
    if l.last() == Some(&Attention) {
        out.push("attention last");
    }
    if l.windows(2).any(|w| w[0] == Attention && w[1] == Attention) {
        out.push("attention adjacent");
    }
    if !l.contains(&Attention) {
        out.push("attention absent");
    }
    if l.iter().all(|m| *m == Attention) {
        out.push("attention all");
    }
    out
}

fn sweep(n: u64) -> Coverage {
    let mut c = Coverage::default();
    for i in 0..n {
        let Some(case) = Case::from_bytes(&sweep_bytes(i)) else { continue };
        if let Some(m) = &case.mutation {
            *c.mutations.entry(m.kind_name()).or_default() += 1;
        }
        if let Input::Spec(spec) = &case.input {
            for name in construct_names(spec) {
                *c.constructs.entry(name).or_default() += 1;
            }
            c.layer_patterns.extend(patterns(spec));
            if spec.layers.contains(&stepcheck::model::spec::Mixer::Attention) {
                c.attention_variants.insert((spec.attention.output_gate, spec.attention.qk_norm));
            }
        }
        c.shims.extend(case.without.map(Symbol::name));
        c.numerics.insert(case.numerics.to_string());
        let j = judge(&case);
        if j.is_failure() {
            c.failures.push(format!("case {i}: {j}\n{}", listing(&case)));
        }
        c.stats.record_at(&j, case.numerics);
    }
    c
}

/// The fuzz target judges a case with the graphs drawing it made (`judge_drawn`): that is the
/// judgement of the case on its own, to the last digit of its verdict.
#[test]
fn judging_a_drawn_case_is_judging_the_case() {
    for i in 0..400 {
        let bytes = sweep_bytes(i);
        let (Some(case), Some(drawn)) = (Case::from_bytes(&bytes), Case::draw(&bytes)) else { continue };
        assert_eq!(judge_drawn(drawn).to_string(), judge(&case).to_string(), "case {i}");
    }
}

/// A deterministic sweep that judges its cases and shows the generator reaches everything: every
/// mutation kind, every construct the author writes, every shim, every layer pattern, and every
/// `LowerError` variant a generated case can meet.
#[test]
fn a_sweep_reaches_every_mutation_construct_and_refusal() {
    let c = sweep(u64::from(budget(5000)));
    eprintln!("{}", c.stats);
    eprintln!("mutations: {:?}", c.mutations);
    eprintln!("constructs: {:?}", c.constructs);
    assert!(c.failures.is_empty(), "{} failures; the first:\n{}", c.failures.len(), c.failures[0]);
    if cfg!(debug_assertions) && std::env::var("STEPCHECK_CASES").is_err() {
        return; // a tenth of the sweep need not reach everything
    }
    for kind in Mutation::KINDS {
        assert!(c.mutations.contains_key(kind), "no {kind} mutation in {:?}", c.mutations);
    }
    for construct in [
        "post_norm:Sandwich",
        "post_norm:PostOnly",
        "ffn:GeluMlp",
        "ffn:GeluMlpTanh",
        "ffn:GeGlu",
        "ffn:Relu2Mlp",
        "ffn:ClampedSwiGlu",
        "experts:SoftmaxTopK",
        "experts:TopKSoftmax",
        "experts:SigmoidGroupLimited",
        "experts:shared",
        "experts:all dense",
        "attention_sinks",
        "sliding_window",
        "sliding_rope",
        "embedding_scale",
        "attention_scale",
        "rope_scaling",
        "latent_attention",
        "qkv_bias",
        "output_bias",
        "interleaved_rope",
    ] {
        assert!(c.constructs.contains_key(construct), "no {construct} in {:?}", c.constructs);
    }
    for symbol in Symbol::ALL {
        assert!(c.shims.contains(symbol.name()), "no shim without {}", symbol.name());
    }
    for pattern in ["attention first", "attention last", "attention adjacent", "attention absent", "attention all"] {
        assert!(c.layer_patterns.contains(pattern), "no spec with {pattern}");
    }
    for n in ["f32/f32/f32", "bf16/bf16/f32", "bf16/bf16/bf16"] {
        assert!(c.numerics.contains(n), "no case at {n}: {:?}", c.numerics);
    }
    for v in stepcheck::r#gen::outcome::VARIANTS {
        assert!(c.stats.refused.contains_key(v), "no case refused with {v}: {}", c.stats);
    }
    for (gate, norm) in [(true, true), (false, true), (true, false), (false, false)] {
        assert!(c.attention_variants.contains(&(gate, norm)), "no attention with gate {gate}, q/k norms {norm}");
    }
    // The cases proved and compared are the ones the time goes to: at least 40% of them.
    assert!(c.stats.accepted * 100 >= c.stats.cases * 40, "few accepted cases: {}", c.stats);
    // No case that reached a comparison is inconclusive, at any numerics: a generated case's
    // values are finite, so every Command's bound can be formed, and nothing else may leave a
    // comparison unjudged (a check that concluded nothing would pass every case).
    eprintln!("by numerics (compared, inconclusive): {:?}", c.stats.by_numerics);
    assert_eq!(c.stats.inconclusive, 0, "inconclusive cases: {}", c.stats);
}

// ---- The text forms. ----

proptest! {
    #![proptest_config(config(budget(1500)))]

    /// The graphs of a case (authored; mutated and fused, as `lower_graph` reads it) print as
    /// listings that parse back to graphs printing the same listing (the same graph up to tensor
    /// ids, which the parser numbers in listing order), and that `lower_graph` judges the same;
    /// and a case prints as a corpus file that reads back to the same case.
    #[test]
    fn generated_graphs_and_cases_round_trip(case in case()) {
        let t = trace(&case).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for g in t.authored.iter().chain([&t.fused]) {
            let text = g.to_string();
            let back = parse_graph(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            prop_assert_eq!(back.to_string(), text);
        }
        let reread = parse_graph(&t.fused.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let again = lower_graph_with(&reread, case.numerics, &case.shim());
        prop_assert_eq!(Outcome::of(&again), Outcome::of(&t.lowered));
        let text = listing(&case);
        let back = CaseFile::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(listing(&back.case), text);
        if let Some(m) = &case.mutation {
            prop_assert_eq!(m.to_string().parse::<Mutation>(), Ok(m.clone()));
        }
    }

    /// Neither a case file nor a mutation line read from arbitrary text panics.
    #[test]
    fn arbitrary_text_never_panics_the_case_reader(text in prop_oneof![any::<String>(), case_like()]) {
        let _ = CaseFile::parse(&text);
        for line in text.lines() {
            let _ = line.parse::<Mutation>();
        }
    }
}

/// Text near a case file: a case's listing with a few bytes changed.
fn case_like() -> impl Strategy<Value = String> {
    (case(), proptest::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..4)).prop_map(|(c, edits)| {
        let mut chars: Vec<char> = listing(&c).chars().collect();
        for (i, ch) in edits {
            let k = i.index(chars.len());
            chars[k] = ch;
        }
        chars.into_iter().collect()
    })
}

// ---- Refusal order. ----

/// Each construct of a mixed spec, and a shim without a symbol, alone on the spec without the
/// others: the refusal each gives by itself. (A sliding window's own RoPE only matters with the
/// window, and comes with it in the mix.)
fn alone(spec: &ModelSpec, without: Option<Symbol>) -> Vec<Outcome> {
    let c = &spec.constructs;
    let base = ModelSpec {
        constructs: Default::default(),
        attention: stepcheck::model::spec::AttentionSpec { rope_style: RopeStyle::Neox, ..spec.attention.clone() },
        ..spec.clone()
    };
    let with = |f: &dyn Fn(&mut ModelSpec)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    let mut singles: Vec<(ModelSpec, Option<Symbol>)> = vec![];
    let mut add = |on: bool, f: &dyn Fn(&mut ModelSpec)| {
        if on {
            singles.push((with(f), None));
        }
    };
    add(c.post_norm != PostNorm::None, &|s| s.constructs.post_norm = c.post_norm);
    add(c.ffn != Ffn::SwiGlu, &|s| s.constructs.ffn = c.ffn);
    add(c.experts.is_some(), &|s| s.constructs.experts = c.experts.clone());
    add(c.attention_sinks, &|s| s.constructs.attention_sinks = true);
    add(c.sliding_window.is_some(), &|s| s.constructs.sliding_window = c.sliding_window.clone());
    add(c.embedding_scale.is_some(), &|s| s.constructs.embedding_scale = c.embedding_scale);
    add(c.attention_scale.is_some(), &|s| s.constructs.attention_scale = c.attention_scale);
    add(c.latent_attention.is_some(), &|s| s.constructs.latent_attention = c.latent_attention.clone());
    add(spec.attention.rope_style == RopeStyle::Interleaved, &|s| s.attention.rope_style = RopeStyle::Interleaved);
    add(c.rope_scaling.is_some(), &|s| s.constructs.rope_scaling = c.rope_scaling.clone());
    add(c.qkv_bias, &|s| {
        s.constructs.qkv_bias = true;
        s.attention.output_gate = false;
    });
    add(c.output_bias, &|s| s.constructs.output_bias = true);
    if without.is_some() {
        singles.push((base.clone(), without));
    }
    singles.into_iter().map(|(s, w)| lowered(&s, w)).collect()
}

fn lowered(spec: &ModelSpec, without: Option<Symbol>) -> Outcome {
    let shim = without.map_or_else(EngineShim::default, |s| EngineShim::default().without(s));
    let g = shim.prepare(&decode_step(spec).expect("the author writes every generated spec"));
    Outcome::of(&lower_graph_with(&g, Numerics::F32, &shim))
}

/// Where a refusal is in reading order; at one place, the order the block checks them in: the
/// attention block's named constructs (latent, sinks, window, scale, interleaved RoPE, scaled RoPE,
/// a bias) before matching it (a symbol the shim lacks), the FFN's experts before its shape before
/// matching it.
fn order(o: &Outcome) -> ((usize, usize), usize) {
    let Outcome::Refused { variant, at } = o else { return ((usize::MAX, usize::MAX), usize::MAX) };
    let within = [
        "LatentAttention",
        "AttentionSinks",
        "SlidingWindow",
        "AttentionScale",
        "InterleavedRope",
        "ScaledRope",
        "AttentionBias",
        "Experts",
        "NotSwiGlu",
        "Unfused",
    ];
    (at.map_or((0, 0), |p| p.rank()), within.iter().position(|v| v == variant).unwrap_or(0))
}

proptest! {
    #![proptest_config(config(budget(1000)))]

    /// A spec mixing constructs the engine refuses by name (and maybe a shim without a symbol) is
    /// refused with the refusal that comes first in the engine's reading order among those each
    /// gives alone: the embedding, then per layer its norm, mixer, add, FFN norm, FFN and add, then
    /// the advance, the final norm and the head.
    #[test]
    fn mixed_constructs_refuse_with_the_first_in_reading_order(bytes in proptest::collection::vec(any::<u8>(), 8..64)) {
        let mut d = Draw::new(&bytes);
        let mut spec = gen_spec::spec(&mut d);
        spec.constructs = gen_spec::constructs(&mut d, &mut spec);
        let without = if d.below(3) == 0 { Some(*d.pick(&Symbol::ALL)) } else { None };
        let singles = alone(&spec, without);
        let first = singles.iter().filter(|o| **o != Outcome::Accepted).min_by_key(|o| order(o)).cloned();
        let mixed = lowered(&spec, without);
        prop_assert_eq!(mixed, first.unwrap_or(Outcome::Accepted), "singles: {:?}\n{:?}", singles, spec);
    }
}

// ---- Specific expectations the generator relies on. ----

#[test]
fn a_mutation_names_its_place_in_reading_order() {
    // (mutation text, the outcome it must have on the `tiny` preset)
    let tiny = stepcheck::model::presets::tiny();
    let cases = [
        ("rebind %output_norm = blk.0.attn_norm.weight at FinalNorm", "refused WrongBinding at FinalNorm"),
        (
            "rebind %blk.1.attn_norm = output_norm.weight at MixerNorm layer 1",
            "refused WrongBinding at MixerNorm layer 1",
        ),
        ("bypass %h.final at FinalNorm", "refused WrongOp at FinalNorm"),
        ("rebind %output = token_embd.weight at Head", "accepted"),
        ("relabel-state all layer 1 as 9", "refused UnknownMixer at DeltaNet layer 1"),
    ];
    for (text, want) in cases {
        let m: Mutation = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        let case = Case {
            input: Input::Spec(tiny.clone()),
            without: None,
            numerics: Numerics::F32,
            mutation: Some(m),
            seed: 1,
            steps: 4,
        };
        let j = judge(&case);
        assert_eq!(j.outcome_line(), want, "{text}: {j}");
        assert!(!j.is_failure(), "{text}: {j}");
    }
}
