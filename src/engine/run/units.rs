//! The engine's units, one function each, over plain slices.
//!
//! A unit computes in f32 with f32 accumulation. It writes its outputs unrounded; the runner rounds
//! every buffer a unit writes to the buffer's storage. What a unit stores itself (a conv window, a
//! delta state, a KV cache) it rounds to that state's storage. Lengths are the runner's to validate:
//! a unit trusts that its slices have the lengths its command implies.

use super::matvec::{dot, par_matvec};
use super::state::{ConvWindow, DeltaState, KvCache};
use crate::engine::numerics::Storage;
use crate::scalar;

/// The l2 norm's epsilon, inside the square root on the sum of squares.
pub const L2_EPS: f32 = 1e-6;

fn sigmoid(x: f32) -> f32 {
    scalar::sigmoid(x as f64) as f32
}

fn silu(x: f32) -> f32 {
    scalar::silu(x as f64) as f32
}

fn softplus(x: f32) -> f32 {
    scalar::softplus(x as f64) as f32
}

/// Rounds every value of `out` to `storage`.
pub fn store(storage: Storage, out: &mut [f32]) {
    if storage != Storage::F32 {
        for x in out {
            *x = storage.round(*x);
        }
    }
}

/// `out = table[token]`, for a table of `out.len()` columns.
pub fn embed(table: &[f32], token: usize, out: &mut [f32]) {
    let start = token * out.len();
    out.copy_from_slice(&table[start..start + out.len()]);
}

/// `out = x · rsqrt(mean(x²) + eps) · weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let r = 1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(weight) {
        *o = xi * r * wi;
    }
}

/// `out = x · rsqrt(Σx² + 1e-6) · scale`.
fn l2_norm(x: &[f32], scale: f32, out: &mut [f32]) {
    let r = scale / (dot(x, x) + L2_EPS).sqrt();
    for (o, &xi) in out.iter_mut().zip(x) {
        *o = xi * r;
    }
}

/// `out = weight · x` (rows over `threads`).
pub fn mat_vec(weight: &[f32], x: &[f32], out: &mut [f32], threads: usize) {
    par_matvec(weight, x, out, threads);
}

/// One pass over the rows of `weight` that `rows` has room for: `rows = weight[..rows.len()] · x`.
/// The runner splits `rows` into the outputs' consecutive ranges.
pub fn merged_rows(weight: &[f32], x: &[f32], rows: &mut [f32], threads: usize) {
    let used = rows.len() * x.len();
    par_matvec(&weight[..used], x, rows, threads);
}

/// One pass over all rows of `weight`, `[heads·2·head_dim, in]`, into `rows`; then row `r` goes to
/// head `r / (2·head_dim)`, half `(r / head_dim) % 2` (`first` or `second`), index `r % head_dim`.
pub fn merged_head_halves(
    weight: &[f32],
    head_dim: usize,
    x: &[f32],
    rows: &mut [f32],
    first: &mut [f32],
    second: &mut [f32],
    threads: usize,
) {
    par_matvec(weight, x, rows, threads);
    for (r, &value) in rows.iter().enumerate() {
        let (head, half, i) = (r / (2 * head_dim), (r / head_dim) % 2, r % head_dim);
        let to = if half == 0 { &mut *first } else { &mut *second };
        to[head * head_dim + i] = value;
    }
}

/// The conv unit over the channels `x`: `out[c] = silu(Σ_{j<K−1} w[c,j]·window[c,j] +
/// w[c,K−1]·x[c] (+ bias[c]))`, then each channel's window drops its oldest input and appends
/// `x[c]`, rounded to the window's storage.
pub fn conv(x: &[f32], window: &mut ConvWindow, weight: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let taps = window.taps;
    let past = taps - 1;
    let storage = window.storage;
    for (c, (o, &xc)) in out.iter_mut().zip(x).enumerate() {
        let w = &weight[c * taps..(c + 1) * taps];
        let win = &mut window.values[c * past..(c + 1) * past];
        let mut acc = dot(&w[..past], win) + w[past] * xc;
        if let Some(b) = bias {
            acc += b[c];
        }
        *o = silu(acc);
        if past > 0 {
            win.copy_within(1.., 0);
            win[past - 1] = storage.round(xc);
        }
    }
}

/// The gates: `beta = sigmoid(b)`, `g = decay · softplus(a + dt_bias)`.
pub fn gates(b: &[f32], a: &[f32], decay: &[f32], dt_bias: &[f32], beta: &mut [f32], g: &mut [f32]) {
    for (be, &bi) in beta.iter_mut().zip(b) {
        *be = sigmoid(bi);
    }
    for (((gi, &ai), &di), &ti) in g.iter_mut().zip(a).zip(decay).zip(dt_bias) {
        *gi = di * softplus(ai + ti);
    }
}

/// The delta rule's inputs for one step.
pub struct DeltaInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub key_heads: usize,
}

