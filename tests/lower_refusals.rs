//! Every way `lower_graph` refuses a graph, each from one case: a graph that must be refused, the
//! `LowerError` variant it must name, and where (block and layer).
//!
//! The graphs are the `tiny` preset's step (layer 0 and 3 attention, 1 and 2 Gated-DeltaNet) with
//! one thing changed, or a spec with one construct the engine has no unit for.

use stepcheck::engine::lower::{LowerError, lower_graph, lower_graph_with};
use stepcheck::engine::program::BlockKind::{self, *};
use stepcheck::engine::{Numerics, Storage, shim::EngineShim};
use stepcheck::fuse::Symbol;
use stepcheck::ir::{Graph, HeadMap, Op, OpKind, RopeStyle, StateKind, TensorDecl, TensorId, Ty};
use stepcheck::model::bind::Binding;
use stepcheck::model::spec::{Experts, Ffn, LatentAttention, ModelSpec, PostNorm, RopeScaling, Routing, SlidingWindow};
use stepcheck::model::{author::decode_step, presets};

// ---- The boundary: author, fuse, lower. ----

fn authored(spec: &ModelSpec) -> Graph {
    decode_step(spec).expect("the author writes every spec of these tests")
}

fn fused(g: &Graph) -> Graph {
    EngineShim::default().prepare(g)
}

fn tiny() -> Graph {
    authored(&presets::tiny())
}

// ---- Graph edits, by tensor name. ----

fn id(g: &Graph, name: &str) -> TensorId {
    g.find(name).unwrap_or_else(|| panic!("no tensor %{name}"))
}

