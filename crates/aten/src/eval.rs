//! `evaluate`: an exported graph run node by node in f64, each node by its row's meaning as ATen
//! defines it, on strided tensors that share storage as torch's views do.
//!
//! It is the executable form of the rows' meanings, held to transformers' own rollout by the tests:
//! the importer that translates the nodes into the IR is then judged against it node by node. It is
//! a semantics of its own: it shares no code with the project's interpreters. Views (`view`,
//! `transpose`, `select`, `slice`, `expand`, `unsqueeze`, `squeeze`, `alias`, `split_with_sizes`,
//! `chunk`) alias their source's storage, and `copy_` writes through them, as in torch; every other
//! op writes a new contiguous tensor. A rounding to f32 (`to.dtype`, `type_as` to f32) rounds; the
//! arithmetic is f64, so the evaluation differs from torch's f32 by its roundings only.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::graph::{Arg, Exported, Node, Output, SymInt};

/// A tensor: a view of a shared storage by sizes, strides and an offset.
#[derive(Clone, Debug)]
pub struct Tensor {
    storage: Rc<RefCell<Vec<f64>>>,
    pub sizes: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// torch's `ScalarType` number of f32.
const F32: i64 = 7;
/// torch's `ScalarType` number of bool.
const BOOL: i64 = 12;

impl Tensor {
    /// A contiguous tensor of `sizes` holding `values` row-major.
    pub fn new(sizes: Vec<usize>, values: Vec<f64>) -> Tensor {
        let strides = contiguous(&sizes);
        Tensor { storage: Rc::new(RefCell::new(values)), sizes, strides, offset: 0 }
    }

    fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// The storage index of each element, row-major.
    fn indices(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.numel());
        let mut at = vec![0usize; self.sizes.len()];
        for _ in 0..self.numel() {
            out.push(self.offset + at.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<usize>());
            for d in (0..at.len()).rev() {
                at[d] += 1;
                if at[d] < self.sizes[d] {
                    break;
                }
                at[d] = 0;
            }
        }
        out
    }

    /// The values, row-major.
    pub fn values(&self) -> Vec<f64> {
        let s = self.storage.borrow();
        self.indices().into_iter().map(|i| s[i]).collect()
    }

    fn view(&self, sizes: Vec<usize>, strides: Vec<usize>, offset: usize) -> Tensor {
        Tensor { storage: Rc::clone(&self.storage), sizes, strides, offset }
    }

    /// `self` broadcast to `sizes` (stride 0 on the new and the size-1 dims).
    fn broadcast_to(&self, sizes: &[usize]) -> Result<Tensor, String> {
        let lead = sizes.len().checked_sub(self.sizes.len()).ok_or("broadcast to fewer dims")?;
        let mut strides = vec![0; lead];
        for (i, (&have, &st)) in self.sizes.iter().zip(&self.strides).enumerate() {
            let want = sizes[lead + i];
            strides.push(match (have == want, have) {
                (true, _) => st,
                (false, 1) => 0,
                _ => return Err(format!("{:?} does not broadcast to {sizes:?}", self.sizes)),
            });
        }
        Ok(self.view(sizes.to_vec(), strides, self.offset))
    }
}

