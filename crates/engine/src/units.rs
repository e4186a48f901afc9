//! The engine's units, one function each, over plain slices.
//!
//! A unit computes in its [`Real`] (the engine: f32, with f32 accumulation; the check's exact run:
//! f64). It reads matrices in place in their stored types ([`Matrix`], through [`Real::matvec`]:
//! the engine's kernels for f32, each row's exact dequantized values for the other arithmetics)
//! and small vectors as their f32 values. It writes its outputs unrounded; the
//! runner keeps every buffer a unit writes as the buffer's storage says ([`Keep`]). What a unit
//! stores itself (a conv window, a delta state, a KV cache) it keeps as that state's storage says.
//! Lengths are the runner's to validate: a unit trusts that its slices have the lengths its
//! command implies.

use super::dot::{PARALLEL_VALUES, dot};
use super::kernels::Matrix;
use super::real::{Keep, Real};
use super::state::{ConvWindow, DeltaState, KvCache};
use formats::scalar;
use program::numerics::KquantInputs;

/// The l2 norm's epsilon, inside the square root on the sum of squares.
pub const L2_EPS: f64 = 1e-6;

fn softplus<R: Real>(x: R) -> R {
    x.apply(scalar::softplus)
}

/// Keeps every value of `out` as `keep` says.
pub fn store<R: Real>(keep: Keep, out: &mut [R]) {
    keep.keep_all(out);
}

/// `out = table[token]`, the row dequantized into `row` (scratch of the table's columns).
pub fn embed<R: Real>(table: &Matrix, token: usize, row: &mut [f32], out: &mut [R]) {
    table.dequantize_row(token, row);
    for (o, &t) in out.iter_mut().zip(row.iter()) {
        *o = R::from(t);
    }
}

/// `out = m · x` read row by row: each row's exact dequantized values (f32) dotted with `x` by
/// [`Real::dot`], the rows split over up to `threads` threads when `m` holds at least
/// [`PARALLEL_VALUES`] values. It is [`Real::matvec`] for every arithmetic but the engine's own.
/// A matrix that reads its input quantized to Q8_K ([`Matrix::quantizes_inputs`]) reads
/// [`q8k_values`] of `x`.
pub(crate) fn rows_matvec<R: Real>(m: &Matrix, x: &[R], out: &mut [R], threads: usize) {
    if m.quantizes_inputs() {
        let quantized = q8k_values(x);
        return rows_matvec(&m.with_inputs(KquantInputs::F32), &quantized, out, threads);
    }
    if x.is_empty() {
        out.fill(R::default());
        return;
    }
    let on_this_thread = |m: Matrix, out: &mut [R]| {
        let mut row = vec![0f32; m.cols()];
        for (r, o) in out.iter_mut().enumerate() {
            m.dequantize_row(r, &mut row);
            *o = dot(&row, x);
        }
    };
    let rows = out.len();
    if threads <= 1 || rows.saturating_mul(m.cols()) < PARALLEL_VALUES || rows < 2 {
        return on_this_thread(*m, out);
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let mut parts = out.chunks_mut(per).enumerate();
        let first = parts.next();
        for (i, o) in parts {
            let part = m.rows_range(i * per..i * per + o.len());
            s.spawn(move || on_this_thread(part, o));
        }
        if let Some((_, o)) = first {
            on_this_thread(m.rows_range(0..o.len()), o);
        }
    });
}

/// `x` as the Q8_K input rule holds it (`KquantInputs::Q8K`), in any arithmetic: per block of
/// 256 values with `a = max |x|`, `d · q` with `q = round_half_even(x · (127 / a))` and
/// `d = a / 127` (zeros when `a` is 0, NaN when a value is not finite). The engine's f32 run
/// quantizes in its kernels (`kernels::q8k`), keeping `q` and `d` apart.
fn q8k_values<R: Real>(x: &[R]) -> Vec<R> {
    let zero = R::default();
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(256) {
        let a = block.iter().fold(zero, |a, &v| a.max(if v < zero { -v } else { v }));
        if !block.iter().all(|v| v.wide().is_finite()) {
            out.extend(block.iter().map(|_| R::of(f64::NAN)));
        } else if a == zero {
            out.extend(block.iter().map(|_| zero));
        } else {
            let (scale, d) = (R::from(127.0) / a, a / R::from(127.0));
            out.extend(block.iter().map(|&v| (v * scale).apply(f64::round_ties_even) * d));
        }
    }
    out
}

