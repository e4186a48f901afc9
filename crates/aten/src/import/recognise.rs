//! The composite rows: ATen computations the IR states as one op, each matched from the node that
//! completes it.
//!
//! A row walks back from its root node through the graph's nodes (not their values), checking the
//! target, every argument and every size on the way; the identities `to` (f32), `type_as`,
//! `alias`, `clone` and `dropout` (p 0, not training) are passed through, and `unsqueeze` where
//! sizes alone fix the meaning (a broadcast is fixed by the sizes of its operands). Only when every
//! node matches are the operands materialised and the op written; a node that matches no row is
//! left to the next rule. Every row is exercised by the committed exports, whose imported graphs
//! give transformers' own logits and states (`tests/import.rs`): a row that misread its op (NeoX
//! pairs read as interleaved, planted) fails there at the first step.

use ir::{HeadMap, OpKind, RopeStyle, TensorId};

use super::direct::{ir_val, squeezed};
use super::elem::{Elem, PosExpr};
use super::{Importer, Val};
use crate::graph::{Arg, Node, SymInt};

/// A row's reader: the values of the node it completes, `None` when the node does not complete it.
pub type Reader = fn(&mut Importer<'_>, &Node) -> Result<Option<Vec<Val>>, String>;

/// A composite row: the target of the node that completes it, what it means, and its reader.
pub struct Row {
    pub name: &'static str,
    pub root: &'static str,
    pub meaning: &'static str,
    pub read: Reader,
}

/// The name of the first tensor `n` writes (empty when it writes none).
fn out(n: &Node) -> &str {
    n.output_tensors().first().copied().unwrap_or("")
}

/// The target of a product, as [`Importer::is`] names targets.
const MUL: &str = "mul.Tensor";

/// The rows, tried in order at a node whose target is their root.
pub const ROWS: &[Row] = &[
    Row {
        name: "rms_norm",
        root: "torch.ops.aten.mul.Tensor",
        meaning: "`(x · rsqrt(mean(x², −1) + ε)) · w` (or `x·x` for `x²`, either order of each product) is `rms_norm(ε)(x, w)`",
        read: rms_norm,
    },
    Row {
        name: "l2_norm",
        root: "torch.ops.aten.mul.Tensor",
        meaning: "`x · rsqrt(Σ(x·x, −1) + ε)` is `l2_norm(ε)(x)`",
        read: l2_norm,
    },
    Row {
        name: "rope",
        root: "torch.ops.aten.add.Tensor",
        meaning: "`x·cos + cat(−x[h:], x[:h])·sin`, `cos` and `sin` of `p·f_j` at dims `j` and `j + h`, is `rope_freqs(f, 1, neox)(x, p)`",
        read: rope,
    },
    Row {
        name: "kv_append",
        root: "torch.ops.aten.cat.default",
        meaning: "`cat([cache, x], −2)` of a cache `[1, h, past, d]` and `x [1, h, 1, d]` is `kv_append(cache, x)`",
        read: kv_append,
    },
    Row {
        name: "attention",
        root: "torch.ops.aten.matmul.default",
        meaning: "`softmax(q · repeat(K)ᵀ · s + causal mask) · repeat(V)`, the caches' heads repeated in turn (`repeat_kv`), the mask hiding no position of a one-token step, is `attention(s, grouped)(q, K, V)`",
        read: attention,
    },
    Row {
        name: "depthwise_conv",
        root: "torch.ops.aten.slice.Tensor",
        meaning: "the last output column of `conv1d(X, w)` with one group per channel, stride 1, no padding, no bias, is `depthwise_conv(X[:, L−K:], w)`",
        read: depthwise_conv,
    },
    Row {
        name: "delta_rule",
        root: "torch.ops.aten.sum.dim_IntList",
        meaning: "transformers' one-token gated delta rule (`S ← S·e^g; δ = (v − Σ_k S·k)·β; S ← S + k ⊗ δ; o = Σ_k S·q`) is `delta_rule(grouped)(S, q, k, v, g, β)`; its state is the value `S + k ⊗ δ` takes",
        read: delta_rule,
    },
];

/// `(self, other)` and `(other, self)` of a binary node.
fn orders(n: &Node) -> Option<[(String, String); 2]> {
    let (Some(Arg::Tensor(a)), Some(Arg::Tensor(b))) = (n.arg("self"), n.arg("other")) else { return None };
    Some([(a.clone(), b.clone()), (b.clone(), a.clone())])
}

fn tensor_arg(n: &Node, name: &str) -> Option<String> {
    match n.arg(name)? {
        Arg::Tensor(t) => Some(t.clone()),
        _ => None,
    }
}

fn float_arg(n: &Node, name: &str) -> Option<f64> {
    match n.arg(name)? {
        Arg::Float(f) => Some(*f),
        Arg::Int(i) => Some(*i as f64),
        _ => None,
    }
}

fn ints_arg(n: &Node, name: &str) -> Option<Vec<i64>> {
    match n.arg(name)? {
        Arg::Ints(v) => Some(v.clone()),
        Arg::Int(i) => Some(vec![*i]),
        _ => None,
    }
}

fn full(short: &str) -> String {
    format!("torch.ops.aten.{short}")
}

impl<'a> Importer<'a> {
    /// The node that writes tensor `t`.
    fn def(&self, t: &str) -> Option<&'a Node> {
        self.producer.get(t).map(|&i| &self.ex.nodes[i])
    }

    /// `t` with the value-preserving identities before it passed through.
    fn through(&self, t: &str) -> String {
        let mut t = t.to_string();
        while let Some(n) = self.def(&t) {
            let short = n.target.strip_prefix("torch.ops.aten.").unwrap_or(&n.target);
            let identity = match short {
                "to.dtype" => matches!(n.arg("dtype"), Some(Arg::ScalarType(7))),
                "to.device" | "type_as.default" | "alias.default" | "clone.default" => true,
                "dropout.default" => float_arg(n, "p") == Some(0.0) && matches!(n.arg("train"), Some(Arg::Bool(false))),
                _ => false,
            };
            let Some(next) =
                n.args.first().and_then(|(_, a)| if let Arg::Tensor(s) = a { Some(s.clone()) } else { None })
            else {
                break;
            };
            if !identity {
                break;
            }
            t = next;
        }
        t
    }

    /// `t` with identities and `unsqueeze`s before it passed through.
    fn unsqueezed(&self, t: &str) -> String {
        let mut t = self.through(t);
        while let Some(n) = self.def(&t).filter(|n| n.target == full("unsqueeze.default")) {
            match tensor_arg(n, "self") {
                Some(s) => t = self.through(&s),
                None => break,
            }
        }
        t
    }

    /// The node writing `t` (identities passed) when its target is `short`.
    fn is(&self, t: &str, short: &str) -> Option<&'a Node> {
        self.def(&self.through(t)).filter(|n| n.target == full(short))
    }

    /// The known sizes of `t`, or `None`.
    fn sizes(&self, t: &str) -> Option<Vec<usize>> {
        self.known(t).ok()
    }

    /// Whether `a` and `b` are one tensor, identities passed.
    fn same(&self, a: &str, b: &str) -> bool {
        self.through(a) == self.through(b)
    }

    /// The `x` of `x · rsqrt(reduce(x², −1, keepdim) + ε)` at `n` (a `mul`), with ε, when the
    /// reduction is `reduce` (`mean.dim` for RMS, `sum.dim_IntList` for L2).
    fn normalised(&self, n: &Node, reduce: &str) -> Option<(String, f64)> {
        for (x, r) in orders(n)? {
            let Some(rs) = self.is(&r, "rsqrt.default") else { continue };
            let add = self.is(&tensor_arg(rs, "self")?, "add.Tensor")?;
            let eps = float_arg(add, "other")?;
            if !matches!(add.arg("alpha"), None | Some(Arg::Int(1))) {
                continue;
            }
            let red = self.is(&tensor_arg(add, "self")?, reduce)?;
            let rank = self.sizes(&x)?.len() as i64;
            let dims = ints_arg(red, "dim")?;
            let keep = matches!(red.arg("keepdim"), Some(Arg::Bool(true)));
            if !(keep && (dims == [-1] || dims == [rank - 1])) {
                continue;
            }
            let sq_name = tensor_arg(red, "self")?;
            let squares = if let Some(p) = self.is(&sq_name, "pow.Tensor_Scalar") {
                float_arg(p, "exponent") == Some(2.0) && self.same(&tensor_arg(p, "self")?, &x)
            } else if let Some(m) = self.is(&sq_name, "mul.Tensor") {
                let (a, b) = (tensor_arg(m, "self")?, tensor_arg(m, "other")?);
                self.same(&a, &x) && self.same(&b, &x)
            } else {
                false
            };
            if squares {
                return Some((x, eps));
            }
        }
        None
    }
}

