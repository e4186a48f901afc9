//! The engine interpreter, unit by unit, against closed forms written here in the simplest way.
//!
//! Every program is built by hand: the unit under test reads inputs that embedding tables supply
//! (token `t` reads row `t` of each input's table, so each step can feed new values) and writes
//! buffers the test reads back. Closed forms are computed in f64, indexed as the formulas are.

#![allow(clippy::needless_range_loop)]

use stepcheck::check::weights::Weights;
use stepcheck::check::{CommandCheck, Found};
use stepcheck::engine::numerics::{Numerics, Storage};
use stepcheck::engine::program::{
    Block, BlockKind, Buf, Buffer, Command, Program, Rope, StateBuffer, StateLayout, StateRef,
};
use stepcheck::engine::run::{EngineRunner, Rounding, RunError, StateValue};
use stepcheck::model::{Checkpoint, Tensor};

/// The vocabulary of every test program: the steps a test can feed distinct inputs to.
const VOCAB: usize = 8;

// ---------------------------------------------------------------------------------------------
// Building programs by hand.

/// A program under construction and the checkpoint its weights and inputs come from. Inputs are
/// embedded by an embedding block; the commands under test form one block; a last block advances
/// the position. The logits are a dummy embedding of `VOCAB` values.
struct Case {
    program: Program,
    checkpoint: Checkpoint,
    inputs: Vec<Command>,
    commands: Vec<Command>,
    position: StateRef,
}

impl Case {
    fn new(numerics: Numerics) -> Case {
        let program = Program {
            name: "test".into(),
            numerics,
            hidden: 0,
            vocab: VOCAB,
            buffers: vec![],
            states: vec![],
            blocks: vec![],
            logits: Buf(0),
        };
        let mut case = Case {
            program,
            checkpoint: Checkpoint::default(),
            inputs: vec![],
            commands: vec![],
            position: StateRef(0),
        };
        case.position = case.state("position", StateLayout::Position);
        case
    }

    fn buf(&mut self, name: &str, len: usize) -> Buf {
        let storage = self.program.numerics.activations;
        self.program.buffers.push(Buffer { name: name.into(), len, storage });
        Buf(self.program.buffers.len() - 1)
    }

    /// A piece of state kept in the storage the numerics give its kind.
    fn state(&mut self, name: &str, layout: StateLayout) -> StateRef {
        let n = self.program.numerics;
        let storage = match layout {
            StateLayout::Position | StateLayout::ConvWindow { .. } => n.activations,
            StateLayout::DeltaState { .. } => n.recurrent_state,
            StateLayout::KvCache { .. } => n.kv_cache,
        };
        let layer = (layout != StateLayout::Position).then_some(0);
        self.program.states.push(StateBuffer { name: name.into(), layer, layout, storage });
        StateRef(self.program.states.len() - 1)
    }

    fn weight(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> String {
        self.checkpoint.insert(name, Tensor::f32(shape.to_vec(), &data));
        name.to_string()
    }

    /// An input buffer whose value at a step on token `t` is `rows[t]` (zeros past the rows given).
    fn input(&mut self, name: &str, rows: &[Vec<f32>]) -> Buf {
        let n = rows.first().map_or(0, Vec::len);
        let mut table = vec![0.0; VOCAB * n];
        for (t, row) in rows.iter().enumerate() {
            table[t * n..(t + 1) * n].copy_from_slice(row);
        }
        let table = self.weight(&format!("input.{name}"), &[VOCAB, n], table);
        let out = self.buf(name, n);
        self.inputs.push(Command::Embed { table, out });
        out
    }

    fn command(&mut self, c: Command) {
        self.commands.push(c);
    }

    /// The program and its checkpoint.
    fn finish(mut self) -> (Program, Checkpoint) {
        let table = self.weight("logits.table", &[VOCAB, VOCAB], wave(VOCAB * VOCAB, 99));
        let logits = self.buf("logits", VOCAB);
        self.inputs.push(Command::Embed { table, out: logits });
        self.program.logits = logits;
        let block = |kind, layer, commands| Block { kind, layer, commands };
        self.program.blocks = vec![
            block(BlockKind::Embedding, None, self.inputs),
            block(BlockKind::Ffn, Some(0), self.commands),
            block(BlockKind::Advance, None, vec![Command::Advance { position: self.position }]),
        ];
        (self.program, self.checkpoint)
    }
}

/// A runner for `program` after a step on each of `tokens`.
fn run<'c>(program: &Program, checkpoint: &'c Checkpoint, tokens: &[u32]) -> EngineRunner<'c> {
    let mut r = EngineRunner::new(program, checkpoint, 16).unwrap_or_else(|e| panic!("new: {e}"));
    for &t in tokens {
        r.step(t).unwrap_or_else(|e| panic!("step {t}: {e}"));
    }
    r
}

/// `n` distinct values in (−1, 1), one sequence per seed.
fn wave(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 + seed * 101) % 97) as f32 / 48.5 - 1.0).collect()
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// `w · x` for a row-major `w` of `x.len()` columns.
fn matvec(w: &[f32], x: &[f32]) -> Vec<f64> {
    w.chunks(x.len()).map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let r = 1.0 / (dot(x, x) / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * b).collect()
}

/// Asserts `got` equals `want` to `tol` (absolute), naming the first index that does not.
fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

fn value(r: &EngineRunner, b: Buf) -> Vec<f32> {
    r.buffer(b).expect("buffer").to_vec()
}

// ---------------------------------------------------------------------------------------------
// Matrix units.

