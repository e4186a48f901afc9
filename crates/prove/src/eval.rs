//! A small evaluator of the term language, in f64 with plain loops: what each symbol means, for
//! the lemmas' property tests and for numeric witnesses of a refutation.
//!
//! It is the prover's own code: it shares nothing with either interpreter but the
//! layout maps of [`super::layout`], which it evaluates the layout symbols by. GELU's `erf` is
//! Abramowitz–Stegun 7.1.26 (error below 1.5·10⁻⁷): both sides of a comparison use the same one.

use std::collections::HashMap;

use super::layout::{LayoutMap, engine_index};
use super::term::{Dag, Id, Sym};
use formats::bind::View;
use ir::{Act, Graph, HeadMap, RopeStyle, StateKind, Ty};

/// A value: an array (row-major, `cols` its last axis), an integer (token, position), a cache of
/// `len` positions per head (`[h][len][d]`), or a pair.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Arr { data: Vec<f64>, cols: usize },
    Int(usize),
    Cache { h: usize, d: usize, len: usize, data: Vec<f64> },
    Pair(Box<Value>, Box<Value>),
}

impl Value {
    /// A vector.
    pub fn vec(data: Vec<f64>) -> Value {
        let cols = data.len();
        Value::Arr { data, cols }
    }

    /// The values of an array (a cache's too).
    pub fn data(&self) -> Result<&[f64], String> {
        match self {
            Value::Arr { data, .. } | Value::Cache { data, .. } => Ok(data),
            v => Err(format!("expected an array, found {v:?}")),
        }
    }

    fn int(&self) -> Result<usize, String> {
        match self {
            Value::Int(i) => Ok(*i),
            v => Err(format!("expected an integer, found {v:?}")),
        }
    }

    fn cache(&self) -> Result<(usize, usize, usize, &[f64]), String> {
        match self {
            Value::Cache { h, d, len, data } => Ok((*h, *d, *len, data)),
            v => Err(format!("expected a cache, found {v:?}")),
        }
    }
}

/// The values of the leaves: checkpoint tensors by name (shape, values), the token, the position,
/// the states as they enter the step, and the engine's cache capacity.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
    pub token: usize,
    pub pos: usize,
    pub states: HashMap<(StateKind, Option<usize>), Value>,
    pub capacity: usize,
}

/// A deterministic stream of values in `[-1, 1)` (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    /// The next value of the stream.
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// The next `n` values of the stream.
    pub fn fill(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next_f64()).collect()
    }
}

impl Env {
    /// Random leaves for the constants and states of `graphs`, each checkpoint tensor shaped to hold
    /// every view of it; the position `pos`, the caches holding `pos` positions. `None` when the
    /// tensors would hold more than `limit` values (too large to evaluate) or a view cannot be shaped.
    pub fn random(graphs: &[&Graph], seed: u64, pos: usize, limit: usize) -> Option<Env> {
        let mut shapes: foldhash::HashMap<String, Vec<usize>> = foldhash::HashMap::default();
        for g in graphs {
            for c in &g.consts {
                let view = g.ty(c.tensor).shape()?.to_vec();
                let whole = match (c.binding.view, view.as_slice()) {
                    (View::Whole, _) => view.clone(),
                    (View::Rows { end, .. }, &[_, cols]) => vec![end, cols],
                    (View::HeadHalf { .. }, &[r, cols]) => vec![2 * r, cols],
                    _ => return None,
                };
                let s = shapes.entry(c.binding.tensor.clone()).or_insert_with(|| whole.clone());
                if s.len() != whole.len() {
                    return None;
                }
                s[0] = s[0].max(whole[0]);
            }
        }
        if shapes.values().map(|s| s.iter().product::<usize>()).sum::<usize>() > limit {
            return None;
        }
        let mut rng = Rng(seed);
        let mut names: Vec<_> = shapes.into_iter().collect();
        names.sort();
        let mut env = Env { pos, capacity: pos + 4, ..Env::default() };
        for (name, shape) in names {
            let data = rng.fill(shape.iter().product());
            env.tensors.insert(name, (shape, data));
        }
        let vocab = env.tensors.get(formats::names::TOKEN_EMBD).map_or(1, |(s, _)| s[0].max(1));
        env.token = (seed as usize) % vocab;
        for g in graphs {
            for s in &g.states {
                let v = match g.ty(s.read) {
                    Ty::Position => Value::Int(pos),
                    Ty::Tensor(sh) => Value::Arr { data: rng.fill(sh.iter().product()), cols: *sh.last()? },
                    &Ty::Cache { heads, dim } => {
                        Value::Cache { h: heads, d: dim, len: pos, data: rng.fill(heads * pos * dim) }
                    }
                    Ty::Token => return None,
                };
                env.states.entry((s.kind, s.layer)).or_insert(v);
            }
        }
        Some(env)
    }
}