fn rms_norm(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let Some(pairs) = orders(n) else { return Ok(None) };
    for (w, y) in pairs {
        let Some(inner) = im.is(&y, "mul.Tensor") else { continue };
        let Some((x, eps)) = im.normalised(inner, "mean.dim") else { continue };
        let (Some(xs), Some(ws), Some(out)) = (im.sizes(&x), im.sizes(&w), im.sizes(out(n))) else {
            continue;
        };
        let width = *xs.last().unwrap_or(&0);
        if ws.iter().product::<usize>() != width || ws.last() != Some(&width) || out != xs {
            continue;
        }
        let (xe, we) = (im.elems(&x)?, im.elems(&w)?);
        let xt = im.materialise(&xe, &squeezed(&xs))?;
        let wt = im.materialise(&we, &[width])?;
        let y = im.emit(OpKind::RmsNorm { eps }, &[xt, wt])?;
        return Ok(Some(vec![ir_val(y, out)]));
    }
    Ok(None)
}

fn l2_norm(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let Some((x, eps)) = im.normalised(n, "sum.dim_IntList") else { return Ok(None) };
    let Some(xs) = im.sizes(&x) else { return Ok(None) };
    let xt = im.materialise(&im.elems(&x)?, &squeezed(&xs))?;
    let y = im.emit(OpKind::L2Norm { eps }, &[xt])?;
    Ok(Some(vec![ir_val(y, xs)]))
}