/// `out = x · rsqrt(mean(x²) + eps) · weight`.
pub fn rms_norm<R: Real>(x: &[R], weight: &[f32], eps: R, out: &mut [R]) {
    let r = R::from(1.0) / (dot(x, x) / R::of(x.len() as f64) + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(weight) {
        *o = xi * r * R::from(wi);
    }
}

/// `out = x · rsqrt(Σx² + 1e-6) · scale`.
fn l2_norm<R: Real>(x: &[R], scale: R, out: &mut [R]) {
    #[cfg(any(test, feature = "planted"))]
    if planted::is(planted::Bug::EngineL2EpsOutsideSqrt) {
        let r = scale / (dot(x, x).sqrt() + R::of(L2_EPS));
        for (o, &xi) in out.iter_mut().zip(x) {
            *o = xi * r;
        }
        return;
    }
    let r = scale / (dot(x, x) + R::of(L2_EPS)).sqrt();
    for (o, &xi) in out.iter_mut().zip(x) {
        *o = xi * r;
    }
}

/// `out = weight · x` (rows over `threads`).
pub(crate) fn mat_vec<R: Real>(weight: &Matrix, x: &[R], out: &mut [R], threads: usize) {
    R::matvec(weight, x, out, threads);
}

/// One pass over the rows of `weight` that `rows` has room for: `rows = weight[..rows.len()] · x`.
/// The runner splits `rows` into the outputs' consecutive ranges.
pub fn merged_rows<R: Real>(weight: &Matrix, x: &[R], rows: &mut [R], threads: usize) {
    R::matvec(&weight.rows_range(0..rows.len()), x, rows, threads);
}

/// One pass over all rows of `weight`, `[heads·2·head_dim, in]`, into `rows`; then row `r` goes to
/// head `r / (2·head_dim)`, half `(r / head_dim) % 2` (`first` or `second`), index `r % head_dim`.
pub fn merged_head_halves<R: Real>(
    weight: &Matrix,
    head_dim: usize,
    x: &[R],
    rows: &mut [R],
    first: &mut [R],
    second: &mut [R],
    threads: usize,
) {
    R::matvec(weight, x, rows, threads);
    split_head_halves(head_dim, rows, first, second);
}

/// Row `r` of `rows` to head `r / (2·head_dim)`, half `(r / head_dim) % 2` (`first` or `second`),
/// index `r % head_dim`.
pub(crate) fn split_head_halves<R: Real>(head_dim: usize, rows: &[R], first: &mut [R], second: &mut [R]) {
    for (r, &value) in rows.iter().enumerate() {
        let (head, half, i) = (r / (2 * head_dim), (r / head_dim) % 2, r % head_dim);
        let to = if half == 0 { &mut *first } else { &mut *second };
        to[head * head_dim + i] = value;
    }
}

/// The conv unit over the channels `x`: `out[c] = silu(Σ_{j<K−1} w[c,j]·window[c,j] +
/// w[c,K−1]·x[c] (+ bias[c]))`, then each channel's window drops its oldest input and appends
/// `x[c]`, kept as the window's storage says.
pub fn conv<R: Real>(x: &[R], window: &mut ConvWindow<R>, weight: &[f32], bias: Option<&[f32]>, out: &mut [R]) {
    let taps = window.taps;
    let past = taps - 1;
    let keep = window.keep;
    for (c, (o, &xc)) in out.iter_mut().zip(x).enumerate() {
        let w = &weight[c * taps..(c + 1) * taps];
        let win = &mut window.values[c * past..(c + 1) * past];
        let mut acc = dot(&w[..past], win) + R::from(w[past]) * xc;
        if let Some(b) = bias {
            acc += R::from(b[c]);
        }
        *o = acc;
        if past > 0 {
            win.copy_within(1.., 0);
            win[past - 1] = keep.keep(xc);
        }
    }
    R::silu_all(out);
}

/// The gates: `beta = sigmoid(b)`, `g = decay · softplus(a + dt_bias)`.
pub fn gates<R: Real>(b: &[R], a: &[R], decay: &[f32], dt_bias: &[f32], beta: &mut [R], g: &mut [R]) {
    for (be, &bi) in beta.iter_mut().zip(b) {
        *be = bi.sigmoid();
    }
    for (((gi, &ai), &di), &ti) in g.iter_mut().zip(a).zip(decay).zip(dt_bias) {
        *gi = R::from(di) * softplus(ai + R::from(ti));
    }
}

/// The delta rule's inputs for one step.
pub(crate) struct DeltaInputs<'a, R> {
    pub q: &'a [R],
    pub k: &'a [R],
    pub v: &'a [R],
    pub g: &'a [R],
    pub beta: &'a [R],
    pub key_heads: usize,
}

