//! The reference interpreter computes what each op's doc comment and the facts file say: tiny cases
//! with closed forms, one per rule; the state it carries between steps; and malformed input refused
//! with a typed error, never a panic.

use stepcheck::interp::{InterpError, Runner, StateSnapshot};
use stepcheck::ir::{Act, Fused, GraphBuilder, HeadMap, OpKind, RopeStyle, StateKind, TensorId, Ty};
use stepcheck::model::bind::{BindError, Binding, View};
use stepcheck::model::{Checkpoint, Tensor, author::decode_step, presets, random::random_checkpoint};

// ---------------------------------------------------------------------------------------------
// Boundaries.

/// A constant operand: a checkpoint tensor of `source` shape holding `values`, read through `view`.
#[derive(Clone)]
struct Operand {
    source: Vec<usize>,
    values: Vec<f32>,
    view: View,
}

/// The whole of a tensor of shape `shape`.
fn t(shape: &[usize], values: &[f32]) -> Operand {
    Operand { source: shape.to_vec(), values: values.to_vec(), view: View::Whole }
}

/// A vector.
fn v(values: &[f32]) -> Operand {
    t(&[values.len()], values)
}

impl Operand {
    fn through(mut self, view: View) -> Operand {
        self.view = view;
        self
    }

    fn shape(&self) -> Vec<usize> {
        self.view.shape(&self.source).expect("the view fits")
    }
}

/// Declares each operand as a constant `c{i}` bound to checkpoint tensor `t{i}`, which it adds.
fn constants(b: &mut GraphBuilder, ckpt: &mut Checkpoint, operands: &[Operand]) -> Vec<TensorId> {
    operands
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let name = format!("t{i}");
            ckpt.insert(&name, Tensor::f32(o.source.clone(), &o.values.clone()));
            b.constant(&format!("c{i}"), &o.shape(), Binding { tensor: name, view: o.view })
        })
        .collect()
}

/// The logits of a graph whose result is `outs` (of types `tys`): their values flattened, side by
/// side.
fn flatten_as_logits(b: &mut GraphBuilder, outs: &[TensorId], tys: &[Ty]) -> TensorId {
    let flat: Vec<TensorId> = outs
        .iter()
        .zip(tys)
        .enumerate()
        .map(|(i, (&o, ty))| {
            let n = ty.numel().expect("an array");
            b.op1(OpKind::Reshape { shape: vec![n] }, &[o], &format!("flat{i}"))
        })
        .collect();
    if flat.len() == 1 { flat[0] } else { b.op1(OpKind::Concat, &flat, "logits") }
}

/// Splits `all` into pieces of the sizes of `tys`.
fn split(all: Vec<f64>, tys: &[Ty]) -> Vec<Vec<f64>> {
    let mut rest = all.as_slice();
    tys.iter()
        .map(|ty| {
            let (piece, tail) = rest.split_at(ty.numel().expect("an array"));
            rest = tail;
            piece.to_vec()
        })
        .collect()
}

