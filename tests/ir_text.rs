//! The text form of the IR is stable: printing a graph and parsing the listing gives the graph back,
//! printing a parsed graph gives the listing back, and the parser answers every text with a graph or
//! a `ParseError` that names the line, never a panic.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use stepcheck::ir::{
    Act, Const, Fused, Graph, GraphBuilder, HeadMap, Op, OpKind, ParseError, RopeStyle, StateKind, TensorDecl,
    TensorId, Ty, parse_graph,
};
use stepcheck::model::bind::{Binding, View};
use stepcheck::model::{author::decode_step, presets};

/// Checks the round trip of `g`: its listing parses, the parsed graph prints as the same listing,
/// and it is `g` itself, every float to the bit (`Debug` prints each float's shortest round-trip
/// form, `-0.0` included) and, when no float is NaN, by `==`.
fn assert_round_trip(g: &Graph) {
    let text = g.to_string();
    let back = parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back.to_string(), text, "print ∘ parse ∘ print is not the identity");
    assert_eq!(format!("{back:?}"), format!("{g:?}"), "parse ∘ print changed the graph\n{text}");
    if !has_nan(g) {
        assert_eq!(&back, g);
    }
}

/// Whether an attribute of an op of `g` is NaN.
fn has_nan(g: &Graph) -> bool {
    g.ops.iter().any(|op| floats(&op.kind).iter().any(|x| x.is_nan()))
}

fn floats(kind: &OpKind) -> Vec<f64> {
    match *kind {
        OpKind::Scale { factor } => vec![factor],
        OpKind::Offset { value } => vec![value],
        OpKind::Clamp { min, max } => vec![min, max],
        OpKind::RmsNorm { eps } | OpKind::LayerNorm { eps } | OpKind::L2Norm { eps } => vec![eps],
        OpKind::Rope { theta, .. } => vec![theta],
        OpKind::Attention { scale, .. } => vec![scale],
        OpKind::RopeFreqs { ref inv_freq, scale, .. } => inv_freq.iter().copied().chain([scale]).collect(),
        _ => vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// Authored graphs.

#[test]
fn every_preset_graph_round_trips() {
    for name in presets::PRESETS {
        let spec = presets::preset(name).expect("preset");
        let g = decode_step(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_round_trip(&g);
    }
}

#[test]
fn the_listing_reads_as_the_author_wrote_the_step() {
    let g = decode_step(&presets::tiny()).expect("tiny");
    let text = g.to_string();
    let head: Vec<&str> = text.lines().take(7).collect();
    assert_eq!(
        head,
        [
            "graph \"tiny\"",
            "token %token",
            "state position %pos: position -> %pos.next",
            "const %token_embd: [97, 64] = token_embd.weight",
            "%h0: [64] = embed %token_embd, %token",
            "const %blk.0.attn_norm: [64] = blk.0.attn_norm.weight",
            "%l0.x: [64] = rms_norm(eps=1e-6) %h0, %blk.0.attn_norm",
        ]
    );
    for line in [
        "const %blk.0.attn_q.q: [128, 64] = blk.0.attn_q.weight head_half 32 0",
        "const %blk.1.attn_qkv.q: [16, 64] = blk.1.attn_qkv.weight rows 0..16",
        "state key_cache layer 0 %l0.kcache: cache[2, 32] -> %l0.kcache.next",
        "state conv layer 1 %l1.conv: [80, 4] -> %l1.conv.next",
        "%l0.attn: [4, 32] = attention(scale=0.17677669529663687, window=none, head_map=grouped) \
         %l0.q.rope, %l0.kcache.next, %l0.vcache.next",
        "%l1.state.next: [4, 8, 12], %l1.o: [4, 12] = delta_rule(head_map=tiled) \
         %l1.state, %l1.q.scaled, %l1.k.normed, %l1.v, %l1.g, %l1.beta",
    ] {
        assert!(text.lines().any(|l| l == line), "no line\n  {line}\nin\n{text}");
    }
    assert_eq!(text.lines().last(), Some("logits %logits"));
}

// ---------------------------------------------------------------------------------------------
// Generated graphs: every op kind and attribute value, built valid with `GraphBuilder`.

/// The op forms the generator builds, one per op kind (`kv_append` comes with `attention`,
/// `advance` with every graph).
const FORMS: usize = 29;

/// The sizes, attributes and choices of one generated op.
#[derive(Clone, Debug)]
struct Step {
    form: usize,
    d: [usize; 4],
    x: [f64; 2],
    flag: bool,
    act: Act,
    head_map: HeadMap,
    style: RopeStyle,
    window: Option<usize>,
}

/// A generated graph: its name, the names and bindings its tensors take in turn, and its ops.
#[derive(Clone, Debug)]
struct Recipe {
    name: String,
    names: Vec<String>,
    bindings: Vec<Binding>,
    steps: Vec<Step>,
}

/// Any float, NaN and the values a text form gets wrong first (±inf, −0, the extremes) included.
fn float() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{INFINITE, NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    let special = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.0,
        -0.0,
        1e-6,
        0.1,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
        f64::MIN,
    ];
    prop_oneof![
        1 => proptest::sample::select(special.to_vec()),
        2 => POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO | INFINITE,
    ]
}

/// A name: mostly bare, sometimes with characters that must be quoted, escaped or both.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z][a-z0-9._-]{0,6}",
        1 => "[ a-z\"\\\\%#:=,()\\[\\]\n\r\t\u{0}\u{7f}é→]{0,4}",
        1 => proptest::collection::vec(any::<char>(), 0..4).prop_map(String::from_iter),
    ]
}