/// The delta rule, per value head `h` with key head `h mod key_heads`: `q̂ = l2norm(q)/√dk`,
/// `k̂ = l2norm(k)`; per row `j` of the head's `[dv][dk]` state, `s ← e^g s`,
/// `s ← s + β (v[j] − s·k̂) k̂` (kept as the state's storage says), `out[j] = s·q̂`.
/// `qn` and `kn` are scratch of `key_heads·dk` values.
pub fn delta_rule<R: Real>(inp: &DeltaInputs<R>, state: &mut DeltaState<R>, qn: &mut [R], kn: &mut [R], out: &mut [R]) {
    let (dk, dv, keep) = (state.key_dim, state.value_dim, state.keep);
    let scale = R::from(1.0) / R::of(dk as f64).sqrt();
    // The planted bug: the engine (the state kept as stored) rounds the rows of a state the
    // program keeps in f32 to bf16, after their update.
    #[cfg(any(test, feature = "planted"))]
    let to_bf16 = keep.rounding == super::real::Rounding::Stored
        && keep.storage == program::numerics::Storage::F32
        && planted::is(planted::Bug::EngineDeltaStateBf16);
    for kh in 0..inp.key_heads {
        let r = kh * dk..(kh + 1) * dk;
        l2_norm(&inp.q[r.clone()], scale, &mut qn[r.clone()]);
        l2_norm(&inp.k[r.clone()], R::from(1.0), &mut kn[r]);
    }
    for h in 0..state.value_heads {
        let kh = h % inp.key_heads;
        #[cfg(any(test, feature = "planted"))]
        let kh = if planted::is(planted::Bug::EngineGroupedValueHeads) {
            h / (state.value_heads / inp.key_heads)
        } else {
            kh
        };
        let (q, k) = (&qn[kh * dk..(kh + 1) * dk], &kn[kh * dk..(kh + 1) * dk]);
        let (decay, beta) = (inp.g[h].exp(), inp.beta[h]);
        let s = &mut state.values[h * dv * dk..(h + 1) * dv * dk];
        let heads_out = &mut out[h * dv..(h + 1) * dv];
        for ((row, o), &vj) in s.chunks_exact_mut(dk).zip(heads_out).zip(&inp.v[h * dv..(h + 1) * dv]) {
            for x in row.iter_mut() {
                *x *= decay;
            }
            let delta = (vj - dot(row, k)) * beta;
            for (x, &ki) in row.iter_mut().zip(k) {
                *x += delta * ki;
            }
            // Each value kept as its storage says, the row at once (nothing to do at f32).
            keep.keep_all(row);
            #[cfg(any(test, feature = "planted"))]
            if to_bf16 {
                row.iter_mut().for_each(|x| *x = x.round_to(program::numerics::Storage::Bf16));
            }
            *o = dot(row, q);
        }
    }
}

/// The gated norm, per head of `dim` values: `out = rms_norm(x, weight) · silu(z)`.
pub fn gated_norm<R: Real>(x: &[R], z: &[R], weight: &[f32], eps: R, dim: usize, out: &mut [R]) {
    #[cfg(any(test, feature = "planted"))]
    let eps = if planted::is(planted::Bug::EngineGatedNormEpsFixed) { R::of(1e-5) } else { eps };
    for ((xh, zh), oh) in x.chunks_exact(dim).zip(z.chunks_exact(dim)).zip(out.chunks_exact_mut(dim)) {
        rms_norm(xh, weight, eps, oh);
        for (o, &zi) in oh.iter_mut().zip(zh) {
            *o *= zi.silu();
        }
    }
}