fn rope(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let Some(pairs) = orders(n) else { return Ok(None) };
    for (straight, turned) in pairs {
        let (Some(m1), Some(m2)) = (im.is(&straight, "mul.Tensor"), im.is(&turned, "mul.Tensor")) else { continue };
        let (Some(p1), Some(p2)) = (orders(m1), orders(m2)) else { continue };
        for (x, cos) in p1.clone() {
            for (rot, sin) in p2.clone() {
                if let Some(found) = rope_parts(im, &x, &cos, &rot, &sin) {
                    let (xs, freqs) = found;
                    let r = *xs.last().unwrap_or(&0);
                    if r == 0 {
                        continue;
                    }
                    let xt = im.materialise(&im.elems(&x)?, &[xs.iter().product::<usize>() / r, r])?;
                    let pos = im.pos;
                    let kind = OpKind::RopeFreqs { inv_freq: freqs, scale: 1.0, style: RopeStyle::Neox };
                    let y = im.emit(kind, &[xt, pos])?;
                    return Ok(Some(vec![ir_val(y, xs)]));
                }
            }
        }
    }
    Ok(None)
}

/// The sizes of `x` and the frequencies, when `x·cos + rot·sin` is NeoX RoPE of `x`.
fn rope_parts(im: &Importer<'_>, x: &str, cos: &str, rot: &str, sin: &str) -> Option<(Vec<usize>, Vec<f64>)> {
    let xs = im.sizes(x)?;
    let r = *xs.last()?;
    let h = r / 2;
    if r == 0 || r % 2 != 0 || im.sizes(rot)? != xs {
        return None;
    }
    let cat = im.is(rot, "cat.default")?;
    let Some(Arg::Tensors(parts)) = cat.arg("tensors") else { return None };
    let [neg, lo] = parts.as_slice() else { return None };
    if !matches!(cat.arg("dim"), Some(Arg::Int(d)) if *d == -1 || *d == xs.len() as i64 - 1) {
        return None;
    }
    let hi = tensor_arg(im.is(neg, "neg.default")?, "self")?;
    let half = |t: &str, start: i64| -> Option<()> {
        let s = im.is(t, "slice.Tensor")?;
        let last = xs.len() as i64 - 1;
        let dim_ok = matches!(s.arg("dim"), Some(Arg::Int(d)) if *d == -1 || *d == last);
        let end = match s.arg("end") {
            Some(Arg::Int(e)) => *e,
            _ => return None,
        };
        let start_ok = matches!(s.arg("start"), Some(Arg::Int(b)) if *b == start);
        let end_ok = if start == 0 { end == h as i64 } else { end >= r as i64 };
        let step_ok = matches!(s.arg("step"), None | Some(Arg::Int(1)));
        (dim_ok && start_ok && end_ok && step_ok && im.same(&tensor_arg(s, "self")?, x)).then_some(())
    };
    half(&hi, h as i64)?;
    half(lo, 0)?;
    let angles = |t: &str, want: fn(PosExpr) -> Option<f64>| -> Option<Vec<f64>> {
        let Some(Val::Elems(e)) = im.env.get(t) else { return None };
        let values = e.broadcast_to(&xs).ok()?.values();
        let mut freqs = vec![f64::NAN; h];
        for (i, v) in values.iter().enumerate() {
            let Elem::Pos(p) = v else { return None };
            let f = want(*p)?;
            let j = (i % r) % h;
            if freqs[j].is_nan() {
                freqs[j] = f;
            } else if freqs[j].to_bits() != f.to_bits() {
                return None;
            }
        }
        Some(freqs)
    };
    let c = angles(cos, |p| if let PosExpr::Cos(f) = p { Some(f) } else { None })?;
    let s = angles(sin, |p| if let PosExpr::Sin(f) = p { Some(f) } else { None })?;
    (c.iter().zip(&s).all(|(a, b)| a.to_bits() == b.to_bits())).then_some((xs, c))
}

