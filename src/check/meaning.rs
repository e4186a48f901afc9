//! Each Command's documented meaning (docs/PROGRAM.md, the doc comments of `engine::program`),
//! evaluated by the check in f64 on the very values the engine's Command read, every output with
//! the bound of what an f32 evaluation of that meaning may give ([`super::bound`]).
//!
//! It is the check's own statement of the Commands, sharing no code with the engine's units
//! (`engine::run::units`) nor with the prover's terms (`prove::program_terms`): three readings of
//! one document. Judging holds the engine's reading to this one, Command by Command; on every
//! accepted program the structure stage (the engine's units against the reference) and the proof
//! (the prover's terms against the graph) hold the engine's and the prover's to the same graph, so
//! a prover's reading written to match a wrong lowering shows as a structural disagreement.
//! What a Command computes in steps the engine does not store (the normed queries, the FFN's
//! intermediate, the attention scores) is carried as balls from one step to the next; what it
//! stores and then reads again (a delta state row before its output, a cache entry before the
//! scores) is read as the engine stored it, once judged.

use super::bound::{Ball, DOT_EXTRA, Q8K_EXTRA, U, dot, dot_exact, sum};
use super::weights::{Rows, Weights};
use crate::engine::numerics::Numerics;
use crate::engine::program::{Buf, Command, Program, StateLayout, StateRef};
use crate::engine::run::StepView;

/// The delta rule's l2-norm eps (docs/PROGRAM.md, `DeltaRule`).
const L2_EPS: f64 = 1e-6;

/// Values per Q8_K block (docs/PROGRAM.md, "Numerics and storage").
const Q8K_BLOCK: usize = 256;

/// What a Command reads: the engine's buffers and states as the Command left them (its inputs
/// are unchanged: a Command never reads what it writes), the states it touches as they were
/// before it ran, the position before it, and the checkpoint.
pub struct Reads<'a, 'v, 'c> {
    pub program: &'a Program,
    pub view: &'a StepView<'v, f32>,
    /// Per state of the program, its values before the Command ran, for the states it touches.
    pub before: &'a [Option<Vec<f32>>],
    pub position: usize,
    pub weights: &'a Weights<'c>,
}

/// What a Command writes, by its meaning.
#[derive(Clone, Debug)]
pub enum Written {
    /// A buffer's values.
    Buffer(Buf, Vec<Ball>),
    /// Values of a state from index `at` in its layout; what a Command does not write of a state
    /// it touches stays as it was.
    State { state: StateRef, at: usize, values: Vec<Ball> },
    /// The position after the Command.
    Position(usize),
    /// The values a Command computes between its halves and stores nowhere, in f32 (SwiGLU's
    /// gated intermediate, [`StepView::intermediate`]).
    Intermediate(Vec<Ball>),
}

impl Reads<'_, '_, '_> {
    fn numerics(&self) -> Numerics {
        self.program.numerics
    }

    fn buf(&self, b: Buf) -> Result<&[f32], String> {
        self.view.buffer(b).ok_or_else(|| format!("buffer {} does not exist", b.0))
    }

    fn exact(&self, b: Buf) -> Result<Vec<Ball>, String> {
        Ok(self.buf(b)?.iter().map(|&x| Ball::exact(f64::from(x))).collect())
    }

    fn before(&self, s: StateRef) -> Result<&[f32], String> {
        self.before.get(s.0).and_then(Option::as_deref).ok_or_else(|| format!("state {} was not read", s.0))
    }

    fn after(&self, s: StateRef) -> Result<&[f32], String> {
        self.view.state(s).ok_or_else(|| format!("state {} has no values", s.0))
    }

    fn layout(&self, s: StateRef) -> Result<&StateLayout, String> {
        self.program.states.get(s.0).map(|st| &st.layout).ok_or_else(|| format!("state {} does not exist", s.0))
    }

    fn len(&self, b: Buf) -> Result<usize, String> {
        self.program.buffers.get(b.0).map(|d| d.len).ok_or_else(|| format!("buffer {} does not exist", b.0))
    }
}