/// The strides under which `sizes` views the same elements as `old_sizes` under `old_strides`,
/// when there are some (torch's rule: each run of new dims splits or merges a run of old dims
/// that are contiguous among themselves).
fn view_strides(old_sizes: &[usize], old_strides: &[usize], sizes: &[usize]) -> Option<Vec<usize>> {
    if old_sizes.iter().product::<usize>() != sizes.iter().product::<usize>() {
        return None;
    }
    if old_sizes.is_empty() || sizes.iter().product::<usize>() == 0 {
        return Some(contiguous(sizes));
    }
    let mut strides = vec![0; sizes.len()];
    let mut view_d = sizes.len() as isize - 1;
    let mut base = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..old_sizes.len()).rev() {
        tensor_numel *= old_sizes[d];
        let run_ends = d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * base);
        if run_ends {
            while view_d >= 0 && (view_numel < tensor_numel || sizes[view_d as usize] == 1) {
                strides[view_d as usize] = view_numel * base;
                view_numel *= sizes[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                base = old_strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(strides)
}

fn contiguous(sizes: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * sizes[d + 1];
    }
    strides
}

/// A value of the graph: a tensor or a symbolic int.
#[derive(Clone, Debug)]
enum Value {
    Tensor(Tensor),
    Int(i64),
}

/// Runs `exported` on `inputs` (every graph input by name) and returns its outputs, in order. The
/// graph must keep its shape rules (`ops::check_shapes`) and each input have its declared rank and
/// every declared size that is a number: what the evaluation then reads lies inside what it
/// computed.
pub fn evaluate(exported: &Exported, inputs: BTreeMap<String, Tensor>) -> Result<Vec<Tensor>, String> {
    super::ops::check_shapes(exported).map_err(|e| e.to_string())?;
    let mut env: BTreeMap<String, Value> = inputs.into_iter().map(|(k, v)| (k, Value::Tensor(v))).collect();
    for input in &exported.inputs {
        let Some(Value::Tensor(t)) = env.get(&input.name) else {
            return Err(format!("no value for input {}", input.name));
        };
        let declared = &exported.tensors.get(&input.name).ok_or(format!("input {} has no metadata", input.name))?.sizes;
        let fits = declared.len() == t.sizes.len()
            && declared.iter().zip(&t.sizes).all(|(d, &s)| d.known().is_none_or(|k| k == s as i64));
        if !fits {
            return Err(format!(
                "input {} is {:?}, declared [{}]",
                input.name,
                t.sizes,
                declared.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for n in &exported.nodes {
        let at = |why: String| format!("node {} ({}, traced at {}): {why}", n.name, n.target, n.source);
        let out = run(exported, n, &env).map_err(at)?;
        match (out, n.outputs.as_slice()) {
            (Written::Nothing, _) => {}
            (Written::Int(v), [Output::SymInt(name)]) => {
                env.insert(name.clone(), Value::Int(v));
            }
            (Written::Tensors(ts), _) => {
                let names = n.output_tensors();
                if names.len() != ts.len() {
                    return Err(at(format!("{} outputs, {} computed", names.len(), ts.len())));
                }
                for (name, t) in names.into_iter().zip(ts) {
                    env.insert(name.to_string(), Value::Tensor(t));
                }
            }
            (_, outputs) => return Err(at(format!("outputs {outputs:?} for what it computed"))),
        }
    }
    exported
        .outputs
        .iter()
        .map(|o| match env.get(o) {
            Some(Value::Tensor(t)) => Ok(t.clone()),
            _ => Err(format!("output {o} was not computed")),
        })
        .collect()
}

enum Written {
    Tensors(Vec<Tensor>),
    Int(i64),
    Nothing,
}

fn one(t: Tensor) -> Result<Written, String> {
    Ok(Written::Tensors(vec![t]))
}

fn tensor<'e>(n: &Node, env: &'e BTreeMap<String, Value>, arg: &str) -> Result<&'e Tensor, String> {
    match n.arg(arg) {
        Some(Arg::Tensor(name)) => match env.get(name) {
            Some(Value::Tensor(t)) => Ok(t),
            _ => Err(format!("{name} is not a computed tensor")),
        },
        other => Err(format!("argument `{arg}` is {other:?}")),
    }
}

fn int(n: &Node, env: &BTreeMap<String, Value>, arg: &str) -> Result<i64, String> {
    match n.arg(arg) {
        Some(Arg::Int(v)) | Some(Arg::SymInt(SymInt::Int(v))) => Ok(*v),
        Some(Arg::SymInt(SymInt::Name(s))) => match env.get(s) {
            Some(Value::Int(v)) => Ok(*v),
            _ => Err(format!("{s} is not a computed int")),
        },
        other => Err(format!("argument `{arg}` is {other:?}, not an int")),
    }
}

fn int_or(n: &Node, env: &BTreeMap<String, Value>, arg: &str, default: i64) -> Result<i64, String> {
    match n.arg(arg) {
        None | Some(Arg::None) => Ok(default),
        _ => int(n, env, arg),
    }
}

fn ints(n: &Node, env: &BTreeMap<String, Value>, arg: &str) -> Result<Vec<i64>, String> {
    match n.arg(arg) {
        Some(Arg::Ints(v)) => Ok(v.clone()),
        Some(Arg::SymInts(v)) => v
            .iter()
            .map(|s| match s {
                SymInt::Int(x) => Ok(*x),
                SymInt::Name(name) => match env.get(name) {
                    Some(Value::Int(x)) => Ok(*x),
                    _ => Err(format!("{name} is not a computed int")),
                },
            })
            .collect(),
        other => Err(format!("argument `{arg}` is {other:?}, not a list of ints")),
    }
}

/// A scalar argument: a number, or a symbolic int.
fn scalar(n: &Node, env: &BTreeMap<String, Value>, arg: &str) -> Result<Option<f64>, String> {
    Ok(match n.arg(arg) {
        Some(Arg::Float(x)) => Some(*x),
        Some(Arg::Int(_)) | Some(Arg::SymInt(_)) => Some(int(n, env, arg)? as f64),
        Some(Arg::Bool(b)) => Some(f64::from(u8::from(*b))),
        _ => None,
    })
}

fn dim(d: i64, rank: usize) -> Result<usize, String> {
    let at = if d < 0 { d + rank as i64 } else { d };
    if (0..rank as i64).contains(&at) { Ok(at as usize) } else { Err(format!("dim {d} of {rank}")) }
}

/// `f` applied to every element of `t`, a new contiguous tensor.
fn map(t: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    Tensor::new(t.sizes.clone(), t.values().into_iter().map(f).collect())
}

fn broadcast_sizes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(format!("{a:?} and {b:?} do not broadcast")),
        })
        .collect()
}

