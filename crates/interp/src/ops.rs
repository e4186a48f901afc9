//! What each op computes, in f64: one function per kind, written as its doc comment and the facts
//! file state it. A fused op runs the primitive steps of its meaning in the shared fusion table.

use std::borrow::Cow;

use ndarray::{
    Array1, Array2, ArrayD, ArrayView1, ArrayView2, ArrayView3, ArrayViewMut1, Axis, Dimension, Ix1, Ix2, Ix3, IxDyn,
};

use smallvec::{SmallVec, smallvec};

use super::values::{ConstView, Fault, Value, surprise};
use formats::scalar;
use fuse::{Slot, meaning};
use ir::{Act, Fused, HeadMap, OpKind, RopeStyle};

/// The values an op writes: one or two but for a fused op's few, kept inline.
pub(crate) type Values<'c> = SmallVec<[Value<'c>; 2]>;

/// The values an op reads, kept inline up to the six a delta rule reads.
pub(crate) type Operands<'a, 'c> = SmallVec<[&'a Value<'c>; 6]>;

/// Runs an op of kind `kind` on `ins`, writing `outputs` values.
pub(crate) fn eval<'c>(kind: &OpKind, ins: &[&Value<'c>], outputs: usize) -> Result<Values<'c>, Fault> {
    use OpKind::*;
    let out = match kind {
        Embed => {
            let [table, token] = take(ins)?;
            embed(table, token.token()?)?
        }
        MatVec => {
            let [w, x] = take(ins)?;
            matvec(w, &vector(&*x.array()?)?)?
        }
        Add => {
            let [a, b] = take(ins)?;
            add(&*a.array()?, &*b.array()?)?
        }
        Mul => {
            let [a, b] = take(ins)?;
            mul(&*a.array()?, &*b.array()?)?
        }
        Scale { factor } => unary(ins, |x| factor * x)?,
        Offset { value } => unary(ins, |x| x + value)?,
        Act(act) => unary(ins, |x| activate(*act, x))?,
        Clamp { min, max } => unary(ins, |x| clamp(x, *min, *max))?,
        RmsNorm { eps } => {
            let [x, w] = take(ins)?;
            rms_norm(&*x.array()?, &vector(&*w.array()?)?, *eps)?
        }
        LayerNorm { eps } => {
            let [x, w, b] = take(ins)?;
            layer_norm(&*x.array()?, &vector(&*w.array()?)?, &vector(&*b.array()?)?, *eps)?
        }
        L2Norm { eps } => {
            let [x] = take(ins)?;
            l2_norm(&*x.array()?, *eps)?
        }
        Softmax => {
            let [x] = take(ins)?;
            softmax(&*x.array()?)?
        }
        Concat => {
            let parts = ins.iter().map(|v| v.array()).collect::<Result<Vec<_>, _>>()?;
            concat(&parts)?
        }
        Slice { start, end } => {
            let [x] = take(ins)?;
            slice(&*x.array()?, *start, *end)?
        }
        Reshape { shape } => {
            let [x] = take(ins)?;
            reshape(&*x.array()?, shape)?
        }
        Broadcast { rows } => {
            let [x] = take(ins)?;
            broadcast(&vector(&*x.array()?)?, *rows)
        }
        ConvShift => {
            let [window, x] = take(ins)?;
            conv_shift(&matrix(&*window.array()?)?, &vector(&*x.array()?)?)?
        }
        DepthwiseConv => {
            let [window, w] = take(ins)?;
            depthwise_conv(&matrix(&*window.array()?)?, &matrix(&*w.array()?)?)?
        }
        DeltaRule { head_map } => {
            let [s, q, k, v, g, beta] = take(ins)?;
            let (s, o) = delta_rule(
                *head_map,
                &dims::<Ix3>(&*s.array()?)?,
                &matrix(&*q.array()?)?,
                &matrix(&*k.array()?)?,
                &matrix(&*v.array()?)?,
                &vector(&*g.array()?)?,
                &vector(&*beta.array()?)?,
            )?;
            return Ok(smallvec![Value::Array(s.into_dyn()), Value::Array(o.into_dyn())]);
        }
        Rope { theta, rotary_dims, style } => {
            let [x, position] = take(ins)?;
            if !rotary_dims.is_multiple_of(2) {
                return surprise(format!("rope of an odd {rotary_dims} dims"));
            }
            let rd = *rotary_dims as f64;
            let inv_freq: Vec<f64> = (0..rotary_dims / 2).map(|i| theta.powf(-2.0 * i as f64 / rd)).collect();
            rope(&matrix(&*x.array()?)?, position.position()?, &inv_freq, 1.0, *style)?
        }
        RopeFreqs { inv_freq, scale, style } => {
            let [x, position] = take(ins)?;
            rope(&matrix(&*x.array()?)?, position.position()?, inv_freq, *scale, *style)?
        }
        KvAppend => {
            let [cache, x] = take(ins)?;
            return Ok(smallvec![Value::Cache(kv_append(cache.cache()?, &matrix(&*x.array()?)?)?)]);
        }
        Attention { scale, window, head_map } => {
            let (q, keys, values, sinks) = match ins {
                [q, k, v] => (q, k, v, None),
                [q, k, v, s] => (q, k, v, Some(s.array()?)),
                _ => return surprise(format!("attention reads 3 or 4 tensors, not {}", ins.len())),
            };
            let sinks = sinks.as_deref().map(vector).transpose()?;
            let q = q.array()?;
            let (keys, values) = (keys.cache()?.view(), values.cache()?.view());
            attention(&matrix(&q)?, &keys, &values, sinks.as_ref(), *scale, *window, *head_map)?
        }
        TopK { k, renormalize } => match ins {
            [p] => top_k(&vector(&*p.array()?)?, None, *k, *renormalize)?,
            [p, values] => top_k(&vector(&*p.array()?)?, Some(&vector(&*values.array()?)?), *k, *renormalize)?,
            _ => return surprise(format!("top_k reads 1 or 2 tensors, not {}", ins.len())),
        },
        GroupLimit { groups, keep, top } => {
            let [x] = take(ins)?;
            group_limit(&vector(&*x.array()?)?, *groups, *keep, *top)?
        }
        Pick { index } => {
            let [x] = take(ins)?;
            pick(&vector(&*x.array()?)?, *index)?
        }
        Advance => {
            let [p] = take(ins)?;
            let next = p.position()?.checked_add(1).ok_or(Fault::Shape("the position overflows".into()))?;
            return Ok(smallvec![Value::Position(next)]);
        }
        Fused(f) => return fused(*f, ins, outputs),
    };
    Ok(smallvec![Value::Array(out)])
}