/// What `command` writes by its meaning, on what it read.
pub fn meaning(command: &Command, r: &Reads<'_, '_, '_>) -> Result<Vec<Written>, String> {
    Ok(match command {
        // out = table[token]
        Command::Embed { table, out } => {
            let row = r.weights.row(table, r.view.token())?;
            vec![Written::Buffer(*out, row.into_iter().map(Ball::exact).collect())]
        }
        // out = x · rsqrt(mean(x²) + eps) · weight
        Command::RmsNorm { x, weight, eps, out } => {
            let w = r.weights.vector(weight)?;
            vec![Written::Buffer(*out, rms_norm(&r.exact(*x)?, &w, *eps))]
        }
        // out = weight · x
        Command::MatVec { weight, x, out } => {
            let m = r.weights.matrix(weight, r.len(*x)?, r.numerics().kquant_inputs)?;
            vec![Written::Buffer(*out, matvec(&m, r.len(*out)?, &r.exact(*x)?)?)]
        }
        // one matvec over the first Σ len(outs) rows, split into consecutive row ranges
        Command::MergedRows { weight, x, outs } => {
            let lens = outs.iter().map(|&o| r.len(o)).collect::<Result<Vec<_>, _>>()?;
            let m = r.weights.matrix(weight, r.len(*x)?, r.numerics().kquant_inputs)?;
            let mut rows = matvec(&m, lens.iter().sum(), &r.exact(*x)?)?.into_iter();
            outs.iter().zip(lens).map(|(&o, n)| Written::Buffer(o, rows.by_ref().take(n).collect())).collect()
        }
        // one matvec over all rows; row r to head r / 2d, half (r / d) mod 2, index r mod d
        Command::MergedHeadHalves { weight, head_dim, x, first, second } => {
            let d = *head_dim;
            let n = r.len(*first)? + r.len(*second)?;
            let m = r.weights.matrix(weight, r.len(*x)?, r.numerics().kquant_inputs)?;
            let rows = matvec(&m, n, &r.exact(*x)?)?;
            let half = |h: usize| rows.chunks(2 * d).flat_map(|head| head[h * d..(h + 1) * d].to_vec()).collect();
            vec![Written::Buffer(*first, half(0)), Written::Buffer(*second, half(1))]
        }
        // per channel silu(Σ_{j<K−1} w[c,j]·window[c,j] + w[c,K−1]·x[c] (+ bias[c])); the window
        // drops its oldest input and appends x[c]
        Command::Conv { ins, window, weight, bias, outs } => conv(r, ins, *window, weight, bias.as_deref(), outs)?,
        // beta = sigmoid(b), g = decay · softplus(a + dt_bias)
        Command::Gates { b, a, decay, dt_bias, beta, g } => {
            let beta_v = r.exact(*b)?.into_iter().map(Ball::sigmoid).collect();
            let (decay, dt) = (r.weights.vector(decay)?, r.weights.vector(dt_bias)?);
            let g_v = r
                .exact(*a)?
                .into_iter()
                .zip(decay.iter().zip(dt.iter()))
                .map(|(a, (&d, &t))| Ball::exact(d) * (a + Ball::exact(t)).softplus())
                .collect();
            vec![Written::Buffer(*beta, beta_v), Written::Buffer(*g, g_v)]
        }
        Command::DeltaRule { state, q, k, v, g, beta, out, key_heads } => {
            delta_rule(r, *state, [*q, *k, *v, *g, *beta], *out, *key_heads)?
        }
        // per head of dim values: rms_norm(x, weight) · silu(z)
        Command::GatedNorm { x, z, weight, eps, dim, out } => {
            let w = r.weights.vector(weight)?;
            let (x, z) = (r.exact(*x)?, r.exact(*z)?);
            let mut o = Vec::with_capacity(x.len());
            for (xh, zh) in x.chunks(*dim).zip(z.chunks(*dim)) {
                o.extend(rms_norm(xh, &w, *eps).into_iter().zip(zh).map(|(n, &z)| n * z.silu()));
            }
            vec![Written::Buffer(*out, o)]
        }
        Command::Attention { .. } => attention(r, command)?,
        // out = sigmoid(gate) · x
        Command::SigmoidGate { x, gate, out } => {
            let o = r.exact(*gate)?.into_iter().zip(r.exact(*x)?).map(|(g, x)| g.sigmoid() * x).collect();
            vec![Written::Buffer(*out, o)]
        }
        // out = down · (silu(gate · x) ⊙ (up · x))
        Command::SwiGlu { x, gate, up, down, out } => {
            let (n, inputs) = (r.len(*x)?, r.numerics().kquant_inputs);
            let xs = r.exact(*x)?;
            let (gm, um) = (r.weights.matrix(gate, n, inputs)?, r.weights.matrix(up, n, inputs)?);
            let (g, u) = (matvec(&gm, gm.rows(), &xs)?, matvec(&um, um.rows(), &xs)?);
            let hidden: Vec<Ball> = g.into_iter().zip(u).map(|(g, u)| g.silu() * u).collect();
            let dm = r.weights.matrix(down, hidden.len(), inputs)?;
            // The intermediate as the engine computed it, where it shows it: judged, then read
            // exactly by `down`, so that each half is judged on its own inputs.
            match r.view.intermediate() {
                Some(engine) => {
                    let read: Vec<Ball> = engine.iter().map(|&h| Ball::exact(f64::from(h))).collect();
                    let o = matvec(&dm, r.len(*out)?, &read)?;
                    vec![Written::Intermediate(hidden), Written::Buffer(*out, o)]
                }
                None => vec![Written::Buffer(*out, matvec(&dm, r.len(*out)?, &hidden)?)],
            }
        }
        // out = residual + x
        Command::Add { residual, x, out } => {
            let o = r.exact(*residual)?.into_iter().zip(r.exact(*x)?).map(|(a, b)| a + b).collect();
            vec![Written::Buffer(*out, o)]
        }
        // the position moves to the next token
        Command::Advance { .. } => vec![Written::Position(r.position + 1)],
    })
}