/// The value of term `id` under `env`, or why it has none (a symbol the evaluator does not know,
/// operands that do not fit).
pub fn eval(dag: &Dag, id: Id, env: &Env) -> Result<Value, String> {
    let mut memo = foldhash::HashMap::default();
    eval_memo(dag, id, env, &mut memo)
}

fn eval_memo(dag: &Dag, id: Id, env: &Env, memo: &mut foldhash::HashMap<Id, Value>) -> Result<Value, String> {
    if let Some(v) = memo.get(&id) {
        return Ok(v.clone());
    }
    let node = dag.node(id);
    let args = node.args.iter().map(|&a| eval_memo(dag, a, env, memo)).collect::<Result<Vec<_>, _>>()?;
    let v = apply(&node.sym, &args, env)?;
    memo.insert(id, v.clone());
    Ok(v)
}

fn act(a: Act, x: f64) -> f64 {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    match a {
        Act::Sigmoid => sigmoid(x),
        Act::Silu => x * sigmoid(x),
        Act::Softplus if x > 30.0 => x,
        Act::Softplus => x.exp().ln_1p(),
        Act::Exp => x.exp(),
        Act::Tanh => x.tanh(),
        Act::Relu => x.max(0.0),
        Act::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Act::GeluTanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
    }
}

/// Abramowitz–Stegun 7.1.26.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let p = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - p * (-x * x).exp();
    if x < 0.0 { -y } else { y }
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok { Ok(()) } else { Err(format!("{what}: operands do not fit")) }
}

/// Each row of `n` values of `x`, mapped by `f`.
fn per_row(x: &[f64], n: usize, mut f: impl FnMut(&[f64], &mut [f64])) -> Result<Vec<f64>, String> {
    check(n > 0 && x.len().is_multiple_of(n), "rows")?;
    let mut out = vec![0.0; x.len()];
    for (r, o) in x.chunks(n).zip(out.chunks_mut(n)) {
        f(r, o);
    }
    Ok(out)
}

fn weight(env: &Env, b: &formats::bind::Binding) -> Result<Value, String> {
    let (shape, data) = env.tensors.get(&b.tensor).ok_or_else(|| format!("no tensor {}", b.tensor))?;
    let cols = *shape.last().unwrap_or(&1);
    let rows = |rs: &mut dyn Iterator<Item = usize>| -> Result<Vec<f64>, String> {
        let mut out = vec![];
        for r in rs {
            out.extend_from_slice(data.get(r * cols..(r + 1) * cols).ok_or("a view outside its tensor")?);
        }
        Ok(out)
    };
    let n = data.len() / cols.max(1);
    let data = match b.view {
        View::Whole => data.clone(),
        View::Rows { start, end } => rows(&mut (start..end))?,
        v @ View::HeadHalf { .. } => rows(&mut (0..n / 2).map(|r| v.source_row(shape, r)))?,
        View::Expert { .. } => return Err("expert views are not evaluated".into()),
    };
    Ok(Value::Arr { data, cols })
}