fn kv_append(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let Some(Arg::Tensors(ts)) = n.arg("tensors") else { return Ok(None) };
    let [cache, new] = ts.as_slice() else { return Ok(None) };
    let Some(Val::Cache(c)) = im.env.get(cache).cloned() else { return Ok(None) };
    if !matches!(n.arg("dim"), Some(Arg::Int(-2) | Arg::Int(2))) {
        return Ok(None);
    }
    let ns = im.sizes(new).ok_or("a new row of unknown sizes")?;
    let ir::Ty::Cache { heads, dim } = im.builder.ty(c).clone() else { return Ok(None) };
    if ns != [1, heads, 1, dim] {
        return Err(format!("a cache of {heads} heads of {dim} appended a row of sizes {ns:?}"));
    }
    let x = im.materialise(&im.elems(new)?, &[heads, dim])?;
    let y = im.emit(OpKind::KvAppend, &[c, x])?;
    Ok(Some(vec![Val::Cache(y)]))
}

impl Importer<'_> {
    /// The cache `t` reads and how many times each of its heads is repeated in turn.
    fn repeated_cache(&self, t: &str) -> Option<(TensorId, usize)> {
        let t = self.through(t);
        if let Some(Val::Cache(c)) = self.env.get(&t) {
            return Some((*c, 1));
        }
        let reshape = self.is(&t, "reshape.default")?;
        let expand = self.is(&tensor_arg(reshape, "self")?, "expand.default")?;
        let unsq = self.is(&tensor_arg(expand, "self")?, "unsqueeze.default")?;
        if !matches!(unsq.arg("dim"), Some(Arg::Int(2))) {
            return None;
        }
        let Some(Val::Cache(c)) = self.env.get(&self.through(&tensor_arg(unsq, "self")?)) else { return None };
        let ir::Ty::Cache { heads, .. } = self.builder.ty(*c) else { return None };
        let sizes = |t: &str| self.ex.tensors.get(t).map(|m| m.sizes.clone());
        let (unsqueezed, merged, e) = (sizes(&tensor_arg(expand, "self")?)?, sizes(out(reshape))?, sizes(out(expand))?);
        let [_, kv, r, past, dim] = &e[..] else { return None };
        let [_, heads_out, past_out, dim_out] = &merged[..] else { return None };
        let (kv, r) = (kv.known()? as usize, r.known()? as usize);
        let regrouped = heads_out.known()? as usize == kv * r && past == past_out && dim == dim_out;
        (unsqueezed.len() == 5 && kv == *heads && regrouped).then_some((*c, r))
    }

    /// Whether `t` is transformers' causal mask of a one-token step: 0 at every key position
    /// `j ≤ past` for the one query at `past`, where the keys are the `past + 1` positions of the
    /// caches after the append.
    fn mask_hides_nothing(&self, t: &str) -> bool {
        let check = || -> Option<bool> {
            let w = self.is(t, "where.ScalarOther")?;
            let zero = tensor_arg(w, "self")?;
            let zero_ok = self.is(&zero, "zeros.default").is_some() && self.sizes(&zero)? == Vec::<usize>::new();
            let le = self.is(
                &self.through(&tensor_arg(self.is(&tensor_arg(w, "condition")?, "expand.default")?, "self")?),
                "le.Tensor",
            )?;
            let key = self.is(&self.unsqueezed(&tensor_arg(le, "self")?), "add.Tensor")?;
            let query = self.is(&self.unsqueezed(&tensor_arg(le, "other")?), "add.Tensor")?;
            let keys = self.is(&tensor_arg(key, "self")?, "arange.default")?;
            let one = self.is(&tensor_arg(query, "self")?, "arange.default")?;
            let sym = |n: &Node, arg: &str| -> Option<crate::size::Size> {
                match n.arg(arg)? {
                    Arg::Int(i) => Some(crate::size::Size::of(*i)),
                    Arg::SymInt(SymInt::Int(i)) => Some(crate::size::Size::of(*i)),
                    Arg::SymInt(SymInt::Name(s)) => self.ex.sym_ints.get(s).cloned(),
                    _ => None,
                }
            };
            let past = sym(query, "other")?;
            let key_ok = sym(key, "other")? == crate::size::Size::of(0)
                && sym(keys, "end")? == past.plus(&crate::size::Size::of(1))?
                && sym(one, "end")? == crate::size::Size::of(1);
            Some(zero_ok && key_ok && past.known().is_none())
        };
        check().unwrap_or(false)
    }
}