fn count() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..300, 1 => any::<usize>()]
}

fn view() -> impl Strategy<Value = View> {
    prop_oneof![
        Just(View::Whole),
        (count(), count()).prop_map(|(start, end)| View::Rows { start, end }),
        (count(), count()).prop_map(|(head_dim, half)| View::HeadHalf { head_dim, half }),
        count().prop_map(|index| View::Expert { index }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        0..FORMS,
        [1usize..=4, 1usize..=4, 1usize..=4, 1usize..=4],
        [float(), float()],
        any::<bool>(),
        proptest::sample::select(Act::ALL.to_vec()),
        prop_oneof![Just(HeadMap::Grouped), Just(HeadMap::Tiled)],
        prop_oneof![Just(RopeStyle::Neox), Just(RopeStyle::Interleaved)],
        proptest::option::of(count()),
    )
        .prop_map(|(form, d, x, flag, act, head_map, style, window)| Step {
            form,
            d,
            x,
            flag,
            act,
            head_map,
            style,
            window,
        })
}

fn recipe() -> impl Strategy<Value = Recipe> {
    (
        name(),
        proptest::collection::vec(name(), 1..6),
        proptest::collection::vec((name(), view()).prop_map(|(tensor, view)| Binding { tensor, view }), 1..4),
        proptest::collection::vec(step(), 0..10),
    )
        .prop_map(|(name, names, bindings, steps)| Recipe { name, names, bindings, steps })
}

/// Builds a recipe's graph: a position, its ops (each reading fresh constants, and the state it
/// updates), the advance, and logits from a matvec.
struct Build<'r> {
    r: &'r Recipe,
    b: GraphBuilder,
    taken: usize,
    layer: usize,
}