// ---------------------------------------------------------------------------------------------
// Operands.

/// The operands of an op that reads exactly `N`.
fn take<'a, 'c, const N: usize>(ins: &[&'a Value<'c>]) -> Result<[&'a Value<'c>; N], Fault> {
    <[&Value; N]>::try_from(ins).or_else(|_| surprise(format!("reads {N} tensors, not {}", ins.len())))
}

/// `a` as an array of `D` dims.
fn dims<D: Dimension>(a: &ArrayD<f64>) -> Result<ndarray::ArrayView<'_, f64, D>, Fault> {
    let want = D::NDIM.unwrap_or(0);
    a.view()
        .into_dimensionality::<D>()
        .or_else(|_| surprise(format!("expected {want} axes, found shape {:?}", a.shape())))
}

fn vector(a: &ArrayD<f64>) -> Result<ArrayView1<'_, f64>, Fault> {
    dims::<Ix1>(a)
}

fn matrix(a: &ArrayD<f64>) -> Result<ArrayView2<'_, f64>, Fault> {
    dims::<Ix2>(a)
}

/// The length of the last axis of `a`.
fn last_axis(a: &ArrayD<f64>) -> Result<usize, Fault> {
    match a.shape().last() {
        Some(&n) => Ok(n),
        None => surprise("a scalar has no last axis"),
    }
}

fn unary(ins: &[&Value], f: impl Fn(f64) -> f64) -> Result<ArrayD<f64>, Fault> {
    let [x] = take(ins)?;
    Ok(x.array()?.mapv(f))
}

// ---------------------------------------------------------------------------------------------
// Projections.