fn attention(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    // The parts, and the mask when the scores add one that is not the causal mask of a one-token
    // step: everything else matched, so that is named rather than left unread.
    let found = || -> Option<(String, f64, TensorId, TensorId, Option<String>)> {
        let (p, vr) = (tensor_arg(n, "self")?, tensor_arg(n, "other")?);
        let (vc, rv) = im.repeated_cache(&vr)?;
        let sm = im.is(&p, "softmax.int")?;
        if !matches!(sm.arg("dim"), Some(Arg::Int(-1) | Arg::Int(3))) {
            return None;
        }
        let scores = tensor_arg(sm, "self")?;
        let (scaled, bad_mask) = match im.is(&scores, "add.Tensor") {
            Some(add) => match orders(add)?.into_iter().find(|(_, m)| im.mask_hides_nothing(m)) {
                Some((s, _)) => (s, None),
                None => {
                    let (s, m) = orders(add)?.into_iter().find(|(s, _)| im.is(s, MUL).is_some())?;
                    (s, Some(m))
                }
            },
            None => (scores, None),
        };
        let mul = im.is(&scaled, MUL)?;
        let scale = float_arg(mul, "other")?;
        let mm = im.is(&tensor_arg(mul, "self")?, "matmul.default")?;
        let q = tensor_arg(mm, "self")?;
        let tr = im.is(&tensor_arg(mm, "other")?, "transpose.int")?;
        let dims = (float_arg(tr, "dim0")? as i64, float_arg(tr, "dim1")? as i64);
        if !matches!(dims, (2, 3) | (3, 2) | (-2, -1) | (-1, -2)) {
            return None;
        }
        let (kc, rk) = im.repeated_cache(&tensor_arg(tr, "self")?)?;
        (rk == rv).then_some((q, scale, kc, vc, bad_mask))
    };
    let Some((q, scale, kc, vc, bad_mask)) = found() else { return Ok(None) };
    if let Some(m) = bad_mask {
        let at = im
            .def(&im.through(&m))
            .map_or(m.clone(), |d| format!("{m} (node {}, {}, traced at {})", d.name, d.target, d.source));
        return Err(format!(
            "the attention's scores add {at}, which is not the causal mask of a one-token step (0 at each of the \
             `past + 1` cached positions): no row reads this attention"
        ));
    }
    let (Some(qs), Some(out)) = (im.sizes(&q), im.sizes(out(n))) else { return Ok(None) };
    let [1, heads, 1, d] = qs[..] else { return Ok(None) };
    let qt = im.materialise(&im.elems(&q)?, &[heads, d])?;
    let kind = OpKind::Attention { scale, window: None, head_map: HeadMap::Grouped };
    let y = im.emit(kind, &[qt, kc, vc])?;
    Ok(Some(vec![ir_val(y, out)]))
}