/// `x · rsqrt(mean(x²) + eps) · weight`, as the engine's arithmetic may evaluate it: the mean of
/// squares, the eps (held in f32), the square root and its reciprocal, then each value times the
/// reciprocal times its weight.
fn rms_norm(x: &[Ball], weight: &[f64], eps: f64) -> Vec<Ball> {
    let mean = dot(x, x) / Ball::exact(x.len() as f64);
    let r = Ball::exact(1.0) / (mean + Ball::f32_constant(eps)).sqrt();
    x.iter().zip(weight).map(|(&xi, &w)| xi * r * Ball::exact(w)).collect()
}

/// `x · scale · rsqrt(Σx² + 1e-6)`: the delta rule's l2 norm (docs/PROGRAM.md, `DeltaRule`).
fn l2_norm(x: &[Ball], scale: Ball) -> Vec<Ball> {
    let r = scale / (dot(x, x) + Ball::f32_constant(L2_EPS)).sqrt();
    x.iter().map(|&xi| xi * r).collect()
}

/// `m`'s first `rows` rows times `x`: each row a dot product in any order, of the weights' decoded
/// values with `x`, or with `x` quantized to Q8_K where the numerics say ([`q8k`]).
fn matvec(m: &Rows<'_>, rows: usize, x: &[Ball]) -> Result<Vec<Ball>, String> {
    if m.quantized_inputs {
        let xq = q8k(x);
        m.each_row(rows, |w, magnitude| dot_exact(w, &xq, magnitude, Q8K_EXTRA))
    } else {
        m.each_row(rows, |w, _| dot_exact(w, x, None, DOT_EXTRA))
    }
}