/// `table [V, H], token → [H]`: row `token` of the table (read in place for a constant).
fn embed(table: &Value, token: u32) -> Result<ArrayD<f64>, Fault> {
    let t = token as usize;
    if let Value::Const(c) = table {
        let [rows, _] = c.matrix()?;
        if t >= rows {
            return Err(Fault::TokenOutOfRange { token, rows });
        }
        return Ok(c.row(t)?.iter().map(|&v| f64::from(v)).collect::<Array1<f64>>().into_dyn());
    }
    let table = table.array()?;
    let table = matrix(&table)?;
    if t >= table.nrows() {
        return Err(Fault::TokenOutOfRange { token, rows: table.nrows() });
    }
    Ok(table.row(t).to_owned().into_dyn())
}

/// `w [O, I], x [I] → [O]`: `w · x`. A constant's rows are read in place, each with an f64
/// accumulator.
fn matvec(w: &Value, x: &ArrayView1<f64>) -> Result<ArrayD<f64>, Fault> {
    let x: Cow<[f64]> = match x.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(x.to_vec()),
    };
    if let Value::Const(c) = w {
        return const_matvec(c, &x);
    }
    let w = w.array()?;
    let w = matrix(&w)?;
    if w.ncols() != x.len() {
        return surprise(format!("matvec of {:?} with a vector of {}", w.shape(), x.len()));
    }
    Ok(w.rows()
        .into_iter()
        .map(|row| row.iter().zip(x.iter()).map(|(w, x)| w * x).sum())
        .collect::<Array1<f64>>()
        .into_dyn())
}

fn const_matvec(w: &ConstView, x: &[f64]) -> Result<ArrayD<f64>, Fault> {
    let [rows, cols] = w.matrix()?;
    if cols != x.len() {
        return surprise(format!("matvec of {:?} with a vector of {}", w.shape(), x.len()));
    }
    // A decoded matrix's rows side by side, else each row read from the checkpoint.
    if let Some(values) = w.decoded_rows().filter(|_| cols > 0) {
        return Ok(values.chunks_exact(cols).map(|row| dot(row, x)).collect::<Array1<f64>>().into_dyn());
    }
    let mut out = Vec::with_capacity(rows);
    for r in 0..rows {
        out.push(dot(&w.row(r)?, x));
    }
    Ok(Array1::from(out).into_dyn())
}

/// `Σ wᵢ xᵢ`, the dequantized f32 weights widened, in an f64 accumulator.
fn dot(w: &[f32], x: &[f64]) -> f64 {
    w.iter().zip(x).map(|(&w, x)| f64::from(w) * x).sum()
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

fn same_shape(a: &ArrayD<f64>, b: &ArrayD<f64>) -> Result<(), Fault> {
    if a.shape() == b.shape() { Ok(()) } else { surprise(format!("shapes {:?} and {:?} differ", a.shape(), b.shape())) }
}

/// `a + b`, same shapes.
fn add(a: &ArrayD<f64>, b: &ArrayD<f64>) -> Result<ArrayD<f64>, Fault> {
    same_shape(a, b)?;
    Ok(a + b)
}

/// `a · b` elementwise, or all of `a` times `b` when `b` is a `[1]` scalar.
fn mul(a: &ArrayD<f64>, b: &ArrayD<f64>) -> Result<ArrayD<f64>, Fault> {
    if b.shape() == [1] {
        let s = b[[0]];
        return Ok(a.mapv(|x| x * s));
    }
    same_shape(a, b)?;
    Ok(a * b)
}

/// `act(x)`; the shared scalar functions, and `exp` and `tanh` from std.
fn activate(act: Act, x: f64) -> f64 {
    match act {
        Act::Sigmoid => scalar::sigmoid(x),
        Act::Silu => scalar::silu(x),
        Act::Softplus => scalar::softplus(x),
        Act::Exp => x.exp(),
        Act::Tanh => x.tanh(),
        Act::Relu => scalar::relu(x),
        Act::Gelu => scalar::gelu(x),
        Act::GeluTanh => scalar::gelu_tanh(x),
    }
}

/// `min(max(x, min), max)`; a NaN stays NaN.
fn clamp(x: f64, min: f64, max: f64) -> f64 {
    if x < min {
        min
    } else if x > max {
        max
    } else {
        x
    }
}

// ---------------------------------------------------------------------------------------------
// Norms and softmax, over the last axis.

/// `x` with `f` applied to each of its lanes along its last axis, in place on a copy.
fn per_lane(x: &ArrayD<f64>, f: impl Fn(ArrayViewMut1<f64>)) -> Result<ArrayD<f64>, Fault> {
    let axis = Axis(x.ndim().checked_sub(1).ok_or(Fault::Shape("a scalar has no last axis".into()))?);
    let mut y = x.clone();
    y.lanes_mut(axis).into_iter().for_each(f);
    Ok(y)
}

fn check_weight(x: &ArrayD<f64>, w: &ArrayView1<f64>) -> Result<usize, Fault> {
    let n = last_axis(x)?;
    if w.len() != n {
        return surprise(format!("a weight of {} for a last axis of {n}", w.len()));
    }
    Ok(n)
}

/// `x · rsqrt(mean(x²) + eps) · w`.
fn rms_norm(x: &ArrayD<f64>, w: &ArrayView1<f64>, eps: f64) -> Result<ArrayD<f64>, Fault> {
    let n = check_weight(x, w)? as f64;
    per_lane(x, |mut x| {
        let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / n + eps).sqrt();
        x.iter_mut().zip(w).for_each(|(x, w)| *x = *x * r * w);
    })
}