/// The outputs of one op of kind `kind` run once on constant operands, each flattened.
fn apply(kind: &OpKind, operands: &[Operand]) -> Vec<Vec<f64>> {
    let shapes: Vec<Ty> = operands.iter().map(|o| Ty::tensor(&o.shape())).collect();
    let tys = kind.infer(&shapes.iter().collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
    let mut b = GraphBuilder::new("one-op");
    let mut ckpt = Checkpoint::default();
    let ins = constants(&mut b, &mut ckpt, operands);
    let names: Vec<String> = (0..tys.len()).map(|i| format!("out{i}")).collect();
    let outs = b.op(kind.clone(), &ins, &names.iter().map(String::as_str).collect::<Vec<_>>());
    let logits = flatten_as_logits(&mut b, &outs, &tys);
    let graph = b.finish(logits).expect("a valid one-op graph");
    let logits = Runner::new(&graph, &ckpt).expect("runner").step(0).expect("step");
    split(logits, &tys)
}

/// RoPE of kind `kind` applied to `x` at `position`: a graph that ropes a constant at the step's
/// position and advances it, run `position + 1` steps.
fn rope_at(kind: OpKind, x: Operand, position: u32) -> Vec<f64> {
    let mut b = GraphBuilder::new("rope");
    let mut ckpt = Checkpoint::default();
    let pos = b.state(StateKind::Position, None, "pos", Ty::Position);
    let ins = constants(&mut b, &mut ckpt, std::slice::from_ref(&x));
    let y = b.op1(kind, &[ins[0], pos], "y");
    let next = b.op1(OpKind::Advance, &[pos], "pos.next");
    b.write_state(pos, next);
    let logits = flatten_as_logits(&mut b, &[y], &[Ty::tensor(&x.shape())]);
    let graph = b.finish(logits).expect("a valid rope graph");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let mut out = vec![];
    for _ in 0..=position {
        out = runner.step(0).expect("step");
    }
    out
}

/// What attention of kind `kind` returns at the last step of a run that appends, at step `i`, the
/// keys `kv[i].0` and values `kv[i].1` (each `[heads, dim]`, flattened) to the caches and attends
/// with queries `q` (and `sinks`, if any). The caches' rows come from embedding tables, one row per
/// step.
fn attend(kind: OpKind, q: Operand, kv: &[(Vec<f32>, Vec<f32>)], sinks: Option<Operand>, kv_heads: usize) -> Vec<f64> {
    let steps = kv.len();
    let kdim = kv[0].0.len() / kv_heads;
    let vdim = kv[0].1.len() / kv_heads;
    let ktable: Vec<f32> = kv.iter().flat_map(|(k, _)| k.iter().copied()).collect();
    let vtable: Vec<f32> = kv.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    let mut operands = vec![t(&[steps, kv_heads * kdim], &ktable), t(&[steps, kv_heads * vdim], &vtable), q.clone()];
    operands.extend(sinks);
    let mut b = GraphBuilder::new("attend");
    let mut ckpt = Checkpoint::default();
    let c = constants(&mut b, &mut ckpt, &operands);
    let token = b.token();
    let k = b.op1(OpKind::Embed, &[c[0], token], "k.flat");
    let k = b.op1(OpKind::Reshape { shape: vec![kv_heads, kdim] }, &[k], "k");
    let v = b.op1(OpKind::Embed, &[c[1], token], "v.flat");
    let v = b.op1(OpKind::Reshape { shape: vec![kv_heads, vdim] }, &[v], "v");
    let kc = b.state(StateKind::KeyCache, Some(0), "kc", Ty::Cache { heads: kv_heads, dim: kdim });
    let vc = b.state(StateKind::ValueCache, Some(0), "vc", Ty::Cache { heads: kv_heads, dim: vdim });
    let kc1 = b.op1(OpKind::KvAppend, &[kc, k], "kc.next");
    let vc1 = b.op1(OpKind::KvAppend, &[vc, v], "vc.next");
    b.write_state(kc, kc1);
    b.write_state(vc, vc1);
    let mut ins = vec![c[2], kc1, vc1];
    ins.extend(c.get(3));
    let o = b.op1(kind, &ins, "o");
    let logits = flatten_as_logits(&mut b, &[o], &[Ty::tensor(&[q.shape()[0], vdim])]);
    let graph = b.finish(logits).expect("a valid attention graph");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let mut out = vec![];
    for step in 0..steps as u32 {
        out = runner.step(step).expect("step");
    }
    out
}

/// The keys and values appended at each step, owned.
fn kv(steps: &[(&[f32], &[f32])]) -> Vec<(Vec<f32>, Vec<f32>)> {
    steps.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{what}: got {got:?}, want {want:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Ops with closed forms.

/// One op on constants, and what each of its outputs must hold.
struct Case {
    what: &'static str,
    kind: OpKind,
    operands: Vec<Operand>,
    want: Vec<Vec<f64>>,
}

fn case(what: &'static str, kind: OpKind, operands: Vec<Operand>, want: &[&[f64]]) -> Case {
    Case { what, kind, operands, want: want.iter().map(|w| w.to_vec()).collect() }
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let got = apply(&c.kind, &c.operands);
        assert_eq!(got.len(), c.want.len(), "{}: outputs", c.what);
        for (g, w) in got.iter().zip(&c.want) {
            close(g, w, c.what);
        }
    }
}

#[test]
fn matvec_reads_each_view_of_a_checkpoint_matrix() {
    // Rows of the source: [1 2], [3 4], [5 6], [7 8]; x = [1, 10].
    let m = || t(&[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let x = || v(&[1., 10.]);
    check(vec![
        case("whole", OpKind::MatVec, vec![m(), x()], &[&[21., 43., 65., 87.]]),
        case("rows 1..3", OpKind::MatVec, vec![m().through(View::Rows { start: 1, end: 3 }), x()], &[&[43., 65.]]),
        case(
            "head half 0 of heads of 1 row: rows 0 and 2",
            OpKind::MatVec,
            vec![m().through(View::HeadHalf { head_dim: 1, half: 0 }), x()],
            &[&[21., 65.]],
        ),
        case(
            "head half 1 of heads of 1 row: rows 1 and 3",
            OpKind::MatVec,
            vec![m().through(View::HeadHalf { head_dim: 1, half: 1 }), x()],
            &[&[43., 87.]],
        ),
        case(
            "expert 1 of a [2, 2, 2] stack",
            OpKind::MatVec,
            vec![t(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]).through(View::Expert { index: 1 }), x()],
            &[&[65., 87.]],
        ),
        case(
            "merged_qkv is the matvec of each matrix",
            OpKind::Fused(Fused::MergedQkv),
            vec![x(), t(&[1, 2], &[1., 2.]), t(&[2, 2], &[3., 4., 5., 6.])],
            &[&[21.], &[43., 65.]],
        ),
    ]);
}

#[test]
fn elementwise_ops_follow_their_formulas() {
    let e = std::f64::consts::E;
    check(vec![
        case("add", OpKind::Add, vec![v(&[1., 2.]), v(&[3., -5.])], &[&[4., -3.]]),
        case("mul", OpKind::Mul, vec![v(&[1., 2.]), v(&[3., -5.])], &[&[3., -10.]]),
        case("mul by a [1] scalar", OpKind::Mul, vec![v(&[1., 2., 3.]), v(&[-2.])], &[&[-2., -4., -6.]]),
        case("scale", OpKind::Scale { factor: 0.5 }, vec![v(&[2., -4.])], &[&[1., -2.]]),
        case("offset", OpKind::Offset { value: 1.0 }, vec![v(&[2., -4.])], &[&[3., -3.]]),
        case("clamp", OpKind::Clamp { min: -1.0, max: 1.0 }, vec![v(&[-3., 0.5, 2.])], &[&[-1., 0.5, 1.]]),
        case("sigmoid", OpKind::Act(Act::Sigmoid), vec![v(&[0.])], &[&[0.5]]),
        case("silu", OpKind::Act(Act::Silu), vec![v(&[0., 1.])], &[&[0., 1. / (1. + 1. / e)]]),
        case("softplus", OpKind::Act(Act::Softplus), vec![v(&[0., 30.])], &[&[std::f64::consts::LN_2, 30.]]),
        case("exp", OpKind::Act(Act::Exp), vec![v(&[0., 1.])], &[&[1., e]]),
        case("tanh", OpKind::Act(Act::Tanh), vec![v(&[0., 1.])], &[&[0., 1f64.tanh()]]),
        case("relu", OpKind::Act(Act::Relu), vec![v(&[-1., 2.])], &[&[0., 2.]]),
        case(
            "glu_act_mul: act(gate) · value",
            OpKind::Fused(Fused::GluActMul { act: Act::Silu }),
            vec![v(&[1., 0.]), v(&[2., 3.])],
            &[&[2. / (1. + 1. / e), 0.]],
        ),
        case(
            "gdn_gating: (sigmoid(b), ssm_a · softplus(a + dt_bias))",
            OpKind::Fused(Fused::GdnGating),
            vec![v(&[0.]), v(&[1.]), v(&[-2.]), v(&[-1.])],
            &[&[0.5], &[-2. * std::f64::consts::LN_2]],
        ),
    ]);
}

#[test]
fn norms_and_softmax_work_over_the_last_axis() {
    let r = 1. / 12.5f64.sqrt();
    let ln3 = 3f64.ln() as f32;
    check(vec![
        case(
            "rms_norm: x · rsqrt(mean x² + eps) · w, per row",
            OpKind::RmsNorm { eps: 0.0 },
            vec![t(&[2, 2], &[3., 4., 1., 1.]), v(&[1., 2.])],
            &[&[3. * r, 8. * r, 1., 2.]],
        ),
        case("rms_norm's eps is inside the rsqrt", OpKind::RmsNorm { eps: 3.0 }, vec![v(&[1.]), v(&[1.])], &[&[0.5]]),
        case(
            "l2_norm: x · rsqrt(Σx² + eps), per row",
            OpKind::L2Norm { eps: 0.0 },
            vec![t(&[2, 2], &[3., 4., 0., 2.])],
            &[&[0.6, 0.8, 0., 1.]],
        ),
        case("l2_norm's eps is inside the rsqrt", OpKind::L2Norm { eps: 3.0 }, vec![v(&[1.])], &[&[0.5]]),
        case(
            "layer_norm: (x − mean) · rsqrt(var + eps) · w + b",
            OpKind::LayerNorm { eps: 0.0 },
            vec![v(&[1., 3.]), v(&[2., 3.]), v(&[0.5, 0.5])],
            &[&[-1.5, 3.5]],
        ),
        case(
            "softmax, per row",
            OpKind::Softmax,
            vec![t(&[2, 2], &[0., ln3, 1000., 1000.])],
            &[&[0.25, 0.75, 0.5, 0.5]],
        ),
    ]);
}

#[test]
fn softmax_sums_to_one_and_renormalized_top_k_too() {
    let p = [3., -1., 2., 0.5, -7., 0.];
    let s = &apply(&OpKind::Softmax, &[v(&p)])[0];
    close(&[s.iter().sum()], &[1.0], "softmax");
    assert!(s.iter().all(|&x| x > 0.0));
    let top = &apply(&OpKind::TopK { k: 3, renormalize: true }, &[v(&[0.3, 0.1, 0.4, 0.2])])[0];
    close(&[top.iter().sum()], &[1.0], "top_k");
}

#[test]
fn moving_ops_move_values_along_the_last_axis() {
    let m23 = || t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    check(vec![
        case(
            "concat",
            OpKind::Concat,
            vec![t(&[2, 1], &[1., 2.]), t(&[2, 2], &[3., 4., 5., 6.])],
            &[&[1., 3., 4., 2., 5., 6.]],
        ),
        case("slice", OpKind::Slice { start: 1, end: 3 }, vec![m23()], &[&[2., 3., 5., 6.]]),
        case(
            "reshape keeps row-major order",
            OpKind::Reshape { shape: vec![3, 2] },
            vec![m23()],
            &[&[1., 2., 3., 4., 5., 6.]],
        ),
        case("broadcast", OpKind::Broadcast { rows: 2 }, vec![v(&[1., 2.])], &[&[1., 2., 1., 2.]]),
        case("pick", OpKind::Pick { index: 1 }, vec![v(&[7., 8., 9.])], &[&[8.]]),
        case(
            "top_k keeps the k largest, renormalized",
            OpKind::TopK { k: 2, renormalize: true },
            vec![v(&[0.1, 0.4, 0.2, 0.3])],
            &[&[0., 4. / 7., 0., 3. / 7.]],
        ),
        case(
            "top_k breaks ties by the lowest index",
            OpKind::TopK { k: 2, renormalize: false },
            vec![v(&[0.5, 0.25, 0.5, 0.5])],
            &[&[0.5, 0., 0.5, 0.]],
        ),
    ]);
}

#[test]
fn the_causal_conv_shifts_its_window_and_weighs_each_channel() {
    check(vec![
        case(
            "conv_shift drops column 0 and appends x as column K−1",
            OpKind::ConvShift,
            vec![t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), v(&[7., 8.])],
            &[&[2., 3., 7., 5., 6., 8.]],
        ),
        case(
            "depthwise_conv: Σⱼ w[c, j] · X[c, j]",
            OpKind::DepthwiseConv,
            vec![t(&[2, 2], &[1., 2., 3., 4.]), t(&[2, 2], &[1., 10., 100., 1000.])],
            &[&[21., 4300.]],
        ),
        case(
            "conv_bias_silu: silu(conv + bias)",
            OpKind::Fused(Fused::ConvBiasSilu),
            vec![t(&[2, 2], &[1., 2., 3., 4.]), t(&[2, 2], &[1., 1., 1., 1.]), v(&[-3., -7.])],
            &[&[0., 0.]],
        ),
        case(
            "conv_bias_silu without a bias: silu(conv)",
            OpKind::Fused(Fused::ConvBiasSilu),
            vec![t(&[1, 2], &[1., 2.]), t(&[1, 2], &[0., 0.])],
            &[&[0.]],
        ),
    ]);
}

#[test]
fn the_delta_rule_decays_corrects_and_reads_after_the_update() {
    let delta = |map| OpKind::DeltaRule { head_map: map };
    let g = HeadMap::Grouped;
    let half = 0.5f64.ln() as f32;
    check(vec![
        // g = 0 (decay 1), β = 1, S = 0: S' = k ⊗ v and o = (k·q) v.
        case(
            "from zero: S' = k ⊗ v, o = (k·q) v",
            delta(g),
            vec![
                t(&[1, 2, 3], &[0.; 6]),
                t(&[1, 2], &[1., 2.]),
                t(&[1, 2], &[3., -1.]),
                t(&[1, 3], &[1., 0., 2.]),
                v(&[0.]),
                v(&[1.]),
            ],
            &[&[3., 0., 6., -1., 0., -2.], &[1., 0., 2.]],
        ),
        // β = 0: only the decay e^g acts.
        case(
            "β = 0: S' = e^g S",
            delta(g),
            vec![t(&[1, 1, 1], &[2.]), t(&[1, 1], &[3.]), t(&[1, 1], &[1.]), t(&[1, 1], &[5.]), v(&[half]), v(&[0.])],
            &[&[1.], &[3.]],
        ),
        // S = 1, k = 1, v = 3, β = 1/2: mem = 1, delta = 1, S' = 2, o = S'q.
        case(
            "the correction β(v − Sᵀk)",
            delta(g),
            vec![t(&[1, 1, 1], &[1.]), t(&[1, 1], &[1.]), t(&[1, 1], &[1.]), t(&[1, 1], &[3.]), v(&[0.]), v(&[0.5])],
            &[&[2.], &[2.]],
        ),
    ]);
    // Four value heads over two key heads with q = [1, 2]: o_h = q of h's key head.
    let heads = |map| {
        let ops = vec![
            t(&[4, 1, 1], &[0.; 4]),
            t(&[2, 1], &[1., 2.]),
            t(&[2, 1], &[1., 1.]),
            t(&[4, 1], &[1.; 4]),
            v(&[0.; 4]),
            v(&[1.; 4]),
        ];
        apply(&delta(map), &ops)[1].clone()
    };
    close(&heads(HeadMap::Grouped), &[1., 1., 2., 2.], "grouped: value head h uses key head h / 2");
    close(&heads(HeadMap::Tiled), &[1., 2., 1., 2.], "tiled: value head h uses key head h mod 2");
}

#[test]
fn rope_turns_pairs_of_the_first_rotary_dims_by_position_times_frequency() {
    let rope = |style| OpKind::Rope { theta: 100.0, rotary_dims: 4, style };
    let e = |i: usize| {
        let mut x = [0f32; 6];
        x[i] = 1.0;
        t(&[1, 6], &x)
    };
    let (c1, s1, c01, s01) = (1f64.cos(), 1f64.sin(), 0.1f64.cos(), 0.1f64.sin());
    // (kind, x, position, want): pair i turns by position · 100^(−2i/4), i.e. 1 and 0.1 rad per step.
    let cases: Vec<(&str, OpKind, Operand, u32, Vec<f64>)> = vec![
        (
            "position 0 is the identity",
            rope(RopeStyle::Neox),
            t(&[1, 6], &[1., 2., 3., 4., 5., 6.]),
            0,
            vec![1., 2., 3., 4., 5., 6.],
        ),
        ("neox pairs dim 0 with dim 2", rope(RopeStyle::Neox), e(0), 1, vec![c1, 0., s1, 0., 0., 0.]),
        ("neox pairs dim 1 with dim 3, at 0.1 rad", rope(RopeStyle::Neox), e(1), 1, vec![0., c01, 0., s01, 0., 0.]),
        (
            "neox at position 2, from the second of a pair",
            rope(RopeStyle::Neox),
            e(2),
            2,
            vec![-(2f64.sin()), 0., 2f64.cos(), 0., 0., 0.],
        ),
        ("interleaved pairs dim 0 with dim 1", rope(RopeStyle::Interleaved), e(0), 1, vec![c1, s1, 0., 0., 0., 0.]),
        ("interleaved pairs dim 2 with dim 3", rope(RopeStyle::Interleaved), e(2), 1, vec![0., 0., c01, s01, 0., 0.]),
        ("dims past rotary_dims pass through", rope(RopeStyle::Neox), e(4), 3, vec![0., 0., 0., 0., 1., 0.]),
        (
            "every row turns alike",
            rope(RopeStyle::Neox),
            t(&[2, 6], &[1., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 0.]),
            1,
            vec![c1, 0., s1, 0., 0., 0., c1, 0., s1, 0., 0., 0.],
        ),
    ];
    for (what, kind, x, position, want) in cases {
        close(&rope_at(kind, x, position), &want, what);
    }
}

#[test]
fn rope_freqs_turns_pair_i_by_position_times_its_given_frequency_and_scales() {
    let freqs = |scale, style| OpKind::RopeFreqs { inv_freq: vec![0.5, 2.0], scale, style };
    let e = |i: usize| {
        let mut x = [0f32; 6];
        x[i] = 1.0;
        t(&[1, 6], &x)
    };
    let x = || t(&[1, 6], &[1., 2., 3., 4., 5., 6.]);
    let c = |a: f64| a.cos();
    let sin = |a: f64| a.sin();
    let cases: Vec<(&str, OpKind, Operand, u32, Vec<f64>)> = vec![
        ("position 0 only scales the turned dims", freqs(2.0, RopeStyle::Neox), x(), 0, vec![2., 4., 6., 8., 5., 6.]),
        (
            "neox pair 0 is dims 0 and 2, 0.5 rad a step",
            freqs(1.0, RopeStyle::Neox),
            e(0),
            3,
            vec![c(1.5), 0., sin(1.5), 0., 0., 0.],
        ),
        (
            "neox pair 1 is dims 1 and 3, 2 rad a step",
            freqs(1.0, RopeStyle::Neox),
            e(3),
            1,
            vec![0., -sin(2.), 0., c(2.), 0., 0.],
        ),
        (
            "interleaved pair 1 is dims 2 and 3",
            freqs(3.0, RopeStyle::Interleaved),
            e(2),
            1,
            vec![0., 0., 3. * c(2.), 3. * sin(2.), 0., 0.],
        ),
        (
            "dims past the pairs pass through unscaled",
            freqs(3.0, RopeStyle::Neox),
            e(5),
            2,
            vec![0., 0., 0., 0., 0., 1.],
        ),
    ];
    for (what, kind, x, position, want) in cases {
        close(&rope_at(kind, x, position), &want, what);
    }
    // With θ's frequencies and scale 1 it is `rope`.
    let theta = OpKind::RopeFreqs { inv_freq: vec![1.0, 0.1], scale: 1.0, style: RopeStyle::Neox };
    let plain = OpKind::Rope { theta: 100.0, rotary_dims: 4, style: RopeStyle::Neox };
    close(&rope_at(theta, x(), 5), &rope_at(plain, x(), 5), "rope_freqs with θ's frequencies");
}

#[test]
fn routing_ops_choose_and_weigh_experts() {
    check(vec![
        case(
            "top_k chooses by p and values by the second operand, renormalized",
            OpKind::TopK { k: 2, renormalize: true },
            vec![v(&[0.1, 0.4, 0.2, 0.3]), v(&[1., 2., 3., 6.])],
            &[&[0., 0.25, 0., 0.75]],
        ),
        case(
            "top_k chooses among finite entries when the others are −∞",
            OpKind::TopK { k: 1, renormalize: false },
            vec![v(&[f32::NEG_INFINITY, -3., f32::NEG_INFINITY]), v(&[9., 8., 7.])],
            &[&[0., 8., 0.]],
        ),
        case(
            "an expert of a stack of bias vectors is its row",
            OpKind::Add,
            vec![t(&[2, 3], &[1., 2., 3., 4., 5., 6.]).through(View::Expert { index: 1 }), v(&[0., 0., 10.])],
            &[&[4., 5., 16.]],
        ),
    ]);
    let limit = |top| OpKind::GroupLimit { groups: 2, keep: 1, top };
    let x = v(&[0., 5., 3., 3.]);
    let inf = f64::NEG_INFINITY;
    // Groups [0, 5] and [3, 3]: by their best entry the first wins (5 > 3), by their best two the
    // second (6 > 5).
    assert_eq!(apply(&limit(1), std::slice::from_ref(&x))[0], vec![0., 5., inf, inf]);
    assert_eq!(apply(&limit(2), std::slice::from_ref(&x))[0], vec![inf, inf, 3., 3.]);
    let keep_both = OpKind::GroupLimit { groups: 2, keep: 2, top: 1 };
    assert_eq!(apply(&keep_both, &[x])[0], vec![0., 5., 3., 3.]);
}

#[test]
fn attention_weighs_the_cached_values_by_the_softmax_of_the_scores() {
    let attn = |window, head_map| OpKind::Attention { scale: 1.0, window, head_map };
    let plain = attn(None, HeadMap::Grouped);
    let ln3 = 3f64.ln() as f32;
    // Two positions whose scores for q = [1, 0] are 0 and ln 3: weights 1/4 and 3/4.
    let two = || kv(&[(&[0., 0.], &[4., 0.]), (&[ln3, 0.], &[0., 4.])]);
    let q = || t(&[1, 2], &[1., 0.]);
    /// (what, kind, queries, the keys and values of each step, sinks, KV heads, want)
    type AttendCase = (&'static str, OpKind, Operand, Vec<(Vec<f32>, Vec<f32>)>, Option<Operand>, usize, Vec<f64>);
    let cases: Vec<AttendCase> = vec![
        (
            "one cached position returns its value",
            plain.clone(),
            t(&[2, 2], &[0.3, -2., 5., 1.]),
            kv(&[(&[1., 2.], &[7., 8., 9.])]),
            None,
            1,
            vec![7., 8., 9., 7., 8., 9.],
        ),
        ("softmax of the scores weighs the values", plain.clone(), q(), two(), None, 1, vec![1., 3.]),
        (
            "the scale multiplies the scores",
            OpKind::Attention { scale: 0.5, window: None, head_map: HeadMap::Grouped },
            q(),
            kv(&[(&[0., 0.], &[4., 0.]), (&[2. * ln3, 0.], &[0., 4.])]),
            None,
            1,
            vec![1., 3.],
        ),
        ("window 1 returns the newest value", attn(Some(1), HeadMap::Grouped), q(), two(), None, 1, vec![0., 4.]),
        (
            "window 2 drops the oldest of three positions",
            attn(Some(2), HeadMap::Grouped),
            q(),
            kv(&[(&[100., 0.], &[8., 8.]), (&[0., 0.], &[4., 0.]), (&[ln3, 0.], &[0., 4.])]),
            None,
            1,
            vec![1., 3.],
        ),
        ("a very negative sink changes nothing", plain.clone(), q(), two(), Some(v(&[-1e4])), 1, vec![1., 3.]),
        (
            "a sink of logit 0 beside one score of 0 takes half the weight and gives no value",
            plain.clone(),
            q(),
            kv(&[(&[0., 0.], &[4., 2.])]),
            Some(v(&[0.])),
            1,
            vec![2., 1.],
        ),
        (
            "grouped: query head h reads KV head h / 2",
            plain.clone(),
            t(&[4, 1], &[1.; 4]),
            kv(&[(&[0., 0.], &[1., 2.])]),
            None,
            2,
            vec![1., 1., 2., 2.],
        ),
        (
            "tiled: query head h reads KV head h mod 2",
            attn(None, HeadMap::Tiled),
            t(&[4, 1], &[1.; 4]),
            kv(&[(&[0., 0.], &[1., 2.])]),
            None,
            2,
            vec![1., 2., 1., 2.],
        ),
    ];
    for (what, kind, q, steps, sinks, kv_heads, want) in cases {
        close(&attend(kind, q, &steps, sinks, kv_heads), &want, what);
    }
}

// ---------------------------------------------------------------------------------------------
// The carried state, on the tiny preset.

fn decode(tokens: &[u32]) -> (Vec<Vec<f64>>, StateSnapshot) {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 11);
    let graph = decode_step(&spec).expect("author");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let logits = tokens.iter().map(|&t| runner.step(t).expect("step")).collect();
    (logits, runner.state())
}

#[test]
fn the_state_carried_between_steps_changes_the_logits() {
    let (after_two, _) = decode(&[1, 2, 3]);
    let (alone, _) = decode(&[3]);
    assert_eq!(after_two[2].len(), presets::tiny().vocab);
    assert_ne!(after_two[2], alone[0]);
    assert!(after_two.iter().flatten().all(|x| x.is_finite()));
}

#[test]
fn the_same_tokens_from_the_start_state_give_the_same_logits() {
    let (a, sa) = decode(&[5, 0, 96, 5]);
    let (b, sb) = decode(&[5, 0, 96, 5]);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert_ne!(a[0], a[3], "the same token at a later step sees the state");
}

#[test]
fn the_state_has_the_documented_shapes_and_starts_at_zero() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 11);
    let graph = decode_step(&spec).expect("author");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let (d, a) = (&spec.delta_net, &spec.attention);
    let c = 2 * d.key_heads * d.key_dim + d.value_heads * d.value_dim;
    // (kind, layer, shape after `steps` steps)
    let shapes = |steps: usize| {
        vec![
            (StateKind::Position, None, vec![]),
            (StateKind::KeyCache, Some(0), vec![a.kv_heads, steps, a.head_dim]),
            (StateKind::ValueCache, Some(0), vec![a.kv_heads, steps, a.head_dim]),
            (StateKind::Conv, Some(1), vec![c, d.conv_kernel]),
            (StateKind::Recurrent, Some(1), vec![d.value_heads, d.key_dim, d.value_dim]),
            (StateKind::Conv, Some(2), vec![c, d.conv_kernel]),
            (StateKind::KeyCache, Some(3), vec![a.kv_heads, steps, a.head_dim]),
        ]
    };
    let start = runner.state();
    assert_eq!(start.entries.len(), graph.states.len());
    for (kind, layer, shape) in shapes(0) {
        let e = start.find(kind, layer).unwrap_or_else(|| panic!("{kind:?} {layer:?}"));
        assert_eq!(e.shape, shape, "{kind:?} {layer:?} at the start");
        assert!(e.values.iter().all(|&x| x == 0.0), "{kind:?} {layer:?} starts at zero");
    }
    for token in [4, 9, 16] {
        runner.step(token).expect("step");
    }
    let after = runner.state();
    for (kind, layer, shape) in shapes(3) {
        let e = after.find(kind, layer).unwrap_or_else(|| panic!("{kind:?} {layer:?}"));
        assert_eq!(e.shape, shape, "{kind:?} {layer:?} after 3 steps");
        assert_eq!(e.values.len(), shape.iter().product::<usize>());
    }
    assert_eq!(after.find(StateKind::Position, None).map(|e| e.values.clone()), Some(vec![3.0]));
    let s = after.find(StateKind::Recurrent, Some(1)).expect("recurrent");
    assert!(s.values.iter().any(|&x| x != 0.0));
}

