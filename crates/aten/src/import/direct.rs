//! The ATen ops that are one IR op each: elementwise arithmetic and activations, `softmax`,
//! `linear` and `embedding`, on operands materialised as IR tensors; and the same elementwise ops
//! on numbers and position expressions, computed exactly ([`super::elem`]).
//!
//! | ATen | IR |
//! |---|---|
//! | `mul(a, b)`, `add(a, b)` (α 1), neither operand repeated by broadcasting | `mul`, `add` |
//! | `sub(a, b)` | `add(a, scale(−1, b))` |
//! | `mul`, `add`, `sub`, `div` with a number `c` | `scale(c)`, `offset(c)`, `offset(−c)`, `scale(1/c)` |
//! | `neg` | `scale(−1)` |
//! | `exp`, `sigmoid`, `silu`, `softplus` (β 1, threshold 20), `tanh`, `relu` | the activation |
//! | `softmax` along the last dim | `softmax` |
//! | `linear(x, W)` (no bias) | `matvec(W, x)` |
//! | `embedding(W, input_ids)` | `embed(W, token)` |
//!
//! `scale(1/c)` holds the f64 nearest `1/c`, exact when `c` is a power of two. `softplus` with
//! threshold 20 is `x` above 20, where `log(1 + eˣ)` differs from `x` by less than 2.1e-9: the IR's
//! softplus is the mathematical one, and the difference is below f32's resolution of the value.
//! Every other row is the op's definition.

use ir::{Act, OpKind};

use super::elem::{self, Elem};
use super::strided::Strided;
use super::{Importer, Val};
use crate::graph::{Arg, Node};

/// The sizes with every dim of 1 dropped (one dim of 1 when all are): the IR shape of an ATen tensor.
pub fn squeezed(sizes: &[usize]) -> Vec<usize> {
    let s: Vec<usize> = sizes.iter().copied().filter(|&d| d != 1).collect();
    if s.is_empty() { vec![1] } else { s }
}

/// An operand: the elements of a tensor, or a number.
enum Operand {
    Elems(Strided<Elem>),
    Number(f64),
}

/// The node's values when it is one IR op on IR values, or computed on numbers and positions;
/// `None` when the IR holds nothing of it.
pub fn read(im: &mut Importer<'_>, n: &Node) -> Result<Option<Vec<Val>>, String> {
    let short = n.target.strip_prefix("torch.ops.aten.").unwrap_or(&n.target);
    let Some(out) = n.output_tensors().first().map(|s| s.to_string()) else { return Ok(None) };
    let Ok(sizes) = im.known(&out) else { return Ok(None) };
    let operand = |arg: &str| -> Option<Operand> {
        match n.arg(arg)? {
            Arg::Tensor(t) => match im.env.get(t)? {
                Val::Elems(e) => Some(Operand::Elems(e.clone())),
                Val::Whole { .. } => im.elems(t).ok().map(Operand::Elems),
                _ => None,
            },
            Arg::Float(f) => Some(Operand::Number(*f)),
            Arg::Int(i) => Some(Operand::Number(*i as f64)),
            _ => None,
        }
    };
    let act = |a: Act| Some(OpKind::Act(a));
    let unary = match short {
        "neg.default" => Some(OpKind::Scale { factor: -1.0 }),
        "exp.default" => act(Act::Exp),
        "sigmoid.default" => act(Act::Sigmoid),
        "silu.default" => act(Act::Silu),
        "tanh.default" => act(Act::Tanh),
        "relu.default" => act(Act::Relu),
        "softplus.default" => {
            let default = |name: &str, want: f64| match n.arg(name) {
                None => true,
                Some(Arg::Float(f)) => *f == want,
                Some(Arg::Int(i)) => *i as f64 == want,
                _ => false,
            };
            if !(default("beta", 1.0) && default("threshold", 20.0)) {
                return Err("a softplus with β or threshold other than 1 and 20".into());
            }
            act(Act::Softplus)
        }
        "softmax.int" => {
            let Some(Operand::Elems(x)) = operand("self") else { return Ok(None) };
            let last = x.sizes.len() as i64 - 1;
            if !matches!(n.arg("dim"), Some(Arg::Int(d)) if *d == -1 || *d == last) {
                return Ok(None);
            }
            Some(OpKind::Softmax)
        }
        _ => None,
    };
    if let Some(kind) = unary {
        let Some(Operand::Elems(x)) = operand("self").or_else(|| operand("input")) else { return Ok(None) };
        return on_values(im, kind, &[x], &sizes);
    }
    match short {
        "cos.default" | "sin.default" => {
            let Some(Operand::Elems(x)) = operand("self") else { return Ok(None) };
            let values: Option<Vec<Elem>> = x.values().into_iter().map(|e| elem::unary(&n.target, e)).collect();
            Ok(values.map(|v| vec![Val::Elems(Strided::new(sizes, v))]))
        }
        "mul.Tensor" | "add.Tensor" | "sub.Tensor" | "div.Tensor" => {
            if !matches!(n.arg("alpha"), None | Some(Arg::Int(1))) {
                return Err("an `alpha` other than 1".into());
            }
            let (Some(a), Some(b)) = (operand("self"), operand("other")) else { return Ok(None) };
            binary(im, short, a, b, &sizes)
        }
        "linear.default" => {
            if !matches!(n.arg("bias"), None | Some(Arg::None)) {
                return Ok(None);
            }
            let (Some(Operand::Elems(x)), Some(Arg::Tensor(w))) = (operand("input"), n.arg("weight")) else {
                return Ok(None);
            };
            let Some((wt, [o, i])) = matrix(im, w)? else { return Ok(None) };
            if x.numel() != i || sizes.iter().product::<usize>() != o {
                return Ok(None);
            }
            let xt = im.materialise(&x, &[i])?;
            let y = im.emit(OpKind::MatVec, &[wt, xt])?;
            Ok(Some(vec![ir_val(y, sizes)]))
        }
        "embedding.default" => {
            let (Some(Arg::Tensor(w)), Some(Arg::Tensor(ids))) = (n.arg("weight"), n.arg("indices")) else {
                return Ok(None);
            };
            if !matches!(im.env.get(ids), Some(Val::Token)) {
                return Ok(None);
            }
            let Some((wt, _)) = matrix(im, w)? else { return Ok(None) };
            let token = im.builder.token();
            let y = im.emit(OpKind::Embed, &[wt, token])?;
            Ok(Some(vec![ir_val(y, sizes)]))
        }
        _ => Ok(None),
    }
}