#[test]
fn merged_rows_equals_separate_matvecs_of_the_row_ranges() {
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[wave(20, 1)]);
    // 3 + 2 + 4 rows used; the tenth row is not read.
    let w = c.weight("w", &[10, 20], wave(200, 2));
    let outs = [c.buf("a", 3), c.buf("b", 2), c.buf("c", 4)];
    c.command(Command::MergedRows { weight: w.clone(), x, outs: outs.to_vec() });
    let (p, ck) = c.finish();
    let r = run(&p, &ck, &[0]);
    let (wt, xv) = (&ck.get(&w).unwrap().to_f32().unwrap(), wave(20, 1));
    for (out, rows) in outs.iter().zip([0..3, 3..5, 5..9]) {
        let want = matvec(&wt[rows.start * 20..rows.end * 20], &xv);
        assert_close("merged_rows", &value(&r, *out), &want, 1e-5);
    }
}

#[test]
fn merged_head_halves_de_interleaves_each_head() {
    // 3 heads of head_dim 2: rows [q0 q0 g0 g0 | q1 q1 g1 g1 | q2 q2 g2 g2]. Row r's first column
    // is r, and x = e₀, so each output value names the row it came from.
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[vec![1.0, 0.0, 0.0]]);
    let w = c.weight("w", &[12, 3], (0..12).flat_map(|r| [r as f32, 0.5, -0.5]).collect());
    let (first, second) = (c.buf("q", 6), c.buf("gate", 6));
    c.command(Command::MergedHeadHalves { weight: w, head_dim: 2, x, first, second });
    let (p, ck) = c.finish();
    let r = run(&p, &ck, &[0]);
    assert_eq!(value(&r, first), [0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
    assert_eq!(value(&r, second), [2.0, 3.0, 6.0, 7.0, 10.0, 11.0]);
}

#[test]
fn matvec_swiglu_and_elementwise_units_match_their_formulas() {
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[wave(6, 1)]);
    let y = c.input("y", &[wave(6, 2)]);
    let w = c.weight("w", &[4, 6], wave(24, 3));
    let norm = c.weight("norm", &[6], wave(6, 4));
    let (gate, up, down) = (
        c.weight("gate", &[5, 6], wave(30, 5)),
        c.weight("up", &[5, 6], wave(30, 6)),
        c.weight("down", &[6, 5], wave(30, 7)),
    );
    let outs = [c.buf("mv", 4), c.buf("norm", 6), c.buf("ffn", 6), c.buf("gated", 6), c.buf("sum", 6)];
    c.command(Command::MatVec { weight: w, x, out: outs[0] });
    c.command(Command::RmsNorm { x, weight: norm, eps: 1e-6, out: outs[1] });
    c.command(Command::SwiGlu { x, gate, up, down, out: outs[2] });
    c.command(Command::SigmoidGate { x, gate: y, out: outs[3] });
    c.command(Command::Add { residual: x, x: y, out: outs[4] });
    let (p, ck) = c.finish();
    let r = run(&p, &ck, &[0]);

    let data = |n: &str| ck.get(n).unwrap().to_f32().unwrap();
    let (xv, yv) = (wave(6, 1), wave(6, 2));
    let (x64, y64) = (f64s(&xv), f64s(&yv));
    let h: Vec<f32> =
        matvec(&data("gate"), &xv).iter().zip(matvec(&data("up"), &xv)).map(|(g, u)| (silu(*g) * u) as f32).collect();
    let cases: [(&str, Vec<f64>); 5] = [
        ("matvec", matvec(&data("w"), &xv)),
        ("rms_norm", rms_norm(&x64, &f64s(&data("norm")), 1e-6)),
        ("swiglu", matvec(&data("down"), &h)),
        ("sigmoid_gate", x64.iter().zip(&y64).map(|(x, g)| sigmoid(*g) * x).collect()),
        ("add", x64.iter().zip(&y64).map(|(a, b)| a + b).collect()),
    ];
    for ((what, want), out) in cases.into_iter().zip(outs) {
        assert_close(what, &value(&r, out), &want, 2e-6);
    }
}

// ---------------------------------------------------------------------------------------------
// The Gated-DeltaNet units.

#[test]
fn conv_with_a_window_of_k_minus_1_equals_a_full_window_conv() {
    // 3 channels in two inputs (2 + 1), 4 taps, a bias; 6 steps of distinct inputs.
    const C: usize = 3;
    const K: usize = 4;
    let steps = 6;
    let xs: Vec<Vec<f32>> = (0..steps).map(|t| wave(C, 10 + t)).collect();
    let mut c = Case::new(Numerics::F32);
    let a = c.input("a", &xs.iter().map(|x| x[..2].to_vec()).collect::<Vec<_>>());
    let b = c.input("b", &xs.iter().map(|x| x[2..].to_vec()).collect::<Vec<_>>());
    let window = c.state("conv", StateLayout::ConvWindow { channels: C, taps: K });
    let w = c.weight("conv.w", &[C, K], wave(C * K, 3));
    let bias = c.weight("conv.b", &[C], wave(C, 4));
    let outs = [c.buf("a.out", 2), c.buf("b.out", 1)];
    c.command(Command::Conv {
        ins: vec![a, b],
        window,
        weight: w.clone(),
        bias: Some(bias.clone()),
        outs: outs.to_vec(),
    });
    let (p, ck) = c.finish();
    let (wt, bt) = (&ck.get(&w).unwrap().to_f32().unwrap(), &ck.get(&bias).unwrap().to_f32().unwrap());

    let mut r = EngineRunner::new(&p, &ck, 0).expect("new");
    for t in 0..steps {
        r.step(t as u32).expect("step");
        // The full window: inputs t−K+1..=t (zeros before the first step), tap K−1 the newest.
        let want: Vec<f64> = (0..C)
            .map(|ch| {
                let taps: f64 = (0..K)
                    .filter_map(|j| (t + j).checked_sub(K - 1).map(|s| wt[ch * K + j] as f64 * xs[s][ch] as f64))
                    .sum();
                silu(taps + bt[ch] as f64)
            })
            .collect();
        let got = [value(&r, outs[0]), value(&r, outs[1])].concat();
        assert_close(&format!("conv step {t}"), &got, &want, 1e-6);
    }
    // The window holds the last K−1 inputs of each channel, oldest first.
    let Some(StateValue::ConvWindow { channels: C, taps: K, values }) =
        r.state().states.get(1).map(|s| s.value.clone())
    else {
        panic!("conv window")
    };
    let want: Vec<f64> =
        (0..C).flat_map(|ch| (steps - (K - 1)..steps).map(move |s| (s, ch))).map(|(s, ch)| xs[s][ch] as f64).collect();
    assert_close("window", &values, &want, 0.0);
}