/// The value of `sym` applied to `args`.
pub fn apply(sym: &Sym, args: &[Value], env: &Env) -> Result<Value, String> {
    let arr = |i: usize| args.get(i).ok_or("too few operands".to_string()).and_then(|v| v.data());
    let v = Value::vec;
    Ok(match sym {
        Sym::Token => Value::Int(env.token),
        Sym::Pos => Value::Int(env.pos),
        Sym::Weight(b) => weight(env, b)?,
        Sym::State(k, l) => env.states.get(&(*k, *l)).cloned().ok_or("no such state")?,
        Sym::Embed => {
            let Value::Arr { data, cols } = &args[0] else { return Err("embed of a non-array".into()) };
            let t = args[1].int()?;
            v(data.get(t * cols..(t + 1) * cols).ok_or("token out of range")?.to_vec())
        }
        Sym::MatVec => {
            let (w, x) = (arr(0)?, arr(1)?);
            check(!x.is_empty() && w.len() % x.len() == 0, "matvec")?;
            v(w.chunks(x.len()).map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum()).collect())
        }
        Sym::Add | Sym::Mul => {
            let (a, b) = (arr(0)?, arr(1)?);
            check(a.len() == b.len(), "elementwise")?;
            let f = if *sym == Sym::Add { |x: f64, y: f64| x + y } else { |x: f64, y: f64| x * y };
            Value::Arr { data: a.iter().zip(b).map(|(x, y)| f(*x, *y)).collect(), cols: a.len() }
        }
        Sym::MulScalar => {
            let s = *arr(1)?.first().ok_or("empty scalar")?;
            v(arr(0)?.iter().map(|x| x * s).collect())
        }
        Sym::Scale(f) => v(arr(0)?.iter().map(|x| x * f.get()).collect()),
        Sym::Offset(f) => v(arr(0)?.iter().map(|x| x + f.get()).collect()),
        Sym::Act(a) => v(arr(0)?.iter().map(|&x| act(*a, x)).collect()),
        Sym::Clamp(lo, hi) => v(arr(0)?.iter().map(|x| x.max(lo.get()).min(hi.get())).collect()),
        Sym::RmsNorm { eps, n } => {
            let w = arr(1)?;
            check(w.len() == *n, "rms_norm")?;
            v(per_row(arr(0)?, *n, |r, o| {
                let s = 1.0 / (r.iter().map(|x| x * x).sum::<f64>() / *n as f64 + eps.get()).sqrt();
                o.iter_mut().zip(r).zip(w).for_each(|((o, x), w)| *o = x * s * w);
            })?)
        }
        Sym::LayerNorm { eps, n } => {
            let (w, b) = (arr(1)?, arr(2)?);
            check(w.len() == *n && b.len() == *n, "layer_norm")?;
            v(per_row(arr(0)?, *n, |r, o| {
                let m = r.iter().sum::<f64>() / *n as f64;
                let var = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / *n as f64;
                let s = 1.0 / (var + eps.get()).sqrt();
                for j in 0..*n {
                    o[j] = (r[j] - m) * s * w[j] + b[j];
                }
            })?)
        }
        Sym::L2Norm { eps, n } => v(per_row(arr(0)?, *n, |r, o| {
            let s = 1.0 / (r.iter().map(|x| x * x).sum::<f64>() + eps.get()).sqrt();
            o.iter_mut().zip(r).for_each(|(o, x)| *o = x * s);
        })?),
        Sym::Softmax { n } => v(per_row(arr(0)?, *n, |r, o| {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = r.iter().map(|x| (x - m).exp()).sum();
            o.iter_mut().zip(r).for_each(|(o, x)| *o = (x - m).exp() / z);
        })?),
        Sym::Concat { rows, lens } => {
            let mut out = vec![];
            for r in 0..*rows {
                for (i, len) in lens.iter().enumerate() {
                    out.extend_from_slice(arr(i)?.get(r * len..(r + 1) * len).ok_or("concat")?);
                }
            }
            v(out)
        }
        Sym::Slice { start, end, n } => {
            check(start < end && end <= n, "slice")?;
            let x = arr(0)?;
            check(x.len() % n == 0, "slice")?;
            v(x.chunks(*n).flat_map(|r| r[*start..*end].to_vec()).collect())
        }
        Sym::Broadcast { rows } => v(arr(0)?.repeat(*rows)),
        Sym::ConvShift { c, k } => {
            let (w, x) = (arr(0)?, arr(1)?);
            check(w.len() == c * k && x.len() == *c && *k >= 1, "conv_shift")?;
            let mut out = vec![0.0; c * k];
            for ch in 0..*c {
                out[ch * k..ch * k + k - 1].copy_from_slice(&w[ch * k + 1..ch * k + k]);
                out[ch * k + k - 1] = x[ch];
            }
            v(out)
        }
        Sym::DepthwiseConv { c, k } => {
            let (x, w) = (arr(0)?, arr(1)?);
            check(x.len() == c * k && w.len() == c * k, "depthwise_conv")?;
            v((0..*c).map(|ch| (0..*k).map(|j| w[ch * k + j] * x[ch * k + j]).sum()).collect())
        }
        &Sym::DeltaRule { hv, hk, dk, dv, map } => delta_rule(args, hv, hk, dk, dv, map)?,
        &Sym::DeltaRuleVk { hv, hk, dk, dv } => delta_rule_vk(args, hv, hk, dk, dv)?,
        Sym::Proj(i) => match &args[0] {
            Value::Pair(a, b) => [a, b][*i].as_ref().clone(),
            v => return Err(format!("proj of {v:?}")),
        },
        Sym::Rope { theta, dims, style, hd } => {
            let freqs: Vec<f64> = (0..dims / 2).map(|i| theta.get().powf(-2.0 * i as f64 / *dims as f64)).collect();
            v(rope(arr(0)?, args[1].int()?, &freqs, 1.0, *style, *hd)?)
        }
        Sym::RopeFreqs { freqs, scale, style, hd } => {
            let f: Vec<f64> = freqs.iter().map(|f| f.get()).collect();
            v(rope(arr(0)?, args[1].int()?, &f, scale.get(), *style, *hd)?)
        }
        &Sym::KvAppend { h, d } => {
            let (ch, cd, len, data) = args[0].cache()?;
            let x = arr(1)?;
            check(ch == h && cd == d && x.len() == h * d, "kv_append")?;
            let mut out = Vec::with_capacity(h * (len + 1) * d);
            for head in 0..h {
                out.extend_from_slice(&data[head * len * d..(head + 1) * len * d]);
                out.extend_from_slice(&x[head * d..(head + 1) * d]);
            }
            Value::Cache { h, d, len: len + 1, data: out }
        }
        &Sym::Attention { scale, window, map, heads, kv_heads } => {
            let (kh, kd, len, k) = args[1].cache()?;
            let (vh, vd, vlen, vals) = args[2].cache()?;
            check(kh == kv_heads && vh == kv_heads && vlen == len, "attention")?;
            let sinks = args.get(3).map(|s| s.data()).transpose()?;
            let first = window.map_or(0, |w| len.saturating_sub(w));
            let positions: Vec<usize> = (first..len).collect();
            let at = |data: &[f64], d: usize, h: usize, p: usize, i: usize| data[(h * len + p) * d + i];
            attend(
                arr(0)?,
                heads,
                kv_heads,
                kd,
                vd,
                scale.get(),
                map,
                &positions,
                sinks,
                &|h, p, i| at(k, kd, h, p, i),
                &|h, p, i| at(vals, vd, h, p, i),
            )?
        }
        Sym::Pick { index } => v(vec![*arr(0)?.get(*index).ok_or("pick")?]),
        Sym::TopK { .. } | Sym::GroupLimit { .. } => return Err(format!("{} is not evaluated", sym.name())),
        Sym::Advance => Value::Int(args[0].int()? + 1),
        Sym::Rows { start, end } => v(arr(0)?.get(*start..*end).ok_or("rows")?.to_vec()),
        Sym::Permute { perm, size } => {
            let data = super::permute::apply(perm, *size, arr(0)?).ok_or("permute")?;
            match &args[0] {
                Value::Arr { cols, .. } => Value::Arr { data, cols: *cols },
                _ => v(data),
            }
        }
        &Sym::HeadHalf { d, half } => {
            let x = arr(0)?;
            check(d > 0 && x.len() % (2 * d) == 0, "head_half")?;
            v((0..x.len() / 2).map(|r| x[(r / d) * 2 * d + half * d + r % d]).collect())
        }
        &Sym::DropFirstCol { c, k } => {
            let x = arr(0)?;
            check(x.len() == c * k && k >= 1, "drop_first_col")?;
            let map = LayoutMap::DropOldest { channels: c, taps: k };
            v(relayout(x, c * (k - 1), |g| engine_index(map, &[g / k, g % k], 0))?)
        }
        &Sym::AppendCol { c, k } => {
            let (w, x) = (arr(0)?, arr(1)?);
            check(k >= 1 && w.len() == c * (k - 1) && x.len() == c, "append_col")?;
            let mut out = vec![0.0; c * k];
            for ch in 0..c {
                out[ch * k..ch * k + k - 1].copy_from_slice(&w[ch * (k - 1)..(ch + 1) * (k - 1)]);
                out[ch * k + k - 1] = x[ch];
            }
            v(out)
        }
        &Sym::TransposeKv { hv, dk, dv } => {
            let x = arr(0)?;
            check(x.len() == hv * dk * dv, "transpose_kv")?;
            let map = LayoutMap::Transpose { value_heads: hv, key_dim: dk, value_dim: dv };
            v(relayout(x, x.len(), |g| engine_index(map, &[g / (dk * dv), (g / dv) % dk, g % dv], 0))?)
        }
        &Sym::Prealloc { h, d } => {
            let (ch, cd, len, data) = args[0].cache()?;
            check(ch == h && cd == d && len <= env.capacity, "prealloc")?;
            let cap = env.capacity;
            let map = LayoutMap::Prealloc { heads: h, dim: d };
            let to = |g: usize| engine_index(map, &[g / (len * d), (g / d) % len, g % d], cap);
            Value::Arr { data: relayout(data, h * cap * d, to)?, cols: d }
        }
        &Sym::KvWrite { h, d } => {
            let (p, pos, x) = (arr(0)?, args[1].int()?, arr(2)?);
            let cap = env.capacity;
            check(p.len() == h * cap * d && x.len() == h * d && pos < cap, "kv_write")?;
            let mut out = p.to_vec();
            for head in 0..h {
                out[(head * cap + pos) * d..(head * cap + pos + 1) * d].copy_from_slice(&x[head * d..(head + 1) * d]);
            }
            Value::Arr { data: out, cols: d }
        }
        &Sym::AttendPrefix { scale, heads, kv_heads } => {
            let (q, k, vals, pos) = (arr(0)?, arr(1)?, arr(2)?, args[3].int()?);
            let cap = env.capacity;
            check(kv_heads > 0 && k.len() % (kv_heads * cap) == 0 && pos < cap, "attend_prefix")?;
            let (kd, vd) = (k.len() / (kv_heads * cap), vals.len() / (kv_heads * cap));
            let positions: Vec<usize> = (0..=pos).collect();
            let at = |data: &[f64], d: usize, h: usize, p: usize, i: usize| data[(h * cap + p) * d + i];
            attend(
                q,
                heads,
                kv_heads,
                kd,
                vd,
                scale.get(),
                HeadMap::Grouped,
                &positions,
                None,
                &|h, p, i| at(k, kd, h, p, i),
                &|h, p, i| at(vals, vd, h, p, i),
            )?
        }
    })
}

