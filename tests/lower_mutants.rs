//! The rules of `lower_graph` that mutation testing (cargo-mutants, docs/SOUNDNESS.md) found no test
//! stating: each test is one rule, read off the graph alone, with the exact place it names.
//!
//! The graphs are the `tiny` preset's step (layers 0 and 3 attention, 1 and 2 Gated-DeltaNet) with one
//! thing changed, before or after the engine's shim fuses it, lowered at f32.

use stepcheck::engine::lower::{LowerError, Site, lower_graph, refusals_in_order};
use stepcheck::engine::program::BlockKind::{self, *};
use stepcheck::engine::{Numerics, Program, shim::EngineShim};
use stepcheck::interp::Runner;
use stepcheck::ir::{Act, Fused, Graph, Op, OpKind, RopeStyle, StateKind, TensorDecl, TensorId, Ty, parse_graph};
use stepcheck::model::bind::Binding;
use stepcheck::model::spec::{Ffn, ModelSpec, PostNorm};
use stepcheck::model::{Checkpoint, Tensor, author::decode_step, presets, random::random_checkpoint};

// ---- The boundary: author, fuse, lower. ----

fn tiny() -> Graph {
    decode_step(&presets::tiny()).expect("the author writes tiny")
}

fn fused(g: &Graph) -> Graph {
    EngineShim::default().prepare(g)
}

fn lowered(g: &Graph) -> Result<Program, LowerError> {
    lower_graph(g, Numerics::F32)
}

/// `g` fused by the engine's shim.
fn engine(g: Graph) -> Graph {
    fused(&g)
}

// ---- Graph edits and places, by tensor name. ----

fn id(g: &Graph, name: &str) -> TensorId {
    g.find(name).unwrap_or_else(|| panic!("no tensor %{name}"))
}

/// The index of the op writing `%out`.
fn writer(g: &Graph, out: &str) -> usize {
    let t = id(g, out);
    g.ops.iter().position(|o| o.outputs.contains(&t)).unwrap_or_else(|| panic!("no op writes %{out}"))
}

fn set_kind(mut g: Graph, op_writing: &str, kind: OpKind) -> Graph {
    let op = writer(&g, op_writing);
    g.ops[op].kind = kind;
    g
}

fn rebind(mut g: Graph, constant: &str, binding: Binding) -> Graph {
    let t = id(&g, constant);
    g.consts.iter_mut().find(|c| c.tensor == t).expect("a constant").binding = binding;
    g
}

fn rewire(mut g: Graph, op_writing: &str, operand: usize, to: &str) -> Graph {
    let (op, t) = (writer(&g, op_writing), id(&g, to));
    g.ops[op].inputs[operand] = t;
    g
}

fn relabel_state(mut g: Graph, kind: StateKind, layer: usize, to: usize) -> Graph {
    g.states.iter_mut().find(|s| s.kind == kind && s.layer == Some(layer)).expect("state").layer = Some(to);
    g
}

/// `g` with the two inputs of the op writing `%out` swapped.
fn swap_inputs(mut g: Graph, out: &str) -> Graph {
    let op = writer(&g, out);
    g.ops[op].inputs.swap(0, 1);
    g
}

/// `g` with the op writing `%op` moved to just before the op writing `%before`.
fn move_before(mut g: Graph, op: &str, before: &str) -> Graph {
    let from = writer(&g, op);
    let moved = g.ops.remove(from);
    let to = writer(&g, before);
    g.ops.insert(to, moved);
    g
}

/// `g` with `new` inserted as lines of its listing just before the line declaring `%before`.
fn insert_lines(g: &Graph, before: &str, new: &[&str]) -> Graph {
    let declares = format!("%{before}: ");
    let mut text = vec![];
    for line in g.to_string().lines() {
        if line.starts_with(&declares) {
            text.extend(new.iter().map(|l| l.to_string()));
        }
        text.push(line.to_string());
    }
    parse_graph(&text.join("\n")).unwrap_or_else(|e| panic!("the edited listing does not read: {e}"))
}