#[test]
fn gates_are_sigmoid_of_b_and_decay_times_softplus() {
    let mut c = Case::new(Numerics::F32);
    let b = c.input("b", &[wave(4, 1)]);
    let a = c.input("a", &[wave(4, 2).iter().map(|v| v * 30.0).collect()]);
    let decay = c.weight("ssm_a", &[4], vec![-0.5, -1.0, -0.1, -2.0]);
    let dt = c.weight("ssm_dt", &[4], wave(4, 3));
    let (beta, g) = (c.buf("beta", 4), c.buf("g", 4));
    c.command(Command::Gates { b, a, decay, dt_bias: dt, beta, g });
    let (p, ck) = c.finish();
    let r = run(&p, &ck, &[0]);
    let softplus = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
    let (bv, av, dv) = (wave(4, 1), wave(4, 2), wave(4, 3));
    let want_g: Vec<f64> =
        (0..4).map(|i| [-0.5, -1.0, -0.1, -2.0][i] * softplus(av[i] as f64 * 30.0 + dv[i] as f64)).collect();
    assert_close("beta", &value(&r, beta), &bv.iter().map(|&x| sigmoid(x as f64)).collect::<Vec<_>>(), 1e-7);
    assert_close("g", &value(&r, g), &want_g, 1e-5);
}

/// A delta-rule program: 2 key heads of 3, 4 value heads of 2 (value head h reads key head
/// h mod 2), the inputs of each step given per token.
struct DeltaCase {
    q: Vec<Vec<f32>>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    g: Vec<Vec<f32>>,
    beta: Vec<Vec<f32>>,
}

const HK: usize = 2;
const HV: usize = 4;
const DK: usize = 3;
const DV: usize = 2;

impl DeltaCase {
    fn run(&self) -> (Vec<Vec<f32>>, Vec<f32>) {
        let mut c = Case::new(Numerics::F32);
        let (q, k, v) = (c.input("q", &self.q), c.input("k", &self.k), c.input("v", &self.v));
        let (g, beta) = (c.input("g", &self.g), c.input("beta", &self.beta));
        let state = c.state("delta", StateLayout::DeltaState { value_heads: HV, key_dim: DK, value_dim: DV });
        let out = c.buf("o", HV * DV);
        c.command(Command::DeltaRule { state, q, k, v, g, beta, out, key_heads: HK });
        let (p, ck) = c.finish();
        let mut r = EngineRunner::new(&p, &ck, 0).expect("new");
        let mut outs = vec![];
        for t in 0..self.q.len() {
            r.step(t as u32).expect("step");
            outs.push(value(&r, out));
        }
        let Some(StateValue::DeltaState { values, .. }) = r.state().states.get(1).map(|s| s.value.clone()) else {
            panic!("delta state")
        };
        (outs, values)
    }
}

/// `x / √(Σx² + 1e-6) · scale`.
fn l2norm(x: &[f32], scale: f64) -> Vec<f64> {
    let x = f64s(x);
    let r = scale / (dot(&x, &x) + 1e-6).sqrt();
    x.iter().map(|v| v * r).collect()
}

#[test]
fn delta_rule_from_zero_with_g_0_and_beta_1_stores_v_times_k_and_reads_k_dot_q_times_v() {
    let case = DeltaCase {
        q: vec![wave(HK * DK, 1)],
        k: vec![wave(HK * DK, 2)],
        v: vec![wave(HV * DV, 3)],
        g: vec![vec![0.0; HV]],
        beta: vec![vec![1.0; HV]],
    };
    let (outs, state) = case.run();
    let (mut want_s, mut want_o) = (vec![], vec![]);
    for h in 0..HV {
        let kh = h % HK;
        let q = l2norm(&case.q[0][kh * DK..(kh + 1) * DK], 1.0 / (DK as f64).sqrt());
        let k = l2norm(&case.k[0][kh * DK..(kh + 1) * DK], 1.0);
        let v = f64s(&case.v[0][h * DV..(h + 1) * DV]);
        // The engine's [dv][dk] orientation: row j is v[j]·k.
        want_s.extend(v.iter().flat_map(|vj| k.iter().map(move |ki| vj * ki)));
        want_o.extend(v.iter().map(|vj| dot(&k, &q) * vj));
    }
    assert_close("state", &state, &want_s, 1e-6);
    assert_close("out", &outs[0], &want_o, 1e-6);
}