/// `x` quantized to Q8_K blocks (docs/PROGRAM.md, "Numerics and storage"): per block of 256 with
/// `a = max |x|`, `q = round_half_even(x · (127 / a))`, `d = a / 127`, held as `d · q`, each in
/// f32. Every value an engine can hold for an `x` within its ball lies in the ball returned: the
/// integers from the smallest to the largest scaled value (widened by the f32 roundings of
/// `127 / a` and of the product, `2u` relatively), `d` within `u` of `a / 127`. Where a scaled
/// value lies within those roundings of a tie, both integers are in the ball: a flip of the
/// quantization costs the bound one step there, and only there.
fn q8k(x: &[Ball]) -> Vec<Ball> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(Q8K_BLOCK) {
        let a_lo = block.iter().fold(0f64, |a, b| a.max(b.mid.abs() - b.rad));
        let a_hi = block.iter().fold(0f64, |a, b| a.max(b.mid.abs() + b.rad));
        if a_hi == 0.0 {
            out.extend(block.iter().map(|_| Ball::exact(0.0)));
            continue;
        }
        let widen = 1.0 + 2.5 * U;
        let (d_lo, d_hi) = (a_lo / 127.0 / widen, a_hi / 127.0 * widen);
        for b in block {
            // The smallest and largest scaled value `x · 127 / a` over the balls of `x` and `a`,
            // widened by the roundings of `127 / a` and of the product.
            let (q_lo, q_hi) = if a_lo > 0.0 {
                let (lo, hi) = (b.lo(), b.hi());
                let t_lo = lo * 127.0 / if lo >= 0.0 { a_hi } else { a_lo };
                let t_hi = hi * 127.0 / if hi >= 0.0 { a_lo } else { a_hi };
                let q_lo = (t_lo - 2.5 * U * t_lo.abs()).round_ties_even().max(-127.0);
                let q_hi = (t_hi + 2.5 * U * t_hi.abs()).round_ties_even().min(127.0);
                (q_lo, q_hi)
            } else {
                (-127.0, 127.0)
            };
            let corners = [d_lo * q_lo, d_lo * q_hi, d_hi * q_lo, d_hi * q_hi];
            let lo = corners.iter().fold(f64::INFINITY, |m, &c| m.min(c));
            let hi = corners.iter().fold(f64::NEG_INFINITY, |m, &c| m.max(c));
            out.push(Ball { mid: (lo + hi) / 2.0, rad: (hi - lo) / 2.0 * (1.0 + 4.0 * f64::EPSILON) });
        }
    }
    out
}

/// The conv unit (docs/PROGRAM.md, `Conv`).
fn conv(
    r: &Reads<'_, '_, '_>,
    ins: &[Buf],
    window: StateRef,
    weight: &str,
    bias: Option<&str>,
    outs: &[Buf],
) -> Result<Vec<Written>, String> {
    let &StateLayout::ConvWindow { channels, taps } = r.layout(window)? else {
        return Err("the conv window is not a ConvWindow".into());
    };
    let mut x = Vec::with_capacity(channels);
    for &i in ins {
        x.extend_from_slice(r.buf(i)?);
    }
    let (w, before) = (r.weights.vector(weight)?, r.before(window)?);
    let b = bias.map(|b| r.weights.vector(b)).transpose()?;
    let past = taps - 1;
    let mut y = Vec::with_capacity(channels);
    let mut next = Vec::with_capacity(channels * past);
    let (mut terms, mut values) = (Vec::with_capacity(taps + 1), Vec::with_capacity(taps + 1));
    for (c, &xc) in x.iter().enumerate() {
        let win = &before[c * past..(c + 1) * past];
        // The K products and the bias (a product by 1), summed in any order.
        terms.clear();
        terms.extend_from_slice(&w[c * taps..(c + 1) * taps]);
        values.clear();
        values.extend(win.iter().chain([&xc]).map(|&v| Ball::exact(f64::from(v))));
        if let Some(b) = &b {
            terms.push(1.0);
            values.push(Ball::exact(b[c]));
        }
        y.push(dot_exact(&terms, &values, None, 0).silu());
        if past > 0 {
            next.extend(win.iter().skip(1).chain([&xc]).map(|&v| Ball::exact(f64::from(v))));
        }
    }
    let mut written = vec![Written::State { state: window, at: 0, values: next }];
    let mut ys = y.into_iter();
    for &o in outs {
        written.push(Written::Buffer(o, ys.by_ref().take(r.len(o)?).collect()));
    }
    Ok(written)
}

