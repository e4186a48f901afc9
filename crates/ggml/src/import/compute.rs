//! The compute ops: each ggml op the qwen35 decode graph computes, written as the IR ops of its
//! meaning (ggml's CPU kernels in `ggml-cpu/ops.cpp` and `ggml-cpu.c`, read for this table):
//!
//! | ggml | the IR |
//! |---|---|
//! | `MUL_MAT(w, x)`, `w` a weight `[k, m]`, `x` one column | `matvec(w [m, k], x)` |
//! | `RMS_NORM(x)` then `MUL(·, w)` | `rms_norm(x, w)` |
//! | `RMS_NORM(x)` then `SCALE(·, s)` | `l2_norm(x)` with ε·n, then `scale(s·√n)` when that is not one |
//! | `MUL`, `ADD`, `SUB` (`b` repeated to `a`'s sizes) | `mul`, `add`, `add(a, scale(−1, b))` on `b` broadcast |
//! | `SCALE(x, s, b)` | `scale(s)`, then `offset(b)` when `b` is not zero |
//! | `UNARY` `SILU`, `SIGMOID`, `SOFTPLUS`, `EXP` | the activation |
//! | `GLU:SWIGLU(a, b)` | `mul(silu(a), b)` |
//! | `SSM_CONV(x [K, C], w [K, C])`, one token | `depthwise_conv(x [C, K], w [C, K])` |
//! | `ROPE(x, pos)`, NeoX or IMRoPE with every section the position | `rope(θ, n_dims, neox)` |
//! | `GATED_DELTA_NET(q, k, v, g, β, S)`, one token, one state | `delta_rule(tiled)`, its output scaled by `1/√S_v` |
//! | `FLASH_ATTN_EXT(q, k, v, mask)` over the KV cache | `attention(s, grouped)` |
//! | `MUL`, `ADD`, `SUB`, `SUM_ROWS` composing the delta rule | one `delta_rule` (`delta`) |
//!
//! A node's result is its IR tensor's values in ggml's logical order (`ne0` fastest), which is
//! the row-major order of the sizes reversed.

use ir::{Act, HeadMap, OpKind, RopeStyle, TensorId};

use super::store::Elem;
use super::{Importer, Pending, index_space, sizes};
use super::{attention, delta};
use crate::graph::Tensor;

/// Reads compute node `n`.
pub(super) fn read(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let row = n.row_name();
    match row.as_str() {
        "MUL_MAT" => mul_mat(im, n),
        "RMS_NORM" => {
            let x = im.src(n, 0)?;
            let shape = rows(x)?;
            let eps = n.param_f32(0).ok_or("no eps")?;
            let xt = {
                let e = im.read(x)?;
                im.materialise(&e, &shape)?
            };
            let width = *shape.last().ok_or("a norm of no dims")?;
            im.pending.insert(n.id.clone(), Pending::RmsNorm { x: xt, eps, n: width });
            Ok(())
        }
        "MUL" | "ADD" | "SUB" => {
            let pending = (0..2).any(|i| im.src(n, i).is_ok_and(|t| im.pending.contains_key(&t.id)));
            if !pending && delta::step(im, n)?.is_some() {
                return Ok(());
            }
            elementwise(im, n, &row)
        }
        "SUM_ROWS" => delta::step(im, n).map(|_| ()),
        "SCALE" => scale(im, n),
        "UNARY:SILU" | "UNARY:SIGMOID" | "UNARY:SOFTPLUS" | "UNARY:EXP" => {
            let act = match row.as_str() {
                "UNARY:SILU" => Act::Silu,
                "UNARY:SIGMOID" => Act::Sigmoid,
                "UNARY:SOFTPLUS" => Act::Softplus,
                _ => Act::Exp,
            };
            elementwise_unary(im, n, &[OpKind::Act(act)])
        }
        "GLU:SWIGLU" => {
            if n.op_params.get(1).copied().unwrap_or(0) != 0 || n.src.len() < 2 {
                return Err("a swapped or one-operand SWIGLU, which the importer does not read".into());
            }
            let (a, b) = (operand(im, n, 0)?, operand(im, n, 1)?);
            let g = im.emit(OpKind::Act(Act::Silu), &[a])?;
            let y = im.emit(OpKind::Mul, &[g, b])?;
            result(im, n, y)
        }
        "SSM_CONV" => {
            let (x, w) = (im.src(n, 0)?, im.src(n, 1)?);
            let [k, c, _, _] = sizes(w)?;
            if x.ne[0] != w.ne[0] || x.ne[2] != 1 {
                return Err(format!("a window {:?} for a kernel {:?}: one token, one sequence is read", x.ne, w.ne));
            }
            let xe = im.read(x)?;
            let xt = im.materialise(&xe, &[c, k])?;
            let we = im.read(w)?;
            let wt = im.materialise(&we, &[c, k])?;
            let y = im.emit(OpKind::DepthwiseConv, &[xt, wt])?;
            result(im, n, y)
        }
        "ROPE" => rope(im, n),
        "GATED_DELTA_NET" => delta_rule(im, n),
        "SOFT_MAX" => attention::softmax(im, n),
        "FLASH_ATTN_EXT" => attention::flash(im, n),
        other => Err(format!("{other}, which no row of the importer reads here")),
    }
}