/// `(x − mean) · rsqrt(var + eps) · w + b`, with the biased variance.
fn layer_norm(x: &ArrayD<f64>, w: &ArrayView1<f64>, b: &ArrayView1<f64>, eps: f64) -> Result<ArrayD<f64>, Fault> {
    let n = check_weight(x, w)? as f64;
    check_weight(x, b)?;
    per_lane(x, |mut x| {
        let mean = x.sum() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let r = 1.0 / (var + eps).sqrt();
        x.iter_mut().zip(w).zip(b).for_each(|((x, w), b)| *x = (*x - mean) * r * w + b);
    })
}

/// `x · rsqrt(Σx² + eps)`.
fn l2_norm(x: &ArrayD<f64>, eps: f64) -> Result<ArrayD<f64>, Fault> {
    per_lane(x, |mut x| {
        let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() + eps).sqrt();
        x.iter_mut().for_each(|x| *x *= r);
    })
}

/// `e^(x − max x) / Σ e^(x − max x)`.
fn softmax(x: &ArrayD<f64>) -> Result<ArrayD<f64>, Fault> {
    per_lane(x, |mut x| {
        let m = x.fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        x.iter_mut().for_each(|v| *v = (*v - m).exp());
        let sum: f64 = x.iter().sum();
        x.iter_mut().for_each(|e| *e /= sum);
    })
}

// ---------------------------------------------------------------------------------------------
// Moving values.

/// The parts side by side along the last axis.
fn concat(parts: &[Cow<ArrayD<f64>>]) -> Result<ArrayD<f64>, Fault> {
    let first = parts.first().ok_or(Fault::Shape("concat of nothing".into()))?;
    let axis = Axis(last_axis(first).map(|_| first.ndim() - 1)?);
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    ndarray::concatenate(axis, &views).or_else(|e| surprise(format!("concat: {e}")))
}

/// `x[.., start..end]`.
fn slice(x: &ArrayD<f64>, start: usize, end: usize) -> Result<ArrayD<f64>, Fault> {
    let n = last_axis(x)?;
    if start >= end || end > n {
        return surprise(format!("slice {start}..{end} of a last axis of {n}"));
    }
    Ok(x.slice_axis(Axis(x.ndim() - 1), (start..end).into()).to_owned())
}

/// The same values, row-major, in shape `shape`.
fn reshape(x: &ArrayD<f64>, shape: &[usize]) -> Result<ArrayD<f64>, Fault> {
    // Row-major order is a standard-layout array's memory order: copied whole when it is one.
    let values = x.as_slice().map_or_else(|| x.iter().copied().collect(), <[f64]>::to_vec);
    ArrayD::from_shape_vec(IxDyn(shape), values)
        .or_else(|_| surprise(format!("reshape of {:?} to {shape:?}", x.shape())))
}

/// `x [n] → [rows, n]`, `x` in every row.
fn broadcast(x: &ArrayView1<f64>, rows: usize) -> ArrayD<f64> {
    Array2::from_shape_fn((rows, x.len()), |(_, j)| x[j]).into_dyn()
}