/// `f(a, b)` elementwise, broadcast.
fn zip(a: &Tensor, b: &Tensor, f: impl Fn(f64, f64) -> f64) -> Result<Tensor, String> {
    let sizes = broadcast_sizes(&a.sizes, &b.sizes)?;
    let (x, y) = (a.broadcast_to(&sizes)?.values(), b.broadcast_to(&sizes)?.values());
    Ok(Tensor::new(sizes, x.into_iter().zip(y).map(|(p, q)| f(p, q)).collect()))
}

/// `x` rounded to f32.
fn f32_round(x: f64) -> f64 {
    f64::from(x as f32)
}

/// `x` as dtype `dtype` holds it.
fn as_dtype(x: f64, dtype: i64) -> Result<f64, String> {
    match dtype {
        F32 => Ok(f32_round(x)),
        BOOL => Ok(f64::from(u8::from(x != 0.0))),
        // The integer dtypes: the values a decode step puts there are integers already.
        0..=5 if x.fract() == 0.0 => Ok(x),
        6 | 15 => Err(format!("dtype {dtype} (a half type): no rounding to it is read")),
        _ => Err(format!("dtype {dtype} of a non-integer {x}")),
    }
}

/// `self` reduced over `dims` by `f` of the reduced values.
fn reduce(n: &Node, env: &BTreeMap<String, Value>, f: fn(&[f64]) -> f64) -> Result<Written, String> {
    let t = tensor(n, env, "self")?;
    let dims: Vec<usize> = ints(n, env, "dim")?.into_iter().map(|d| dim(d, t.sizes.len())).collect::<Result<_, _>>()?;
    let keep = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    // The reduced dims moved last: each output element reduces a contiguous run.
    let kept: Vec<usize> = (0..t.sizes.len()).filter(|d| !dims.contains(d)).collect();
    let order: Vec<usize> = kept.iter().chain(&dims).copied().collect();
    let moved =
        t.view(order.iter().map(|&d| t.sizes[d]).collect(), order.iter().map(|&d| t.strides[d]).collect(), t.offset);
    let run: usize = dims.iter().map(|&d| t.sizes[d]).product();
    let values: Vec<f64> = moved.values().chunks(run.max(1)).map(f).collect();
    let sizes = (0..t.sizes.len())
        .filter_map(|d| match (dims.contains(&d), keep) {
            (false, _) => Some(t.sizes[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    one(Tensor::new(sizes, values))
}

/// `a · b` for `a [.., n, k]` and `b [.., k, m]`, batch dims broadcast.
fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let (ra, rb) = (a.sizes.len(), b.sizes.len());
    if ra < 2 || rb < 2 || a.sizes[ra - 1] != b.sizes[rb - 2] {
        return Err(format!("{:?} × {:?}", a.sizes, b.sizes));
    }
    let (rows, inner, cols) = (a.sizes[ra - 2], a.sizes[ra - 1], b.sizes[rb - 1]);
    let batch = broadcast_sizes(&a.sizes[..ra - 2], &b.sizes[..rb - 2])?;
    let with = |s: &[usize], last: [usize; 2]| [s, &last].concat();
    let (x, y) = (
        a.broadcast_to(&with(&batch, [rows, inner]))?.values(),
        b.broadcast_to(&with(&batch, [inner, cols]))?.values(),
    );
    let count: usize = batch.iter().product();
    let mut out = vec![0.0; count * rows * cols];
    for bt in 0..count {
        for i in 0..rows {
            for j in 0..cols {
                out[(bt * rows + i) * cols + j] =
                    (0..inner).map(|k| x[(bt * rows + i) * inner + k] * y[(bt * inner + k) * cols + j]).sum();
            }
        }
    }
    Ok(Tensor::new(with(&batch, [rows, cols]), out))
}

/// The node's meaning: what it writes, computed.
fn run(exported: &Exported, n: &Node, env: &BTreeMap<String, Value>) -> Result<Written, String> {
    let t = |arg: &str| tensor(n, env, arg);
    let target = n.target.strip_prefix("torch.ops.aten.").unwrap_or(&n.target);
    match target {
        "sym_size.int" => {
            let s = t("self")?;
            Ok(Written::Int(s.sizes[dim(int(n, env, "dim")?, s.sizes.len())?] as i64))
        }
        "_operator.add" => Ok(Written::Int(int(n, env, "a")? + int(n, env, "b")?)),
        "_assert_tensor_metadata.default" => Ok(Written::Nothing),
        "clone.default" => one(Tensor::new(t("self")?.sizes.clone(), t("self")?.values())),
        "alias.default" => one(t("self")?.clone()),
        "dropout.default" => {
            let off = matches!(n.arg("train"), Some(Arg::Bool(false))) || scalar(n, env, "p")? == Some(0.0);
            if off { one(t("input")?.clone()) } else { Err("dropout while training, p above 0".into()) }
        }
        "to.dtype" | "to.device" => {
            let dtype = match n.arg("dtype") {
                Some(Arg::ScalarType(d)) => *d,
                _ => return one(t("self")?.clone()),
            };
            let v = t("self")?.values().into_iter().map(|x| as_dtype(x, dtype)).collect::<Result<_, _>>()?;
            one(Tensor::new(t("self")?.sizes.clone(), v))
        }
        "type_as.default" => {
            let dtype = match n.arg("other") {
                Some(Arg::Tensor(o)) => exported.tensors.get(o).map(|m| m.dtype).ok_or("`other` has no metadata")?,
                _ => return Err("`other` is not a tensor".into()),
            };
            let v = t("self")?.values().into_iter().map(|x| as_dtype(x, dtype)).collect::<Result<_, _>>()?;
            one(Tensor::new(t("self")?.sizes.clone(), v))
        }
        "rsqrt.default" => one(map(t("self")?, |x| 1.0 / x.sqrt())),
        "exp.default" => one(map(t("self")?, f64::exp)),
        "neg.default" => one(map(t("self")?, |x| -x)),
        "silu.default" => one(map(t("self")?, |x| x / (1.0 + (-x).exp()))),
        "sigmoid.default" => one(map(t("self")?, |x| 1.0 / (1.0 + (-x).exp()))),
        "softplus.default" => one(map(t("self")?, |x| if x > 20.0 { x } else { x.exp().ln_1p() })),
        "cos.default" => one(map(t("self")?, f64::cos)),
        "sin.default" => one(map(t("self")?, f64::sin)),
        "pow.Tensor_Scalar" => {
            let e = scalar(n, env, "exponent")?.ok_or("no exponent")?;
            one(map(t("self")?, |x| if e == 2.0 { x * x } else { x.powf(e) }))
        }
        "zeros_like.default" => one(Tensor::new(t("self")?.sizes.clone(), vec![0.0; t("self")?.numel()])),
        "mul.Tensor" | "add.Tensor" | "sub.Tensor" | "div.Tensor" | "le.Tensor" => {
            let a = t("self")?;
            let alpha = scalar(n, env, "alpha")?.unwrap_or(1.0);
            let f: fn(f64, f64, f64) -> f64 = match target {
                "mul.Tensor" => |x, y, _| x * y,
                "add.Tensor" => |x, y, al| x + al * y,
                "sub.Tensor" => |x, y, al| x - al * y,
                "div.Tensor" => |x, y, _| x / y,
                _ => |x, y, _| f64::from(u8::from(x <= y)),
            };
            match (n.arg("other"), scalar(n, env, "other")?) {
                (Some(Arg::Tensor(_)), _) => one(zip(a, t("other")?, |x, y| f(x, y, alpha))?),
                (_, Some(y)) => one(map(a, |x| f(x, y, alpha))),
                _ => Err("no `other`".into()),
            }
        }
        "where.ScalarOther" => {
            let other = scalar(n, env, "other")?.ok_or("no `other`")?;
            one(zip(t("condition")?, t("self")?, |c, x| if c != 0.0 { x } else { other })?)
        }
        "copy_.default" => {
            let (to, from) = (t("self")?, t("src")?);
            let values = from.broadcast_to(&to.sizes)?.values();
            let indices = to.indices();
            let mut s = to.storage.borrow_mut();
            for (i, v) in indices.into_iter().zip(values) {
                s[i] = v;
            }
            drop(s);
            one(to.clone())
        }
        "embedding.default" => {
            let (w, ids) = (t("weight")?, t("indices")?);
            let [rows, h] = w.sizes[..] else { return Err("weight is not [V, H]".into()) };
            let table = w.values();
            let mut out = vec![];
            for id in ids.values() {
                let r = id as usize;
                if id < 0.0 || r >= rows {
                    return Err(format!("token {id} outside {rows} rows"));
                }
                out.extend_from_slice(&table[r * h..(r + 1) * h]);
            }
            one(Tensor::new([ids.sizes.clone(), vec![h]].concat(), out))
        }
        "linear.default" => {
            let (x, w) = (t("input")?, t("weight")?);
            let wt = w.view(vec![w.sizes[1], w.sizes[0]], vec![w.strides[1], w.strides[0]], w.offset);
            let y = matmul_last(x, &wt)?;
            match n.arg("bias") {
                Some(Arg::Tensor(_)) => one(zip(&y, t("bias")?, |a, b| a + b)?),
                _ => one(y),
            }
        }
        "matmul.default" => one(matmul(t("self")?, t("other")?)?),
        "unsqueeze.default" => {
            let s = t("self")?;
            let d = dim(int(n, env, "dim")?, s.sizes.len() + 1)?;
            let (mut sizes, mut strides) = (s.sizes.clone(), s.strides.clone());
            let st = if d < strides.len() { strides[d] * sizes[d] } else { 1 };
            sizes.insert(d, 1);
            strides.insert(d, st);
            one(s.view(sizes, strides, s.offset))
        }
        "squeeze.dim" => {
            let s = t("self")?;
            let d = dim(int(n, env, "dim")?, s.sizes.len())?;
            let (mut sizes, mut strides) = (s.sizes.clone(), s.strides.clone());
            if sizes[d] == 1 {
                sizes.remove(d);
                strides.remove(d);
            }
            one(s.view(sizes, strides, s.offset))
        }
        "transpose.int" => {
            let s = t("self")?;
            let (a, b) = (dim(int(n, env, "dim0")?, s.sizes.len())?, dim(int(n, env, "dim1")?, s.sizes.len())?);
            let (mut sizes, mut strides) = (s.sizes.clone(), s.strides.clone());
            sizes.swap(a, b);
            strides.swap(a, b);
            one(s.view(sizes, strides, s.offset))
        }
        "expand.default" => {
            let s = t("self")?;
            let want = ints(n, env, "size")?;
            let lead = want.len() - s.sizes.len();
            let sizes: Vec<usize> =
                want.iter().enumerate().map(|(i, &w)| if w == -1 { s.sizes[i - lead] } else { w as usize }).collect();
            one(s.broadcast_to(&sizes)?)
        }
        "reshape.default" | "view.default" => {
            let s = t("self")?;
            let mut shape = ints(n, env, if target == "view.default" { "size" } else { "shape" })?;
            let known: i64 = shape.iter().filter(|&&x| x != -1).product();
            for x in shape.iter_mut().filter(|x| **x == -1) {
                *x = s.numel() as i64 / known.max(1);
            }
            let sizes: Vec<usize> = shape.iter().map(|&x| x as usize).collect();
            match view_strides(&s.sizes, &s.strides, &sizes) {
                Some(strides) => one(s.view(sizes, strides, s.offset)),
                None if target == "view.default" => Err(format!("no view of {:?} as {sizes:?}", s.sizes)),
                None => one(Tensor::new(sizes, s.values())),
            }
        }
        "select.int" => {
            let s = t("self")?;
            let d = dim(int(n, env, "dim")?, s.sizes.len())?;
            let i = int(n, env, "index")?;
            let i = if i < 0 { i + s.sizes[d] as i64 } else { i } as usize;
            let (mut sizes, mut strides) = (s.sizes.clone(), s.strides.clone());
            let offset = s.offset + i * strides[d];
            sizes.remove(d);
            strides.remove(d);
            one(s.view(sizes, strides, offset))
        }
        "slice.Tensor" => {
            let s = t("self")?;
            let d = dim(int_or(n, env, "dim", 0)?, s.sizes.len())?;
            let size = s.sizes[d] as i64;
            let bound = |b: i64| if b < 0 { (b + size).max(0) } else { b.min(size) };
            let (from, to, step) = (
                bound(int_or(n, env, "start", 0)?),
                bound(int_or(n, env, "end", i64::MAX)?),
                int_or(n, env, "step", 1)?,
            );
            let len = if to > from { ((to - from - 1) / step + 1) as usize } else { 0 };
            let (mut sizes, mut strides) = (s.sizes.clone(), s.strides.clone());
            let offset = s.offset + from as usize * strides[d];
            sizes[d] = len;
            strides[d] *= step as usize;
            one(s.view(sizes, strides, offset))
        }
        "cat.default" => {
            let Some(Arg::Tensors(names)) = n.arg("tensors") else { return Err("no tensors".into()) };
            let parts: Vec<&Tensor> = names
                .iter()
                .map(|nm| match env.get(nm) {
                    Some(Value::Tensor(t)) => Ok(t),
                    _ => Err(format!("{nm} not computed")),
                })
                .collect::<Result<_, _>>()?;
            let d = dim(int_or(n, env, "dim", 0)?, parts[0].sizes.len())?;
            let outer: usize = parts[0].sizes[..d].iter().product();
            let mut sizes = parts[0].sizes.clone();
            sizes[d] = parts.iter().map(|p| p.sizes[d]).sum();
            let values: Vec<Vec<f64>> = parts.iter().map(|p| p.values()).collect();
            let mut out = vec![];
            for o in 0..outer {
                for (p, v) in parts.iter().zip(&values) {
                    let run = p.numel() / outer.max(1);
                    out.extend_from_slice(&v[o * run..(o + 1) * run]);
                }
            }
            one(Tensor::new(sizes, out))
        }
        "split_with_sizes.default" | "chunk.default" => {
            let s = t("self")?;
            let d = dim(int_or(n, env, "dim", 0)?, s.sizes.len())?;
            let pieces: Vec<usize> = if target == "chunk.default" {
                let c = int(n, env, "chunks")? as usize;
                let piece = s.sizes[d].div_ceil(c);
                (0..c).map(|i| s.sizes[d].saturating_sub(i * piece).min(piece)).filter(|&p| p > 0).collect()
            } else {
                ints(n, env, "split_sizes")?.into_iter().map(|x| x as usize).collect()
            };
            let mut at = 0;
            let mut out = vec![];
            for p in pieces {
                let mut sizes = s.sizes.clone();
                sizes[d] = p;
                out.push(s.view(sizes, s.strides.clone(), s.offset + at * s.strides[d]));
                at += p;
            }
            Ok(Written::Tensors(out))
        }
        "repeat_interleave.self_int" => {
            let s = t("self")?;
            let d = dim(int(n, env, "dim")?, s.sizes.len())?;
            let r = int(n, env, "repeats")? as usize;
            let mut sizes = s.sizes.clone();
            sizes.insert(d + 1, r);
            let mut strides = s.strides.clone();
            strides.insert(d + 1, 0);
            let spread = s.view(sizes, strides, s.offset);
            let mut out = s.sizes.clone();
            out[d] *= r;
            one(Tensor::new(out, spread.values()))
        }
        "mean.dim" => reduce(n, env, |v| v.iter().sum::<f64>() / v.len() as f64),
        "sum.dim_IntList" => reduce(n, env, |v| v.iter().sum()),
        "softmax.int" => {
            let s = t("self")?;
            let d = dim(int(n, env, "dim")?, s.sizes.len())?;
            if d + 1 != s.sizes.len() {
                return Err("softmax over a dim that is not the last".into());
            }
            let v = s.values();
            let out: Vec<f64> = v
                .chunks(s.sizes[d].max(1))
                .flat_map(|row| {
                    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = row.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    e.into_iter().map(move |x| x / z)
                })
                .collect();
            one(Tensor::new(s.sizes.clone(), out))
        }
        "arange.default" => {
            let end = int(n, env, "end")?;
            one(Tensor::new(vec![end.max(0) as usize], (0..end.max(0)).map(|i| i as f64).collect()))
        }
        "zeros.default" => {
            let sizes: Vec<usize> = ints(n, env, "size")?.into_iter().map(|x| x as usize).collect();
            let count = sizes.iter().product();
            one(Tensor::new(sizes, vec![0.0; count]))
        }
        "conv1d.default" => {
            let (x, w) = (t("input")?, t("weight")?);
            let groups = int(n, env, "groups")? as usize;
            let pad = ints(n, env, "padding")?[0] as usize;
            let [batch, channels, len] = x.sizes[..] else { return Err("input is not [N, C, L]".into()) };
            let [outs, per_group, taps] = w.sizes[..] else { return Err("weight is not [O, C/g, K]".into()) };
            if ints(n, env, "stride")? != [1] || ints(n, env, "dilation")? != [1] || channels != per_group * groups {
                return Err("only stride 1, dilation 1 and matching groups are read".into());
            }
            let (xv, wv) = (x.values(), w.values());
            let bias = match n.arg("bias") {
                Some(Arg::Tensor(_)) => Some(t("bias")?.values()),
                _ => None,
            };
            let out_len = len + 2 * pad + 1 - taps;
            let outs_per_group = outs / groups;
            let mut out = vec![0.0; batch * outs * out_len];
            for b in 0..batch {
                for o in 0..outs {
                    let g = o / outs_per_group;
                    for p in 0..out_len {
                        let mut acc = bias.as_ref().map_or(0.0, |bv| bv[o]);
                        for c in 0..per_group {
                            for k in 0..taps {
                                let at = (p + k) as i64 - pad as i64;
                                if (0..len as i64).contains(&at) {
                                    let ch = g * per_group + c;
                                    acc += wv[(o * per_group + c) * taps + k]
                                        * xv[(b * channels + ch) * len + at as usize];
                                }
                            }
                        }
                        out[(b * outs + o) * out_len + p] = acc;
                    }
                }
            }
            one(Tensor::new(vec![batch, outs, out_len], out))
        }
        other => Err(format!("no meaning for {other}")),
    }
}

/// `x [.., k] · w [k, m]` over `x`'s last dim.
fn matmul_last(x: &Tensor, w: &Tensor) -> Result<Tensor, String> {
    let k = *x.sizes.last().ok_or("a scalar input")?;
    let rows = x.numel() / k.max(1);
    let flat = Tensor::new(vec![rows, k], x.values());
    let y = matmul(&flat, w)?;
    let mut sizes = x.sizes.clone();
    *sizes.last_mut().ok_or("a scalar input")? = w.sizes[1];
    Ok(Tensor::new(sizes, y.values()))
}