#[test]
fn delta_rule_follows_the_reference_recurrence_over_steps() {
    let steps = 5;
    let case = DeltaCase {
        q: (0..steps).map(|t| wave(HK * DK, 10 + t)).collect(),
        k: (0..steps).map(|t| wave(HK * DK, 20 + t)).collect(),
        v: (0..steps).map(|t| wave(HV * DV, 30 + t)).collect(),
        g: (0..steps).map(|t| wave(HV, 40 + t).iter().map(|x| -x.abs()).collect()).collect(),
        beta: (0..steps).map(|t| wave(HV, 50 + t).iter().map(|x| x.abs()).collect()).collect(),
    };
    let (outs, state) = case.run();
    // The reference: per value head a [dk][dv] matrix S; S ← e^g S; δ = β(v − Sᵀk); S ← S + k δᵀ;
    // o = Sᵀq.
    let mut s = vec![vec![[[0f64; DV]; DK]; HV]; 1].remove(0);
    for t in 0..steps {
        let mut want = vec![];
        for (h, sh) in s.iter_mut().enumerate() {
            let kh = h % HK;
            let q = l2norm(&case.q[t][kh * DK..(kh + 1) * DK], 1.0 / (DK as f64).sqrt());
            let k = l2norm(&case.k[t][kh * DK..(kh + 1) * DK], 1.0);
            let (decay, beta) = ((case.g[t][h] as f64).exp(), case.beta[t][h] as f64);
            for row in sh.iter_mut() {
                row.iter_mut().for_each(|x| *x *= decay);
            }
            for j in 0..DV {
                let mem: f64 = (0..DK).map(|i| sh[i][j] * k[i]).sum();
                let delta = beta * (case.v[t][h * DV + j] as f64 - mem);
                (0..DK).for_each(|i| sh[i][j] += k[i] * delta);
            }
            want.extend((0..DV).map(|j| (0..DK).map(|i| sh[i][j] * q[i]).sum::<f64>()));
        }
        assert_close(&format!("out step {t}"), &outs[t], &want, 1e-5);
    }
    let transposed: Vec<f64> =
        s.iter().flat_map(|sh| (0..DV).flat_map(move |j| (0..DK).map(move |i| sh[i][j]))).collect();
    assert_close("state", &state, &transposed, 1e-5);
}

#[test]
fn the_delta_state_maps_to_the_reference_orientation() {
    let v = StateValue::DeltaState { value_heads: 1, key_dim: 3, value_dim: 2, values: vec![1., 2., 3., 4., 5., 6.] };
    assert_eq!(v.delta_key_major(), Some(vec![1., 4., 2., 5., 3., 6.]));
}