/// The index of the op writing `%out`.
fn writer(g: &Graph, out: &str) -> usize {
    let t = id(g, out);
    g.ops.iter().position(|o| o.outputs.contains(&t)).unwrap_or_else(|| panic!("no op writes %{out}"))
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

fn set_kind(mut g: Graph, op_writing: &str, kind: OpKind) -> Graph {
    let op = writer(&g, op_writing);
    g.ops[op].kind = kind;
    g
}

/// Appends an op reading `inputs` and writing a new tensor `%out` of type `ty`.
fn append(mut g: Graph, kind: OpKind, inputs: &[&str], out: &str, ty: Ty) -> Graph {
    let inputs = inputs.iter().map(|n| id(&g, n)).collect();
    g.tensors.push(TensorDecl { name: out.into(), ty });
    let t = TensorId(g.tensors.len() - 1);
    g.ops.push(Op { kind, inputs, outputs: vec![t] });
    g
}

fn relabel_state(mut g: Graph, kind: StateKind, layer: usize, to: usize) -> Graph {
    g.states.iter_mut().find(|s| s.kind == kind && s.layer == Some(layer)).expect("state").layer = Some(to);
    g
}

fn swap_state_writes(mut g: Graph, a: StateKind, b: StateKind, layer: usize) -> Graph {
    let i = g.states.iter().position(|s| s.kind == a && s.layer == Some(layer)).expect("state");
    let j = g.states.iter().position(|s| s.kind == b && s.layer == Some(layer)).expect("state");
    let (wi, wj) = (g.states[i].write, g.states[j].write);
    g.states[i].write = wj;
    g.states[j].write = wi;
    g
}

// ---- The cases. ----

/// How a case is lowered.
enum Lower {
    /// The engine's shim, f32.
    Engine(Graph),
    /// An already fused graph, f32.
    AsIs(Graph),
    /// The engine's shim at these numerics.
    At(Graph, Numerics),
    /// A shim without this symbol.
    Without(Graph, Symbol),
}

struct Case {
    what: &'static str,
    input: Lower,
    error: &'static str,
    at: Option<(BlockKind, Option<usize>)>,
}

fn case(what: &'static str, input: Lower, error: &'static str, at: Option<(BlockKind, Option<usize>)>) -> Case {
    Case { what, input, error, at }
}

fn with(f: impl FnOnce(&mut ModelSpec)) -> Graph {
    let mut s = presets::tiny();
    f(&mut s);
    authored(&s)
}

fn cases() -> Vec<Case> {
    use Lower::*;
    let l = Some;
    let kd = 16; // tiny: 2 key heads of 8
    vec![
        case(
            "the key rows of attn_qkv shifted by one row: not the rows after the queries",
            Engine(rebind(tiny(), "blk.1.attn_qkv.k", Binding::rows("blk.1.attn_qkv.weight", kd + 1, 2 * kd + 1))),
            "NotFusable",
            Some((DeltaNet, l(1))),
        ),
        case(
            "a merged_qkv whose key rows do not follow its query rows",
            AsIs(rebind(
                fused(&tiny()),
                "blk.1.attn_qkv.k",
                Binding::rows("blk.1.attn_qkv.weight", kd + 1, 2 * kd + 1),
            )),
            "MergedNotContiguous",
            Some((DeltaNet, l(1))),
        ),
        case(
            "layer 1's value rows read from layer 2's attn_qkv: its query and key rows still merge, two \
             outputs where the block's unit splits three",
            Engine(rebind(tiny(), "blk.1.attn_qkv.v", Binding::rows("blk.2.attn_qkv.weight", 2 * kd, 2 * kd + 48))),
            "WrongArity",
            Some((DeltaNet, l(1))),
        ),
        case(
            "layer 1's output projection bound to layer 2's tensor",
            Engine(rebind(tiny(), "blk.1.ssm_out", Binding::whole("blk.2.ssm_out.weight"))),
            "WrongBinding",
            Some((DeltaNet, l(1))),
        ),
        case(
            "the query norm bound to the key norm's weight",
            Engine(rebind(tiny(), "blk.0.attn_q_norm", Binding::whole("blk.0.attn_k_norm.weight"))),
            "WrongBinding",
            Some((Attention, l(0))),
        ),
        case(
            "the output gate read from the queries' half of attn_q",
            Engine(rebind(tiny(), "blk.3.attn_q.gate", Binding::head_half("blk.3.attn_q.weight", 32, 0))),
            "NotFusable",
            Some((Attention, l(3))),
        ),
        case(
            "layer 1's mixer norm reads the stale residual of layer 0's input",
            Engine(rewire(tiny(), "l1.x", 0, "h0")),
            "WrongOp",
            Some((MixerNorm, l(1))),
        ),
        case(
            "the query scale is an offset",
            Engine(set_kind(tiny(), "l1.q.scaled", OpKind::Offset { value: 0.25 })),
            "WrongOp",
            Some((DeltaNet, l(1))),
        ),
        case(
            "the delta rule reads value heads in grouped order, the engine's unit in tiled order",
            Engine(set_kind(tiny(), "l2.o", OpKind::DeltaRule { head_map: HeadMap::Grouped })),
            "WrongAttribute",
            Some((DeltaNet, l(2))),
        ),
        case(
            "the query scale is not 1/√dk",
            Engine(set_kind(tiny(), "l1.q.scaled", OpKind::Scale { factor: 0.5 })),
            "WrongAttribute",
            Some((DeltaNet, l(1))),
        ),
        case(
            "the key RoPE uses another theta than the query RoPE",
            Engine(set_kind(
                tiny(),
                "l0.k.rope",
                OpKind::Rope { theta: 500.0, rotary_dims: 8, style: RopeStyle::Neox },
            )),
            "WrongAttribute",
            Some((Attention, l(0))),
        ),
        case(
            "interleaved RoPE",
            Engine(set_kind(
                set_kind(
                    tiny(),
                    "l3.q.rope",
                    OpKind::Rope { theta: 1e4, rotary_dims: 8, style: RopeStyle::Interleaved },
                ),
                "l3.k.rope",
                OpKind::Rope { theta: 1e4, rotary_dims: 8, style: RopeStyle::Interleaved },
            )),
            "InterleavedRope",
            Some((Attention, l(3))),
        ),
        case(
            "layer 0's key cache append reads layer 3's cache",
            Engine(rewire(rewire(tiny(), "l0.kcache.next", 0, "l3.kcache"), "l3.kcache.next", 0, "l0.kcache")),
            "WrongTensor",
            Some((Attention, l(0))),
        ),
        case(
            "the key and value caches' end-of-step tensors swapped",
            Engine(swap_state_writes(tiny(), StateKind::KeyCache, StateKind::ValueCache, 0)),
            "WrongStateWrite",
            Some((Attention, l(0))),
        ),
        case(
            "layer 1's conv state labelled as layer 2's",
            Engine(relabel_state(tiny(), StateKind::Conv, 1, 2)),
            "MissingState",
            Some((DeltaNet, l(1))),
        ),
        case(
            "layer 1 has no state of either mixer",
            Engine(relabel_state(relabel_state(tiny(), StateKind::Conv, 1, 9), StateKind::Recurrent, 1, 9)),
            "UnknownMixer",
            Some((DeltaNet, l(1))),
        ),
        case(
            "an op outside the block reads the delta rule's β",
            Engine(append(tiny(), OpKind::Scale { factor: 2.0 }, &["l1.b"], "stray", Ty::tensor(&[4]))),
            "StrayRead",
            Some((DeltaNet, l(1))),
        ),
        case(
            "a dead op reading the final norm's output",
            Engine(append(tiny(), OpKind::Act(stepcheck::ir::Act::Exp), &["h.final"], "dead", Ty::tensor(&[64]))),
            "UnreadOp",
            None,
        ),
        case(
            "a second query RoPE nobody reads",
            Engine(append(
                tiny(),
                OpKind::Rope { theta: 1e4, rotary_dims: 8, style: RopeStyle::Neox },
                &["l0.q.normed", "pos"],
                "twin",
                Ty::tensor(&[4, 32]),
            )),
            "AmbiguousOp",
            Some((Attention, l(0))),
        ),
        case(
            "an op reads a tensor nothing writes",
            Engine(rewire(tiny(), "l1.q.raw", 1, "l2.q.raw")),
            "InvalidGraph",
            None,
        ),
        case(
            "a bf16 recurrent state",
            At(tiny(), Numerics { recurrent_state: Storage::Bf16, ..Numerics::F32 }),
            "RecurrentStateBelowF32",
            None,
        ),
        case("no merged_qkv", Without(tiny(), Symbol::MergedQkv), "Unfused", Some((Attention, l(0)))),
        case("no conv_bias_silu", Without(tiny(), Symbol::ConvBiasSilu), "Unfused", Some((DeltaNet, l(1)))),
        case("no gdn_gating", Without(tiny(), Symbol::GdnGating), "Unfused", Some((DeltaNet, l(1)))),
        case("no glu_act_mul", Without(tiny(), Symbol::GluActMul), "Unfused", Some((Attention, l(0)))),
        // The constructs the engine has no unit for.
        case(
            "Gemma's sandwich norms",
            Engine(with(|s| s.constructs.post_norm = PostNorm::Sandwich)),
            "NormAfterMixer",
            Some((MixerAdd, l(0))),
        ),
        case(
            "OLMo 2's post-norms",
            Engine(with(|s| s.constructs.post_norm = PostNorm::PostOnly)),
            "NormAfterMixer",
            Some((MixerNorm, l(0))),
        ),
        case(
            "a GELU MLP",
            Engine(with(|s| s.constructs.ffn = Ffn::GeluMlp { tanh: true })),
            "NotSwiGlu",
            Some((Ffn, l(0))),
        ),
        case("GeGLU", Engine(with(|s| s.constructs.ffn = Ffn::GeGlu)), "NotSwiGlu", Some((Ffn, l(0)))),
        case("ReLU²", Engine(with(|s| s.constructs.ffn = Ffn::Relu2Mlp)), "NotSwiGlu", Some((Ffn, l(0)))),
        case(
            "gpt-oss's clamped SwiGLU",
            Engine(with(|s| s.constructs.ffn = Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 })),
            "NotSwiGlu",
            Some((Ffn, l(0))),
        ),
        case(
            "attention sinks",
            Engine(with(|s| s.constructs.attention_sinks = true)),
            "AttentionSinks",
            Some((Attention, l(0))),
        ),
        case(
            "a sliding window on layer 3",
            Engine(with(|s| s.constructs.sliding_window = Some(SlidingWindow { window: 4, layers: vec![3] }))),
            "SlidingWindow",
            Some((Attention, l(3))),
        ),
        case(
            "a scaled embedding",
            Engine(with(|s| s.constructs.embedding_scale = Some(8.0))),
            "ScaledEmbedding",
            Some((Embedding, None)),
        ),
        case(
            "scores scaled by 1/2, not 1/√32 (Gemma's query_pre_attn_scalar)",
            Engine(with(|s| s.constructs.attention_scale = Some(0.5))),
            "AttentionScale",
            Some((Attention, l(0))),
        ),
        case(
            "q/k/v biases on an ungated attention (Qwen2)",
            Engine(with(|s| (s.attention.output_gate, s.constructs.qkv_bias) = (false, true))),
            "AttentionBias",
            Some((Attention, l(0))),
        ),
        case(
            "a bias on the attention's output projection",
            Engine(with(|s| s.constructs.output_bias = true)),
            "AttentionBias",
            Some((Attention, l(0))),
        ),
        case(
            "linearly scaled RoPE",
            Engine(with(|s| s.constructs.rope_scaling = Some(RopeScaling::Linear { factor: 8.0 }))),
            "ScaledRope",
            Some((Attention, l(0))),
        ),
        case(
            "interleaved RoPE, as the author writes it",
            Engine(with(|s| s.attention.rope_style = RopeStyle::Interleaved)),
            "InterleavedRope",
            Some((Attention, l(0))),
        ),
        case(
            "experts: a softmax router, top-k renormalised",
            Engine(with(|s| s.constructs.experts = Some(Experts::new(4, 2, 16)))),
            "Experts",
            Some((Ffn, l(0))),
        ),
        case(
            "experts with a gated shared expert, layer 0 dense",
            Engine(with(|s| {
                let mut e = Experts::new(4, 2, 16);
                (e.shared_intermediate, e.dense_layers) = (Some(24), vec![0]);
                s.constructs.experts = Some(e);
            })),
            "Experts",
            Some((Ffn, l(1))),
        ),
        case(
            "gpt-oss's experts: top-k then softmax, biases, clamped SwiGLU",
            Engine(with(|s| {
                let mut e = Experts::new(4, 2, 16);
                (e.routing, e.router_bias, e.expert_bias) = (Routing::TopKSoftmax, true, true);
                s.constructs.experts = Some(e);
                s.constructs.ffn = Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 };
            })),
            "Experts",
            Some((Ffn, l(0))),
        ),
        case(
            "DeepSeek-V3's experts: sigmoid scores, group limit, ungated shared expert",
            Engine(with(|s| {
                let mut e = Experts::new(8, 2, 16);
                e.routing = Routing::SigmoidGroupLimited { groups: 2, keep_groups: 1 };
                (e.shared_intermediate, e.shared_gate, e.weight_scale) = (Some(16), false, Some(2.5));
                s.constructs.experts = Some(e);
            })),
            "Experts",
            Some((Ffn, l(0))),
        ),
        case(
            "latent attention with a compressed query",
            Engine(with(|s| s.constructs.latent_attention = Some(latent(Some(10))))),
            "LatentAttention",
            Some((Attention, l(0))),
        ),
        case(
            "latent attention with a direct query (DeepSeek-V2-Lite)",
            Engine(with(|s| s.constructs.latent_attention = Some(latent(None)))),
            "LatentAttention",
            Some((Attention, l(0))),
        ),
    ]
}