/// RoPE's cosines and sines at `position` for `dims` rotated dims: angle `i` is
/// `position · theta^(−2i/dims)`, computed in f64.
pub fn rope_table<R: Real>(theta: f64, dims: usize, position: usize, cos: &mut [R], sin: &mut [R]) {
    for (i, (c, s)) in cos.iter_mut().zip(sin.iter_mut()).enumerate().take(dims / 2) {
        let angle = position as f64 * theta.powf(-2.0 * i as f64 / dims as f64);
        #[cfg(any(test, feature = "planted"))]
        let angle = if planted::is(planted::Bug::EngineRopeBackwards) { -angle } else { angle };
        *c = R::of(angle.cos());
        *s = R::of(angle.sin());
    }
}

/// NeoX RoPE on the first `2·cos.len()` dims of `u`: dim `i` pairs with dim `i + cos.len()`.
pub fn rope<R: Real>(u: &mut [R], cos: &[R], sin: &[R]) {
    let half = cos.len();
    let (a, b) = u.split_at_mut(half);
    for (((x, y), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
        let (x0, y0) = (*x, *y);
        *x = x0 * c - y0 * s;
        *y = y0 * c + x0 * s;
    }
}

/// The attention unit's shape and constants.
#[derive(Clone)]
pub(crate) struct AttentionShape<R> {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: R,
    pub scale: R,
}

/// A head's preparation for attention: RMS-normed by `norm` (when given), then RoPE'd.
fn prepare_head<R: Real>(u: &[R], norm: Option<&[f32]>, eps: R, cos: &[R], sin: &[R], out: &mut [R]) {
    match norm {
        Some(w) => rms_norm(u, w, eps, out),
        None => out.copy_from_slice(u),
    }
    rope(out, cos, sin);
}

/// The attention unit's first half, once for the keys and once for the values: per KV head of `x`,
/// the head RMS-normed by `norm` (when given) and RoPE'd by `rope` (the values: neither), written to
/// `cache` at `position`. `head` is scratch of `head_dim` values.
pub(crate) fn attention_append<R: Real>(
    shape: &AttentionShape<R>,
    x: &[R],
    norm: Option<&[f32]>,
    rope: (&[R], &[R]),
    position: usize,
    cache: &mut KvCache<R>,
    head: &mut [R],
) {
    for (kvh, xh) in x.chunks_exact(shape.head_dim).enumerate() {
        prepare_head(xh, norm, shape.eps, rope.0, rope.1, head);
        cache.put(kvh, position, head);
    }
}

/// The attention unit's second half: per query head `h` (normed, RoPE'd), softmax attention with
/// `scale` over positions `0..=position` of KV head `h / (heads / kv_heads)`. `head` is scratch of
/// `head_dim` values and `scores` of at least `position + 1`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_read<R: Real>(
    shape: &AttentionShape<R>,
    q: &[R],
    q_norm: Option<&[f32]>,
    rope: (&[R], &[R]),
    position: usize,
    k_cache: &KvCache<R>,
    v_cache: &KvCache<R>,
    head: &mut [R],
    scores: &mut [R],
    out: &mut [R],
) {
    let hd = shape.head_dim;
    let group = shape.heads / shape.kv_heads;
    let scores = &mut scores[..=position];
    for (h, (qh, oh)) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)).enumerate() {
        prepare_head(qh, q_norm, shape.eps, rope.0, rope.1, head);
        let kvh = h / group;
        for (p, s) in scores.iter_mut().enumerate() {
            *s = dot(head, k_cache.at(kvh, p)) * shape.scale;
        }
        let max = scores.iter().copied().fold(R::NEG_INFINITY, R::max);
        let mut total = R::default();
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            total += *s;
        }
        oh.fill(R::default());
        for (p, &s) in scores.iter().enumerate() {
            let a = s / total;
            for (o, &vi) in oh.iter_mut().zip(v_cache.at(kvh, p)) {
                *o += a * vi;
            }
        }
    }
}

