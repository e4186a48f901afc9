//! Translation validation (`stepcheck::prove`): every preset and every accepted generated case is
//! proved; each planted bug — in the program, the fused graph, or the shim — is refuted, with the
//! output it breaks; a change that keeps the meaning (a commuted residual add) still proves.

use stepcheck::engine::lower::lower_graph;
use stepcheck::engine::program::{BlockKind, Command, Program, StateLayout};
use stepcheck::engine::shim::EngineShim;
use stepcheck::engine::{Numerics, Storage};
use stepcheck::r#gen::Case;
use stepcheck::r#gen::draw::seeded_bytes;
use stepcheck::r#gen::oracle::{prove_trace, trace};
use stepcheck::ir::{Act, Graph, HeadMap, OpKind};
use stepcheck::model::author::decode_step;
use stepcheck::model::bind::View;
use stepcheck::model::presets::{PRESETS, preset};
use stepcheck::prove::{ProofVerdict, prove};

// ---- The boundary: a spec's three stages, and the proof of a (possibly edited) triple. ----

/// The authored step of preset `name`, the engine's shim's fused graph of it, and its program.
fn stages(name: &str, numerics: Numerics) -> (Graph, Graph, Program) {
    let spec = preset(name).expect("a preset");
    let authored = decode_step(&spec).expect("the author writes every preset");
    let fused = EngineShim::default().prepare(&authored);
    let program = lower_graph(&fused, numerics).expect("every preset lowers");
    (authored, fused, program)
}

/// Every command of `p`, mutably, in order.
fn commands(p: &mut Program) -> impl Iterator<Item = &mut Command> {
    p.blocks.iter_mut().flat_map(|b| b.commands.iter_mut())
}

/// The first command of `p` that `edit` changes (it returns whether it did); panics if none does,
/// so a planted bug that plants nothing fails its test.
fn edit_first(p: &mut Program, mut edit: impl FnMut(&mut Command) -> bool) {
    assert!(commands(p).any(&mut edit), "the planted bug found no command to change");
}

/// The proof of the tiny preset at `numerics` with `plant` applied to its program.
fn prove_planted_program(numerics: Numerics, plant: fn(&mut Program)) -> ProofVerdict {
    let (authored, fused, mut program) = stages("tiny", numerics);
    plant(&mut program);
    prove(&authored, &fused, &program)
}

/// The refutation's one-line summary, or a panic naming the verdict.
fn refuted(v: &ProofVerdict, bug: &str) -> String {
    match v {
        ProofVerdict::Refuted(r) => format!("{}: {}: {}", r.stage, r.output, r.why),
        v => panic!("the planted bug `{bug}` was not refuted: {v}"),
    }
}

// ---- Every preset proves. ----

#[test]
fn every_preset_proves_at_every_numerics() {
    for name in PRESETS {
        for numerics in [Numerics::F32, Numerics::BF16] {
            let (authored, fused, program) = stages(name, numerics);
            let v = prove(&authored, &fused, &program);
            let ProofVerdict::Proved(p) = &v else { panic!("{name} at {numerics}: {v}") };
            // Logits and every state, at both stages.
            assert_eq!(p.outputs.len(), 2 * (1 + fused.states.len()), "{name}");
        }
    }
}

#[test]
fn the_08b_preset_uses_the_layout_lemmas() {
    let (authored, fused, program) = stages("qwen3.5-0.8b", Numerics::F32);
    let ProofVerdict::Proved(p) = prove(&authored, &fused, &program) else { panic!("not proved") };
    assert_eq!(p.commands, 322);
    for lemma in ["rows-of-matvec", "head-half-of-matvec", "conv-window", "delta-orientation", "kv-append-at-fill"] {
        assert!(p.lemmas.keys().any(|l| l.name() == lemma), "{lemma} unused: {:?}", p.lemmas);
    }
}

// ---- Every accepted generated case proves. ----

/// The bytes of case `i` of the sweep.
fn sweep_bytes(i: u64) -> Vec<u8> {
    seeded_bytes(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D, 160)
}

#[test]
fn every_accepted_generated_case_proves() {
    let cases = if cfg!(debug_assertions) { 300 } else { 3000 };
    let mut accepted = 0;
    for i in 0..cases {
        let Some(case) = Case::from_bytes(&sweep_bytes(i)) else { continue };
        let Ok(t) = trace(&case) else { continue };
        let Ok(program) = &t.lowered else { continue };
        accepted += 1;
        let v = prove_trace(&case, &t, program);
        assert!(v.is_proved(), "case {i}: {v}\n{case:?}");
    }
    assert!(accepted >= cases / 20, "only {accepted} of {cases} cases accepted");
}

// ---- Planted program bugs are refuted. ----

/// A planted bug in the lowered program of the tiny preset, and the output its refutation names.
struct PlantedProgram {
    bug: &'static str,
    numerics: Numerics,
    plant: fn(&mut Program),
    output: &'static str,
}