/// The delta rule (docs/PROGRAM.md, `DeltaRule`): per value head `h` with key head `h mod
/// key_heads`, per row `j` of its `[dv][dk]` state, `s ← e^g·s`, `s ← s + β·(v[j] − s·k̂)·k̂`,
/// `out[j] = s·q̂` on the row as the engine stored it.
fn delta_rule(
    r: &Reads<'_, '_, '_>,
    state: StateRef,
    [q, k, v, g, beta]: [Buf; 5],
    out: Buf,
    key_heads: usize,
) -> Result<Vec<Written>, String> {
    let &StateLayout::DeltaState { value_heads, key_dim: dk, value_dim: dv } = r.layout(state)? else {
        return Err("the delta state is not a DeltaState".into());
    };
    let scale = Ball::exact(1.0) / Ball::exact(dk as f64).sqrt();
    let (q, k) = (r.exact(q)?, r.exact(k)?);
    let qn: Vec<Vec<Ball>> = q.chunks(dk).map(|h| l2_norm(h, scale)).collect();
    let kn: Vec<Vec<Ball>> = k.chunks(dk).map(|h| l2_norm(h, Ball::exact(1.0))).collect();
    let (v, g, beta) = (r.buf(v)?, r.buf(g)?, r.buf(beta)?);
    let (before, after) = (r.before(state)?, r.after(state)?);
    let mut next = Vec::with_capacity(before.len());
    let mut o = Vec::with_capacity(value_heads * dv);
    for h in 0..value_heads {
        let kh = h % key_heads;
        let (qh, kh) = (&qn[kh], &kn[kh]);
        let decay = Ball::exact(f64::from(g[h])).exp();
        let b = Ball::exact(f64::from(beta[h]));
        for j in 0..dv {
            let at = (h * dv + j) * dk;
            let decayed: Vec<Ball> = before[at..at + dk].iter().map(|&s| Ball::exact(f64::from(s)) * decay).collect();
            let delta = (Ball::exact(f64::from(v[h * dv + j])) - dot(&decayed, kh)) * b;
            next.extend(decayed.iter().zip(kh).map(|(&s, &ki)| s + delta * ki));
            o.push(dot_exact(&after[at..at + dk], qh, None, 0));
        }
    }
    Ok(vec![Written::State { state, at: 0, values: next }, Written::Buffer(out, o)])
}

/// The cosine and sine of RoPE's angle `position · θ^(−2i/dims)` for each rotated pair `i`,
/// within one f32 rounding and the f64 error of the angle (docs/PROGRAM.md, `Attention`).
fn rope_table(theta: f64, dims: usize, position: usize) -> Vec<(Ball, Ball)> {
    (0..dims / 2)
        .map(|i| {
            let angle = position as f64 * theta.powf(-2.0 * i as f64 / dims as f64);
            let off = (angle.abs() + 1.0) * f64::EPSILON * 4.0;
            let ball = |v: f64| Ball { mid: v, rad: Ball::f32_constant(v).rad + off };
            (ball(angle.cos()), ball(angle.sin()))
        })
        .collect()
}