impl Build<'_> {
    fn name(&mut self) -> String {
        self.taken += 1;
        self.r.names[self.taken % self.r.names.len()].clone()
    }

    fn constant(&mut self, shape: &[usize]) -> TensorId {
        let name = self.name();
        let binding = self.r.bindings[self.taken % self.r.bindings.len()].clone();
        self.b.constant(&name, shape, binding)
    }

    fn state(&mut self, kind: StateKind, ty: Ty) -> TensorId {
        self.layer += 1;
        let name = self.name();
        self.b.state(kind, Some(self.layer), &name, ty)
    }

    fn op(&mut self, kind: OpKind, ins: &[TensorId], outs: usize) -> Vec<TensorId> {
        let names: Vec<String> = (0..outs).map(|_| self.name()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.b.op(kind, ins, &names)
    }

    fn op1(&mut self, kind: OpKind, ins: &[TensorId]) -> TensorId {
        self.op(kind, ins, 1)[0]
    }

    fn step(&mut self, s: &Step, pos: TensorId) {
        use OpKind::*;
        let [a, b, c, d] = s.d;
        let [x, y] = s.x;
        match s.form {
            0 => {
                let t = self.constant(&[a + 1, b]);
                let token = self.b.token();
                self.op1(Embed, &[t, token]);
            }
            1 => {
                let (w, v) = (self.constant(&[a, b]), self.constant(&[b]));
                self.op1(MatVec, &[w, v]);
            }
            2 => {
                let (p, q) = (self.constant(&[a, b]), self.constant(&[a, b]));
                self.op1(Add, &[p, q]);
            }
            3 => {
                let p = self.constant(&[a, b]);
                let q = if s.flag { self.constant(&[1]) } else { self.constant(&[a, b]) };
                self.op1(Mul, &[p, q]);
            }
            4..=7 | 10 | 11 => {
                let kind = match s.form {
                    4 => Scale { factor: x },
                    5 => Offset { value: x },
                    6 => OpKind::Act(s.act),
                    7 => Clamp { min: x, max: y },
                    10 => L2Norm { eps: x },
                    _ => Softmax,
                };
                let p = self.constant(&[a, b]);
                self.op1(kind, &[p]);
            }
            8 => {
                let (p, w) = (self.constant(&[a, b]), self.constant(&[b]));
                self.op1(RmsNorm { eps: x }, &[p, w]);
            }
            9 => {
                let (p, w, bias) = (self.constant(&[a, b]), self.constant(&[b]), self.constant(&[b]));
                self.op1(LayerNorm { eps: x }, &[p, w, bias]);
            }
            12 => {
                let mut ins = vec![self.constant(&[a, b]), self.constant(&[a, c])];
                if s.flag {
                    ins.push(self.constant(&[a, d]));
                }
                self.op1(Concat, &ins);
            }
            13 => {
                let p = self.constant(&[a, b + c]);
                self.op1(Slice { start: b - 1, end: b + c - usize::from(s.flag && c > 1) }, &[p]);
            }
            14 => {
                let p = self.constant(&[a * b]);
                self.op1(Reshape { shape: if s.flag { vec![a, b] } else { vec![b, 1, a] } }, &[p]);
            }
            15 => {
                let p = self.constant(&[a]);
                self.op1(Broadcast { rows: b }, &[p]);
            }
            16 => {
                let window = self.state(StateKind::Conv, Ty::tensor(&[a, b]));
                let p = self.constant(&[a]);
                let next = self.op1(ConvShift, &[window, p]);
                self.b.write_state(window, next);
            }
            17 => {
                let (p, w) = (self.constant(&[a, b]), self.constant(&[a, b]));
                self.op1(DepthwiseConv, &[p, w]);
            }
            18 => {
                let (hk, hv, dk, dv) = (a, a * b, c, d);
                let st = self.state(StateKind::Recurrent, Ty::tensor(&[hv, dk, dv]));
                let (q, k) = (self.constant(&[hk, dk]), self.constant(&[hk, dk]));
                let v = self.constant(&[hv, dv]);
                let (g, beta) = (self.constant(&[hv]), self.constant(&[hv]));
                let outs = self.op(DeltaRule { head_map: s.head_map }, &[st, q, k, v, g, beta], 2);
                self.b.write_state(st, outs[0]);
            }
            19 => {
                let p = self.constant(&[a, 2 * b]);
                self.op1(Rope { theta: x, rotary_dims: 2 * c.min(b), style: s.style }, &[p, pos]);
            }
            20 => {
                let (kv, nh, dq, dv) = (a, a * b, c, d);
                let kc = self.state(StateKind::KeyCache, Ty::Cache { heads: kv, dim: dq });
                let vc = self.state(StateKind::ValueCache, Ty::Cache { heads: kv, dim: dv });
                let (k, v) = (self.constant(&[kv, dq]), self.constant(&[kv, dv]));
                let kc1 = self.op1(KvAppend, &[kc, k]);
                let vc1 = self.op1(KvAppend, &[vc, v]);
                self.b.write_state(kc, kc1);
                self.b.write_state(vc, vc1);
                let mut ins = vec![self.constant(&[nh, dq]), kc1, vc1];
                if s.flag {
                    ins.push(self.constant(&[nh]));
                }
                self.op1(Attention { scale: x, window: s.window, head_map: s.head_map }, &ins);
            }
            21 => {
                let mut ins = vec![self.constant(&[a + b])];
                if s.flag {
                    ins.push(self.constant(&[a + b]));
                }
                self.op1(TopK { k: b, renormalize: s.flag }, &ins);
            }
            22 => {
                let p = self.constant(&[a + b]);
                self.op1(Pick { index: b - 1 }, &[p]);
            }
            23 => {
                let mut ins = vec![self.constant(&[a]), self.constant(&[b, a]), self.constant(&[c, a])];
                if s.flag {
                    ins.push(self.constant(&[d, a]));
                }
                let outs = ins.len() - 1;
                self.op(Fused(stepcheck::ir::Fused::MergedQkv), &ins, outs);
            }
            24 => {
                let mut ins = vec![self.constant(&[a, b]), self.constant(&[a, b])];
                if s.flag {
                    ins.push(self.constant(&[a]));
                }
                self.op1(Fused(stepcheck::ir::Fused::ConvBiasSilu), &ins);
            }
            25 => {
                let ins: Vec<TensorId> = (0..4).map(|_| self.constant(&[a])).collect();
                self.op(Fused(stepcheck::ir::Fused::GdnGating), &ins, 2);
            }
            26 => {
                let p = self.constant(&[a, 2 * b]);
                let inv_freq = [x, y, x, y].into_iter().take(c.min(b)).collect();
                self.op1(RopeFreqs { inv_freq, scale: y, style: s.style }, &[p, pos]);
            }
            27 => {
                let p = self.constant(&[a * b]);
                self.op1(GroupLimit { groups: a, keep: c.min(a), top: d.min(b) }, &[p]);
            }
            _ => {
                let (g, v) = (self.constant(&[a, b]), self.constant(&[a, b]));
                self.op1(Fused(stepcheck::ir::Fused::GluActMul { act: s.act }), &[g, v]);
            }
        }
    }
}