/// `X [C, K], x [C] → X'` with `X'[:, j] = X[:, j+1]` for `j < K−1` and `X'[:, K−1] = x`.
fn conv_shift(window: &ArrayView2<f64>, x: &ArrayView1<f64>) -> Result<ArrayD<f64>, Fault> {
    let (c, k) = window.dim();
    if k == 0 || x.len() != c {
        return surprise(format!("conv shift of a window {:?} by a vector of {}", window.shape(), x.len()));
    }
    Ok(Array2::from_shape_fn((c, k), |(ch, j)| if j + 1 < k { window[[ch, j + 1]] } else { x[ch] }).into_dyn())
}

/// `X [C, K], w [C, K] → [C]`: `Σⱼ w[c, j] · X[c, j]`.
fn depthwise_conv(window: &ArrayView2<f64>, w: &ArrayView2<f64>) -> Result<ArrayD<f64>, Fault> {
    if window.dim() != w.dim() {
        return surprise(format!("conv of a window {:?} with weights {:?}", window.shape(), w.shape()));
    }
    let (c, k) = window.dim();
    Ok(Array1::from_shape_fn(c, |ch| (0..k).map(|j| w[[ch, j]] * window[[ch, j]]).sum()).into_dyn())
}

// ---------------------------------------------------------------------------------------------
// The Gated-DeltaNet rule.

/// Per value head `h` with key head `m = head_map.source(h, Hv, Hk)`, with `S_h` the `[dk, dv]`
/// state: `S_h ← e^{g_h} S_h; mem = S_hᵀ k_m; delta = β_h (v_h − mem); S_h ← S_h + k_m ⊗ delta;
/// o_h = S_hᵀ q_m`. Returns the new state and `o [Hv, dv]`.
fn delta_rule(
    head_map: HeadMap,
    s: &ArrayView3<f64>,
    q: &ArrayView2<f64>,
    k: &ArrayView2<f64>,
    v: &ArrayView2<f64>,
    g: &ArrayView1<f64>,
    beta: &ArrayView1<f64>,
) -> Result<(ndarray::Array3<f64>, Array2<f64>), Fault> {
    let (hv, dk, dv) = s.dim();
    let hk = q.nrows();
    let fits = hk > 0
        && hv % hk == 0
        && q.dim() == (hk, dk)
        && k.dim() == (hk, dk)
        && v.dim() == (hv, dv)
        && g.len() == hv
        && beta.len() == hv;
    if !fits {
        return surprise(format!(
            "delta rule: state {:?}, q {:?}, k {:?}, v {:?}, g {:?}, beta {:?}",
            s.shape(),
            q.shape(),
            k.shape(),
            v.shape(),
            g.shape(),
            beta.shape()
        ));
    }
    let mut s = s.to_owned();
    let mut o = Array2::zeros((hv, dv));
    for h in 0..hv {
        let m = head_map.source(h, hv, hk);
        let (q, k, v) = (q.row(m), k.row(m), v.row(h));
        let mut s_h = s.index_axis_mut(Axis(0), h);
        s_h *= g[h].exp();
        let mem = s_h.t().dot(&k);
        let delta = (&v - &mem) * beta[h];
        for i in 0..dk {
            for j in 0..dv {
                s_h[[i, j]] += k[i] * delta[j];
            }
        }
        o.row_mut(h).assign(&s_h.t().dot(&q));
    }
    Ok((s, o))
}

// ---------------------------------------------------------------------------------------------
// Attention.

/// The rotary embedding of the first `2·inv_freq.len()` dims of each row of `x` at `position`:
/// pair `(a, b)` number `i` (NeoX: `(i, i + n)` with `n = inv_freq.len()`; interleaved: `(2i, 2i+1)`)
/// turns by the angle `position · inv_freq[i]` and is scaled: `(a, b) → scale · (a cos − b sin,
/// b cos + a sin)`. The other dims pass through. `rope` with θ is this with `inv_freq[i] =
/// θ^(−2i/rotary_dims)` and `scale` 1.
fn rope(
    x: &ArrayView2<f64>,
    position: u64,
    inv_freq: &[f64],
    scale: f64,
    style: RopeStyle,
) -> Result<ArrayD<f64>, Fault> {
    let n = inv_freq.len();
    if 2 * n > x.ncols() {
        return surprise(format!("rope of {} dims on heads of {}", 2 * n, x.ncols()));
    }
    let mut y = x.to_owned();
    for mut row in y.rows_mut() {
        let u = row.to_owned();
        for (i, f) in inv_freq.iter().enumerate() {
            let (sin, cos) = (position as f64 * f).sin_cos();
            let (a, b) = match style {
                RopeStyle::Neox => (i, i + n),
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            };
            row[a] = scale * (u[a] * cos - u[b] * sin);
            row[b] = scale * (u[b] * cos + u[a] * sin);
        }
    }
    Ok(y.into_dyn())
}