const PLANTED_PROGRAMS: &[PlantedProgram] = &[
    PlantedProgram {
        bug: "head halves swapped (queries and output gate)",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::MergedHeadHalves { first, second, .. } => {
                    std::mem::swap(first, second);
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "an RMS norm's eps not carried",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::RmsNorm { eps, .. } => {
                    *eps = 1e-5;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "the gated norm's eps not carried",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::GatedNorm { eps, .. } => {
                    *eps = 1e-5;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "RoPE's θ not carried",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::Attention { rope, .. } => {
                    rope.theta = 1e6;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "the rotary dims not carried (the whole head rotated)",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::Attention { rope, head_dim, .. } => {
                    rope.dims = *head_dim;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "a delta state layout transposed ([dk][dv] declared for the engine's [dv][dk])",
        numerics: Numerics::F32,
        plant: |p| {
            let s = p.states.iter_mut().find(|s| matches!(s.layout, StateLayout::DeltaState { .. })).unwrap();
            if let StateLayout::DeltaState { key_dim, value_dim, .. } = &mut s.layout {
                std::mem::swap(key_dim, value_dim);
            }
        },
        output: "recurrent@l1",
    },
    PlantedProgram {
        bug: "a conv window of K columns where the engine keeps K−1",
        numerics: Numerics::F32,
        plant: |p| {
            let s = p.states.iter_mut().find(|s| matches!(s.layout, StateLayout::ConvWindow { .. })).unwrap();
            if let StateLayout::ConvWindow { taps, .. } = &mut s.layout {
                *taps += 1;
            }
        },
        output: "conv@l1",
    },
    PlantedProgram {
        bug: "the wrong key-head count of a delta rule (every value head on one key head)",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::DeltaRule { key_heads, .. } => {
                    *key_heads = 1;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "the attention's scale not carried",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::Attention { scale, .. } => {
                    *scale = 1.0;
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "the SwiGLU's gate and up projections swapped",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::SwiGlu { gate, up, .. } => {
                    std::mem::swap(gate, up);
                    true
                }
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "no advance: the position never moves",
        numerics: Numerics::F32,
        plant: |p| p.blocks.retain(|b| !b.commands.iter().any(|c| matches!(c, Command::Advance { .. }))),
        output: "position",
    },
    PlantedProgram {
        bug: "the advance moved before the layers",
        numerics: Numerics::F32,
        plant: advance_first,
        output: "logits",
    },
    PlantedProgram {
        bug: "the attention's key norm dropped",
        numerics: Numerics::F32,
        plant: |p| {
            edit_first(p, |c| match c {
                Command::Attention { k_norm, .. } => k_norm.take().is_some(),
                _ => false,
            })
        },
        output: "logits",
    },
    PlantedProgram {
        bug: "a buffer stored in f32 where the numerics store activations in bf16",
        numerics: Numerics::BF16,
        plant: |p| p.buffers[1].storage = Storage::F32,
        output: "rounding of",
    },
    PlantedProgram {
        bug: "a KV cache stored in f32 where the numerics store it in bf16",
        numerics: Numerics::BF16,
        plant: |p| {
            p.states.iter_mut().find(|s| matches!(s.layout, StateLayout::KvCache { .. })).unwrap().storage =
                Storage::F32
        },
        output: "rounding of",
    },
];

#[test]
fn planted_program_bugs_are_refuted() {
    for case in PLANTED_PROGRAMS {
        let v = prove_planted_program(case.numerics, case.plant);
        let summary = refuted(&v, case.bug);
        if std::env::var("SHOW").is_ok() {
            println!("{}\n{v}\n", case.bug);
        }
        assert!(summary.contains(case.output), "`{}` refuted at another output: {summary}\n{v}", case.bug);
    }
}

/// Moves the program's advance block to right after the embedding, before the layers.
fn advance_first(p: &mut Program) {
    let at = p.blocks.iter().position(|b| b.kind == BlockKind::Advance).expect("an advance block");
    let advance = p.blocks.remove(at);
    p.blocks.insert(1, advance);
}

// ---- The program is read in order. ----

#[test]
fn an_advance_before_the_layers_is_refuted_naming_both_commands() {
    // The 0.8B preset is beyond the witness search's size: the refutation is the definite mismatch
    // alone, `pos` against `pos + 1` in the first attention's query.
    let (authored, fused, mut program) = stages("qwen3.5-0.8b", Numerics::F32);
    advance_first(&mut program);
    let v = prove(&authored, &fused, &program);
    let ProofVerdict::Refuted(r) = &v else { panic!("an advance before the layers is not refuted: {v}") };
    assert!(r.witness.is_none(), "{v}");
    assert_eq!((r.output.as_str(), r.why.as_str()), ("logits", "different positions: pos + 0 vs pos + 1"), "{v}");
    assert_eq!(
        r.order,
        ["block 21 (layer 3 attention block) command 3 (attention) reads the position pos as block 1 (advance) \
          command 0 (advance) moved it"],
        "{v}"
    );
}

#[test]
fn two_advances_are_refuted_naming_the_second() {
    let v = prove_planted_program(Numerics::F32, |p| {
        let at = p.blocks.iter().position(|b| b.kind == BlockKind::Advance).expect("an advance block");
        p.blocks.insert(at, p.blocks[at].clone());
    });
    let ProofVerdict::Refuted(r) = &v else { panic!("{v}") };
    assert_eq!(r.output, "position", "{v}");
    let moved = "block 26 (advance) command 0 (advance) reads the position pos as block 25 (advance) command 0 \
                 (advance) moved it";
    assert_eq!(r.order, [moved], "{v}");
}

#[test]
fn a_buffer_read_before_its_write_is_refuted_naming_the_command() {
    // The attention block's commands rotated: the attention unit first, before the matvecs that
    // write its queries, keys and values.
    let v = prove_planted_program(Numerics::F32, |p| {
        let b = p.blocks.iter_mut().find(|b| b.kind == BlockKind::Attention).expect("an attention block");
        let at = b.commands.iter().position(|c| matches!(c, Command::Attention { .. })).expect("an attention");
        b.commands[..=at].rotate_right(1);
    });
    let ProofVerdict::Refuted(r) = &v else { panic!("a read before its write is not refuted: {v}") };
    assert!(r.output.ends_with("(layer 0 attention block) command 0 (attention)"), "{v}");
    assert!(r.why.contains("is read before any command of the step writes it"), "{v}");
}

#[test]
fn two_attentions_sharing_a_cache_read_it_as_the_earlier_left_it() {
    use stepcheck::ir::StateKind;
    use stepcheck::prove::term::{Dag, Sym};
    use stepcheck::prove::{graph_terms, program_terms};
    // Layer 3's attention given layer 0's caches: it must read them as layer 0's attention left
    // them (its key and value appended), and the proof must fail.
    let plant = |p: &mut Program| {
        let mut caches = None;
        for c in commands(p) {
            if let Command::Attention { k_cache, v_cache, .. } = c {
                match caches {
                    None => caches = Some((*k_cache, *v_cache)),
                    Some((k, v)) => (*k_cache, *v_cache) = (k, v),
                }
            }
        }
    };
    let v = prove_planted_program(Numerics::F32, plant);
    assert!(v.is_refuted(), "{v}");
    let (_, _, mut program) = stages("tiny", Numerics::F32);
    plant(&mut program);
    let mut dag = Dag::new();
    let kinds = program.states.iter().map(|s| match s.layout {
        StateLayout::Position => StateKind::Position,
        StateLayout::ConvWindow { .. } => StateKind::Conv,
        StateLayout::DeltaState { .. } => StateKind::Recurrent,
        StateLayout::KvCache { .. } => StateKind::KeyCache,
    });
    let leaves: Vec<_> = kinds.enumerate().map(|(i, k)| graph_terms::state_leaf(&mut dag, k, Some(i))).collect();
    let t = program_terms::program_terms(&mut dag, &program, &leaves).expect("the program reads");
    let shown: Vec<String> = t.reads.iter().map(|r| r.to_string()).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    for r in &t.reads {
        assert!(r.reader.to_string().ends_with("(layer 3 attention block) command 3 (attention)"), "{shown:?}");
        assert!(r.writer.to_string().ends_with("(layer 0 attention block) command 3 (attention)"), "{shown:?}");
        let state = program.states.iter().position(|s| s.name == r.state).expect("a state");
        // The term read is layer 0's write, over the cache as it entered the step.
        assert_ne!(r.read, leaves[state]);
        assert!(dag.cone(r.read).contains(&leaves[state]));
        assert!(matches!(dag.node(r.read).sym, Sym::Prealloc { .. } | Sym::KvWrite { .. }), "{}", dag.show(r.read, 2));
    }
}

#[test]
fn a_re_split_of_merged_rows_that_one_conv_reads_still_proves() {
    // Rows 0..17 and 17..32 where the graph reads 0..16 and 16..32: the conv reads their
    // concatenation, the same 32 rows (`concat-of-rows`), and splits its output by its own lengths.
    let v = prove_planted_program(Numerics::F32, |p| {
        let Some(Command::MergedRows { outs, .. }) =
            commands(p).find(|c| matches!(c, Command::MergedRows { .. })).cloned()
        else {
            panic!("no merged rows")
        };
        p.buffers[outs[0].0].len += 1;
        p.buffers[outs[1].0].len -= 1;
    });
    let ProofVerdict::Proved(p) = &v else { panic!("{v}") };
    assert!(p.lemmas.keys().any(|l| l.name() == "concat-of-rows"));
}

#[test]
fn a_change_that_keeps_the_meaning_still_proves() {
    // The residual add's operands swapped: addition commutes (`add-commutes`).
    let v = prove_planted_program(Numerics::F32, |p| {
        edit_first(p, |c| match c {
            Command::Add { residual, x, .. } => {
                std::mem::swap(residual, x);
                true
            }
            _ => false,
        })
    });
    assert!(v.is_proved(), "{v}");
}

// ---- Planted graph bugs: the fused graph against the program, the shim against the author. ----

/// The tiny preset's stages with `edit` applied to one op of the fused (`fused == true`) or the
/// authored graph, chosen by its first output's name.
fn prove_edited_graph(fused_side: bool, tensor: &str, edit: fn(&mut OpKind)) -> ProofVerdict {
    let (mut authored, mut fused, program) = stages("tiny", Numerics::F32);
    let g = if fused_side { &mut fused } else { &mut authored };
    let t = g.find(tensor).unwrap_or_else(|| panic!("no tensor {tensor}"));
    let op = g.ops.iter_mut().find(|o| o.outputs.contains(&t)).expect("an op writes it");
    edit(&mut op.kind);
    // An edit of the fused graph is judged against the program alone: the graph it answers to is
    // itself.
    if fused_side {
        authored = fused.clone();
    }
    prove(&authored, &fused, &program)
}

#[test]
fn the_wrong_head_map_in_the_graph_is_refuted() {
    // The graph says grouped where the engine's delta rule is tiled (4 value heads, 2 key heads).
    let v = prove_edited_graph(true, "l1.o", |k| *k = OpKind::DeltaRule { head_map: HeadMap::Grouped });
    let s = refuted(&v, "grouped delta rule");
    assert!(s.contains("fused ≡ program") && s.contains("head") || s.contains("grouped"), "{s}\n{v}");
    // The graph says tiled where the engine's attention is grouped (4 query heads, 2 KV heads).
    let v = prove_edited_graph(true, "l0.attn", |k| {
        if let OpKind::Attention { head_map, .. } = k {
            *head_map = HeadMap::Tiled;
        }
    });
    refuted(&v, "tiled attention");
}

#[test]
fn a_mis_fused_shim_pattern_is_refuted() {
    // The authored conv activation is gelu, but the fused graph has conv_bias_silu: what a conv
    // pattern that takes any activation would make.
    let v = prove_edited_graph(false, "l1.conv.silu", |k| *k = OpKind::Act(Act::Gelu));
    let s = refuted(&v, "gelu conv fused as conv_bias_silu");
    assert!(s.starts_with("authored ≡ fused"), "{s}");
    // The same for the SwiGLU's activation fused as glu_act_mul of silu.
    let v = prove_edited_graph(false, "l0.ffn.act", |k| *k = OpKind::Act(Act::GeluTanh));
    assert!(refuted(&v, "geglu fused as silu").starts_with("authored ≡ fused"));
}

#[test]
fn a_row_range_off_by_one_is_refuted() {
    // The graph binds the delta rule's queries to rows 1..17 of the merged projection; the
    // program's merged rows still start at row 0.
    // The rows no longer follow one another, so no lemma merges them and the normal forms differ
    // in their symbols: the refutation is the numeric witness's.
    let (_, mut fused, program) = stages("tiny", Numerics::F32);
    let c = fused.consts.iter_mut().find(|c| c.binding.to_string() == "blk.1.attn_qkv.weight rows 0..16").unwrap();
    c.binding.view = View::Rows { start: 1, end: 17 };
    let v = prove(&fused, &fused, &program);
    refuted(&v, "rows 1..17");
    let ProofVerdict::Refuted(r) = &v else { unreachable!() };
    assert!(r.witness.is_some(), "{v}");
}

#[test]
fn a_graph_eps_the_program_does_not_carry_is_refuted() {
    let v = prove_edited_graph(true, "l1.k.normed", |k| *k = OpKind::L2Norm { eps: 1e-5 });
    assert!(refuted(&v, "delta rule l2 eps").contains("fused ≡ program"));
}

#[test]
fn planted_bugs_in_commands_have_a_numeric_witness() {
    // The definite mismatches of the normal forms are real: evaluated on random leaves, the two
    // outputs differ (every planted bug but the layouts and roundings, refused before evaluation,
    // and a key-head count that does not fit the queries' length, which has no value).
    for case in PLANTED_PROGRAMS.iter().filter(|c| {
        c.output != "rounding of"
            && !c.bug.contains("layout")
            && !c.bug.contains("window")
            && !c.bug.contains("key-head count")
    }) {
        let v = prove_planted_program(case.numerics, case.plant);
        let ProofVerdict::Refuted(r) = &v else { panic!("{}: {v}", case.bug) };
        assert!(r.witness.is_some(), "`{}` has no witness:\n{v}", case.bug);
    }
}

// ---- Every lemma holds: both sides evaluated on random tensors of random shapes. ----

mod lemmas {
    use proptest::prelude::*;
    use stepcheck::ir::{HeadMap, StateKind};
    use stepcheck::model::bind::Binding;
    use stepcheck::prove::Lemma;
    use stepcheck::prove::eval::{Env, Rng, Value, differ, eval};
    use stepcheck::prove::term::{Dag, Id, Real, Sym};

    /// One lemma's instance: the DAG, its left and right sides (built as they are, unnormalised)
    /// and the leaves' values.
    struct Instance {
        dag: Dag,
        lhs: Id,
        rhs: Id,
        env: Env,
    }

    /// A builder of instances: random leaves, drawn from a seed.
    struct Leaves {
        dag: Dag,
        env: Env,
        rng: Rng,
    }

    impl Leaves {
        fn new(seed: u64) -> Leaves {
            Leaves { dag: Dag::new(), env: Env { capacity: 16, ..Env::default() }, rng: Rng(seed) }
        }

        /// A checkpoint tensor `name` of `shape`, whole.
        fn tensor(&mut self, name: &str, shape: &[usize]) -> Id {
            let data = self.rng.fill(shape.iter().product());
            self.env.tensors.insert(name.into(), (shape.to_vec(), data));
            self.dag.leaf(Sym::Weight(Binding::whole(name)))
        }

        /// A cache state leaf of `len` positions.
        fn cache(&mut self, kind: StateKind, h: usize, d: usize, len: usize) -> Id {
            let data = self.rng.fill(h * len * d);
            self.env.states.insert((kind, Some(0)), Value::Cache { h, d, len, data });
            self.dag.leaf(Sym::State(kind, Some(0)))
        }

        /// An array state leaf of `n` values.
        fn state(&mut self, kind: StateKind, n: usize) -> Id {
            let data = self.rng.fill(n);
            self.env.states.insert((kind, Some(0)), Value::vec(data));
            self.dag.leaf(Sym::State(kind, Some(0)))
        }

        fn raw(&mut self, sym: Sym, args: &[Id]) -> Id {
            self.dag.raw(sym, args)
        }

        fn done(self, lhs: Id, rhs: Id) -> Instance {
            Instance { dag: self.dag, lhs, rhs, env: self.env }
        }
    }

    /// Both sides evaluate, and to the same values.
    fn agree(i: &Instance) -> Result<(), TestCaseError> {
        let (a, b) = (eval(&i.dag, i.lhs, &i.env), eval(&i.dag, i.rhs, &i.env));
        let (a, b) = (a.map_err(TestCaseError::fail)?, b.map_err(TestCaseError::fail)?);
        prop_assert!(differ(&a, &b).is_none(), "{}: {a:?} vs {b:?}", i.dag.show(i.lhs, 4));
        Ok(())
    }

    /// The builder rewrites the left side's top symbol, over the left side's operands, to the
    /// right side, and records `lemma`.
    fn normalises(i: &mut Instance, lemma: Lemma) -> Result<(), TestCaseError> {
        let top = i.dag.node(i.lhs).clone();
        let before = i.dag.fired.len();
        let n = i.dag.mk(top.sym, &top.args);
        prop_assert_eq!(n, i.rhs, "{} ↦ {}", i.dag.show(i.lhs, 3), i.dag.show(n, 3));
        prop_assert!(i.dag.fired[before..].iter().any(|(l, _)| *l == lemma), "{lemma} not recorded");
        Ok(())
    }

    fn config() -> ProptestConfig {
        ProptestConfig { cases: if cfg!(debug_assertions) { 32 } else { 256 }, ..ProptestConfig::default() }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn rows_of_matvec(seed: u64, r in 1usize..12, c in 1usize..9, a in 0usize..12, b in 0usize..12) {
            let s = a % r;
            let e = s + 1 + b % (r - s);
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[r, c]);
            let x = l.tensor("x", &[c]);
            let m = l.raw(Sym::MatVec, &[w, x]);
            let lhs = l.raw(Sym::Rows { start: s, end: e }, &[m]);
            let ws = l.dag.leaf(Sym::Weight(Binding::rows("w", s, e)));
            let rhs = l.raw(Sym::MatVec, &[ws, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::RowsOfMatVec)?;
        }

        #[test]
        fn head_half_of_matvec(seed: u64, heads in 1usize..5, d in 1usize..6, c in 1usize..7, half in 0usize..2) {
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[heads * 2 * d, c]);
            let x = l.tensor("x", &[c]);
            let m = l.raw(Sym::MatVec, &[w, x]);
            let lhs = l.raw(Sym::HeadHalf { d, half }, &[m]);
            let wh = l.dag.leaf(Sym::Weight(Binding::head_half("w", d, half)));
            let rhs = l.raw(Sym::MatVec, &[wh, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::HeadHalfOfMatVec)?;
        }

        #[test]
        fn slice_of_concat(seed: u64, lens in proptest::collection::vec(1usize..6, 2..5), pick in 0usize..5) {
            let mut l = Leaves::new(seed);
            let parts: Vec<Id> = lens.iter().enumerate().map(|(i, &n)| l.tensor(&format!("p{i}"), &[n])).collect();
            let cat = l.raw(Sym::Concat { rows: 1, lens: lens.clone() }, &parts);
            let i = pick % lens.len();
            let start: usize = lens[..i].iter().sum();
            let lhs = l.raw(Sym::Slice { start, end: start + lens[i], n: lens.iter().sum() }, &[cat]);
            let mut inst = l.done(lhs, parts[i]);
            agree(&inst)?;
            normalises(&mut inst, Lemma::SliceOfConcat)?;
        }

        #[test]
        fn whole_slice(seed: u64, rows in 1usize..4, n in 1usize..7) {
            let mut l = Leaves::new(seed);
            let x = l.tensor("x", &[rows, n]);
            let lhs = l.raw(Sym::Slice { start: 0, end: n, n }, &[x]);
            let mut i = l.done(lhs, x);
            agree(&i)?;
            normalises(&mut i, Lemma::WholeSlice)?;
        }

        #[test]
        fn concat_of_rows(seed: u64, a in 0usize..4, n1 in 1usize..5, n2 in 1usize..5, c in 1usize..6) {
            let mut l = Leaves::new(seed);
            l.tensor("w", &[a + n1 + n2, c]);
            let x = l.tensor("x", &[c]);
            let w1 = l.dag.leaf(Sym::Weight(Binding::rows("w", a, a + n1)));
            let w2 = l.dag.leaf(Sym::Weight(Binding::rows("w", a + n1, a + n1 + n2)));
            let m1 = l.raw(Sym::MatVec, &[w1, x]);
            let m2 = l.raw(Sym::MatVec, &[w2, x]);
            let lhs = l.raw(Sym::Concat { rows: 1, lens: vec![n1, n2] }, &[m1, m2]);
            let w = l.dag.leaf(Sym::Weight(Binding::rows("w", a, a + n1 + n2)));
            let rhs = l.raw(Sym::MatVec, &[w, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::ConcatOfRows)?;
        }

        #[test]
        fn add_and_mul_commute(seed: u64, n in 1usize..9, mul: bool) {
            let mut l = Leaves::new(seed);
            let a = l.tensor("a", &[n]);
            let b = l.tensor("b", &[n]);
            let sym = if mul { Sym::Mul } else { Sym::Add };
            let lhs = l.raw(sym.clone(), &[b, a]);
            let rhs = l.raw(sym, &[a, b]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, if mul { Lemma::MulCommutes } else { Lemma::AddCommutes })?;
        }

        #[test]
        fn conv_window(seed: u64, c in 1usize..6, k in 1usize..5) {
            let mut l = Leaves::new(seed);
            let big_x = l.state(StateKind::Conv, c * k);
            let x = l.tensor("x", &[c]);
            let w = l.raw(Sym::DropFirstCol { c, k }, &[big_x]);
            let lhs = l.raw(Sym::AppendCol { c, k }, &[w, x]);
            let rhs = l.raw(Sym::ConvShift { c, k }, &[big_x, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::ConvWindow)?;
        }

        #[test]
        fn delta_orientation(seed: u64, hk in 1usize..4, r in 1usize..4, dk in 1usize..5, dv in 1usize..5, out in 0usize..2) {
            let hv = hk * r;
            let mut l = Leaves::new(seed);
            let s = l.state(StateKind::Recurrent, hv * dk * dv);
            let ins = [l.tensor("q", &[hk * dk]), l.tensor("k", &[hk * dk]), l.tensor("v", &[hv * dv]), l.tensor("g", &[hv]), l.tensor("b", &[hv])];
            let t = l.raw(Sym::TransposeKv { hv, dk, dv }, &[s]);
            let vk = l.raw(Sym::DeltaRuleVk { hv, hk, dk, dv }, &[&[t][..], &ins].concat());
            let lhs = l.raw(Sym::Proj(out), &[vk]);
            let rule = l.raw(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Tiled }, &[&[s][..], &ins].concat());
            let p = l.raw(Sym::Proj(out), &[rule]);
            let rhs = if out == 0 { l.raw(Sym::TransposeKv { hv, dk, dv }, &[p]) } else { p };
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            // The builder writes the tiled map of one key head or of as many as value heads as
            // grouped (`trivial-head-map`): normalise the right side the same way first.
            if hk > 1 && hk < hv {
                normalises(&mut i, Lemma::DeltaOrientation)?;
            }
        }

        #[test]
        fn kv_append_at_fill(seed: u64, h in 1usize..4, d in 1usize..5, pos in 0usize..8) {
            let mut l = Leaves::new(seed);
            l.env.pos = pos;
            let c = l.cache(StateKind::KeyCache, h, d, pos);
            let x = l.tensor("x", &[h * d]);
            let p = l.dag.leaf(Sym::Pos);
            let pre = l.raw(Sym::Prealloc { h, d }, &[c]);
            let lhs = l.raw(Sym::KvWrite { h, d }, &[pre, p, x]);
            let app = l.raw(Sym::KvAppend { h, d }, &[c, x]);
            let rhs = l.raw(Sym::Prealloc { h, d }, &[app]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::KvAppendAtFill)?;
        }

        #[test]
        fn attend_filled_prefix(seed: u64, kvh in 1usize..3, r in 1usize..3, d in 1usize..5, pos in 0usize..8, scale in 0.1f64..2.0) {
            let heads = kvh * r;
            let mut l = Leaves::new(seed);
            l.env.pos = pos;
            let kc = l.cache(StateKind::KeyCache, kvh, d, pos);
            let vc = l.cache(StateKind::ValueCache, kvh, d, pos);
            let (q, kx, vx) = (l.tensor("q", &[heads * d]), l.tensor("kx", &[kvh * d]), l.tensor("vx", &[kvh * d]));
            let p = l.dag.leaf(Sym::Pos);
            let k1 = l.raw(Sym::KvAppend { h: kvh, d }, &[kc, kx]);
            let v1 = l.raw(Sym::KvAppend { h: kvh, d }, &[vc, vx]);
            let (pk, pv) = (l.raw(Sym::Prealloc { h: kvh, d }, &[k1]), l.raw(Sym::Prealloc { h: kvh, d }, &[v1]));
            let scale = Real::new(scale);
            let lhs = l.raw(Sym::AttendPrefix { scale, heads, kv_heads: kvh }, &[q, pk, pv, p]);
            let attn = Sym::Attention { scale, window: None, map: HeadMap::Grouped, heads, kv_heads: kvh };
            let rhs = l.raw(attn, &[q, k1, v1]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::AttendFilledPrefix)?;
        }

        #[test]
        fn trivial_head_map(seed: u64, n in 1usize..5, one: bool, d in 1usize..4, pos in 0usize..5) {
            // Attention: one KV head, or as many as query heads.
            let kvh = if one { 1 } else { n };
            let mut l = Leaves::new(seed);
            l.env.pos = pos;
            let kc = l.cache(StateKind::KeyCache, kvh, d, pos + 1);
            let vc = l.cache(StateKind::ValueCache, kvh, d, pos + 1);
            let q = l.tensor("q", &[n * d]);
            let at = |map| Sym::Attention { scale: Real::new(0.5), window: None, map, heads: n, kv_heads: kvh };
            let lhs = l.raw(at(HeadMap::Tiled), &[q, kc, vc]);
            let rhs = l.raw(at(HeadMap::Grouped), &[q, kc, vc]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::TrivialHeadMap)?;
            // The delta rule: one key head, or as many as value heads.
            let mut l = Leaves::new(seed ^ 1);
            let s = l.state(StateKind::Recurrent, n * d * d);
            let ins = [l.tensor("q", &[kvh * d]), l.tensor("k", &[kvh * d]), l.tensor("v", &[n * d]), l.tensor("g", &[n]), l.tensor("b", &[n])];
            let all = [&[s][..], &ins].concat();
            let dr = |map| Sym::DeltaRule { hv: n, hk: kvh, dk: d, dv: d, map };
            let lhs = l.raw(dr(HeadMap::Tiled), &all);
            let rhs = l.raw(dr(HeadMap::Grouped), &all);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::TrivialHeadMap)?;
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn whole_rows(seed: u64, r in 1usize..6, c in 1usize..5) {
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[r, c]);
            l.dag.rows.insert("w".into(), r);
            let lhs = l.raw(Sym::Weight(Binding::rows("w", 0, r)), &[]);
            let mut i = l.done(lhs, w);
            agree(&i)?;
            normalises(&mut i, Lemma::WholeRows)?;
        }

        #[test]
        fn slice_of_heads(seed: u64, heads in 1usize..4, d in 1usize..5, c in 1usize..5, half in 0usize..2) {
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[heads * 2 * d, c]);
            let x = l.tensor("x", &[c]);
            let m = l.raw(Sym::MatVec, &[w, x]);
            let lhs = l.raw(Sym::Slice { start: half * d, end: (half + 1) * d, n: 2 * d }, &[m]);
            let wh = l.dag.leaf(Sym::Weight(Binding::head_half("w", d, half)));
            let rhs = l.raw(Sym::MatVec, &[wh, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::SliceOfHeads)?;
        }

        #[test]
        fn partial_rotary(seed: u64, rows in 1usize..4, half in 1usize..4, rest in 1usize..4, pos in 0usize..9, theta in 2.0f64..1e6) {
            let (r, hd) = (2 * half, 2 * half + rest);
            let mut l = Leaves::new(seed);
            l.env.pos = pos;
            let x = l.tensor("x", &[rows * hd]);
            let p = l.dag.leaf(Sym::Pos);
            let style = stepcheck::ir::RopeStyle::Neox;
            let theta = Real::new(theta);
            let head = l.raw(Sym::Slice { start: 0, end: r, n: hd }, &[x]);
            let turned = l.raw(Sym::Rope { theta, dims: r, style, hd: r }, &[head, p]);
            let tail = l.raw(Sym::Slice { start: r, end: hd, n: hd }, &[x]);
            let lhs = l.raw(Sym::Concat { rows, lens: vec![r, hd - r] }, &[turned, tail]);
            let rhs = l.raw(Sym::Rope { theta, dims: r, style, hd }, &[x, p]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PartialRotary)?;
        }

        #[test]
        fn broadcast_commutes(seed: u64, rows in 1usize..4, n in 1usize..6, which in 0usize..4) {
            let mut l = Leaves::new(seed);
            let x = l.tensor("x", &[n]);
            let f = [
                Sym::Scale(Real::new(0.5)),
                Sym::Offset(Real::new(1.5)),
                Sym::Act(stepcheck::ir::Act::Silu),
                Sym::L2Norm { eps: Real::new(1e-6), n },
            ][which].clone();
            let b = l.raw(Sym::Broadcast { rows }, &[x]);
            let lhs = l.raw(f.clone(), &[b]);
            let inside = l.raw(f, &[x]);
            let rhs = l.raw(Sym::Broadcast { rows }, &[inside]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::BroadcastCommutes)?;
        }

        #[test]
        fn one_key_head(seed: u64, hv in 2usize..5, dk in 1usize..4, dv in 1usize..4, out in 0usize..2) {
            let mut l = Leaves::new(seed);
            let s = l.state(StateKind::Recurrent, hv * dk * dv);
            let (q, k) = (l.tensor("q", &[dk]), l.tensor("k", &[dk]));
            let rest = [l.tensor("v", &[hv * dv]), l.tensor("g", &[hv]), l.tensor("b", &[hv])];
            let (qb, kb) = (l.raw(Sym::Broadcast { rows: hv }, &[q]), l.raw(Sym::Broadcast { rows: hv }, &[k]));
            let many = l.raw(Sym::DeltaRule { hv, hk: hv, dk, dv, map: HeadMap::Grouped }, &[&[s, qb, kb][..], &rest].concat());
            let one = l.raw(Sym::DeltaRule { hv, hk: 1, dk, dv, map: HeadMap::Grouped }, &[&[s, q, k][..], &rest].concat());
            let (lhs, rhs) = (l.raw(Sym::Proj(out), &[many]), l.raw(Sym::Proj(out), &[one]));
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            let top = i.dag.node(many).clone();
            let before = i.dag.fired.len();
            prop_assert_eq!(i.dag.mk(top.sym, &top.args), one);
            prop_assert!(i.dag.fired[before..].iter().any(|(l, _)| *l == Lemma::OneKeyHead));
        }
    }

    /// A permutation of `0..n` for `n` in `sizes`, as proptest shuffles (and shrinks) it.
    fn permutation(sizes: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u32>> {
        sizes.prop_flat_map(|n| Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn permute_through_matvec(seed: u64, p in permutation(2..5), k in 1usize..3, c in 1usize..4) {
            let nb = p.len();
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[nb * k, c]);
            let x = l.tensor("x", &[c]);
            l.dag.cols.insert("w".into(), c);
            let pw = l.dag.permute(&p, k * c, w);
            let lhs = l.raw(Sym::MatVec, &[pw, x]);
            let m = l.raw(Sym::MatVec, &[w, x]);
            let rhs = l.dag.permute(&p, k, m);
            prop_assume!(pw != w);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteThroughMatVec)?;
        }

        #[test]
        fn permute_cancels(seed: u64, rows in 1usize..4, q in permutation(2..5), dv in 1usize..3) {
            let hv = q.len();
            let mut l = Leaves::new(seed);
            let w = l.tensor("w", &[rows, hv * dv]);
            let x = l.tensor("x", &[hv * dv]);
            l.dag.cols.insert("w".into(), hv * dv);
            prop_assume!(!stepcheck::prove::permute::is_identity(&q));
            let cols: Vec<u32> = (0..rows).flat_map(|r| q.iter().map(move |&h| (r * hv) as u32 + h)).collect();
            let (pw, px) = (l.dag.permute(&cols, dv, w), l.dag.permute(&q, dv, x));
            let lhs = l.raw(Sym::MatVec, &[pw, px]);
            let rhs = l.raw(Sym::MatVec, &[w, x]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteCancels)?;
        }

        #[test]
        fn permute_commutes(seed: u64, p in permutation(2..5), n in 1usize..4, which in 0usize..4) {
            let nb = p.len();
            let mut l = Leaves::new(seed);
            let (a, b) = (l.tensor("a", &[nb * n]), l.tensor("b", &[nb * n]));
            let w = l.tensor("w", &[n]);
            prop_assume!(!stepcheck::prove::permute::is_identity(&p));
            let (pa, pb) = (l.dag.permute(&p, n, a), l.dag.permute(&p, n, b));
            let (lhs, inner) = match which {
                0 => (l.raw(Sym::Act(stepcheck::ir::Act::Silu), &[pa]), l.raw(Sym::Act(stepcheck::ir::Act::Silu), &[a])),
                1 => (l.raw(Sym::Mul, &[pa, pb]), l.raw(Sym::Mul, &[a, b])),
                2 => {
                    let rms = Sym::RmsNorm { eps: Real::new(1e-6), n };
                    (l.raw(rms.clone(), &[pa, w]), l.raw(rms, &[a, w]))
                }
                _ => {
                    let l2 = Sym::L2Norm { eps: Real::new(1e-6), n };
                    (l.raw(l2.clone(), &[pa]), l.raw(l2, &[a]))
                }
            };
            let rhs = l.dag.permute(&p, n, inner);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteCommutes)?;
        }

        #[test]
        fn permute_through_concat(seed: u64, la in 1usize..4, p in permutation(2..4), s in 1usize..3) {
            let nb = p.len();
            let mut l = Leaves::new(seed);
            let (a, b) = (l.tensor("a", &[la]), l.tensor("b", &[nb * s]));
            prop_assume!(!stepcheck::prove::permute::is_identity(&p));
            let pb = l.dag.permute(&p, s, b);
            let lens = vec![la, nb * s];
            let lhs = l.raw(Sym::Concat { rows: 1, lens: lens.clone() }, &[a, pb]);
            let joined = l.raw(Sym::Concat { rows: 1, lens: lens.clone() }, &[a, b]);
            let whole = stepcheck::prove::permute::concat(&lens, &[None, stepcheck::prove::permute::expand(&p, s, 1)]);
            let rhs = l.dag.permute(&whole, 1, joined);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteThroughConcat)?;
        }

        #[test]
        fn permute_through_slice(seed: u64, before in 0usize..3, q in permutation(2..5), after in 0usize..3) {
            let len = q.len();
            let mut l = Leaves::new(seed);
            let n = before + len + after;
            let x = l.tensor("x", &[n]);
            // The whole row is `whole-slice`'s, not this lemma's.
            prop_assume!(!stepcheck::prove::permute::is_identity(&q) && before + after > 0);
            let p = stepcheck::prove::permute::concat(&[before, len, after], &[None, Some(q.clone()), None]);
            let px = l.dag.permute(&p, 1, x);
            let slice = Sym::Slice { start: before, end: before + len, n };
            let lhs = l.raw(slice.clone(), &[px]);
            let inner = l.raw(slice, &[x]);
            let rhs = l.dag.permute(&q, 1, inner);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteThroughSlice)?;
        }

        #[test]
        fn permute_through_conv(seed: u64, p in permutation(2..5), k in 1usize..4, depthwise: bool) {
            let c = p.len();
            let mut l = Leaves::new(seed);
            prop_assume!(!stepcheck::prove::permute::is_identity(&p));
            let big_s = l.state(StateKind::Conv, c * k);
            let (lhs, rhs) = if depthwise {
                let w = l.tensor("w", &[c, k]);
                let (ps, pw) = (l.dag.permute(&p, k, big_s), l.dag.permute(&p, k, w));
                let lhs = l.raw(Sym::DepthwiseConv { c, k }, &[ps, pw]);
                let inner = l.raw(Sym::DepthwiseConv { c, k }, &[big_s, w]);
                (lhs, l.dag.permute(&p, 1, inner))
            } else {
                let x = l.tensor("x", &[c]);
                let (ps, px) = (l.dag.permute(&p, k, big_s), l.dag.permute(&p, 1, x));
                let lhs = l.raw(Sym::ConvShift { c, k }, &[ps, px]);
                let inner = l.raw(Sym::ConvShift { c, k }, &[big_s, x]);
                (lhs, l.dag.permute(&p, k, inner))
            };
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::PermuteThroughConv)?;
        }

        #[test]
        fn tiled_delta_rule(seed: u64, hk in 2usize..4, r in 2usize..4, dk in 1usize..4, dv in 1usize..4, out in 0usize..2) {
            let hv = hk * r;
            let heads = stepcheck::prove::permute::tiled_heads(hk, hv);
            let mut l = Leaves::new(seed);
            let s = l.state(StateKind::Recurrent, hv * dk * dv);
            let (q, k) = (l.tensor("q", &[hk * dk]), l.tensor("k", &[hk * dk]));
            let (v, g, b) = (l.tensor("v", &[hv * dv]), l.tensor("g", &[hv]), l.tensor("b", &[hv]));
            let ps = l.dag.permute(&heads, dk * dv, s);
            let (pv, pg, pb) = (l.dag.permute(&heads, dv, v), l.dag.permute(&heads, 1, g), l.dag.permute(&heads, 1, b));
            let tiled = l.raw(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Tiled }, &[ps, q, k, pv, pg, pb]);
            let lhs = l.raw(Sym::Proj(out), &[tiled]);
            let grouped = l.raw(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, &[s, q, k, v, g, b]);
            let part = l.raw(Sym::Proj(out), &[grouped]);
            let rhs = l.dag.permute(&heads, if out == 0 { dk * dv } else { dv }, part);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::TiledDeltaRule)?;
        }

        #[test]
        fn repeat_commutes(seed: u64, rows in 1usize..4, m in 1usize..4, r in 2usize..4, l2: bool) {
            let mut l = Leaves::new(seed);
            let x = l.tensor("x", &[rows * m]);
            let f = if l2 { Sym::L2Norm { eps: Real::new(1e-6), n: m } } else { Sym::Scale(Real::new(0.5)) };
            let rep = Sym::Concat { rows, lens: vec![m; r] };
            let xr = l.raw(rep.clone(), &vec![x; r]);
            let lhs = l.raw(f.clone(), &[xr]);
            let fx = l.raw(f, &[x]);
            let rhs = l.raw(rep, &vec![fx; r]);
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            normalises(&mut i, Lemma::RepeatCommutes)?;
        }

        #[test]
        fn repeat_heads(seed: u64, hk in 1usize..4, r in 2usize..4, dk in 1usize..4, dv in 1usize..3, out in 0usize..2) {
            let hv = hk * r;
            let mut l = Leaves::new(seed);
            let s = l.state(StateKind::Recurrent, hv * dk * dv);
            let (q, k) = (l.tensor("q", &[hk * dk]), l.tensor("k", &[hk * dk]));
            let rest = [l.tensor("v", &[hv * dv]), l.tensor("g", &[hv]), l.tensor("b", &[hv])];
            let rep = Sym::Concat { rows: hk, lens: vec![dk; r] };
            let (qr, kr) = (l.raw(rep.clone(), &vec![q; r]), l.raw(rep, &vec![k; r]));
            let many = l.raw(Sym::DeltaRule { hv, hk: hv, dk, dv, map: HeadMap::Grouped }, &[&[s, qr, kr][..], &rest].concat());
            let few = l.raw(Sym::DeltaRule { hv, hk, dk, dv, map: HeadMap::Grouped }, &[&[s, q, k][..], &rest].concat());
            let (lhs, rhs) = (l.raw(Sym::Proj(out), &[many]), l.raw(Sym::Proj(out), &[few]));
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            let top = i.dag.node(many).clone();
            let before = i.dag.fired.len();
            prop_assert_eq!(i.dag.mk(top.sym, &top.args), few);
            prop_assert!(i.dag.fired[before..].iter().any(|(l, _)| *l == Lemma::RepeatHeads));
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn scale_by_one(seed: u64, n in 1usize..6) {
            let mut l = Leaves::new(seed);
            let x = l.tensor("x", &[n]);
            let lhs = l.raw(Sym::Scale(Real::new(1.0)), &[x]);
            let mut i = l.done(lhs, x);
            agree(&i)?;
            normalises(&mut i, Lemma::ScaleByOne)?;
        }

        #[test]
        fn delta_query_scale(seed: u64, hv in 1usize..4, dk in 1usize..4, dv in 1usize..4, out in 0usize..2, f in -2.0f64..2.0) {
            let mut l = Leaves::new(seed);
            let s = l.state(StateKind::Recurrent, hv * dk * dv);
            let (q, k) = (l.tensor("q", &[hv * dk]), l.tensor("k", &[hv * dk]));
            let rest = [l.tensor("v", &[hv * dv]), l.tensor("g", &[hv]), l.tensor("b", &[hv])];
            let sym = Sym::DeltaRule { hv, hk: hv, dk, dv, map: HeadMap::Grouped };
            let qs = l.raw(Sym::Scale(Real::new(f)), &[q]);
            let scaled = l.raw(sym.clone(), &[&[s, qs, k][..], &rest].concat());
            let plain = l.raw(sym, &[&[s, q, k][..], &rest].concat());
            let lhs = l.raw(Sym::Proj(out), &[scaled]);
            let part = l.raw(Sym::Proj(out), &[plain]);
            let rhs = if out == 1 { l.raw(Sym::Scale(Real::new(f)), &[part]) } else { part };
            let mut i = l.done(lhs, rhs);
            agree(&i)?;
            let before = i.dag.fired.len();
            prop_assert_eq!(i.dag.mk(Sym::Proj(out), &[scaled]), rhs);
            prop_assert!(i.dag.fired[before..].iter().any(|(l, _)| *l == Lemma::DeltaQueryScale));
        }
    }

    /// Each lemma has its property above: the list is the lemma set.
    #[test]
    fn every_lemma_has_a_property() {
        let tested = [
            Lemma::RowsOfMatVec,
            Lemma::HeadHalfOfMatVec,
            Lemma::SliceOfConcat,
            Lemma::WholeSlice,
            Lemma::ConcatOfRows,
            Lemma::AddCommutes,
            Lemma::MulCommutes,
            Lemma::ConvWindow,
            Lemma::DeltaOrientation,
            Lemma::KvAppendAtFill,
            Lemma::AttendFilledPrefix,
            Lemma::TrivialHeadMap,
            Lemma::WholeRows,
            Lemma::SliceOfHeads,
            Lemma::PartialRotary,
            Lemma::BroadcastCommutes,
            Lemma::OneKeyHead,
            Lemma::PermuteThroughMatVec,
            Lemma::PermuteCancels,
            Lemma::PermuteCommutes,
            Lemma::PermuteThroughConcat,
            Lemma::PermuteThroughSlice,
            Lemma::PermuteThroughConv,
            Lemma::TiledDeltaRule,
            Lemma::RepeatCommutes,
            Lemma::RepeatHeads,
            Lemma::ScaleByOne,
            Lemma::DeltaQueryScale,
        ];
        assert_eq!(tested.to_vec(), Lemma::ALL.to_vec());
    }

    /// A false "lemma" fails its property: the evaluator tells a grouped map from a tiled one.
    #[test]
    fn the_property_can_fail() {
        let mut l = Leaves::new(7);
        let (hv, hk, dk, dv) = (4, 2, 3, 3);
        let s = l.state(StateKind::Recurrent, hv * dk * dv);
        let ins = [
            l.tensor("q", &[hk * dk]),
            l.tensor("k", &[hk * dk]),
            l.tensor("v", &[hv * dv]),
            l.tensor("g", &[hv]),
            l.tensor("b", &[hv]),
        ];
        let all = [&[s][..], &ins].concat();
        let dr = |map| Sym::DeltaRule { hv, hk, dk, dv, map };
        let a = l.raw(dr(HeadMap::Tiled), &all);
        let b = l.raw(dr(HeadMap::Grouped), &all);
        let i = l.done(a, b);
        let (x, y) = (eval(&i.dag, i.lhs, &i.env).unwrap(), eval(&i.dag, i.rhs, &i.env).unwrap());
        assert!(differ(&x, &y).is_some());
    }
}

// ---- The gate's power: each planted bug, and what catches it (docs/SOUNDNESS.md's table). ----

mod table {
    use super::*;
    use stepcheck::check::{Verdict, compare};
    use stepcheck::model::random::random_checkpoint;
    use stepcheck::model::{Checkpoint, Tensor};

    /// What catches a planted bug: the prover alone, the numeric check alone, or both.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Catch {
        Both,
        Prover,
        Numeric,
    }

    /// Five steps from position 0: RoPE is not the identity after the first, and the caches fill.
    const TOKENS: [u32; 5] = [3, 1, 4, 1, 5];

    /// The tiny preset's seeded checkpoint.
    fn checkpoint() -> Checkpoint {
        random_checkpoint(&preset("tiny").expect("a preset"), 7)
    }

    /// Whether the numeric check (`check::compare`: the program in `engine::run` against `graph` in
    /// the reference interpreter, as the oracle runs it) finds the bug: a disagreement, or a
    /// program the engine cannot run. An agreement or an inconclusive comparison misses it.
    fn numeric_catches(graph: &Graph, program: &Program, ck: &Checkpoint) -> (bool, String) {
        match compare(graph, program, ck, &TOKENS) {
            Ok(Verdict::Disagree(w)) => (true, format!("disagree at {} {}", w.tensor, w.step)),
            Ok(v @ Verdict::Agree { .. }) => (false, v.to_string()),
            Ok(v) => (false, v.to_string()),
            Err(e) => (true, format!("the engine cannot run it: {e}")),
        }
    }

    /// The row's measured catch, checked against the expected one; prints the row with `SHOW`.
    fn row(bug: &str, proof: &ProofVerdict, numeric: (bool, String), expected: Catch) {
        let by_prover = proof.is_refuted();
        assert!(
            by_prover || proof.is_proved(),
            "`{bug}`: the prover must refute or prove, never leave a planted bug inconclusive: {proof}"
        );
        let found = match (by_prover, numeric.0) {
            (true, true) => Catch::Both,
            (true, false) => Catch::Prover,
            (false, true) => Catch::Numeric,
            (false, false) => panic!("`{bug}` is caught by neither: {proof}; numeric: {}", numeric.1),
        };
        if std::env::var("SHOW").is_ok() {
            let p = match proof {
                ProofVerdict::Refuted(r) => format!("refuted: {}, {}: {}", r.stage, r.output, r.why),
                v => v.word().to_string(),
            };
            println!("| {bug} | {p} | {} | {found:?} |", numeric.1);
        }
        assert_eq!(found, expected, "`{bug}`: {proof}\nnumeric: {}", numeric.1);
    }

    /// What catches each planted program bug, by its name in `PLANTED_PROGRAMS`.
    const PROGRAM_ROWS: &[(&str, Catch)] = &[
        ("head halves swapped (queries and output gate)", Catch::Both),
        ("an RMS norm's eps not carried", Catch::Both),
        ("the gated norm's eps not carried", Catch::Both),
        ("RoPE's θ not carried", Catch::Both),
        ("the rotary dims not carried (the whole head rotated)", Catch::Both),
        ("a delta state layout transposed ([dk][dv] declared for the engine's [dv][dk])", Catch::Both),
        ("a conv window of K columns where the engine keeps K−1", Catch::Both),
        ("the wrong key-head count of a delta rule (every value head on one key head)", Catch::Both),
        ("the attention's scale not carried", Catch::Both),
        ("the SwiGLU's gate and up projections swapped", Catch::Both),
        ("no advance: the position never moves", Catch::Both),
        ("the advance moved before the layers", Catch::Both),
        ("the attention's key norm dropped", Catch::Both),
        ("a buffer stored in f32 where the numerics store activations in bf16", Catch::Both),
        ("a KV cache stored in f32 where the numerics store it in bf16", Catch::Both),
    ];

    #[test]
    fn planted_program_bugs_by_catcher() {
        let ck = checkpoint();
        assert_eq!(PROGRAM_ROWS.len(), PLANTED_PROGRAMS.len());
        for case in PLANTED_PROGRAMS {
            let &(_, expected) = PROGRAM_ROWS.iter().find(|(b, _)| *b == case.bug).expect("a row per bug");
            let (authored, fused, mut program) = stages("tiny", case.numerics);
            (case.plant)(&mut program);
            let proof = prove(&authored, &fused, &program);
            row(case.bug, &proof, numeric_catches(&fused, &program, &ck), expected);
        }
    }

    /// The tiny preset's fused graph with `edit` applied to the op that writes `tensor`.
    fn edited_fused(tensor: &str, edit: fn(&mut OpKind)) -> (Graph, Program) {
        let (_, mut fused, program) = stages("tiny", Numerics::F32);
        let t = fused.find(tensor).unwrap_or_else(|| panic!("no tensor {tensor}"));
        let op = fused.ops.iter_mut().find(|o| o.outputs.contains(&t)).expect("an op writes it");
        edit(&mut op.kind);
        (fused, program)
    }

    #[test]
    fn planted_graph_bugs_by_catcher() {
        let ck = checkpoint();
        // A row range off by one: the delta rule's queries bound to rows 1..17 of the merged
        // projection, where the program's merged rows start at row 0.
        let (_, mut fused, program) = stages("tiny", Numerics::F32);
        let c = fused.consts.iter_mut().find(|c| c.binding.to_string() == "blk.1.attn_qkv.weight rows 0..16").unwrap();
        c.binding.view = View::Rows { start: 1, end: 17 };
        let proof = prove(&fused, &fused, &program);
        row(
            "a row range off by one (queries at rows 1..17)",
            &proof,
            numeric_catches(&fused, &program, &ck),
            Catch::Both,
        );

        // Conv taps reversed: the graph's conv reads its `[C, K]` weight with the taps in reverse
        // order (a tensor holding the reversed taps), the program the weight as stored.
        let (_, mut fused, program) = stages("tiny", Numerics::F32);
        let mut ck_rev = ck.clone();
        let c = fused.consts.iter_mut().find(|c| c.binding.tensor == "blk.1.ssm_conv1d.weight").expect("a conv weight");
        let w = ck.get(&c.binding.tensor).expect("the conv weight").clone();
        let k = w.shape[1];
        assert!(k > 1, "taps reversed needs two taps");
        let data: Vec<f32> = w.to_f32().expect("f32").chunks(k).flat_map(|r| r.iter().rev().copied()).collect();
        ck_rev.insert("blk.1.ssm_conv1d.weight.reversed", Tensor::f32(w.shape.clone(), &data));
        c.binding.tensor = "blk.1.ssm_conv1d.weight.reversed".into();
        let proof = prove(&fused, &fused, &program);
        row("conv taps reversed", &proof, numeric_catches(&fused, &program, &ck_rev), Catch::Both);

        // The wrong key-head map: the graph's delta rule grouped where the engine's is tiled, and
        // its attention tiled where the engine's is grouped.
        let (fused, program) = edited_fused("l1.o", |k| *k = OpKind::DeltaRule { head_map: HeadMap::Grouped });
        let proof = prove(&fused, &fused, &program);
        row("the wrong key-head map (delta rule grouped)", &proof, numeric_catches(&fused, &program, &ck), Catch::Both);
        let (fused, program) = edited_fused("l0.attn", |k| {
            if let OpKind::Attention { head_map, .. } = k {
                *head_map = HeadMap::Tiled;
            }
        });
        let proof = prove(&fused, &fused, &program);
        row("the wrong key-head map (attention tiled)", &proof, numeric_catches(&fused, &program, &ck), Catch::Both);

        // An eps the program does not carry: the graph's l2 norm eps 1e-5.
        let (fused, program) = edited_fused("l1.k.normed", |k| *k = OpKind::L2Norm { eps: 1e-5 });
        let proof = prove(&fused, &fused, &program);
        // Its effect is below the check's tolerance on this checkpoint: only the prover sees it.
        row("the l2 norm's eps not carried", &proof, numeric_catches(&fused, &program, &ck), Catch::Both);
    }

    #[test]
    fn mis_fused_shim_patterns_by_catcher() {
        // The authored conv activation is gelu (the SwiGLU's gelu-tanh), the fused graph still has
        // conv_bias_silu (glu_act_mul of silu): what a pattern taking any activation makes. The
        // numeric check compares the program with the *fused* graph, so it agrees.
        let ck = checkpoint();
        for (tensor, act, bug) in [
            ("l1.conv.silu", Act::Gelu, "a mis-fused shim pattern (fused conv over a gelu)"),
            ("l0.ffn.act", Act::GeluTanh, "a mis-fused shim pattern (SwiGLU over a gelu-tanh)"),
        ] {
            let (mut authored, fused, program) = stages("tiny", Numerics::F32);
            let t = authored.find(tensor).unwrap();
            authored.ops.iter_mut().find(|o| o.outputs.contains(&t)).unwrap().kind = OpKind::Act(act);
            let proof = prove(&authored, &fused, &program);
            row(bug, &proof, numeric_catches(&fused, &program, &ck), Catch::Prover);
        }
    }

    #[test]
    fn meaning_preserving_edits_prove_and_agree() {
        // Not bugs: the prover proves them and the numeric check agrees.
        let ck = checkpoint();
        let (authored, fused, mut program) = stages("tiny", Numerics::F32);
        edit_first(&mut program, |c| match c {
            Command::Add { residual, x, .. } => {
                std::mem::swap(residual, x);
                true
            }
            _ => false,
        });
        assert!(prove(&authored, &fused, &program).is_proved());
        assert!(!numeric_catches(&fused, &program, &ck).0);
    }
}

// ---- Roundings sit exactly where the numerics say. ----

/// The tiny preset at `numerics`: the proof's roundings, as `(place, storage, count)`.
fn roundings(numerics: Numerics) -> Vec<(String, String, usize)> {
    let (authored, fused, program) = stages("tiny", numerics);
    let v = prove(&authored, &fused, &program);
    let ProofVerdict::Proved(p) = &v else { panic!("{numerics}: {v}") };
    p.roundings.iter().map(|((place, s), n)| (place.name().to_string(), s.to_string(), *n)).collect()
}

#[test]
fn roundings_sit_where_the_numerics_say() {
    let n = |a, k, s| Numerics { activations: a, kv_cache: k, recurrent_state: s, ..Numerics::F32 };
    let (f32, bf16, f16) = (Storage::F32, Storage::Bf16, Storage::F16);
    // At f32 nothing is rounded.
    assert!(roundings(Numerics::F32).is_empty());
    // Each place is rounded to its own storage, and only places whose storage is below f32: the
    // tiny preset has two Gated-DeltaNet layers (a conv window and a delta state each) and two
    // attention layers (two caches each).
    let places = |r: &[(String, String, usize)]| -> Vec<(String, String)> {
        r.iter().map(|(p, s, _)| (p.clone(), s.clone())).collect()
    };
    let count = |r: &[(String, String, usize)], place: &str| r.iter().find(|(p, ..)| p == place).map(|x| x.2);
    let r = roundings(n(bf16, bf16, f32));
    assert_eq!(
        places(&r),
        [("buffer", "bf16"), ("conv window", "bf16"), ("kv cache", "bf16")].map(|(a, b)| (a.into(), b.into()))
    );
    assert_eq!((count(&r, "conv window"), count(&r, "kv cache")), (Some(2), Some(4)));
    // (`lower_graph` refuses a delta state below f32, so the state stays f32.)
    let r = roundings(n(f32, f16, f32));
    assert_eq!(places(&r), [("kv cache", "f16")].map(|(a, b)| (a.into(), b.into())));
    assert_eq!(count(&r, "kv cache"), Some(4));
}

#[test]
fn a_delta_state_rounded_where_the_numerics_keep_f32_is_refuted() {
    // A program `lower_graph` would refuse to write; the prover refutes it on its own.
    let v = prove_planted_program(Numerics::BF16, |p| {
        p.states.iter_mut().find(|s| matches!(s.layout, StateLayout::DeltaState { .. })).unwrap().storage =
            Storage::Bf16
    });
    assert!(refuted(&v, "delta state in bf16").contains("rounding of"), "{v}");
}