#[test]
fn the_conv_window_moves_one_column_per_step() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 11);
    let graph = decode_step(&spec).expect("author");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    let k = spec.delta_net.conv_kernel;
    let column = |s: &StateSnapshot, j: usize| -> Vec<f64> {
        let e = s.find(StateKind::Conv, Some(1)).expect("conv");
        e.values.chunks(k).map(|row| row[j]).collect()
    };
    runner.step(7).expect("step");
    let first = runner.state();
    runner.step(8).expect("step");
    let second = runner.state();
    assert_eq!(column(&first, k - 1), column(&second, k - 2), "the newest column moves one to the left");
    assert!(column(&second, 0).iter().all(|&x| x == 0.0), "the oldest columns are still zero");
}

// ---------------------------------------------------------------------------------------------
// Malformed input.

#[test]
fn a_token_outside_the_vocabulary_is_an_error_and_leaves_the_state_alone() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 3);
    let graph = decode_step(&spec).expect("author");
    let mut runner = Runner::new(&graph, &ckpt).expect("runner");
    runner.step(1).expect("step");
    let before = runner.state();
    let vocab = spec.vocab as u32;
    for token in [vocab, u32::MAX] {
        assert_eq!(runner.step(token), Err(InterpError::TokenOutOfRange { token, rows: spec.vocab }));
    }
    assert_eq!(runner.state(), before);
    let (expected, _) = decode_with(&graph, &ckpt, &[1, 2]);
    assert_eq!(runner.step(2).expect("step"), expected[1]);
}