/// The cache `[heads, T, dim]` with `x [heads, dim]` appended as position `T`.
fn kv_append(cache: &ndarray::Array3<f64>, x: &ArrayView2<f64>) -> Result<ndarray::Array3<f64>, Fault> {
    let mut cache = cache.clone();
    cache
        .push(Axis(1), x.view())
        .or_else(|e| surprise(format!("kv append of {:?} to {:?}: {e}", x.shape(), cache.shape())))?;
    Ok(cache)
}

/// For query head `h` with KV head `m = head_map.source(h, nH, nKV)`: scores `s_j = scale · q_h ·
/// K[m, j]` over the cached positions `j` (only the newest `window` when set: `j > T−1−window`);
/// weights `a_j = e^{s_j − M} / (Σ_j e^{s_j − M} [+ e^{sink_h − M}])` with `M` the largest of the
/// scores and the sink; `o_h = Σ_j a_j V[m, j]`. The sink takes weight but gives no value; over no
/// positions the output is zero.
fn attention(
    q: &ArrayView2<f64>,
    keys: &ArrayView3<f64>,
    values: &ArrayView3<f64>,
    sinks: Option<&ArrayView1<f64>>,
    scale: f64,
    window: Option<usize>,
    head_map: HeadMap,
) -> Result<ArrayD<f64>, Fault> {
    let (nh, dq) = q.dim();
    let (nkv, t, dk) = keys.dim();
    let (vh, vt, dv) = values.dim();
    let fits = nkv > 0 && nh % nkv == 0 && dk == dq && (vh, vt) == (nkv, t) && sinks.is_none_or(|s| s.len() == nh);
    if !fits {
        return surprise(format!(
            "attention of q {:?} over keys {:?} and values {:?}",
            q.shape(),
            keys.shape(),
            values.shape()
        ));
    }
    let first = match window {
        Some(w) => t.saturating_sub(w),
        None => 0,
    };
    let mut out = Array2::zeros((nh, dv));
    for h in 0..nh {
        let m = head_map.source(h, nh, nkv);
        #[cfg(any(test, feature = "planted"))]
        let m = if planted::is(planted::Bug::ReferenceTiledKvHeads) { h % nkv } else { m };
        let scores: Vec<f64> = (first..t)
            .map(|j| scale * q.row(h).dot(&keys.index_axis(Axis(0), m).index_axis_move(Axis(0), j)))
            .collect();
        let sink = sinks.map(|s| s[h]);
        let max = scores.iter().chain(sink.iter()).fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let denominator = exps.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
        for (e, j) in exps.iter().zip(first..t) {
            let a = e / denominator;
            out.row_mut(h).scaled_add(a, &values.index_axis(Axis(0), m).index_axis_move(Axis(0), j));
        }
    }
    Ok(out.into_dyn())
}

// ---------------------------------------------------------------------------------------------
// Routing.

/// The `k` largest entries of `p` (ties: the lowest index first), valued from `values` when given,
/// else from `p`, and divided by the sum of those values when `renormalize`; the others zero.
fn top_k(
    p: &ArrayView1<f64>,
    values: Option<&ArrayView1<f64>>,
    k: usize,
    renormalize: bool,
) -> Result<ArrayD<f64>, Fault> {
    if k == 0 || k > p.len() || values.is_some_and(|v| v.len() != p.len()) {
        return surprise(format!("top-{k} of {}", p.len()));
    }
    let mut kept: Vec<usize> = Vec::with_capacity(k);
    for _ in 0..k {
        let mut best: Option<usize> = None;
        for i in (0..p.len()).filter(|i| !kept.contains(i)) {
            if best.is_none_or(|b| p[i] > p[b]) {
                best = Some(i);
            }
        }
        kept.extend(best);
    }
    let value = |i: usize| values.map_or(p[i], |v| v[i]);
    let sum: f64 = kept.iter().map(|&i| value(i)).sum();
    let divisor = if renormalize { sum } else { 1.0 };
    let mut out = Array1::zeros(p.len());
    for &i in &kept {
        out[i] = value(i) / divisor;
    }
    Ok(out.into_dyn())
}