/// `x` moved to an array of `len` zeros at the engine's index `to(i)` of each graph index `i`
/// (values without a place are dropped).
fn relayout(x: &[f64], len: usize, to: impl Fn(usize) -> Option<usize>) -> Result<Vec<f64>, String> {
    let mut out = vec![0.0; len];
    for (g, &val) in x.iter().enumerate() {
        if let Some(e) = to(g) {
            *out.get_mut(e).ok_or("a layout index out of range")? = val;
        }
    }
    Ok(out)
}

fn rope(x: &[f64], pos: usize, freqs: &[f64], scale: f64, style: RopeStyle, hd: usize) -> Result<Vec<f64>, String> {
    check(2 * freqs.len() <= hd, "rope")?;
    let half = freqs.len();
    per_row(x, hd, |r, o| {
        o.copy_from_slice(r);
        for (i, f) in freqs.iter().enumerate() {
            let (a, b) = match style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            };
            let (s, c) = (pos as f64 * f).sin_cos();
            o[a] = (r[a] * c - r[b] * s) * scale;
            o[b] = (r[b] * c + r[a] * s) * scale;
        }
    })
}

/// Softmax attention of each of `heads` query heads over `positions` of its KV head.
#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f64],
    heads: usize,
    kv_heads: usize,
    kd: usize,
    vd: usize,
    scale: f64,
    map: HeadMap,
    positions: &[usize],
    sinks: Option<&[f64]>,
    key: &dyn Fn(usize, usize, usize) -> f64,
    value: &dyn Fn(usize, usize, usize) -> f64,
) -> Result<Value, String> {
    check(kv_heads > 0 && heads.is_multiple_of(kv_heads) && q.len() == heads * kd, "attention")?;
    let mut out = vec![0.0; heads * vd];
    for h in 0..heads {
        let m = map.source(h, heads, kv_heads);
        let s: Vec<f64> =
            positions.iter().map(|&p| scale * (0..kd).map(|i| q[h * kd + i] * key(m, p, i)).sum::<f64>()).collect();
        let sink = sinks.map(|s| s[h]);
        let mx = s.iter().cloned().chain(sink).fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().chain(sink.as_ref()).map(|x| (x - mx).exp()).sum();
        for (j, &p) in positions.iter().enumerate() {
            let a = (s[j] - mx).exp() / z;
            for i in 0..vd {
                out[h * vd + i] += a * value(m, p, i);
            }
        }
    }
    Ok(Value::vec(out))
}