fn depthwise_conv(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let found = || -> Option<(String, String)> {
        let conv = im.is(&tensor_arg(n, "self")?, "conv1d.default")?;
        let last = matches!(n.arg("dim"), Some(Arg::Int(2) | Arg::Int(-1)))
            && matches!(n.arg("start"), Some(Arg::Int(-1)))
            && matches!(n.arg("end"), Some(Arg::Int(e)) if *e >= i64::from(i32::MAX))
            && matches!(n.arg("step"), None | Some(Arg::Int(1)));
        let (input, weight) = (tensor_arg(conv, "input")?, tensor_arg(conv, "weight")?);
        let channels = *im.sizes(&input)?.get(1)? as i64;
        let plain = matches!(conv.arg("bias"), None | Some(Arg::None))
            && ints_arg(conv, "stride")? == [1]
            && ints_arg(conv, "padding")? == [0]
            && ints_arg(conv, "dilation")? == [1]
            && matches!(conv.arg("groups"), Some(Arg::Int(g)) if *g == channels);
        (last && plain).then_some((input, weight))
    };
    let Some((input, weight)) = found() else { return Ok(None) };
    let (Some(is), Some(ws), Some(out)) = (im.sizes(&input), im.sizes(&weight), im.sizes(out(n))) else {
        return Ok(None);
    };
    let (&[1, c, l], &[wc, 1, k]) = (&is[..], &ws[..]) else { return Ok(None) };
    if wc != c || k > l || out != [1, c, 1] {
        return Ok(None);
    }
    let window = im.elems(&input)?.slice(2, l - k, l, 1);
    let xt = im.materialise(&window, &[c, k])?;
    let wt = im.materialise(&im.elems(&weight)?, &[c, k])?;
    let y = im.emit(OpKind::DepthwiseConv, &[xt, wt])?;
    Ok(Some(vec![ir_val(y, out)]))
}

/// The operands of transformers' one-token delta rule completed at `n` (`o = Σ_k S'·q`).
struct DeltaParts {
    state: String,
    q: String,
    k: String,
    v: String,
    g: String,
    beta: String,
    updated: String,
}