/// The entries of `x` as `groups` contiguous groups, each scored by the sum of its `top` largest
/// entries; the `keep` best groups (ties: the lowest index first) pass, the others become −∞.
fn group_limit(x: &ArrayView1<f64>, groups: usize, keep: usize, top: usize) -> Result<ArrayD<f64>, Fault> {
    let e = x.len();
    if groups == 0 || !e.is_multiple_of(groups) || !(1..=groups).contains(&keep) || !(1..=e / groups).contains(&top) {
        return surprise(format!("the best {keep} of {groups} groups by their top {top} of {e} entries"));
    }
    let size = e / groups;
    let score = |g: usize| {
        let mut members: Vec<f64> = x.iter().skip(g * size).take(size).copied().collect();
        members.sort_by(|a, b| b.total_cmp(a));
        members.iter().take(top).sum::<f64>()
    };
    let scores: Vec<f64> = (0..groups).map(score).collect();
    let mut kept: Vec<usize> = Vec::with_capacity(keep);
    for _ in 0..keep {
        let mut best: Option<usize> = None;
        for g in (0..groups).filter(|g| !kept.contains(g)) {
            if best.is_none_or(|b| scores[g] > scores[b]) {
                best = Some(g);
            }
        }
        kept.extend(best);
    }
    Ok(Array1::from_shape_fn(e, |i| if kept.contains(&(i / size)) { x[i] } else { f64::NEG_INFINITY }).into_dyn())
}

/// `x [n] → [1]`: entry `index`.
fn pick(x: &ArrayView1<f64>, index: usize) -> Result<ArrayD<f64>, Fault> {
    match x.get(index) {
        Some(&v) => Ok(Array1::from(vec![v]).into_dyn()),
        None => surprise(format!("pick {index} of {}", x.len())),
    }
}

// ---------------------------------------------------------------------------------------------
// Fused symbols.

/// A fused op: the primitive steps of its meaning, run over its operands, its results and
/// temporaries.
fn fused<'c>(f: Fused, ins: &[&Value<'c>], outputs: usize) -> Result<Values<'c>, Fault> {
    let mut outs: Vec<Option<Value<'c>>> = vec![None; outputs];
    let mut tmps: Vec<Option<Value<'c>>> = vec![];
    for step in meaning(f, ins.len(), outputs) {
        let written = {
            let read = |slot: &Slot| -> Result<&Value<'c>, Fault> {
                let v = match *slot {
                    Slot::In(i) => ins.get(i).copied(),
                    Slot::Out(i) => outs.get(i).and_then(Option::as_ref),
                    Slot::Tmp(i) => tmps.get(i).and_then(Option::as_ref),
                };
                v.ok_or_else(|| Fault::Shape(format!("{}: step reads {slot:?} before it is written", f.name())))
            };
            let reads = step.reads.iter().map(read).collect::<Result<Operands, _>>()?;
            eval(&step.kind, &reads, step.writes.len())?
        };
        if written.len() != step.writes.len() {
            return surprise(format!(
                "{}: a step writes {} values, not {}",
                f.name(),
                written.len(),
                step.writes.len()
            ));
        }
        for (slot, value) in step.writes.iter().zip(written) {
            let (table, i) = match *slot {
                Slot::Out(i) => (&mut outs, i),
                Slot::Tmp(i) => (&mut tmps, i),
                Slot::In(_) => return surprise(format!("{}: a step writes an operand", f.name())),
            };
            if table.len() <= i {
                table.resize(i + 1, None);
            }
            table[i] = Some(value);
        }
    }
    outs.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| Fault::Shape(format!("{}: result {i} is never written", f.name()))))
        .collect()
}