/// A head as the attention unit prepares it: RMS-normed by `norm` (when given), then RoPE'd by
/// `table` on its first `2·table.len()` dims, dim `i` with `i + table.len()`.
fn prepare(head: &[Ball], norm: Option<&[f64]>, eps: f64, table: &[(Ball, Ball)]) -> Vec<Ball> {
    let mut u = match norm {
        Some(w) => rms_norm(head, w, eps),
        None => head.to_vec(),
    };
    let half = table.len();
    for (i, &(c, s)) in table.iter().enumerate() {
        let (x, y) = (u[i], u[i + half]);
        u[i] = x * c - y * s;
        u[i + half] = y * c + x * s;
    }
    u
}

/// The attention unit (docs/PROGRAM.md, `Attention`): the key and value written at the position,
/// then each query head's softmax attention over the cache as the engine stored it.
fn attention(r: &Reads<'_, '_, '_>, command: &Command) -> Result<Vec<Written>, String> {
    let Command::Attention {
        q,
        k,
        v,
        q_norm,
        k_norm,
        eps,
        rope,
        heads,
        kv_heads,
        head_dim,
        scale,
        k_cache,
        v_cache,
        out,
    } = command
    else {
        return Err("not an attention".into());
    };
    let (hd, pos) = (*head_dim, r.position);
    let capacity = r.view.capacity();
    let table = rope_table(rope.theta, rope.dims, pos);
    let norm = |n: &Option<String>| n.as_deref().map(|w| r.weights.vector(w)).transpose();
    let (qn, kn) = (norm(q_norm)?, norm(k_norm)?);
    let (ks, vs) = (r.exact(*k)?, r.exact(*v)?);
    let mut written = vec![];
    for (h, (kh, vh)) in ks.chunks(hd).zip(vs.chunks(hd)).enumerate() {
        let at = (h * capacity + pos) * hd;
        written.push(Written::State { state: *k_cache, at, values: prepare(kh, kn.as_deref(), *eps, &table) });
        written.push(Written::State { state: *v_cache, at, values: vh.to_vec() });
    }
    let (kc, vc) = (r.after(*k_cache)?, r.after(*v_cache)?);
    let group = heads / kv_heads;
    let scale = Ball::f32_constant(*scale);
    let mut o = Vec::with_capacity(heads * hd);
    for (h, qh) in r.exact(*q)?.chunks(hd).enumerate() {
        let qh = prepare(qh, qn.as_deref(), *eps, &table);
        let kvh = h / group;
        let at = |p: usize| (kvh * capacity + p) * hd..(kvh * capacity + p + 1) * hd;
        let scores: Vec<Ball> = (0..=pos).map(|p| dot_exact(&kc[at(p)], &qh, None, 0) * scale).collect();
        let weights = softmax(&scores);
        // Each output dim over the positions: the values' column of it.
        let mut column = Vec::with_capacity(pos + 1);
        let start = (kvh * capacity) * hd;
        for i in start..start + hd {
            column.clear();
            column.extend((0..=pos).map(|p| vc[i + p * hd]));
            o.push(dot_exact(&column, &weights, None, 0));
        }
    }
    written.push(Written::Buffer(*out, o));
    Ok(written)
}

/// Softmax with the maximum subtracted, as the engine evaluates it: each exponent `s_p − m`
/// rounded (`u·|s_p − m|`), its exponential within [`super::bound::FUNCTION`], their sum and each
/// quotient. The engine's maximum `m` is its own scores' and may sit anywhere within the largest
/// score's ball; it cancels exactly between each exponential and their sum, so the balls are
/// taken about the midpoints' maximum and carry only what does not cancel.
fn softmax(scores: &[Ball]) -> Vec<Ball> {
    let top = scores.iter().fold(f64::NEG_INFINITY, |m, s| m.max(s.mid));
    let spread = scores.iter().fold(0f64, |m, s| m.max(s.rad));
    let e: Vec<Ball> = scores
        .iter()
        .map(|s| {
            let t = s.mid - top;
            let off = s.rad + 2.0 * U * (t.abs() + s.rad + spread);
            Ball { mid: t, rad: off }.exp()
        })
        .collect();
    let total = sum(&e);
    e.iter().map(|&x| x / total).collect()
}