fn delta_parts(args: &[Value], hv: usize, hk: usize, dk: usize, dv: usize) -> Result<[&[f64]; 6], String> {
    let a: Vec<&[f64]> = args.iter().map(|v| v.data()).collect::<Result<_, _>>()?;
    let fits = a.len() == 6
        && a[0].len() == hv * dk * dv
        && a[1].len() == hk * dk
        && a[2].len() == hk * dk
        && a[3].len() == hv * dv
        && a[4].len() == hv
        && a[5].len() == hv
        && hk > 0
        && hv.is_multiple_of(hk);
    check(fits, "delta rule")?;
    Ok([a[0], a[1], a[2], a[3], a[4], a[5]])
}

/// The graph's delta rule: per value head `h` with key head `map(h)`, over `S [dk][dv]`:
/// `S ← e^g S; S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq`.
fn delta_rule(args: &[Value], hv: usize, hk: usize, dk: usize, dv: usize, map: HeadMap) -> Result<Value, String> {
    let [s0, q, k, v, g, beta] = delta_parts(args, hv, hk, dk, dv)?;
    let mut s = s0.to_vec();
    let mut o = vec![0.0; hv * dv];
    for h in 0..hv {
        let m = map.source(h, hv, hk);
        let st = &mut s[h * dk * dv..(h + 1) * dk * dv];
        let decay = g[h].exp();
        st.iter_mut().for_each(|x| *x *= decay);
        let u: Vec<f64> =
            (0..dv).map(|j| v[h * dv + j] - (0..dk).map(|i| st[i * dv + j] * k[m * dk + i]).sum::<f64>()).collect();
        for i in 0..dk {
            for j in 0..dv {
                st[i * dv + j] += k[m * dk + i] * beta[h] * u[j];
            }
        }
        for j in 0..dv {
            o[h * dv + j] = (0..dk).map(|i| st[i * dv + j] * q[m * dk + i]).sum();
        }
    }
    Ok(Value::Pair(Box::new(Value::vec(s)), Box::new(Value::vec(o))))
}