/// Tensor `name` as an IR matrix and its sizes: a parameter whole, or elements materialised.
fn matrix(im: &mut Importer<'_>, name: &str) -> Result<Option<(ir::TensorId, [usize; 2])>, String> {
    match im.env.get(name).cloned() {
        Some(Val::Whole { t, sizes }) => match sizes[..] {
            [o, i] => Ok(Some((im.reshaped(t, &[o, i])?, [o, i]))),
            _ => Err(format!("a weight of sizes {sizes:?}, not a matrix")),
        },
        Some(Val::Elems(e)) => match e.sizes[..] {
            [o, i] => Ok(Some((im.materialise(&e, &[o, i])?, [o, i]))),
            _ => Err(format!("a weight of sizes {:?}, not a matrix", e.sizes)),
        },
        _ => Ok(None),
    }
}

/// A binary elementwise op.
fn binary(
    im: &mut Importer<'_>,
    short: &str,
    a: Operand,
    b: Operand,
    sizes: &[usize],
) -> Result<Option<Vec<Val>>, String> {
    match (a, b) {
        (Operand::Elems(x), Operand::Number(c)) => {
            let kind = match short {
                "mul.Tensor" => OpKind::Scale { factor: c },
                "add.Tensor" => OpKind::Offset { value: c },
                "sub.Tensor" => OpKind::Offset { value: -c },
                "div.Tensor" if c != 0.0 => OpKind::Scale { factor: 1.0 / c },
                _ => return Ok(None),
            };
            if short == "mul.Tensor" && !holds_ir(&x) {
                return symbolic(&[x, Strided::new(vec![], vec![Elem::Num(c)])], sizes);
            }
            on_values(im, kind, &[x], sizes)
        }
        (Operand::Elems(x), Operand::Elems(y)) => {
            let repeats = |t: &Strided<Elem>| squeezed(&t.sizes) != squeezed(sizes);
            if (repeats(&x) || repeats(&y)) && (holds_ir(&x) || holds_ir(&y)) {
                // A product that repeats values of an operand (`S · e^g[..., None, None]`) is one
                // step of a composite the rows read whole; alone, the IR has no op for it.
                return Ok(None);
            }
            let (x, y) = (x.broadcast_to(sizes)?, y.broadcast_to(sizes)?);
            if short == "mul.Tensor" && !holds_ir(&x) && !holds_ir(&y) {
                return symbolic(&[x, y], sizes);
            }
            let shape = squeezed(sizes);
            let (xt, yt) = match (im.materialise(&x, &shape), im.materialise(&y, &shape)) {
                (Ok(xt), Ok(yt)) => (xt, yt),
                (Err(why), _) | (_, Err(why)) => return Ok(im.unread_because(why)),
            };
            let out = match short {
                "mul.Tensor" => im.emit(OpKind::Mul, &[xt, yt])?,
                "add.Tensor" => im.emit(OpKind::Add, &[xt, yt])?,
                "sub.Tensor" => {
                    let negated = im.emit(OpKind::Scale { factor: -1.0 }, &[yt])?;
                    im.emit(OpKind::Add, &[xt, negated])?
                }
                _ => return Ok(None),
            };
            Ok(Some(vec![ir_val(out, sizes.to_vec())]))
        }
        _ => Ok(None),
    }
}

/// Whether any element of `t` is an IR value (a made storage seen whole is one without a look).
fn holds_ir(t: &Strided<Elem>) -> bool {
    t.made_whole().is_some() || t.any(|e| matches!(e, Elem::Ir(..)))
}

/// The elementwise product of numbers and position expressions, when exact.
fn symbolic(operands: &[Strided<Elem>], sizes: &[usize]) -> Result<Option<Vec<Val>>, String> {
    let (x, y) = (operands[0].broadcast_to(sizes)?, operands[1].broadcast_to(sizes)?);
    let values: Option<Vec<Elem>> = x.values().into_iter().zip(y.values()).map(|(a, b)| elem::product(a, b)).collect();
    Ok(values.map(|v| vec![Val::Elems(Strided::new(sizes.to_vec(), v))]))
}

/// A one-operand op on IR values; `None` when the operand is not IR values.
fn on_values(
    im: &mut Importer<'_>,
    kind: OpKind,
    x: &[Strided<Elem>],
    sizes: &[usize],
) -> Result<Option<Vec<Val>>, String> {
    let shape = squeezed(sizes);
    let xt = match im.materialise(&x[0], &shape) {
        Ok(t) => t,
        Err(why) => return Ok(im.unread_because(why)),
    };
    let y = im.emit(kind, &[xt])?;
    Ok(Some(vec![ir_val(y, sizes.to_vec())]))
}

/// The values of IR tensor `t` laid out as ATen `sizes`.
pub fn ir_val(t: ir::TensorId, sizes: Vec<usize>) -> Val {
    Val::Elems(super::ir_elems(t, sizes))
}