/// The IR shape of ggml sizes: `ne` reversed, without the sizes of one before the first other.
pub(super) fn rows(t: &Tensor) -> Result<Vec<usize>, String> {
    let ne = sizes(t)?;
    let mut dims: Vec<usize> = ne.iter().rev().copied().skip_while(|&d| d == 1).collect();
    if dims.is_empty() {
        dims.push(1);
    }
    Ok(dims)
}

/// Source `i` of `n` as an IR tensor of its own IR shape.
fn operand(im: &mut Importer<'_>, n: &Tensor, i: usize) -> Result<TensorId, String> {
    let s = im.src(n, i)?;
    if im.pending.contains_key(&s.id) {
        return Err(format!("source {i} is an RMS norm or attention the importer holds pending, read by no row here"));
    }
    let e = im.read(s)?;
    let shape = rows(s)?;
    im.materialise(&e, &shape)
}

/// Gives `n` the values of IR tensor `y`, in order.
pub(super) fn result(im: &mut Importer<'_>, n: &Tensor, y: TensorId) -> Result<(), String> {
    let count = im.builder.ty(y).numel().ok_or("a result that is not an array")?;
    let want = n.numel().and_then(|c| usize::try_from(c).ok());
    if want != Some(count) {
        return Err(format!("{count} values for a node of {:?}", n.ne));
    }
    im.fresh(n, (0..count).map(|i| Elem::Ir(y, i)).collect())
}

/// `MUL_MAT`: a weight times one column, or the attention's two products.
fn mul_mat(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let (a, b) = (im.src(n, 0)?, im.src(n, 1)?);
    if let Some(done) = attention::mul_mat(im, n, a, b)? {
        return Ok(done);
    }
    let is_weight = a.op == "NONE" && !a.input && a.view_src.is_none();
    if !is_weight || b.ne[1] != 1 || b.ne[2] != 1 || b.ne[3] != 1 || a.ne[2] != 1 || a.ne[3] != 1 {
        return Err(format!("a product of {:?} by {:?} that is not a weight times one column", a.ne, b.ne));
    }
    let w = im.weight(a)?;
    let act = activation_type(&a.ty)?;
    if let Some(act) = act {
        im.numerics.push(format!("act={act} ({} `{}`: {} weights)", n.id, n.name, a.ty));
    }
    let xe = im.read(b)?;
    let x = im.materialise(&xe, &[xe.len()])?;
    let y = im.emit(OpKind::MatVec, &[w, x])?;
    if let Some(act) = act {
        im.rounds(1, act);
    }
    result(im, n, y)
}

/// The type llama.cpp's CPU backend rounds a matrix product's column to before the dot products
/// with weights of type `ty` (the `vec_dot_type` of `ggml-cpu.c`'s type traits), when it is not
/// f32: the product then runs at that rounding, which the IR's values do not carry.
fn activation_type(ty: &str) -> Result<Option<&'static str>, String> {
    Ok(match ty {
        "f32" => None,
        "f16" => Some("f16"),
        "bf16" => Some("bf16"),
        "q8_0" | "q4_0" => Some("q8_0"),
        "q4_K" | "q5_K" | "q6_K" => Some("q8_K"),
        other => return Err(format!("weights of type {other}, whose product's rounding the importer does not know")),
    })
}

/// `MUL`, `ADD`, `SUB`, with `b` repeated to `a`'s sizes; a `MUL` of a pending RMS norm by its
/// weight is the IR's `rms_norm`.
fn elementwise(im: &mut Importer<'_>, n: &Tensor, row: &str) -> Result<(), String> {
    let (a, b) = (im.src(n, 0)?, im.src(n, 1)?);
    if let Some(Pending::RmsNorm { x, eps, n: width }) = im.pending.get(&a.id).cloned() {
        if row != "MUL" {
            return Err(format!("a {row} of an RMS norm, which the importer does not read"));
        }
        let we = im.read(b)?;
        if we.len() != width || b.ne[0] as usize != width {
            return Err(format!("an RMS norm over rows of {width} times {:?}", b.ne));
        }
        let w = im.materialise(&we, &[width])?;
        let y = im.emit(OpKind::RmsNorm { eps: f64::from(eps) }, &[x, w])?;
        return result(im, n, y);
    }
    let ea = im.read(a)?;
    let eb = im.read(b)?;
    let (na, nb) = (sizes(a)?, sizes(b)?);
    let repeated: Vec<Elem> = index_space(&na)
        .map(|i| {
            let j = [i[0] % nb[0], i[1] % nb[1], i[2] % nb[2], i[3] % nb[3]];
            eb[super::flat(&j, &nb)]
        })
        .collect();
    let shape = rows(a)?;
    let xa = im.materialise(&ea, &shape)?;
    let xb = im.materialise(&repeated, &shape)?;
    let y = match row {
        "MUL" => im.emit(OpKind::Mul, &[xa, xb])?,
        "ADD" => im.emit(OpKind::Add, &[xa, xb])?,
        _ => {
            let neg = im.emit(OpKind::Scale { factor: -1.0 }, &[xb])?;
            im.emit(OpKind::Add, &[xa, neg])?
        }
    };
    result(im, n, y)
}