#[test]
fn gated_norm_normalises_each_head_then_multiplies_by_silu_of_z() {
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[wave(6, 1)]);
    let z = c.input("z", &[wave(6, 2)]);
    let w = c.weight("norm", &[3], wave(3, 3));
    let out = c.buf("out", 6);
    c.command(Command::GatedNorm { x, z, weight: w, eps: 1e-6, dim: 3, out });
    let (p, ck) = c.finish();
    let r = run(&p, &ck, &[0]);
    let (xv, zv, wv) = (f64s(&wave(6, 1)), f64s(&wave(6, 2)), f64s(&wave(3, 3)));
    let want: Vec<f64> = (0..2)
        .flat_map(|h| {
            let n = rms_norm(&xv[h * 3..h * 3 + 3], &wv, 1e-6);
            (0..3).map(|i| n[i] * silu(zv[h * 3 + i])).collect::<Vec<_>>()
        })
        .collect();
    assert_close("gated_norm", &value(&r, out), &want, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// The attention unit.

/// An attention program: `heads` query heads and `kv_heads` KV heads of `head_dim`, RoPE on
/// `rope_dims` with θ 100, no q/k norms, scale 0.5; the inputs of each step given per token.
struct AttnCase {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rope_dims: usize,
    q: Vec<Vec<f32>>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl AttnCase {
    fn build(&self) -> (Program, Checkpoint, Buf) {
        let mut c = Case::new(Numerics::F32);
        let (q, k, v) = (c.input("q", &self.q), c.input("k", &self.k), c.input("v", &self.v));
        let layout = StateLayout::KvCache { heads: self.kv_heads, dim: self.head_dim };
        let (k_cache, v_cache) = (c.state("k_cache", layout.clone()), c.state("v_cache", layout));
        let out = c.buf("o", self.heads * self.head_dim);
        c.command(Command::Attention {
            q,
            k,
            v,
            q_norm: None,
            k_norm: None,
            eps: 1e-6,
            rope: Rope { theta: 100.0, dims: self.rope_dims },
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: 0.5,
            k_cache,
            v_cache,
            out,
        });
        let (p, ck) = c.finish();
        (p, ck, out)
    }

    /// The outputs of each step and the key cache's written rows after the last.
    fn run(&self) -> (Vec<Vec<f32>>, Vec<f32>) {
        let (p, ck, out) = self.build();
        let mut r = EngineRunner::new(&p, &ck, self.q.len()).expect("new");
        let mut outs = vec![];
        for t in 0..self.q.len() {
            r.step(t as u32).expect("step");
            outs.push(value(&r, out));
        }
        let keys = r.state().states[1].value.kv_filled().expect("key cache");
        (outs, keys)
    }
}

#[test]
fn attention_over_one_position_returns_v_of_each_query_heads_kv_head() {
    // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0 and heads 2, 3 read KV head 1
    // (h / 2, not h mod 2).
    let case = AttnCase {
        heads: 4,
        kv_heads: 2,
        head_dim: 4,
        rope_dims: 2,
        q: vec![wave(16, 1)],
        k: vec![wave(8, 2)],
        v: vec![wave(8, 3)],
    };
    let (outs, _) = case.run();
    let v = f64s(&case.v[0]);
    let want = [&v[0..4], &v[0..4], &v[4..8], &v[4..8]].concat();
    assert_close("attention", &outs[0], &want, 1e-6);
}

#[test]
fn rope_is_the_identity_at_position_0_and_rotates_pairs_i_and_i_plus_half_after() {
    // head_dim 6, 4 dims rotated: at position 1 pairs (0, 2) and (1, 3) turn by 1·100^(−2i/4);
    // dims 4 and 5 pass through.
    let case = AttnCase {
        heads: 1,
        kv_heads: 1,
        head_dim: 6,
        rope_dims: 4,
        q: vec![wave(6, 1), wave(6, 2)],
        k: vec![wave(6, 3), wave(6, 4)],
        v: vec![wave(6, 5), wave(6, 6)],
    };
    let (_, keys) = case.run();
    assert_close("position 0", &keys[..6], &f64s(&case.k[0]), 0.0);
    let k = f64s(&case.k[1]);
    let mut want = k.clone();
    for i in 0..2 {
        let a = 100f64.powf(-2.0 * i as f64 / 4.0);
        want[i] = k[i] * a.cos() - k[i + 2] * a.sin();
        want[i + 2] = k[i + 2] * a.cos() + k[i] * a.sin();
    }
    assert_close("position 1", &keys[6..], &want, 1e-6);
}

#[test]
fn attention_weighs_the_cached_values_by_the_softmax_of_scaled_scores() {
    // No RoPE, so the scores are plain dot products over the three cached positions.
    let steps = 3;
    let case = AttnCase {
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        rope_dims: 0,
        q: (0..steps).map(|t| wave(8, 10 + t).iter().map(|x| 3.0 * x).collect()).collect(),
        k: (0..steps).map(|t| wave(4, 20 + t)).collect(),
        v: (0..steps).map(|t| wave(4, 30 + t)).collect(),
    };
    let (outs, _) = case.run();
    let want: Vec<f64> = (0..2)
        .flat_map(|h| {
            let q = f64s(&case.q[steps - 1][h * 4..(h + 1) * 4]);
            let e: Vec<f64> = case.k.iter().map(|k| (0.5 * dot(&q, &f64s(k))).exp()).collect();
            let total: f64 = e.iter().sum();
            (0..4).map(|d| (0..steps).map(|p| e[p] / total * case.v[p][d] as f64).sum::<f64>()).collect::<Vec<_>>()
        })
        .collect();
    assert_close("attention", &outs[steps - 1], &want, 1e-6);
}

#[test]
fn a_step_beyond_the_caches_capacity_is_refused_and_changes_nothing() {
    let case = AttnCase {
        heads: 1,
        kv_heads: 1,
        head_dim: 2,
        rope_dims: 2,
        q: vec![vec![0.5, 0.5]],
        k: vec![vec![1.0, 2.0]],
        v: vec![vec![3.0, 4.0]],
    };
    let (p, ck, _) = case.build();
    let mut r = EngineRunner::new(&p, &ck, 2).expect("new");
    r.step(0).expect("position 0");
    r.step(0).expect("position 1");
    let before = r.state();
    assert_eq!(r.step(0), Err(RunError::CapacityExceeded { position: 2, capacity: 2 }));
    assert_eq!(r.state(), before);
    assert_eq!(before.position, 2);
    let StateValue::KvCache { filled, capacity, .. } = before.states[1].value else { panic!("cache") };
    assert_eq!((filled, capacity), (2, 2));
}

// ---------------------------------------------------------------------------------------------
// Storage.

#[test]
fn bf16_storage_rounds_what_a_unit_writes_and_f32_keeps_it() {
    // 1 + 2⁻¹⁰ is not a bf16 (8 significant bits): it rounds to 1. 1.5 and 2⁻¹⁰ are bf16s.
    let tiny = 2f32.powi(-10);
    for (numerics, want) in [(Numerics::BF16, [1.0, 1.5 + 0.5]), (Numerics::F32, [1.0 + tiny, 2.0])] {
        let mut c = Case::new(numerics);
        let a = c.input("a", &[vec![1.0, 1.5]]);
        let b = c.input("b", &[vec![tiny, 0.5]]);
        let sum = c.buf("sum", 2);
        c.command(Command::Add { residual: a, x: b, out: sum });
        let (p, ck) = c.finish();
        let r = run(&p, &ck, &[0]);
        assert_eq!(value(&r, a), [1.0, 1.5], "{numerics}: a representable value stays");
        assert_eq!(value(&r, sum), want, "{numerics}");
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals.

/// A valid program: `%y = matvec w, %x`, and its checkpoint.
fn matvec_case() -> (Program, Checkpoint) {
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[wave(4, 1)]);
    let w = c.weight("w", &[3, 4], wave(12, 2));
    let y = c.buf("y", 3);
    c.command(Command::MatVec { weight: w, x, out: y });
    c.finish()
}

/// The matvec command of [`matvec_case`].
fn matvec_of(p: &mut Program) -> &mut Command {
    &mut p.blocks[1].commands[0]
}

#[test]
fn new_refuses_a_malformed_program_naming_what_is_wrong() {
    type Mutation = fn(&mut Program, &mut Checkpoint);
    type Case = (&'static str, Mutation, fn(&RunError) -> bool, &'static str);
    let cases: [Case; 10] = [
        (
            "a missing weight",
            |p, _| *matvec_of(p) = Command::MatVec { weight: "absent.weight".into(), x: Buf(0), out: Buf(1) },
            |e| matches!(e, RunError::MissingWeight { tensor, .. } if tensor == "absent.weight"),
            "absent.weight",
        ),
        (
            "a weight of the wrong shape",
            |_, c| c.insert("w", Tensor::f32(vec![4, 3], &wave(12, 2))),
            |e| {
                matches!(e, RunError::WeightShape { tensor, expected, found, .. }
                if tensor == "w" && expected == &[3, 4] && found == &[4, 3])
            },
            "block 1 (layer 0 FFN) command 0 (matvec)",
        ),
        (
            "a command reading buffer 999",
            |p, _| *matvec_of(p) = Command::MatVec { weight: "w".into(), x: Buf(999), out: Buf(1) },
            |e| matches!(e, RunError::NoSuchBuffer { index: 999, .. }),
            "999",
        ),
        (
            "a buffer read before it is written",
            |p, _| p.blocks.swap(0, 1),
            |e| matches!(e, RunError::ReadBeforeWrite { buffer, .. } if buffer == "x"),
            "%x",
        ),
        (
            "a buffer written twice",
            |p, _| p.blocks[1].commands.push(Command::Add { residual: Buf(0), x: Buf(0), out: Buf(1) }),
            |e| matches!(e, RunError::WrittenTwice { buffer, .. } if buffer == "y"),
            "%y",
        ),
        (
            "an output of the wrong length",
            |p, _| p.buffers[1].len = 5,
            |e| matches!(e, RunError::BufferLength { buffer, expected: 3, found: 5, .. } if buffer == "y"),
            "matvec",
        ),
        (
            "an advance of a state the program does not have",
            |p, _| p.blocks[2].commands[0] = Command::Advance { position: StateRef(7) },
            |e| matches!(e, RunError::NoSuchState { index: 7, .. }),
            "advance",
        ),
        (
            "a state no command uses",
            |p, _| {
                let layout = StateLayout::ConvWindow { channels: 4, taps: 4 };
                p.states.push(StateBuffer { name: "idle".into(), layer: None, layout, storage: Storage::F32 })
            },
            |e| matches!(e, RunError::UnusedState { state } if state == "idle"),
            "idle",
        ),
        (
            "logits that are not the vocabulary's length",
            |p, _| p.logits = Buf(1),
            |e| matches!(e, RunError::LogitsLength { found: 3, vocab: VOCAB, .. }),
            "%y",
        ),
        (
            "a weight whose values do not fill its shape",
            |_, c| c.insert("w", Tensor::f32(vec![3, 4], &wave(11, 2))),
            |e| matches!(e, RunError::WeightData { why, .. } if why.contains("takes 48 bytes, but it holds 44")),
            "w",
        ),
    ];
    for (what, mutate, expected, named) in cases {
        let (mut p, mut ck) = matvec_case();
        mutate(&mut p, &mut ck);
        match EngineRunner::new(&p, &ck, 4) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => {
                assert!(expected(&e), "{what}: {e:?}");
                assert!(e.to_string().contains(named), "{what}: {e} does not name {named}");
            }
        }
    }
}

#[test]
fn a_token_outside_the_vocabulary_is_refused() {
    let (p, ck) = matvec_case();
    let mut r = EngineRunner::new(&p, &ck, 0).expect("new");
    assert_eq!(r.step(VOCAB as u32), Err(RunError::TokenOutOfRange { token: VOCAB as u32, vocab: VOCAB }));
    assert_eq!(r.position(), 0);
}

#[test]
fn a_state_kept_in_another_type_than_the_numerics_say_is_refused() {
    let mut c = Case::new(Numerics::F32);
    let x = c.input("x", &[wave(4, 1)]);
    let window = c.state("conv", StateLayout::ConvWindow { channels: 4, taps: 2 });
    let w = c.weight("w", &[4, 2], wave(8, 1));
    let y = c.buf("y", 4);
    c.command(Command::Conv { ins: vec![x], window, weight: w, bias: None, outs: vec![y] });
    let (mut p, ck) = c.finish();
    p.states[1].storage = Storage::Bf16;
    let err = EngineRunner::new(&p, &ck, 0).err();
    assert_eq!(
        err,
        Some(RunError::StateStorage { state: "conv".into(), expected: Storage::F32, found: Storage::Bf16 })
    );
}

// ---------------------------------------------------------------------------------------------
// The program's forms: JSON and the listing.

/// A program that holds every command (not a valid one: only its forms are tested).
fn every_command() -> Program {
    let (mut p, _) = matvec_case();
    let s = StateRef(0);
    let rope = Rope { theta: 1e7, dims: 64 };
    let (w, b) = (String::from("w"), Buf(1));
    p.blocks[1].commands = vec![
        Command::Embed { table: w.clone(), out: b },
        Command::RmsNorm { x: b, weight: w.clone(), eps: 1e-6, out: b },
        Command::MatVec { weight: w.clone(), x: b, out: b },
        Command::MergedRows { weight: w.clone(), x: b, outs: vec![b, Buf(3)] },
        Command::MergedHeadHalves { weight: w.clone(), head_dim: 256, x: b, first: b, second: b },
        Command::Conv { ins: vec![b], window: s, weight: w.clone(), bias: Some(w.clone()), outs: vec![b] },
        Command::Gates { b, a: b, decay: w.clone(), dt_bias: w.clone(), beta: b, g: b },
        Command::DeltaRule { state: s, q: b, k: b, v: b, g: b, beta: b, out: b, key_heads: 16 },
        Command::GatedNorm { x: b, z: b, weight: w.clone(), eps: 1e-6, dim: 128, out: b },
        Command::Attention {
            q: b,
            k: b,
            v: b,
            q_norm: Some(w.clone()),
            k_norm: None,
            eps: 1e-6,
            rope,
            heads: 8,
            kv_heads: 2,
            head_dim: 256,
            scale: 0.0625,
            k_cache: s,
            v_cache: StateRef(9),
            out: b,
        },
        Command::SigmoidGate { x: b, gate: b, out: b },
        Command::SwiGlu { x: b, gate: w.clone(), up: w.clone(), down: w, out: b },
        Command::Add { residual: b, x: b, out: b },
        Command::Advance { position: s },
    ];
    p
}

#[test]
fn a_program_round_trips_through_json() {
    let p = every_command();
    let json = serde_json::to_string_pretty(&p).expect("to json");
    let back: Program = serde_json::from_str(&json).expect("from json");
    assert_eq!(back, p);
    // Commands are externally tagged: `{"MatVec": {"weight": …, "x": 1, "out": 1}}`.
    assert!(json.contains("\"MergedHeadHalves\": {"), "{json}");
}

#[test]
fn the_listing_writes_one_line_per_buffer_state_and_command() {
    let (p, _) = matvec_case();
    let want = "\
program test numerics f32/f32/f32 hidden 0 vocab 8
%x: [4] f32
%y: [3] f32
%logits: [8] f32
state %position position

block 0 embedding
  %x = embed input.x, token
  %logits = embed logits.table, token

block 1 layer 0 FFN
  %y = matvec w, %x

block 2 advance
  advance %position

logits %logits
";
    assert_eq!(p.to_string(), want);
    let listing = every_command().to_string();
    for c in &every_command().blocks[1].commands {
        assert!(listing.contains(&format!(" {} ", c.unit())) || listing.contains(&format!("{} %", c.unit())));
    }
    assert!(listing.contains("%?9"), "an index the program lacks lists as %?9");
}

#[test]
fn the_complete_program_of_the_docs_loads_and_runs() {
    let doc = include_str!("../docs/PROGRAM.md");
    let section = doc.split("## A complete program").nth(1).expect("section");
    let json = section.split("```json").nth(1).and_then(|s| s.split("```").next()).expect("json block");
    let p: Program = serde_json::from_str(json).expect("the documented program parses");
    let mut ck = Checkpoint::default();
    ck.insert("token_embd.weight", Tensor::f32(vec![8, 4], &wave(32, 1)));
    ck.insert("output_norm.weight", Tensor::f32(vec![4], &[1.0; 4]));
    ck.insert("output.weight", Tensor::f32(vec![8, 4], &wave(32, 2)));
    let mut r = EngineRunner::new(&p, &ck, 0).expect("new");
    let logits = r.step(3).expect("step");
    let x = &wave(32, 1)[12..16];
    let normed = rms_norm(&f64s(x), &[1.0; 4], 1e-6);
    let want: Vec<f64> = wave(32, 2).chunks(4).map(|row| dot(&f64s(row), &normed)).collect();
    assert_close("logits", &logits, &want, 1e-6);
    assert_eq!(r.position(), 1);
}

// ---------------------------------------------------------------------------------------------
// A whole layer, and programs a fuzzer could write.

/// A program with every unit: a Gated-DeltaNet mixer (2 key heads of 2, 4 value heads of 2), a
/// gated attention mixer (2 query heads, 1 KV head of 4), a SwiGLU FFN and an untied head, hidden 8.
fn layer_case() -> (Program, Checkpoint) {
    let mut c = Case::new(Numerics::BF16);
    let h = 8;
    let w = |c: &mut Case, name: &str, shape: &[usize]| {
        let n = shape.iter().product();
        c.weight(name, shape, wave(n, name.len()))
    };
    let x0 = c.buf("x0", h);
    let table = w(&mut c, "token_embd.weight", &[VOCAB, h]);
    c.inputs.push(Command::Embed { table, out: x0 });
    let buf = |c: &mut Case, name: &str, len: usize| c.buf(name, len);
    // Gated-DeltaNet.
    let xn = buf(&mut c, "xn", h);
    let [q, k, v] = [buf(&mut c, "q.raw", 4), buf(&mut c, "k.raw", 4), buf(&mut c, "v.raw", 8)];
    let [qc, kc, vc] = [buf(&mut c, "q", 4), buf(&mut c, "k", 4), buf(&mut c, "v", 8)];
    let [z, b, a, beta, g] =
        [buf(&mut c, "z", 8), buf(&mut c, "b", 4), buf(&mut c, "a", 4), buf(&mut c, "beta", 4), buf(&mut c, "g", 4)];
    let [o, on, y, x1] = [buf(&mut c, "o", 8), buf(&mut c, "on", 8), buf(&mut c, "y", h), buf(&mut c, "x1", h)];
    let window = c.state("conv", StateLayout::ConvWindow { channels: 16, taps: 4 });
    let delta = c.state("delta", StateLayout::DeltaState { value_heads: 4, key_dim: 2, value_dim: 2 });
    let mut cmds = vec![
        Command::RmsNorm { x: x0, weight: w(&mut c, "attn_norm", &[h]), eps: 1e-6, out: xn },
        Command::MergedRows { weight: w(&mut c, "attn_qkv", &[16, h]), x: xn, outs: vec![q, k, v] },
        Command::MatVec { weight: w(&mut c, "attn_gate", &[8, h]), x: xn, out: z },
        Command::MatVec { weight: w(&mut c, "ssm_beta", &[4, h]), x: xn, out: b },
        Command::MatVec { weight: w(&mut c, "ssm_alpha", &[4, h]), x: xn, out: a },
        Command::Conv {
            ins: vec![q, k, v],
            window,
            weight: w(&mut c, "conv", &[16, 4]),
            bias: None,
            outs: vec![qc, kc, vc],
        },
        Command::Gates { b, a, decay: w(&mut c, "ssm_a", &[4]), dt_bias: w(&mut c, "ssm_dt", &[4]), beta, g },
        Command::DeltaRule { state: delta, q: qc, k: kc, v: vc, g, beta, out: o, key_heads: 2 },
        Command::GatedNorm { x: o, z, weight: w(&mut c, "ssm_norm", &[2]), eps: 1e-6, dim: 2, out: on },
        Command::MatVec { weight: w(&mut c, "ssm_out", &[h, 8]), x: on, out: y },
        Command::Add { residual: x0, x: y, out: x1 },
    ];
    // Gated attention.
    let [an, aq, gate, ak, av] = [
        buf(&mut c, "an", h),
        buf(&mut c, "aq", 8),
        buf(&mut c, "gate", 8),
        buf(&mut c, "ak", 4),
        buf(&mut c, "av", 4),
    ];
    let [ao, ag, ay, x2] = [buf(&mut c, "ao", 8), buf(&mut c, "ag", 8), buf(&mut c, "ay", h), buf(&mut c, "x2", h)];
    let k_cache = c.state("k_cache", StateLayout::KvCache { heads: 1, dim: 4 });
    let v_cache = c.state("v_cache", StateLayout::KvCache { heads: 1, dim: 4 });
    cmds.extend([
        Command::RmsNorm { x: x1, weight: w(&mut c, "attn_norm.2", &[h]), eps: 1e-6, out: an },
        Command::MergedHeadHalves {
            weight: w(&mut c, "attn_q", &[16, h]),
            head_dim: 4,
            x: an,
            first: aq,
            second: gate,
        },
        Command::MatVec { weight: w(&mut c, "attn_k", &[4, h]), x: an, out: ak },
        Command::MatVec { weight: w(&mut c, "attn_v", &[4, h]), x: an, out: av },
        Command::Attention {
            q: aq,
            k: ak,
            v: av,
            q_norm: Some(w(&mut c, "q_norm", &[4])),
            k_norm: Some(w(&mut c, "k_norm", &[4])),
            eps: 1e-6,
            rope: Rope { theta: 1e4, dims: 2 },
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            scale: 0.5,
            k_cache,
            v_cache,
            out: ao,
        },
        Command::SigmoidGate { x: ao, gate, out: ag },
        Command::MatVec { weight: w(&mut c, "attn_output", &[h, 8]), x: ag, out: ay },
        Command::Add { residual: x1, x: ay, out: x2 },
    ]);
    // FFN and head.
    let [fy, x3, fin] = [buf(&mut c, "fy", h), buf(&mut c, "x3", h), buf(&mut c, "final", h)];
    let logits = buf(&mut c, "head", VOCAB);
    cmds.extend([
        Command::SwiGlu {
            x: x2,
            gate: w(&mut c, "ffn_gate", &[6, h]),
            up: w(&mut c, "ffn_up", &[6, h]),
            down: w(&mut c, "ffn_down", &[h, 6]),
            out: fy,
        },
        Command::Add { residual: x2, x: fy, out: x3 },
        Command::RmsNorm { x: x3, weight: w(&mut c, "output_norm", &[h]), eps: 1e-6, out: fin },
        Command::MatVec { weight: w(&mut c, "output", &[VOCAB, h]), x: fin, out: logits },
    ]);
    c.commands = cmds;
    let (mut p, ck) = c.finish();
    // The head's logits, not the dummy embedding `finish` adds.
    p.blocks[0].commands.pop();
    p.buffers.pop();
    p.logits = logits;
    (p, ck)
}

#[test]
fn a_program_with_every_unit_runs_steps_and_carries_its_state() {
    // Its values (at bf16): every Command of the engine's run within its bound of its meaning on
    // the inputs it read, stored as bf16 (the check's per-Command judge); far from the same units
    // over f64 with nothing rounded. The units' meaning itself is checked against transformers'
    // goldens (tests/check.rs) and the reference interpreter (the check).
    let (p, ck) = layer_case();
    let mut r = EngineRunner::new(&p, &ck, 8).unwrap_or_else(|e| panic!("{e}\n{p}"));
    let mut judge = CommandCheck::new(&p, Weights::new(&ck), true);
    let mut exact = EngineRunner::<f64>::with_arithmetic(&p, &ck, 8, Rounding::Exact).expect("exact");
    let off = |a: &[f64], b: &[f64]| {
        let scale = b.iter().fold(1f64, |m, x| m.max(x.abs()));
        a.iter().zip(b).map(|(x, y)| (x - y).abs() / scale).fold(0f64, f64::max)
    };
    for (step, t) in [3, 1, 4, 1, 5].into_iter().enumerate() {
        judge.at_step(step);
        let logits = r.step_observed(t, &mut judge).expect("step");
        assert_eq!(judge.found(), &Found::Admitted, "token {t}");
        let wide = exact.step(t).expect("step");
        assert!(logits.iter().all(|x| x.is_finite()), "{logits:?}");
        let engine: Vec<f64> = logits.iter().map(|&x| f64::from(x)).collect();
        assert!(off(&engine, &wide) > 1e-4, "token {t}: bf16 storage should show against exact f64");
    }
    assert!(judge.values > 0);
    let s = r.state();
    assert_eq!(s.position, 5);
    let names: Vec<&str> = s.states.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["position", "conv", "delta", "k_cache", "v_cache"]);
    assert!(matches!(s.states[3].value, StateValue::KvCache { filled: 5, capacity: 8, .. }));
}

/// Every number of the program's JSON, as a path of keys and indices.
fn number_paths(v: &serde_json::Value, path: &mut Vec<serde_json::Value>, out: &mut Vec<Vec<serde_json::Value>>) {
    match v {
        serde_json::Value::Number(_) => out.push(path.clone()),
        serde_json::Value::Array(items) => items.iter().enumerate().for_each(|(i, x)| {
            path.push(i.into());
            number_paths(x, path, out);
            path.pop();
        }),
        serde_json::Value::Object(map) => map.iter().for_each(|(k, x)| {
            path.push(k.clone().into());
            number_paths(x, path, out);
            path.pop();
        }),
        _ => {}
    }
}

fn at<'v>(v: &'v mut serde_json::Value, path: &[serde_json::Value]) -> Option<&'v mut serde_json::Value> {
    path.iter().try_fold(v, |v, key| match key {
        serde_json::Value::String(k) => v.get_mut(k.as_str()),
        serde_json::Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

proptest::proptest! {
    /// A program with any of its numbers replaced (an index, a length, a head count, a dim) is
    /// refused by `new` with an error, or runs: it never panics.
    #[test]
    fn a_mutated_program_is_refused_or_runs_but_never_panics(
        edits in proptest::collection::vec((0usize..10_000, proptest::sample::select(vec![
            0u64, 1, 2, 3, 4, 5, 7, 8, 9, 16, 999, 1 << 40, u64::MAX,
        ])), 1..4),
        capacity in 0usize..4,
    ) {
        let (p, ck) = layer_case();
        let mut json = serde_json::to_value(&p).expect("json");
        let mut paths = vec![];
        number_paths(&json, &mut vec![], &mut paths);
        for (i, value) in edits {
            if let Some(slot) = at(&mut json, &paths[i % paths.len()]) {
                *slot = value.into();
            }
        }
        if let Ok(mutated) = serde_json::from_value::<Program>(json) {
            let _ = mutated.to_string();
            if let Ok(mut r) = EngineRunner::new(&mutated, &ck, capacity) {
                for t in [0, 1, 2, 3, 9] {
                    let _ = r.step(t);
                }
                let _ = r.state();
            }
        }
    }
}