fn latent(q_rank: Option<usize>) -> LatentAttention {
    LatentAttention { q_rank, kv_rank: 12, nope_dim: 6, rope_dim: 4, value_dim: 5 }
}

fn lower(input: Lower) -> Result<stepcheck::engine::Program, LowerError> {
    match input {
        Lower::Engine(g) => lower_graph(&fused(&g), Numerics::F32),
        Lower::AsIs(g) => lower_graph(&g, Numerics::F32),
        Lower::At(g, n) => lower_graph(&fused(&g), n),
        Lower::Without(g, s) => {
            let shim = EngineShim::default().without(s);
            lower_graph_with(&shim.prepare(&g), Numerics::F32, &shim)
        }
    }
}

#[test]
fn each_case_is_refused_with_its_variant_at_its_place() {
    for c in cases() {
        let err = match lower(c.input) {
            Ok(_) => panic!("{}: accepted, expected {}", c.what, c.error),
            Err(e) => e,
        };
        assert_eq!(err.name(), c.error, "{}: {err}", c.what);
        let at = err.site().map(|s| (s.block, s.layer));
        assert_eq!(at, c.at, "{}: {err}", c.what);
    }
}

#[test]
fn every_variant_but_the_unreachable_ones_has_a_case() {
    let named: Vec<&str> = cases().iter().map(|c| c.error).collect();
    let not_yet: [&str; 0] = [];
    for v in [
        "InvalidGraph",
        "RecurrentStateBelowF32",
        "WrongOp",
        "AmbiguousOp",
        "WrongTensor",
        "WrongBinding",
        "WrongAttribute",
        "WrongArity",
        "MissingState",
        "WrongStateWrite",
        "StrayRead",
        "UnreadOp",
        "UnknownMixer",
        "Unfused",
        "NotFusable",
        "MergedNotContiguous",
        "NormAfterMixer",
        "NotSwiGlu",
        "Experts",
        "LatentAttention",
        "AttentionSinks",
        "SlidingWindow",
        "ScaledEmbedding",
        "InterleavedRope",
        "AttentionScale",
        "ScaledRope",
        "AttentionBias",
    ] {
        assert!(named.contains(&v) && !not_yet.contains(&v), "{v} has no case");
    }
}

#[test]
fn a_refusal_reads_as_a_sentence_naming_the_place() {
    let err = lower(Lower::Engine(with(|s| s.constructs.attention_sinks = true))).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "layer 0's attention block (op 14): attention sinks (a learned logit per head joins the softmax): \
         the engine's attention unit has none"
    );
}

#[test]
fn the_shim_leaves_a_malformed_graph_for_the_lowering_to_refuse() {
    let mut g = tiny();
    g.ops[3].outputs.clear();
    g.ops[5].inputs.push(TensorId(usize::MAX));
    assert_eq!(fused(&g), g);
    assert_eq!(lower(Lower::Engine(g)).map(|_| ()).map_err(|e| e.name()), Err("InvalidGraph"));
}