/// `out = sigmoid(gate) · x`.
pub fn sigmoid_gate<R: Real>(x: &[R], gate: &[R], out: &mut [R]) {
    out.copy_from_slice(gate);
    R::sigmoid_all(out);
    for (o, &xi) in out.iter_mut().zip(x) {
        *o *= xi;
    }
}

/// The SwiGLU FFN: `out = down · (silu(gate · x) ⊙ (up · x))`; `hidden` and `up_x` are scratch of
/// the intermediate size, kept unrounded.
#[allow(clippy::too_many_arguments)]
pub fn swiglu<R: Real>(
    x: &[R],
    gate: &Matrix,
    up: &Matrix,
    down: &Matrix,
    hidden: &mut [R],
    up_x: &mut [R],
    out: &mut [R],
    threads: usize,
) {
    R::matvec(gate, x, hidden, threads);
    R::matvec(up, x, up_x, threads);
    glu(hidden, up_x);
    R::matvec(down, hidden, out, threads);
}

/// SwiGLU's gating, in place: `hidden = silu(hidden) ⊙ up`.
pub fn glu<R: Real>(hidden: &mut [R], up: &[R]) {
    R::silu_all(hidden);
    for (h, &u) in hidden.iter_mut().zip(up) {
        *h *= u;
    }
}

/// `out = residual + x`.
pub fn add<R: Real>(residual: &[R], x: &[R], out: &mut [R]) {
    for ((o, &r), &xi) in out.iter_mut().zip(residual).zip(x) {
        *o = r + xi;
    }
}

#[cfg(test)]
mod tests {
    use super::super::planted_runs::{Result, runs, values_of};
    use crate::StateValue;
    use planted::Bug;

    /// The values of every delta state of a state.
    fn delta(v: &StateValue) -> Option<&Vec<f32>> {
        match v {
            StateValue::DeltaState { values, .. } => Some(values),
            _ => None,
        }
    }

    #[test]
    fn the_planted_bf16_delta_state_rounds_the_engines_state_where_the_program_keeps_f32() -> Result<()> {
        let (clean, clean_exact) = runs("f32", None)?;
        let (planted, planted_exact) = runs("f32", Some(Bug::EngineDeltaStateBf16))?;
        let bf16 = |v: &f32| half::bf16::from_f32(*v).to_f32() == *v;
        let (clean_s, planted_s) = (values_of(&clean.1, delta), values_of(&planted.1, delta));
        assert!(!planted_s.is_empty() && planted_s.iter().all(bf16), "the planted states are bf16");
        assert!(!clean_s.iter().all(bf16), "the clean states are f32");
        assert_ne!(clean.0, planted.0, "the logits");
        assert_eq!(clean_exact, planted_exact, "the exact run");
        Ok(())
    }

    #[test]
    fn the_planted_bf16_delta_state_holds_in_a_batched_step_whose_rows_go_to_the_pools_threads() -> Result<()> {
        // The rows' per-row units split over two threads (the second row's on the pool's): the
        // plant, asked for on the thread that runs the unit, is carried to it.
        use crate::{BatchRow, EngineRunner};
        use lower::{lower_graph, shim::EngineShim};
        use model::{author::decode_step, presets, random::random_checkpoint};
        use planted;
        use program::Numerics;
        let spec = presets::preset("tiny").ok_or("no such preset")?;
        let graph = EngineShim::default().prepare(&decode_step(&spec)?);
        let program = lower_graph(&graph, Numerics::F32)?;
        let ckpt = random_checkpoint(&spec, 2);
        let mut runner = EngineRunner::new(&program, &ckpt, 8)?.with_threads(2).with_rows_split_from(0);
        let (mut a, mut b) = (runner.fresh_state(), runner.fresh_state());
        planted::with(Bug::EngineDeltaStateBf16, || {
            runner
                .step_batch(&mut [BatchRow { state: &mut a, token: 3 }, BatchRow { state: &mut b, token: 5 }])
                .map(|_| ())
        })?;
        let bf16 = |v: &f32| half::bf16::from_f32(*v).to_f32() == *v;
        for (row, state) in [a, b].iter().enumerate() {
            let values = values_of(&state.snapshot(), delta);
            assert!(!values.is_empty() && values.iter().all(bf16), "row {row}'s states are bf16");
        }
        Ok(())
    }
}