/// `SCALE(x, s, b)`: `s · x + b`; of a pending RMS norm, an L2 norm.
fn scale(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let s = f64::from(n.param_f32(0).ok_or("no scale")?);
    let b = f64::from(n.param_f32(1).unwrap_or(0.0));
    let x = im.src(n, 0)?;
    if let Some(Pending::RmsNorm { x: xt, eps, n: width }) = im.pending.get(&x.id).cloned() {
        if b != 0.0 {
            return Err("an offset after an RMS norm, which the importer does not read".into());
        }
        // rms_norm(x)·s = x·rsqrt(Σx²/n + ε)·s = l2_norm(x, n·ε)·(s·√n).
        let w = width as f64;
        let mut y = im.emit(OpKind::L2Norm { eps: f64::from(eps) * w }, &[xt])?;
        let factor = s * w.sqrt();
        if factor != 1.0 {
            y = im.emit(OpKind::Scale { factor }, &[y])?;
        }
        return result(im, n, y);
    }
    let mut ops = vec![OpKind::Scale { factor: s }];
    if b != 0.0 {
        ops.push(OpKind::Offset { value: b });
    }
    elementwise_unary(im, n, &ops)
}

/// The elementwise ops `ops`, in turn, on source 0 of `n`. When its elements do not materialise as
/// one IR tensor but are all values of one (a tensor's heads repeated in turn, as `REPEAT` tiles
/// them), the ops are written on that tensor and the result keeps the arrangement: an elementwise
/// op commutes with any arrangement of its operand's values.
fn elementwise_unary(im: &mut Importer<'_>, n: &Tensor, ops: &[OpKind]) -> Result<(), String> {
    let x = im.src(n, 0)?;
    if im.pending.contains_key(&x.id) {
        return Err("an elementwise op on a value the importer holds pending, read by no row here".into());
    }
    let e = im.read(x)?;
    let shape = rows(x)?;
    let apply = |im: &mut Importer<'_>, mut t: TensorId| -> Result<TensorId, String> {
        for op in ops {
            t = im.emit(op.clone(), &[t])?;
        }
        Ok(t)
    };
    match im.materialise(&e, &shape) {
        Ok(t) => {
            let y = apply(im, t)?;
            result(im, n, y)
        }
        Err(why) => {
            let Some(Elem::Ir(t, _)) = e.first().copied() else { return Err(why) };
            let mut idx = Vec::with_capacity(e.len());
            for v in &e {
                match *v {
                    Elem::Ir(u, i) if u == t => idx.push(i),
                    _ => return Err(why),
                }
            }
            let y = apply(im, t)?;
            im.fresh(n, idx.into_iter().map(|i| Elem::Ir(y, i)).collect())
        }
    }
}

/// ggml's rope modes (`ggml.h`).
const ROPE_NEOX: i32 = 2;
const ROPE_IMROPE: i32 = 40;