/// The engine's delta rule (docs/PROGRAM.md): per value head `h` with key head `h mod hk`, per row
/// `j` of its `[dv][dk]` matrix: `s ← e^g s; s ← s + β(v_j − s·k)k; o_j = s·q`.
fn delta_rule_vk(args: &[Value], hv: usize, hk: usize, dk: usize, dv: usize) -> Result<Value, String> {
    let [s0, q, k, v, g, beta] = delta_parts(args, hv, hk, dk, dv)?;
    let mut s = s0.to_vec();
    let mut o = vec![0.0; hv * dv];
    for h in 0..hv {
        let m = h % hk;
        let (kk, qq) = (&k[m * dk..(m + 1) * dk], &q[m * dk..(m + 1) * dk]);
        for j in 0..dv {
            let row = &mut s[(h * dv + j) * dk..(h * dv + j + 1) * dk];
            row.iter_mut().for_each(|x| *x *= g[h].exp());
            let u = v[h * dv + j] - row.iter().zip(kk).map(|(a, b)| a * b).sum::<f64>();
            row.iter_mut().zip(kk).for_each(|(x, ki)| *x += beta[h] * u * ki);
            o[h * dv + j] = row.iter().zip(qq).map(|(a, b)| a * b).sum();
        }
    }
    Ok(Value::Pair(Box::new(Value::vec(s)), Box::new(Value::vec(o))))
}

/// Where two values differ beyond `1e-9` of their scale, in words, or `None` when they agree.
pub fn differ(a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => (x != y).then(|| format!("{x} vs {y}")),
        (Value::Pair(a0, a1), Value::Pair(b0, b1)) => differ(a0, b0).or_else(|| differ(a1, b1)),
        _ => {
            let (x, y) = match (a.data(), b.data()) {
                (Ok(x), Ok(y)) => (x, y),
                _ => return Some(format!("{a:?} vs {b:?}")),
            };
            if x.len() != y.len() {
                return Some(format!("{} values vs {}", x.len(), y.len()));
            }
            let scale = x.iter().chain(y).fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
            let (i, d) = x
                .iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .enumerate()
                .fold((0, -1.0), |m, (i, d)| if d > m.1 || d.is_nan() { (i, d) } else { m });
            (d > 1e-9 * scale || d.is_nan()).then(|| format!("index {i}: {} vs {} (scale {scale:.3e})", x[i], y[i]))
        }
    }
}