/// The delta rule, per value head `h` with key head `h mod key_heads`: `q̂ = l2norm(q)/√dk`,
/// `k̂ = l2norm(k)`; per row `j` of the head's `[dv][dk]` state, `s ← e^g s`,
/// `s ← s + β (v[j] − s·k̂) k̂` (rounded to the state's storage), `out[j] = s·q̂`.
/// `qn` and `kn` are scratch of `key_heads·dk` values.
pub fn delta_rule(inp: &DeltaInputs, state: &mut DeltaState, qn: &mut [f32], kn: &mut [f32], out: &mut [f32]) {
    let (dk, dv, storage) = (state.key_dim, state.value_dim, state.storage);
    let scale = 1.0 / (dk as f32).sqrt();
    for kh in 0..inp.key_heads {
        let r = kh * dk..(kh + 1) * dk;
        l2_norm(&inp.q[r.clone()], scale, &mut qn[r.clone()]);
        l2_norm(&inp.k[r.clone()], 1.0, &mut kn[r]);
    }
    for h in 0..state.value_heads {
        let kh = h % inp.key_heads;
        #[cfg(test)]
        let kh = if crate::planted::is(crate::planted::Bug::EngineGroupedValueHeads) {
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
                *x = storage.round(*x + delta * ki);
            }
            *o = dot(row, q);
        }
    }
}

/// The gated norm, per head of `dim` values: `out = rms_norm(x, weight) · silu(z)`.
pub fn gated_norm(x: &[f32], z: &[f32], weight: &[f32], eps: f32, dim: usize, out: &mut [f32]) {
    for ((xh, zh), oh) in x.chunks_exact(dim).zip(z.chunks_exact(dim)).zip(out.chunks_exact_mut(dim)) {
        rms_norm(xh, weight, eps, oh);
        for (o, &zi) in oh.iter_mut().zip(zh) {
            *o *= silu(zi);
        }
    }
}

/// RoPE's cosines and sines at `position` for `dims` rotated dims: angle `i` is
/// `position · theta^(−2i/dims)`, computed in f64.
pub fn rope_table(theta: f64, dims: usize, position: usize, cos: &mut [f32], sin: &mut [f32]) {
    for (i, (c, s)) in cos.iter_mut().zip(sin.iter_mut()).enumerate().take(dims / 2) {
        let angle = position as f64 * theta.powf(-2.0 * i as f64 / dims as f64);
        *c = angle.cos() as f32;
        *s = angle.sin() as f32;
    }
}

/// NeoX RoPE on the first `2·cos.len()` dims of `u`: dim `i` pairs with dim `i + cos.len()`.
pub fn rope(u: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    let (a, b) = u.split_at_mut(half);
    for (((x, y), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
        let (x0, y0) = (*x, *y);
        *x = x0 * c - y0 * s;
        *y = y0 * c + x0 * s;
    }
}

/// The attention unit's shape and constants.
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub scale: f32,
}

/// A head's preparation for attention: RMS-normed by `norm` (when given), then RoPE'd.
fn prepare_head(u: &[f32], norm: Option<&[f32]>, eps: f32, cos: &[f32], sin: &[f32], out: &mut [f32]) {
    match norm {
        Some(w) => rms_norm(u, w, eps, out),
        None => out.copy_from_slice(u),
    }
    rope(out, cos, sin);
}

/// The attention unit's first half, once for the keys and once for the values: per KV head of `x`,
/// the head RMS-normed by `norm` (when given) and RoPE'd by `rope` (the values: neither), written to
/// `cache` at `position`. `head` is scratch of `head_dim` values.
pub fn attention_append(
    shape: &AttentionShape,
    x: &[f32],
    norm: Option<&[f32]>,
    rope: (&[f32], &[f32]),
    position: usize,
    cache: &mut KvCache,
    head: &mut [f32],
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
pub fn attention_read(
    shape: &AttentionShape,
    q: &[f32],
    q_norm: Option<&[f32]>,
    rope: (&[f32], &[f32]),
    position: usize,
    k_cache: &KvCache,
    v_cache: &KvCache,
    head: &mut [f32],
    scores: &mut [f32],
    out: &mut [f32],
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
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            total += *s;
        }
        oh.fill(0.0);
        for (p, &s) in scores.iter().enumerate() {
            let a = s / total;
            for (o, &vi) in oh.iter_mut().zip(v_cache.at(kvh, p)) {
                *o += a * vi;
            }
        }
    }
}

/// `out = sigmoid(gate) · x`.
pub fn sigmoid_gate(x: &[f32], gate: &[f32], out: &mut [f32]) {
    for ((o, &xi), &gi) in out.iter_mut().zip(x).zip(gate) {
        *o = sigmoid(gi) * xi;
    }
}

/// The SwiGLU FFN: `out = down · (silu(gate · x) ⊙ (up · x))`; `hidden` and `up_x` are scratch of
/// the intermediate size, kept in f32.
#[allow(clippy::too_many_arguments)]
pub fn swiglu(
    x: &[f32],
    gate: &[f32],
    up: &[f32],
    down: &[f32],
    hidden: &mut [f32],
    up_x: &mut [f32],
    out: &mut [f32],
    threads: usize,
) {
    par_matvec(gate, x, hidden, threads);
    par_matvec(up, x, up_x, threads);
    for (h, &u) in hidden.iter_mut().zip(up_x.iter()) {
        *h = silu(*h) * u;
    }
    par_matvec(down, hidden, out, threads);
}

/// `out = residual + x`.
pub fn add(residual: &[f32], x: &[f32], out: &mut [f32]) {
    for ((o, &r), &xi) in out.iter_mut().zip(residual).zip(x) {
        *o = r + xi;
    }
}