/// `ROPE`: the rotary embedding at the step's position, read from its op params; the positions
/// input must hold the position in every section it reads (and `0` in IMRoPE's fourth).
fn rope(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let (x, pos) = (im.src(n, 0)?, im.src(n, 1)?);
    let p = |i: usize| n.op_params.get(i).copied().unwrap_or(0);
    let f = |i: usize| n.param_f32(i).unwrap_or(f32::NAN);
    let (n_dims, mode) = (usize::try_from(p(1)).map_err(|_| "n_dims below zero")?, p(2));
    let (base, freq_scale, ext_factor, attn_factor) = (f(5), f(6), f(7), f(8));
    if freq_scale != 1.0 || ext_factor != 0.0 || attn_factor != 1.0 {
        return Err(format!(
            "freq_scale {freq_scale}, ext_factor {ext_factor}, attn_factor {attn_factor}: a scaled rope the step does not have"
        ));
    }
    if n.src.len() > 2 && n.src[2].is_some() {
        return Err("rope frequency factors, which the step does not have".into());
    }
    let [hd, heads, tokens, _] = sizes(x)?;
    if tokens != 1 || n_dims > hd || n_dims % 2 != 0 {
        return Err(format!("{n_dims} rotated dims of heads of {hd}, {tokens} tokens"));
    }
    let at = position(im, pos)?;
    match mode {
        ROPE_NEOX => {}
        ROPE_IMROPE => {
            // Pair `i` of the rotated dims turns by section `i mod 3` (t, h, w) while `i` is within
            // three times that section's size, and by the fourth (e) otherwise
            // (`ggml_mrope_cache_init`).
            let sections = [p(11), p(12), p(13), p(14)];
            let values = im.input_values(pos)?;
            let values = values.as_slice();
            for i in 0..n_dims / 2 {
                let s = i % 3;
                let section = if (i as i64) < 3 * i64::from(sections[s]) { s } else { 3 };
                let v = values.get(section * tokens).copied().ok_or("a position section not recorded")?;
                if v != at as f64 {
                    return Err(format!(
                        "rotated pair {i} turns by position section {section}, which holds {v} at position {at}: the step turns every pair by the position (sections {sections:?})"
                    ));
                }
            }
        }
        other => return Err(format!("rope mode {other}, which the importer does not read")),
    }
    let xe = im.read(x)?;
    let xt = im.materialise(&xe, &[heads, hd])?;
    let pos_t = im.pos;
    let y =
        im.emit(OpKind::Rope { theta: f64::from(base), rotary_dims: n_dims, style: RopeStyle::Neox }, &[xt, pos_t])?;
    result(im, n, y)
}

/// The position the recorded step ran at, checked against a positions input's first section.
pub(super) fn position(im: &Importer<'_>, pos: &Tensor) -> Result<u64, String> {
    let at = im.rec.position;
    let first = im.input_values(pos)?.first().copied().ok_or("no position recorded")?;
    if first != at as f64 {
        return Err(format!("{} holds {first}, the recorded step ran at position {at}", pos.name));
    }
    Ok(at)
}

/// `GATED_DELTA_NET` for one token and one state: per value head `h` (key head `h mod H_k`), the
/// state `S [S_k, S_v]` (stored per head with `k` fastest) decays by `e^g`, takes
/// `k ⊗ β(v − Sᵀk)`, and the output is `Sᵀq / √S_v`; its result holds the outputs `[S_v, H]`
/// and then the new state in the old one's layout.
fn delta_rule(im: &mut Importer<'_>, n: &Tensor) -> Result<(), String> {
    let srcs: Vec<&Tensor> = (0..6).map(|i| im.src(n, i)).collect::<Result<_, _>>()?;
    let [q, k, v, g, beta, state] = srcs.as_slice() else { return Err("not six operands".into()) };
    if n.op_params.first().copied() != Some(1) {
        return Err("more than one state kept, which a decode step does not".into());
    }
    let [sv, h, tokens, seqs] = sizes(v)?;
    let [sk, hk, _, _] = sizes(q)?;
    if tokens != 1 || seqs != 1 || g.ne[0] != 1 || sk != sv || k.ne != q.ne || hk == 0 || h % hk != 0 {
        return Err(format!("q {:?}, v {:?}, g {:?}: the importer reads one token of one sequence", q.ne, v.ne, g.ne));
    }
    let qe = im.read(q)?;
    let qt = im.materialise(&qe, &[hk, sk])?;
    let ke = im.read(k)?;
    let kt = im.materialise(&ke, &[hk, sk])?;
    let ve = im.read(v)?;
    let vt = im.materialise(&ve, &[h, sv])?;
    let ge = im.read(g)?;
    let gt = im.materialise(&ge, &[h])?;
    let be = im.read(beta)?;
    let bt = im.materialise(&be, &[h])?;
    // ggml's state element (k, v, head) is the IR state's (head, k, v).
    let se = im.read(state)?;
    let mut list = Vec::with_capacity(se.len());
    for head in 0..h {
        for kk in 0..sk {
            for vv in 0..sv {
                list.push(se[head * sk * sv + vv * sk + kk]);
            }
        }
    }
    let st = im.materialise(&list, &[h, sk, sv])?;
    let (s_next, o) = im.emit2(OpKind::DeltaRule { head_map: HeadMap::Tiled }, &[st, qt, kt, vt, gt, bt])?;
    let scale = f64::from(1.0f32 / (sv as f32).sqrt());
    let o = im.emit(OpKind::Scale { factor: scale }, &[o])?;
    let mut out = Vec::with_capacity(h * sv + h * sk * sv);
    out.extend((0..h * sv).map(|i| Elem::Ir(o, i)));
    for head in 0..h {
        for vv in 0..sv {
            for kk in 0..sk {
                out.push(Elem::Ir(s_next, head * sk * sv + kk * sv + vv));
            }
        }
    }
    im.fresh(n, out)
}