/// The graph a recipe describes; it is valid.
fn build(r: &Recipe) -> Graph {
    let mut g = Build { r, b: GraphBuilder::new(&r.name), taken: 0, layer: 0 };
    let pos_name = g.name();
    let pos = g.b.state(StateKind::Position, None, &pos_name, Ty::Position);
    for s in &r.steps {
        g.step(s, pos);
    }
    let next = g.op1(OpKind::Advance, &[pos]);
    g.b.write_state(pos, next);
    let (w, x) = (g.constant(&[5, 3]), g.constant(&[3]));
    let logits = g.op1(OpKind::MatVec, &[w, x]);
    g.b.finish(logits).unwrap_or_else(|e| panic!("the generator built an invalid graph: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_graphs_round_trip(r in recipe()) {
        let g = build(&r);
        prop_assert!(g.validate().is_ok(), "{:?}\n{g}", g.validate());
        assert_round_trip(&g);
    }
}

/// `g` with its tensor table shuffled by `seed`: the same graph under other ids.
fn shuffled(g: &Graph, seed: u64) -> Graph {
    let n = g.tensors.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut new_id = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    renumbered(g, &order, &new_id)
}

/// `g` with tensor `order[i]` as tensor `i` (`new_id` the inverse of `order`).
fn renumbered(g: &Graph, order: &[usize], new_id: &[usize]) -> Graph {
    let map = |t: TensorId| TensorId(new_id[t.0]);
    let mut h = g.clone();
    h.tensors = order.iter().map(|&o| g.tensors[o].clone()).collect();
    h.token = map(g.token);
    h.logits = map(g.logits);
    h.consts.iter_mut().for_each(|c| c.tensor = map(c.tensor));
    h.states.iter_mut().for_each(|s| (s.read, s.write) = (map(s.read), map(s.write)));
    for op in &mut h.ops {
        op.inputs.iter_mut().chain(op.outputs.iter_mut()).for_each(|t| *t = map(*t));
    }
    h
}

/// What a graph says, by tensor names rather than ids.
fn by_name(g: &Graph) -> String {
    let n = |t: TensorId| format!("{:?}: {}", g.tensors[t.0].name, g.tensors[t.0].ty);
    let mut s = format!("{:?} token {} logits {}\n", g.name, n(g.token), n(g.logits));
    let mut all: Vec<String> = (0..g.tensors.len()).map(|i| n(TensorId(i))).collect();
    all.sort();
    s += &format!("{all:?}\n");
    for c in &g.consts {
        s += &format!("const {} = {:?}\n", n(c.tensor), c.binding);
    }
    for st in &g.states {
        s += &format!("state {:?} {:?} {} -> {}\n", st.kind, st.layer, n(st.read), n(st.write));
    }
    for op in &g.ops {
        let ins: Vec<String> = op.inputs.iter().map(|&t| n(t)).collect();
        let outs: Vec<String> = op.outputs.iter().map(|&t| n(t)).collect();
        s += &format!("{outs:?} = {:?} {ins:?}\n", op.kind);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the order of its tensor table (a fusion pass appends tensors), a graph's listing
    /// reads back as the same graph under the listing's ids, and prints the same again.
    #[test]
    fn graphs_with_any_table_order_round_trip_up_to_ids(r in recipe(), seed in any::<u64>()) {
        let g = shuffled(&build(&r), seed);
        prop_assert!(g.validate().is_ok());
        let text = g.to_string();
        let back = parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        prop_assert_eq!(back.to_string(), text);
        prop_assert_eq!(by_name(&back), by_name(&g));
    }
}

/// An op whose outputs were appended to the table, as a pass that replaced it leaves them, keeps
/// its place among the ops and does not drag the lines after it to the end: only the constant the
/// author declared just after it now comes just before it.
#[test]
fn an_op_whose_outputs_were_appended_to_the_table_keeps_its_place() {
    let g = decode_step(&presets::tiny()).expect("tiny");
    let rule = g.ops.iter().position(|op| matches!(op.kind, OpKind::DeltaRule { .. })).expect("a delta rule");
    let moved = &g.ops[rule].outputs;
    let mut order: Vec<usize> = (0..g.tensors.len()).filter(|i| !moved.contains(&TensorId(*i))).collect();
    order.extend(moved.iter().map(|t| t.0));
    let mut new_id = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    let text = g.to_string();
    let mut want: Vec<&str> = text.lines().collect();
    let at = want.iter().position(|l| l.contains("= delta_rule")).expect("the delta rule's line");
    assert!(want[at + 1].starts_with("const %blk.1.ssm_norm"), "{}", want[at + 1]);
    want.swap(at, at + 1);
    let moved = renumbered(&g, &order, &new_id).to_string();
    assert_eq!(moved.lines().collect::<Vec<_>>(), want);
}

/// The features of a graph the generator must reach: op names, attribute values, views, names
/// that must be quoted.
fn features(g: &Graph) -> BTreeSet<String> {
    let mut f = BTreeSet::new();
    for op in &g.ops {
        f.insert(op.kind.name().to_string());
        match &op.kind {
            OpKind::Clamp { min, max } => {
                if *min == f64::NEG_INFINITY {
                    f.insert("clamp min -inf".into());
                }
                if *max == f64::INFINITY {
                    f.insert("clamp max inf".into());
                }
            }
            OpKind::Attention { window, head_map, .. } => {
                f.insert(format!("attention window {}", if window.is_some() { "some" } else { "none" }));
                f.insert(format!("attention {}", head_map.name()));
                f.insert(format!("attention reads {}", op.inputs.len()));
            }
            OpKind::DeltaRule { head_map } => {
                f.insert(format!("delta_rule {}", head_map.name()));
            }
            OpKind::Rope { style, .. } => {
                f.insert(format!("rope {}", style.name()));
            }
            OpKind::RopeFreqs { style, .. } => {
                f.insert(format!("rope_freqs {}", style.name()));
            }
            OpKind::TopK { renormalize, .. } => {
                f.insert(format!("top_k renormalize {renormalize}"));
                f.insert(format!("top_k reads {}", op.inputs.len()));
            }
            OpKind::Fused(Fused::GluActMul { act }) => {
                f.insert(format!("glu_act_mul {}", act.name()));
            }
            _ => {}
        }
        if floats(&op.kind).iter().any(|x| x.is_nan()) {
            f.insert("NaN".into());
        }
    }
    for c in &g.consts {
        let view = match c.binding.view {
            View::Whole => "whole",
            View::Rows { .. } => "rows",
            View::HeadHalf { .. } => "head_half",
            View::Expert { .. } => "expert",
        };
        f.insert(format!("view {view}"));
    }
    if g.tensors.iter().any(|d| d.name.contains(['"', '\\', '\n', ' '])) {
        f.insert("quoted names".into());
    }
    f
}

#[test]
fn the_generator_reaches_every_op_kind_and_attribute_value() {
    let mut want: BTreeSet<String> = [
        "embed",
        "matvec",
        "add",
        "mul",
        "scale",
        "offset",
        "clamp",
        "rms_norm",
        "layer_norm",
        "l2_norm",
        "softmax",
        "concat",
        "slice",
        "reshape",
        "broadcast",
        "conv_shift",
        "depthwise_conv",
        "delta_rule",
        "rope",
        "kv_append",
        "attention",
        "top_k",
        "pick",
        "advance",
        "merged_qkv",
        "conv_bias_silu",
        "gdn_gating",
        "glu_act_mul",
        "clamp min -inf",
        "clamp max inf",
        "attention window some",
        "attention window none",
        "attention grouped",
        "attention tiled",
        "attention reads 3",
        "attention reads 4",
        "delta_rule grouped",
        "delta_rule tiled",
        "rope neox",
        "rope interleaved",
        "top_k renormalize true",
        "top_k renormalize false",
        "top_k reads 1",
        "top_k reads 2",
        "rope_freqs",
        "rope_freqs neox",
        "rope_freqs interleaved",
        "group_limit",
        "NaN",
        "view whole",
        "view rows",
        "view head_half",
        "view expert",
        "quoted names",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for a in Act::ALL {
        want.insert(a.name().to_string());
        want.insert(format!("glu_act_mul {}", a.name()));
    }
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    for _ in 0..1024 {
        let r = recipe().new_tree(&mut runner).expect("a recipe").current();
        seen.extend(features(&build(&r)));
    }
    let missing: Vec<&String> = want.difference(&seen).collect();
    assert!(missing.is_empty(), "the generator never made: {missing:?}");
}

// ---------------------------------------------------------------------------------------------
// Graphs the builder does not make: invalid ones still have a listing that round-trips.

/// A graph with a tensor nothing writes, an op that writes nothing, a token of the wrong type and a
/// state written by a tensor declared after the op reading it.
fn odd_graph() -> Graph {
    let t = |name: &str, ty: Ty| TensorDecl { name: name.into(), ty };
    Graph {
        name: "odd \"graph\"\n".into(),
        tensors: vec![
            t("tok", Ty::tensor(&[1])),
            t("w", Ty::tensor(&[2, 3])),
            t("lost", Ty::tensor(&[4])),
            t("", Ty::tensor(&[3])),
            t("out put", Ty::tensor(&[2])),
        ],
        token: TensorId(0),
        consts: vec![Const { tensor: TensorId(1), binding: Binding { tensor: "w w".into(), view: View::Whole } }],
        states: vec![],
        ops: vec![
            Op { kind: OpKind::Softmax, inputs: vec![TensorId(3)], outputs: vec![] },
            Op { kind: OpKind::Act(Act::Gelu), inputs: vec![TensorId(1)], outputs: vec![TensorId(3)] },
            Op { kind: OpKind::MatVec, inputs: vec![TensorId(1), TensorId(3)], outputs: vec![TensorId(4)] },
        ],
        logits: TensorId(4),
    }
}

#[test]
fn invalid_graphs_have_listings_that_round_trip() {
    let g = odd_graph();
    assert_round_trip(&g);
    let text = g.to_string();
    assert_eq!(
        text,
        "graph \"odd \\\"graph\\\"\\n\"\n\
         token %tok: [1]\n\
         () = softmax %\"\"\n\
         const %w: [2, 3] = \"w w\"\n\
         unwritten %lost: [4]\n\
         %\"\": [3] = gelu %w\n\
         %\"out put\": [2] = matvec %w, %\"\"\n\
         logits %\"out put\"\n"
    );
}

#[test]
fn a_graph_reading_a_tensor_its_table_lacks_prints_and_is_refused() {
    let mut g = odd_graph();
    g.ops[2].inputs[1] = TensorId(99);
    g.logits = TensorId(42);
    let text = g.to_string();
    assert!(text.contains("= matvec %w, %?99\n") && text.ends_with("logits %?42\n"), "{text}");
    assert!(matches!(parse_graph(&text), Err(ParseError::Syntax { line: 7, .. })));
}

#[test]
fn a_name_may_be_read_before_its_line_and_validate_judges_the_order() {
    let text = "graph \"g\"\n\
                token %token\n\
                %b: [2] = silu %a\n\
                %a: [2] = embed %w, %token\n\
                const %w: [3, 2] = w\n\
                logits %b\n";
    let g = parse_graph(text).expect("parses");
    assert_eq!(g.to_string(), text);
    assert!(matches!(g.validate(), Err(stepcheck::ir::GraphError::ReadBeforeWrite { .. })));
}

#[test]
fn blank_lines_and_comments_are_skipped() {
    let text = "# a graph\n\ngraph \"g\"  # its name\ntoken %token\n  # the table\nconst %w: [3, 2] = w\n\
                %a: [2] = embed %w, %token\t# row token\nlogits %a\n";
    let g = parse_graph(text).expect("parses");
    assert_eq!(
        g.to_string(),
        "graph \"g\"\ntoken %token\nconst %w: [3, 2] = w\n%a: [2] = embed %w, %token\nlogits %a\n"
    );
}

#[test]
fn floats_print_in_their_shortest_form_and_read_back_to_the_bit() {
    for (x, printed) in [
        (1e-6, "1e-6"),
        (0.1, "0.1"),
        (10_000.0, "10000.0"),
        (-0.0, "-0.0"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::NAN, "NaN"),
        (5e-324, "5e-324"),
        (f64::MAX, "1.7976931348623157e308"),
        (1.0 / 3f64.sqrt(), "0.5773502691896258"),
    ] {
        let kind = OpKind::Scale { factor: x };
        assert_eq!(kind.to_string(), format!("scale(factor={printed})"));
        let text = format!("graph \"g\"\ntoken %t\nconst %x: [1] = x\n%y: [1] = {kind} %x\nlogits %y\n");
        let g = parse_graph(&text).expect("parses");
        let OpKind::Scale { factor } = g.ops[0].kind else { panic!("not a scale: {:?}", g.ops[0].kind) };
        assert!(factor.to_bits() == x.to_bits() || (x.is_nan() && factor.is_nan()), "{printed} read as {factor:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed listings: each is refused with the error, and on the line, it names.

const BASE: &str = "graph \"m\"\ntoken %token\nconst %w: [4, 3] = w.weight\n%e: [3] = embed %w, %token\nlogits %e\n";

/// `BASE` with line `n` (from 1) replaced by `line`, or removed when `line` is empty.
fn with_line(n: usize, line: &str) -> String {
    let mut lines: Vec<&str> = BASE.lines().collect();
    if line.is_empty() {
        lines.remove(n - 1);
    } else {
        lines[n - 1] = line;
    }
    lines.join("\n") + "\n"
}

type Expect = fn(&ParseError) -> bool;

#[test]
fn malformed_listings_are_refused_on_the_line_at_fault() {
    use ParseError as E;
    let syntax: Expect = |e| matches!(e, E::Syntax { .. });
    let number: Expect = |e| matches!(e, E::BadNumber { .. });
    let unknown_op: Expect = |e| matches!(e, E::UnknownOp { .. });
    let unknown_attr: Expect = |e| matches!(e, E::UnknownAttribute { .. });
    let missing_attr: Expect = |e| matches!(e, E::MissingAttribute { .. });
    let repeated_attr: Expect = |e| matches!(e, E::RepeatedAttribute { .. });
    let undeclared: Expect = |e| matches!(e, E::Undeclared { .. });
    let duplicate: Expect = |e| matches!(e, E::DuplicateName { .. });
    let cases: Vec<(&str, String, Expect, usize)> = vec![
        ("a type must follow ':'", with_line(4, "%e: x = embed %w, %token"), syntax, 4),
        ("an op line needs '='", with_line(4, "%e: [3] embed %w, %token"), syntax, 4),
        ("the header comes first", BASE.replacen("graph \"m\"\n", "", 1), syntax, 1),
        ("the graph's name is quoted", with_line(1, "graph m"), syntax, 1),
        ("one token line", with_line(5, "token %t2"), syntax, 5),
        ("a listing ends with its logits", with_line(5, ""), syntax, 5),
        ("a quoted name is closed", with_line(4, "%\"e: [3] = embed %w, %token"), syntax, 4),
        ("escapes are the known ones", with_line(4, "%\"\\q\": [3] = embed %w, %token"), syntax, 4),
        ("nothing follows a complete line", with_line(5, "logits %e %w"), syntax, 5),
        ("state kinds are the known ones", with_line(3, "state cache layer 0 %w: cache[1, 2] -> %w"), syntax, 3),
        ("views are the known ones", with_line(3, "const %w: [4, 3] = w.weight cols 0..3"), syntax, 3),
        ("enum attributes take their names", with_line(4, "%e: [3] = glu_act_mul(act=swish) %w, %w"), syntax, 4),
        ("a window is a count or none", with_line(4, "%e: [3] = attention(scale=1.0, window=soon)"), syntax, 4),
        ("unknown op", with_line(4, "%e: [3] = embedd %w, %token"), unknown_op, 4),
        ("unknown attribute", with_line(4, "%e: [3] = embed(eps=1e-6) %w, %token"), unknown_attr, 4),
        ("missing attribute", with_line(4, "%e: [3] = rms_norm %w, %token"), missing_attr, 4),
        ("repeated attribute", with_line(4, "%e: [3] = scale(factor=1.0, factor=2.0) %w"), repeated_attr, 4),
        ("undeclared tensor", with_line(4, "%e: [3] = embed %v, %token"), undeclared, 4),
        ("undeclared logits", with_line(5, "logits %f"), undeclared, 5),
        ("duplicate name", with_line(4, "%w: [3] = embed %w, %token"), duplicate, 4),
        ("bad float", with_line(4, "%e: [3] = scale(factor=1.2.3) %w"), number, 4),
        ("bad dim", with_line(3, "const %w: [4x, 3] = w.weight"), number, 3),
        ("negative dim", with_line(3, "const %w: [-4, 3] = w.weight"), number, 3),
        ("overflowed dim", with_line(3, "const %w: [99999999999999999999999, 3] = w.weight"), number, 3),
        ("overflowed row", with_line(3, "const %w: [4, 3] = w.weight rows 0..18446744073709551616"), number, 3),
    ];
    assert!(parse_graph(BASE).is_ok(), "the base listing parses");
    for (what, text, expect, line) in cases {
        match parse_graph(&text) {
            Ok(_) => panic!("{what}: parsed\n{text}"),
            Err(e) => {
                assert!(expect(&e), "{what}: wrong error {e:?}\n{text}");
                assert_eq!(e.line(), line, "{what}: {e}");
            }
        }
    }
}

#[test]
fn a_message_says_what_was_expected_and_what_was_found() {
    let e = parse_graph(&with_line(4, "%e: x = embed %w, %token")).expect_err("refused");
    assert_eq!(e.to_string(), "line 4, column 5: expected a type like [64] after ':', found 'x'");
    let e = parse_graph(&with_line(3, "const %w: [99999999999999999999999, 3] = w.weight")).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "line 3, column 12: expected a dimension like 64 no larger than 18446744073709551615, \
         found '99999999999999999999999'"
    );
    let e = parse_graph(&with_line(4, "%e: [3] = embed %v, %token")).expect_err("refused");
    assert_eq!(e.to_string(), "line 4, column 17: %v is not declared");
}

// ---------------------------------------------------------------------------------------------
// The parser never panics.

/// Text that looks like a listing: the header and token, then lines of the listing's characters.
fn listing_like() -> impl Strategy<Value = String> {
    "[%\"\\\\:=,()\\[\\]a-z0-9 ._\n#>-]{0,200}".prop_map(|body| format!("graph \"g\"\ntoken %token\n{body}"))
}

/// An edit of a listing: delete, duplicate or replace the characters at a place.
#[derive(Clone, Debug)]
enum Edit {
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Replace { at: usize, with: char },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Duplicate { at, len }),
        (
            any::<usize>(),
            prop_oneof![any::<char>(), proptest::sample::select(b"%\":=,()[]0.-\n#\\ ".map(char::from).to_vec())]
        )
            .prop_map(|(at, with)| Edit::Replace { at, with }),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len().max(1);
        match *e {
            Edit::Delete { at, len } => {
                let at = at % n;
                chars.drain(at.min(chars.len())..(at + len).min(chars.len()));
            }
            Edit::Duplicate { at, len } => {
                let at = (at % n).min(chars.len());
                let piece: Vec<char> = chars[at..(at + len).min(chars.len())].to_vec();
                chars.splice(at..at, piece);
            }
            Edit::Replace { at, with } => {
                if let Some(c) = chars.get_mut(at % n) {
                    *c = with;
                }
            }
        }
    }
    chars.into_iter().collect()
}

/// The listings of two small presets, which the edits start from.
static LISTINGS: LazyLock<[String; 2]> = LazyLock::new(|| {
    ["tiny", "tiny-tied"].map(|p| decode_step(&presets::preset(p).expect("preset")).expect("author").to_string())
});

/// Parses `text`; whatever parses prints as a listing that parses back to the same listing.
fn parse_without_panic(text: &str) {
    if let Ok(g) = parse_graph(text) {
        let printed = g.to_string();
        let again = parse_graph(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(again.to_string(), printed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_text_never_panics_the_parser(text in prop_oneof![any::<String>(), listing_like()]) {
        parse_without_panic(&text);
    }

    #[test]
    fn edited_listings_never_panic_the_parser(
        listing in proptest::sample::select(LISTINGS.to_vec()),
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        parse_without_panic(&apply(&listing, &edits));
    }
}