fn decode_with(graph: &stepcheck::ir::Graph, ckpt: &Checkpoint, tokens: &[u32]) -> (Vec<Vec<f64>>, StateSnapshot) {
    let mut runner = Runner::new(graph, ckpt).expect("runner");
    let logits = tokens.iter().map(|&t| runner.step(t).expect("step")).collect();
    (logits, runner.state())
}

#[test]
fn a_missing_checkpoint_tensor_is_a_bind_error_naming_it() {
    let spec = presets::tiny();
    let mut ckpt = random_checkpoint(&spec, 3);
    ckpt.tensors.remove("blk.1.ssm_a");
    let graph = decode_step(&spec).expect("author");
    let err = Runner::new(&graph, &ckpt).err().expect("an error");
    assert!(matches!(&err, InterpError::Bind(BindError::Missing { tensor, .. }) if tensor == "blk.1.ssm_a"), "{err:?}");
    assert!(err.to_string().contains("blk.1.ssm_a"), "{err}");
}

#[test]
fn a_tensor_whose_values_do_not_fill_its_shape_is_an_error() {
    let spec = presets::tiny();
    let mut ckpt = random_checkpoint(&spec, 3);
    if let Some(t) = ckpt.tensors.get_mut("output_norm.weight") {
        let mut values = t.to_f32().expect("f32");
        values.pop();
        *t = Tensor::f32(t.shape.clone(), &values);
    }
    let graph = decode_step(&spec).expect("author");
    let err = Runner::new(&graph, &ckpt).err().expect("an error");
    assert!(matches!(&err, InterpError::Checkpoint { tensor, .. } if tensor == "output_norm.weight"), "{err:?}");
}