/// `g` with every line of its listing that mentions one of `on` rewritten by `edit`, read back.
fn edit_lines(g: &Graph, on: &[&str], edit: impl Fn(String) -> String) -> Graph {
    let text: Vec<String> = g
        .to_string()
        .lines()
        .map(|line| if on.iter().any(|w| line.contains(w)) { edit(line.to_string()) } else { line.to_string() })
        .collect();
    parse_graph(&text.join("\n")).unwrap_or_else(|e| panic!("the edited listing does not read: {e}"))
}

/// Appends an op reading `inputs` and writing a new tensor `%out` of type `ty`.
fn append(mut g: Graph, kind: OpKind, inputs: &[&str], out: &str, ty: Ty) -> Graph {
    let inputs = inputs.iter().map(|n| id(&g, n)).collect();
    g.tensors.push(TensorDecl { name: out.into(), ty });
    let t = TensorId(g.tensors.len() - 1);
    g.ops.push(Op { kind, inputs, outputs: vec![t] });
    g
}

// ---- The cases: a fused graph, the variant it must be refused with, and the exact place. ----

/// Where a refusal must be: the block, the layer, and the op by the tensor it writes (or no op).
type At = (BlockKind, Option<usize>, Option<&'static str>);

struct Case {
    what: &'static str,
    /// The graph lowered: fused by the engine's shim, then perhaps edited.
    graph: Graph,
    error: &'static str,
    at: At,
}

fn case(what: &'static str, graph: Graph, error: &'static str, at: At) -> Case {
    Case { what, graph, error, at }
}

fn cases() -> Vec<Case> {
    let l = Some;
    vec![
        // A layer is an attention block when it has either cache; then a missing one is named.
        case(
            "layer 0's value cache labelled as layer 9's",
            engine(relabel_state(tiny(), StateKind::ValueCache, 0, 9)),
            "MissingState",
            (Attention, l(0), None),
        ),
        case(
            "layer 3's key cache labelled as layer 9's",
            engine(relabel_state(tiny(), StateKind::KeyCache, 3, 9)),
            "MissingState",
            (Attention, l(3), None),
        ),
        // An attribute the engine's unit fixes is refused at the op that has it.
        case(
            "the delta rule's query scale is not 1/√dk",
            engine(set_kind(tiny(), "l1.q.scaled", OpKind::Scale { factor: 0.5 })),
            "WrongAttribute",
            (DeltaNet, l(1), Some("l1.q.scaled")),
        ),
        case(
            "the key RoPE's theta is not the query RoPE's",
            engine(set_kind(
                tiny(),
                "l3.k.rope",
                OpKind::Rope { theta: 500.0, rotary_dims: 8, style: RopeStyle::Neox },
            )),
            "WrongAttribute",
            (Attention, l(3), Some("l3.k.rope")),
        ),
        // The head writes the step's logits, or the head is not the engine's.
        case(
            "the step's logits are a copy of the head's output, not its output",
            engine({
                let mut g =
                    append(tiny(), OpKind::Scale { factor: 1.0 }, &["logits"], "logits.copy", Ty::tensor(&[97]));
                g.logits = id(&g, "logits.copy");
                g
            }),
            "WrongTensor",
            (Head, None, Some("logits")),
        ),
        // An attribute fixed by the engine's unit is compared up to a few units in its last place,
        // relative to its size.
        case(
            "the delta rule's query scale 16 units in the last place above 1/√8",
            engine(set_kind(
                tiny(),
                "l2.q.scaled",
                OpKind::Scale { factor: 8f64.sqrt().recip() * (1.0 + 16.0 * f64::EPSILON) },
            )),
            "WrongAttribute",
            (DeltaNet, l(2), Some("l2.q.scaled")),
        ),
        // Any other score scale is a construct the attention refusal names, before the block is matched.
        case(
            "the attention's scale 16 units in the last place below 1/√32",
            engine(set_kind(
                tiny(),
                "l0.attn",
                OpKind::Attention {
                    scale: 32f64.sqrt().recip() * (1.0 - 16.0 * f64::EPSILON),
                    window: None,
                    head_map: stepcheck::ir::HeadMap::Grouped,
                },
            )),
            "AttentionScale",
            (Attention, l(0), Some("l0.attn")),
        ),
        // The gates: SiLU on the Gated-DeltaNet's gated norm, sigmoid on the attention's output.
        case(
            "the attention's output gate is SiLU",
            set_kind(engine(tiny()), "l0.attn.gated", OpKind::Fused(Fused::GluActMul { act: Act::Silu })),
            "WrongAttribute",
            (Attention, l(0), Some("l0.attn.gated")),
        ),
        case(
            "the gated norm's gate is a sigmoid",
            set_kind(engine(tiny()), "l1.o.gated", OpKind::Fused(Fused::GluActMul { act: Act::Sigmoid })),
            "WrongAttribute",
            (DeltaNet, l(1), Some("l1.o.gated")),
        ),
        // The conv's channels are the query, key and value channels in that order, each whole.
        case(
            "the value channels start one channel early, on the last key channel",
            set_kind(engine(tiny()), "l1.v.flat", OpKind::Slice { start: 31, end: 79 }),
            "WrongOp",
            (DeltaNet, l(1), Some("l1.v.flat")),
        ),
        // Where a fused symbol is expected, only the ops its pattern starts from are named as
        // unfused; any other op is the wrong op.
        case(
            "the SwiGLU product is an add",
            set_kind(engine(tiny()), "l0.ffn.hidden", OpKind::Add),
            "WrongOp",
            (Ffn, l(0), None),
        ),
        // Root cause: the template checked which half each of attn_q's views is, not that both
        // have one head size; the engine split both at the first's and disagreed with the graph.
        case(
            "a merged_qkv reading attn_q's query half of heads of 32 and gate half of heads of 16",
            rebind(engine(tiny()), "blk.3.attn_q.gate", Binding::head_half("blk.3.attn_q.weight", 16, 1)),
            "MergedNotContiguous",
            (Attention, l(3), Some("l3.q.raw")),
        ),
        // The engine's conv unit has no bias.
        case(
            "layer 1's conv with a bias",
            engine(conv_with_bias()),
            "WrongArity",
            (DeltaNet, l(1), Some("l1.conv.silu")),
        ),
        case(
            "the decay is computed, not a constant: no gdn_gating",
            engine(decay_computed()),
            "NotFusable",
            (DeltaNet, l(1), Some("l1.beta")),
        ),
        case(
            "attn_q's halves of two head sizes, left to the shim",
            engine(rebind(tiny(), "blk.3.attn_q.gate", Binding::head_half("blk.3.attn_q.weight", 16, 1))),
            "NotFusable",
            (Attention, l(3), Some("l3.q.raw")),
        ),
        // The engine splits attn_q's heads at the head size of its halves: the query heads must
        // have that size.
        case(
            "layer 0's attention read as 8 heads of 16 from attn_q's halves of 32",
            engine(edit_lines(&tiny(), &["%l0.", "%blk.0.attn_q_norm:", "%blk.0.attn_k_norm:"], |line| {
                line.replace("[4, 32]", "[8, 16]")
                    .replace("[2, 32]", "[4, 16]")
                    .replace(": [32] =", ": [16] =")
                    .replace("scale=0.17677669529663687", "scale=0.25")
            })),
            "WrongAttribute",
            (Attention, l(0), Some("l0.q.raw")),
        ),
        // A merged op that writes fewer parts than its unit splits is refused at that op.
        case(
            "layer 1's value rows read from layer 2's attn_qkv: its query and key rows merge alone",
            engine(rebind(tiny(), "blk.1.attn_qkv.v", Binding::rows("blk.2.attn_qkv.weight", 32, 80))),
            "WrongArity",
            (DeltaNet, l(1), Some("l1.q.raw")),
        ),
        // A block's op whose output is read outside the block is named with the reader.
        case(
            "an op after the step reads layer 1's query projection",
            append(engine(tiny()), OpKind::Act(Act::Silu), &["l1.q.raw"], "stray", Ty::tensor(&[16])),
            "StrayRead",
            (DeltaNet, l(1), Some("l1.q.raw")),
        ),
        // A pattern that reads a state is found from the state first: the append that reads
        // layer 0's key cache is layer 3's, whose key is not layer 0's.
        case(
            "the key caches' appends of layers 0 and 3 swapped",
            engine(rewire(rewire(tiny(), "l0.kcache.next", 0, "l3.kcache"), "l3.kcache.next", 0, "l0.kcache")),
            "WrongTensor",
            (Attention, l(0), Some("l3.kcache.next")),
        ),
        // A layer with its mixer norm, whose residual is also projected directly, is not a
        // post-norm layer: the block finds the next projection of its input where the gate's was.
        case(
            "layer 1's output gate projects the residual, not the normed input",
            engine(rewire(tiny(), "l1.z", 1, "l0.h")),
            "WrongBinding",
            (DeltaNet, l(1), Some("l1.b")),
        ),
        // A scale inside the FFN is not SwiGLU (outside a mixture of experts' weighting).
        case(
            "layer 2's FFN scales its product before the down projection",
            engine(rewire(
                insert_lines(&tiny(), "l2.ffn", &["%l2.ffn.scaled: [96] = scale(factor=2.0) %l2.ffn.hidden"]),
                "l2.ffn",
                1,
                "l2.ffn.scaled",
            )),
            "NotSwiGlu",
            (Ffn, l(2), Some("l2.ffn.scaled")),
        ),
        // An FFN whose product is fused with another activation is not the SwiGLU unit: the
        // refusal names the product.
        case(
            "layer 2's FFN product fused with GELU",
            set_kind(engine(tiny()), "l2.ffn.hidden", OpKind::Fused(Fused::GluActMul { act: Act::Gelu })),
            "NotSwiGlu",
            (Ffn, l(2), Some("l2.ffn.hidden")),
        ),
    ]
}

#[test]
fn each_case_is_refused_with_its_variant_at_its_exact_op() {
    for c in cases() {
        let g = c.graph;
        let err = match lowered(&g) {
            Ok(_) => panic!("{}: accepted, expected {}", c.what, c.error),
            Err(e) => e,
        };
        assert_eq!(err.name(), c.error, "{}: {err}", c.what);
        let (block, layer, op) = c.at;
        let want = Site { block, layer, op: op.map(|t| writer(&g, t)) };
        assert_eq!(err.site(), Some(want), "{}: {err}", c.what);
    }
}

/// The verdict's list (`refusals_in_order`) names only what the engine has no unit for, whatever
/// order a residual add's operands come in, and reads a layer with either recurrent state as
/// Gated-DeltaNet (whose dt bias is no attention bias).
#[test]
fn the_scan_lists_refused_constructs_only() {
    let cases: [(&str, Graph, &[&str]); 3] = [
        (
            "layer 1's residual add with its operands swapped, layer 2's FFN gated by a sigmoid",
            engine(set_kind(
                rewire(rewire(tiny(), "l1.h.mix", 0, "l1.mix"), "l1.h.mix", 1, "l0.h"),
                "l2.ffn.act",
                OpKind::Act(Act::Sigmoid),
            )),
            &["NotSwiGlu"],
        ),
        (
            "layer 1, unfused (its dt bias an add), with its conv state and no recurrent state",
            relabel_state(tiny(), StateKind::Recurrent, 1, 9),
            &[],
        ),
        (
            "layer 2's FFN gated by a sigmoid",
            engine(set_kind(tiny(), "l2.ffn.act", OpKind::Act(Act::Sigmoid))),
            &["NotSwiGlu"],
        ),
    ];
    for (what, g, want) in cases {
        let names: Vec<&str> = refusals_in_order(&g, Numerics::F32).iter().map(|e| e.name()).collect();
        assert_eq!(names, want, "{what}");
    }
    // A sandwich norm is found before the add whichever operand the norm's output is.
    let sandwich = engine(with(|s| s.constructs.post_norm = PostNorm::Sandwich));
    let listed = |g: &Graph| refusals_in_order(g, Numerics::F32).iter().map(|e| e.to_string()).collect::<Vec<_>>();
    let found = listed(&sandwich);
    assert!(found.len() >= 4 && found.iter().all(|e| e.contains("norm")), "{found:?}");
    assert_eq!(listed(&swap_inputs(sandwich, "l1.h.mix")), found, "layer 1's mixer add with its operands swapped");
}

#[test]
fn attributes_a_unit_or_two_in_the_last_place_off_are_accepted() {
    let factor = 8f64.sqrt().recip() * (1.0 + 2.0 * f64::EPSILON);
    let g = engine(set_kind(tiny(), "l1.q.scaled", OpKind::Scale { factor }));
    lowered(&g).unwrap_or_else(|e| panic!("a query scale 2 units in the last place off: {e}"));
}

#[test]
fn a_merge_the_shim_cannot_make_is_refused_saying_which_rows_do_not_follow() {
    let kd = 16; // tiny: 2 key heads of 8
    let g = engine(rebind(tiny(), "blk.1.attn_qkv.k", Binding::rows("blk.1.attn_qkv.weight", kd + 1, 2 * kd + 1)));
    let err = lowered(&g).expect_err("the keys shifted by a row");
    assert!(err.to_string().ends_with("rows 17..33 of blk.1.attn_qkv.weight do not follow row 16"), "{err}");
    let g = engine(rebind(tiny(), "blk.1.attn_qkv.q", Binding::rows("blk.1.attn_qkv.weight", 1, kd + 1)));
    let err = lowered(&g).expect_err("the queries shifted by a row");
    assert!(err.to_string().contains("the first range of blk.1.attn_qkv.weight starts at row 1, not row 0"), "{err}");
}

/// The reason a merge cannot be made reads the projections in row (or half) order, whatever order
/// the author wrote their matvecs in.
#[test]
fn a_merge_the_shim_cannot_make_is_explained_in_row_order_not_op_order() {
    let kd = 16; // tiny: 2 key heads of 8
    let keys_shifted = rebind(tiny(), "blk.1.attn_qkv.k", Binding::rows("blk.1.attn_qkv.weight", kd + 1, 2 * kd + 1));
    let g = engine(move_before(keys_shifted, "l1.k.raw", "l1.q.raw"));
    let err = lowered(&g).expect_err("the keys shifted by a row");
    assert!(err.to_string().ends_with("rows 17..33 of blk.1.attn_qkv.weight do not follow row 16"), "{err}");
    let gate_of_16 = rebind(tiny(), "blk.0.attn_q.gate", Binding::head_half("blk.0.attn_q.weight", 16, 1));
    let g = engine(move_before(gate_of_16, "l0.gate", "l0.q.raw"));
    let err = lowered(&g).expect_err("halves of two head sizes");
    assert!(err.to_string().contains("the head halves [(32, 0), (16, 1)] of blk.0.attn_q.weight"), "{err}");
}

/// Layer 1's decay scaled by 1 (a computed tensor, not a constant) after the softplus in the gate.
fn decay_computed() -> Graph {
    let g = insert_lines(&tiny(), "l1.g", &["%l1.decay: [4] = scale(factor=1.0) %blk.1.ssm_a"]);
    let g = rewire(g, "l1.g", 0, "l1.a.softplus");
    rewire(g, "l1.g", 1, "l1.decay")
}

/// Tiny's random weights, and a bias for layer 1's conv (Qwen3.5 has none).
fn weights() -> Checkpoint {
    let mut ckpt = random_checkpoint(&presets::tiny(), 5);
    let bias: Vec<f32> = (0..80).map(|i| (i as f32 - 40.0) / 100.0).collect();
    ckpt.insert("blk.1.ssm_conv1d.bias", Tensor::f32(vec![80], &bias));
    ckpt
}

/// Layer 1's conv with a bias added before its SiLU.
fn conv_with_bias() -> Graph {
    let g = insert_lines(
        &tiny(),
        "l1.conv.silu",
        &[
            "const %blk.1.ssm_conv1d.bias: [80] = blk.1.ssm_conv1d.bias",
            "%l1.conv.biased: [80] = add %l1.conv.out, %blk.1.ssm_conv1d.bias",
        ],
    );
    rewire(g, "l1.conv.silu", 0, "l1.conv.biased")
}

/// The logits of `g` over a few tokens, by the reference interpreter, on [`weights`].
fn reference_logits(g: &Graph) -> Vec<Vec<f64>> {
    let ckpt = weights();
    let mut r = Runner::new(g, &ckpt).unwrap_or_else(|e| panic!("the reference does not run the graph: {e}"));
    [3, 1, 4].into_iter().map(|t| r.step(t).expect("a step")).collect()
}

#[test]
fn the_shim_never_fuses_away_a_tensor_the_step_still_reads() {
    let cases = [
        ("the SwiGLU product squares the activation", rewire(tiny(), "l0.ffn.hidden", 1, "l0.ffn.act")),
        ("the logits are an activation a product reads", {
            let g = append(tiny(), OpKind::Act(Act::Silu), &["logits"], "logits.act", Ty::tensor(&[97]));
            let mut g = append(g, OpKind::Mul, &["logits.act", "logits"], "logits.dead", Ty::tensor(&[97]));
            g.logits = id(&g, "logits.act");
            g
        }),
        ("layer 1's key rows projected from the stale residual", rewire(tiny(), "l1.k.raw", 1, "l0.h")),
        ("the dt bias multiplied, not added", set_kind(tiny(), "l1.a.biased", OpKind::Mul)),
        ("the SwiGLU product is an add", set_kind(tiny(), "l2.ffn.hidden", OpKind::Add)),
        ("β is exp(b), not sigmoid(b)", set_kind(tiny(), "l1.beta", OpKind::Act(Act::Exp))),
        ("the decay computed, not a constant", decay_computed()),
        ("layer 1's conv with a bias", conv_with_bias()),
    ];
    for (what, g) in cases {
        let f = fused(&g);
        if let Err(e) = f.validate() {
            panic!("{what}: the shim made an invalid graph: {e}");
        }
        assert_eq!(reference_logits(&f), reference_logits(&g), "{what}: the shim changed what the step computes");
    }
}

#[test]
fn the_shim_fuses_the_patterns_in_whatever_order_the_author_wrote_them() {
    let cases = [
        ("the value rows projected before the query rows", move_before(tiny(), "l1.v.raw", "l1.q.raw")),
        ("the gate half projected before the query half", move_before(tiny(), "l0.gate", "l0.q.raw")),
        (
            "the SwiGLU product with the activation second",
            rewire(rewire(tiny(), "l0.ffn.hidden", 0, "l0.ffn.up"), "l0.ffn.hidden", 1, "l0.ffn.act"),
        ),
        (
            "the decay after the softplus in the product",
            rewire(rewire(tiny(), "l1.g", 0, "l1.a.softplus"), "l1.g", 1, "blk.1.ssm_a"),
        ),
    ];
    for (what, g) in cases {
        let f = fused(&g);
        lowered(&f).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(reference_logits(&f), reference_logits(&g), "{what}: the shim changed what the step computes");
    }
}

#[test]
fn a_conv_its_bias_and_its_silu_fuse_into_one_conv_bias_silu_reading_the_bias() {
    let f = fused(&conv_with_bias());
    let conv = &f.ops[writer(&f, "l1.conv.silu")];
    assert_eq!(conv.kind, OpKind::Fused(Fused::ConvBiasSilu));
    let names: Vec<&str> = conv.inputs.iter().map(|&t| f.name_of(t)).collect();
    assert_eq!(names, ["l1.conv.next", "blk.1.ssm_conv1d", "blk.1.ssm_conv1d.bias"]);
}

#[test]
fn a_refusal_lists_what_it_found() {
    let g = set_kind(engine(tiny()), "l0.ffn.hidden", OpKind::Add);
    let err = lowered(&g).expect_err("an add for a product");
    let op = writer(&g, "l0.ffn.hidden");
    let found = format!("found op {op} Add reading %l0.ffn.gate, %l0.ffn.up");
    assert!(err.to_string().ends_with(&format!("reading %l0.ffn.gate, {found}")), "{err}");
}

fn with(f: impl FnOnce(&mut ModelSpec)) -> Graph {
    let mut s = presets::tiny();
    f(&mut s);
    decode_step(&s).expect("the author writes it")
}

#[test]
fn the_refused_constructs_are_those_the_engine_has_no_unit_for_not_malformed_graphs() {
    let construct = |g: Graph| lowered(&engine(g)).expect_err("refused").is_refused_construct();
    assert!(construct(with(|s| s.constructs.ffn = Ffn::GeGlu)));
    assert!(construct(with(|s| s.constructs.attention_sinks = true)));
    assert!(!construct(relabel_state(tiny(), StateKind::ValueCache, 0, 9)));
    assert!(!construct(set_kind(tiny(), "l1.q.scaled", OpKind::Scale { factor: 0.5 })));
}