fn delta_parts(im: &Importer<'_>, n: &Node) -> Option<DeltaParts> {
    let sum_over_keys = |node: &Node| -> bool {
        matches!(ints_arg(node, "dim").as_deref(), Some([-2]))
            && matches!(node.arg("keepdim"), None | Some(Arg::Bool(false)))
    };
    if !sum_over_keys(n) {
        return None;
    }
    let out = im.sizes(out(n))?;
    let [1, hv, dv] = out[..] else { return None };
    let prod = im.is(&tensor_arg(n, "self")?, "mul.Tensor")?;
    let state_sized = |t: &str| im.sizes(t).is_some_and(|s| s.len() == 4 && s[0] == 1 && s[1] == hv && s[3] == dv);
    let (updated, qcol) = orders(prod)?.into_iter().find(|(s, _)| state_sized(s))?;
    let dk = im.sizes(&updated)?[2];
    let column = |t: &str| -> Option<String> {
        (im.sizes(t)? == [1, hv, dk, 1]).then_some(())?;
        let base = im.unsqueezed(t);
        (im.sizes(&base)? == [1, hv, dk]).then_some(base)
    };
    let q = column(&qcol)?;
    let add = im.is(&updated, "add.Tensor")?;
    for (decayed, outer) in orders(add)? {
        let Some(found) = (|| -> Option<DeltaParts> {
            let dec = im.is(&decayed, MUL)?;
            let (state, e) = orders(dec)?.into_iter().find(|(s, _)| state_sized(s))?;
            (im.sizes(&e)? == [1, hv, 1, 1]).then_some(())?;
            let exp = im.is(&im.unsqueezed(&e), "exp.default")?;
            let g = tensor_arg(exp, "self")?;
            (im.sizes(&g)? == [1, hv]).then_some(())?;
            let op = im.is(&outer, MUL)?;
            let (kcol, drow) = orders(op)?.into_iter().find(|(a, b)| {
                im.sizes(a).as_deref() == Some(&[1, hv, dk, 1][..])
                    && im.sizes(b).as_deref() == Some(&[1, hv, 1, dv][..])
            })?;
            let k = column(&kcol)?;
            let delta = im.is(&im.unsqueezed(&drow), MUL)?;
            let (diff, bcol) =
                orders(delta)?.into_iter().find(|(_, b)| im.sizes(b).as_deref() == Some(&[1, hv, 1][..]))?;
            let beta = im.unsqueezed(&bcol);
            (im.sizes(&beta)? == [1, hv]).then_some(())?;
            let sub = im.is(&diff, "sub.Tensor")?;
            if !matches!(sub.arg("alpha"), None | Some(Arg::Int(1))) {
                return None;
            }
            let (v, mem) = (tensor_arg(sub, "self")?, tensor_arg(sub, "other")?);
            (im.sizes(&v)? == [1, hv, dv]).then_some(())?;
            let recall = im.is(&mem, "sum.dim_IntList")?;
            if !sum_over_keys(recall) {
                return None;
            }
            let rp = im.is(&tensor_arg(recall, "self")?, MUL)?;
            let (_, kc) = orders(rp)?.into_iter().find(|(s, _)| im.same(s, &decayed))?;
            (column(&kc)? == k).then_some(())?;
            Some(DeltaParts { state, q: q.clone(), k, v, g, beta, updated: updated.clone() })
        })() else {
            continue;
        };
        return Some(found);
    }
    None
}

fn delta_rule(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let Some(p) = delta_parts(im, n) else { return Ok(None) };
    let (Some(ss), Some(qs), Some(vs)) = (im.sizes(&p.state), im.sizes(&p.q), im.sizes(&p.v)) else { return Ok(None) };
    let (&[1, hv, dk, dv], &[1, _, _], &[1, _, _]) = (&ss[..], &qs[..], &vs[..]) else { return Ok(None) };
    let st = im.materialise(&im.elems(&p.state)?, &[hv, dk, dv])?;
    let qt = im.materialise(&im.elems(&p.q)?, &[hv, dk])?;
    let kt = im.materialise(&im.elems(&p.k)?, &[hv, dk])?;
    let vt = im.materialise(&im.elems(&p.v)?, &[hv, dv])?;
    let gt = im.materialise(&im.elems(&p.g)?, &[hv])?;
    let bt = im.materialise(&im.elems(&p.beta)?, &[hv])?;
    let (state, o) = im.emit2(OpKind::DeltaRule { head_map: HeadMap::Grouped }, &[st, qt, kt, vt, gt, bt])?;
    im.env.insert(p.updated.clone(), ir_val(state, ss));
    Ok(Some(vec![ir_val(o, vec![1, hv, dv])]))
}