#[test]
fn an_invalid_graph_is_an_error() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 3);
    let mut graph = decode_step(&spec).expect("author");
    graph.ops.pop();
    let err = Runner::new(&graph, &ckpt).err().expect("an error");
    assert!(matches!(err, InterpError::Graph(_)), "{err:?}");
}

#[test]
fn nan_weights_give_nan_logits_not_a_panic() {
    let spec = presets::tiny();
    let mut ckpt = random_checkpoint(&spec, 3);
    if let Some(t) = ckpt.tensors.get_mut("token_embd.weight") {
        *t = Tensor::f32(t.shape.clone(), &vec![f32::NAN; t.numel()]);
    }
    let graph = decode_step(&spec).expect("author");
    let logits = Runner::new(&graph, &ckpt).expect("runner").step(0).expect("step");
    assert!(logits.iter().all(|x| x.is_nan()));
    let top = apply(&OpKind::TopK { k: 2, renormalize: true }, &[v(&[f32::NAN, 1., f32::NAN])]);
    assert_eq!(top[0].len(), 3);
}

/// Runners that share one checkpoint's decoded constants (`Runner::with_decoded`, as the check runs
/// a case's authored and fused graphs) compute what runners decoding their own do, to the bit,
/// whichever runs first: the two graphs bind some tensors through different views.
#[test]
fn runners_sharing_decoded_constants_compute_what_runners_on_their_own_do() {
    use stepcheck::engine::shim::EngineShim;
    use stepcheck::interp::Decoded;
    for name in ["tiny", "tiny-tied", "small"] {
        let spec = presets::preset(name).expect("a preset");
        let authored = decode_step(&spec).expect("a graph");
        let fused = EngineShim::default().prepare(&authored);
        let ckpt = random_checkpoint(&spec, 5);
        let run = |runner: Result<Runner<'_>, InterpError>| {
            let mut runner = runner.expect("a runner");
            [3u32, 1, 4].map(|t| runner.step(t).expect("a step"))
        };
        let alone = [run(Runner::new(&authored, &ckpt)), run(Runner::new(&fused, &ckpt))];
        for order in [[&authored, &fused], [&fused, &authored]] {
            let decoded = Decoded::default();
            let shared = order.map(|g| run(Runner::with_decoded(g, &ckpt, &decoded)));
            let want =
                if std::ptr::eq(order[0], &authored) { alone.clone() } else { [alone[1].clone(), alone[0].clone()] };
            assert_eq!(shared, want, "{name}");
        }
    }
}
