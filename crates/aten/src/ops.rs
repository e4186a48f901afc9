//! The ATen operators the importer reads: one row per target, with its meaning and its shape rule.
//!
//! A row's meaning is ATen's (`native_functions.yaml` and the op's documentation), stated for the
//! importer that will turn the node into the IR's ops; its shape rule computes the sizes of what the
//! node writes from the sizes and arguments it reads, exactly, with symbolic sizes as linear forms
//! ([`Size`]). [`check_shapes`] runs every node's rule and compares it with the sizes the graph
//! declares: a node with no row, arguments the rule cannot read, or declared sizes the rule does not
//! give is an [`ImportError`] naming the node, its target and its source line.

use std::collections::BTreeMap;

use super::error::ImportError;
use super::graph::{Arg, Exported, Node, Output, SymInt};
use super::size::Size;

/// What a node writes, by its row's rule: the sizes of each tensor output, or a symbolic int.
#[derive(Clone, Debug, PartialEq)]
pub enum Writes {
    Tensors(Vec<Vec<Size>>),
    SymInt(Size),
    Nothing,
}

/// A shape rule: what `node` writes, given the sizes and symbolic ints already known.
type Rule = fn(&Node, &Known) -> Result<Writes, String>;

/// One operator the importer reads: its target, its meaning, its shape rule.
pub struct Row {
    pub target: &'static str,
    pub meaning: &'static str,
    rule: Rule,
}

/// The most pieces a `chunk` is read into.
const MAX_PIECES: i64 = 1 << 12;

/// The rows, one per target.
pub const ROWS: &[Row] = &[
    row("torch.ops.aten.sym_size.int", "the size of `self` along `dim`, a symbolic int", |n, k| {
        let s = k.tensor(n, "self")?;
        Ok(Writes::SymInt(s[dim(int(n, "dim")?, s.len())?].clone()))
    }),
    row("_operator.add", "`a + b` of two symbolic ints", |n, k| {
        Ok(Writes::SymInt(k.sym(n, "a")?.plus(&k.sym(n, "b")?).ok_or("the sum overflows")?))
    }),
    row(
        "torch.ops.aten._assert_tensor_metadata.default",
        "asserts `a`'s dtype and device; computes nothing",
        |_, _| Ok(Writes::Nothing),
    ),
    row("torch.ops.aten.clone.default", "a copy of `self`, contiguous", same_self),
    row("torch.ops.aten.alias.default", "`self`, the same storage", same_self),
    row("torch.ops.aten.dropout.default", "`input` (p 0.0, not training: the identity)", same_input),
    row("torch.ops.aten.to.dtype", "`self` rounded to `dtype` (none in an f32 export)", same_self),
    row("torch.ops.aten.to.device", "`self` on `device`, rounded to `dtype`", same_self),
    row("torch.ops.aten.type_as.default", "`self` rounded to `other`'s dtype", same_self),
    row("torch.ops.aten.rsqrt.default", "`1/√x` elementwise", same_self),
    row("torch.ops.aten.exp.default", "`eˣ` elementwise", same_self),
    row("torch.ops.aten.neg.default", "`−x` elementwise", same_self),
    row("torch.ops.aten.silu.default", "`x·σ(x)` elementwise", same_self),
    row("torch.ops.aten.sigmoid.default", "`σ(x) = 1/(1 + e⁻ˣ)` elementwise", same_self),
    row("torch.ops.aten.softplus.default", "`log(1 + eˣ)` elementwise (β 1, threshold 20: `x` above it)", same_self),
    row("torch.ops.aten.cos.default", "`cos x` elementwise", same_self),
    row("torch.ops.aten.sin.default", "`sin x` elementwise", same_self),
    row("torch.ops.aten.pow.Tensor_Scalar", "`xᵉ` elementwise, `exponent` a number", same_self),
    row("torch.ops.aten.softmax.int", "softmax of `self` along `dim`, in `dtype`", same_self),
    row("torch.ops.aten.zeros_like.default", "zeros of `self`'s sizes", same_self),
    row("torch.ops.aten.mul.Tensor", "`self · other`, broadcast (`other` a tensor or a number)", broadcast2),
    row("torch.ops.aten.add.Tensor", "`self + alpha·other`, broadcast (`other` a tensor or a number)", broadcast2),
    row("torch.ops.aten.sub.Tensor", "`self − alpha·other`, broadcast", broadcast2),
    row("torch.ops.aten.div.Tensor", "`self / other`, broadcast (true division)", broadcast2),
    row("torch.ops.aten.le.Tensor", "`self ≤ other`, broadcast, a bool tensor", broadcast2),
    row("torch.ops.aten.where.ScalarOther", "`condition ? self : other`, `other` a number, broadcast", |n, k| {
        Ok(Writes::Tensors(vec![broadcast(k.tensor(n, "condition")?, k.tensor(n, "self")?)?]))
    }),
    row("torch.ops.aten.copy_.default", "writes `src` (broadcast) into `self`, in place; returns `self`", |n, k| {
        let (to, from) = (k.tensor(n, "self")?, k.tensor(n, "src")?);
        if broadcast(to, from)? != to {
            return Err(format!("src {} does not broadcast to self {}", shape(from), shape(to)));
        }
        Ok(Writes::Tensors(vec![to.to_vec()]))
    }),
    row("torch.ops.aten.embedding.default", "row `indices[…]` of `weight [V, H]`", |n, k| {
        let (w, i) = (k.tensor(n, "weight")?, k.tensor(n, "indices")?);
        let [_, h] = w else { return Err(format!("weight {} is not [V, H]", shape(w))) };
        Ok(Writes::Tensors(vec![[i, std::slice::from_ref(h)].concat()]))
    }),
    row("torch.ops.aten.linear.default", "`input · weightᵀ (+ bias)` over `input`'s last dim", |n, k| {
        let (x, w) = (k.tensor(n, "input")?, k.tensor(n, "weight")?);
        let ([.., inner], [out, w_in]) = (x, w) else {
            return Err(format!("input {} and weight {} are not [.., in] and [out, in]", shape(x), shape(w)));
        };
        if inner != w_in {
            return Err(format!("input {} and weight {} disagree on `in`", shape(x), shape(w)));
        }
        Ok(Writes::Tensors(vec![[&x[..x.len() - 1], std::slice::from_ref(out)].concat()]))
    }),
    row("torch.ops.aten.matmul.default", "the matrix product, batch dims broadcast (≥ 2-D operands)", |n, k| {
        let (a, b) = (k.tensor(n, "self")?, k.tensor(n, "other")?);
        let ([a_batch @ .., rows, inner], [b_batch @ .., b_inner, cols]) = (a, b) else {
            return Err(format!("{} × {}: only operands of at least 2 dims are read", shape(a), shape(b)));
        };
        if inner != b_inner {
            return Err(format!("{} × {}: the inner dims differ", shape(a), shape(b)));
        }
        let mut out = broadcast(a_batch, b_batch)?;
        out.extend([rows.clone(), cols.clone()]);
        Ok(Writes::Tensors(vec![out]))
    }),
    row("torch.ops.aten.unsqueeze.default", "`self` with a dim of 1 inserted at `dim`", |n, k| {
        let mut s = k.tensor(n, "self")?.to_vec();
        let d = dim(int(n, "dim")?, s.len() + 1)?;
        s.insert(d, Size::of(1));
        Ok(Writes::Tensors(vec![s]))
    }),
    row("torch.ops.aten.squeeze.dim", "`self` without `dim` when its size is 1, else `self`", |n, k| {
        let mut s = k.tensor(n, "self")?.to_vec();
        let d = dim(int(n, "dim")?, s.len())?;
        if s[d] == Size::of(1) {
            s.remove(d);
        }
        Ok(Writes::Tensors(vec![s]))
    }),
    row("torch.ops.aten.transpose.int", "`self` with dims `dim0` and `dim1` swapped (a view)", |n, k| {
        let mut s = k.tensor(n, "self")?.to_vec();
        let (a, b) = (dim(int(n, "dim0")?, s.len())?, dim(int(n, "dim1")?, s.len())?);
        s.swap(a, b);
        Ok(Writes::Tensors(vec![s]))
    }),
    row("torch.ops.aten.expand.default", "`self` broadcast to `size` (−1 keeps a dim; a view)", |n, k| {
        let s = k.tensor(n, "self")?;
        let size = k.sizes(n, "size")?;
        if size.len() < s.len() {
            return Err(format!("expand of {} to {} dims", shape(s), size.len()));
        }
        let lead = size.len() - s.len();
        let out = size
            .iter()
            .enumerate()
            .map(|(i, want)| match (i.checked_sub(lead).map(|j| &s[j]), want.known()) {
                (Some(have), Some(-1)) => Ok(have.clone()),
                (Some(have), _) if have == want || *have == Size::of(1) => Ok(want.clone()),
                (None, w) if w != Some(-1) => Ok(want.clone()),
                _ => Err(format!("expand of {} to {}", shape(s), shape(&size))),
            })
            .collect::<Result<_, String>>()?;
        Ok(Writes::Tensors(vec![out]))
    }),
    row(
        "torch.ops.aten.reshape.default",
        "`self`'s values in row-major order under `shape` (one −1 inferred)",
        |n, k| Ok(Writes::Tensors(vec![reshaped(k.tensor(n, "self")?, &k.sizes(n, "shape")?)?])),
    ),
    row("torch.ops.aten.view.default", "`self` under `size`, the same storage (one −1 inferred)", |n, k| {
        Ok(Writes::Tensors(vec![reshaped(k.tensor(n, "self")?, &k.sizes(n, "size")?)?]))
    }),
    row("torch.ops.aten.select.int", "`self` at `index` of `dim`, that dim removed (a view)", |n, k| {
        let mut s = k.tensor(n, "self")?.to_vec();
        let d = dim(int(n, "dim")?, s.len())?;
        s.remove(d);
        Ok(Writes::Tensors(vec![s]))
    }),
    row("torch.ops.aten.slice.Tensor", "`self[start:end:step]` along `dim` (a view; bounds clamped)", |n, k| {
        let mut s = k.tensor(n, "self")?.to_vec();
        let d = dim(int_or(n, "dim", 0)?, s.len())?;
        s[d] = sliced(&s[d], int_or(n, "start", 0)?, int_or(n, "end", i64::MAX)?, int_or(n, "step", 1)?)?;
        Ok(Writes::Tensors(vec![s]))
    }),
    row("torch.ops.aten.cat.default", "`tensors` joined along `dim`", |n, k| {
        let Some(Arg::Tensors(names)) = n.arg("tensors") else { return Err("no `tensors` list".into()) };
        let parts: Vec<&[Size]> = names.iter().map(|t| k.named(t)).collect::<Result<_, _>>()?;
        let first = parts.first().ok_or("no tensor to join")?;
        let d = dim(int_or(n, "dim", 0)?, first.len())?;
        let mut out = first.to_vec();
        for p in &parts[1..] {
            let same_else = p.len() == first.len() && (0..p.len()).all(|i| i == d || p[i] == first[i]);
            if !same_else {
                return Err(format!("{} and {} differ off dim {d}", shape(first), shape(p)));
            }
            out[d] = out[d].plus(&p[d]).ok_or("the joined size overflows")?;
        }
        Ok(Writes::Tensors(vec![out]))
    }),
    row("torch.ops.aten.split_with_sizes.default", "`self` cut along `dim` into pieces of `split_sizes`", |n, k| {
        let s = k.tensor(n, "self")?;
        let d = dim(int_or(n, "dim", 0)?, s.len())?;
        let sizes = ints(n, "split_sizes")?;
        let total = sizes.iter().try_fold(0i64, |a, &b| a.checked_add(b)).ok_or("the pieces' sizes overflow")?;
        if Size::of(total) != s[d] {
            return Err(format!("pieces {sizes:?} do not add up to {}", s[d]));
        }
        Ok(Writes::Tensors(sizes.iter().map(|&p| with(s, d, Size::of(p))).collect()))
    }),
    row("torch.ops.aten.chunk.default", "`self` cut along `dim` into `chunks` pieces of ⌈size/chunks⌉", |n, k| {
        let s = k.tensor(n, "self")?;
        let d = dim(int_or(n, "dim", 0)?, s.len())?;
        let (size, chunks) = (s[d].known().ok_or("a symbolic size is not chunked")?, int(n, "chunks")?);
        // More pieces than outputs a node can list are not read (and not allocated).
        if !(1..=MAX_PIECES).contains(&chunks) || size <= 0 {
            return Err(format!("{size} in {chunks} chunks"));
        }
        let piece = (size - 1) / chunks + 1;
        let mut pieces = vec![];
        let mut left = size;
        while left > 0 {
            pieces.push(with(s, d, Size::of(left.min(piece))));
            left -= left.min(piece);
        }
        Ok(Writes::Tensors(pieces))
    }),
    row(
        "torch.ops.aten.repeat_interleave.self_int",
        "each slice of `dim` repeated `repeats` times in place",
        |n, k| {
            let s = k.tensor(n, "self")?;
            let d = dim(int(n, "dim")?, s.len())?;
            let repeated = s[d].times(int(n, "repeats")?).ok_or("the repeated size overflows")?;
            Ok(Writes::Tensors(vec![with(s, d, repeated)]))
        },
    ),
    row("torch.ops.aten.mean.dim", "the mean of `self` over `dim` (kept as 1 with `keepdim`)", reduced),
    row("torch.ops.aten.sum.dim_IntList", "the sum of `self` over `dim` (kept as 1 with `keepdim`)", reduced),
    row("torch.ops.aten.arange.default", "`0, 1, …, end − 1`", |n, k| {
        Ok(Writes::Tensors(vec![vec![k.sym(n, "end")?]]))
    }),
    row("torch.ops.aten.zeros.default", "zeros of `size`", |n, k| Ok(Writes::Tensors(vec![k.sizes(n, "size")?]))),
    row(
        "torch.ops.aten.conv1d.default",
        "the 1-D convolution of `input [N, C, L]` by `weight [O, C/groups, K]`",
        |n, k| {
            let (x, w) = (k.tensor(n, "input")?, k.tensor(n, "weight")?);
            let ([batch @ .., _, len], [out, _, taps]) = (x, w) else {
                return Err(format!("input {} and weight {} are not [.., C, L] and [O, C/g, K]", shape(x), shape(w)));
            };
            let one = |name: &str| -> Result<i64, String> {
                match ints(n, name)?.as_slice() {
                    [v] => Ok(*v),
                    v => Err(format!("`{name}` is {v:?}, not one value")),
                }
            };
            let (stride, padding, dilation) = (one("stride")?, one("padding")?, one("dilation")?);
            let taps = taps.known().ok_or("a symbolic kernel size")?;
            if stride != 1 {
                return Err(format!("stride {stride}: only stride 1 is read"));
            }
            let reach = taps
                .checked_sub(1)
                .and_then(|t| dilation.checked_mul(t))
                .and_then(|r| padding.checked_mul(2)?.checked_sub(r));
            let grown = reach.and_then(|r| len.plus(&Size::of(r))).ok_or("the length overflows")?;
            Ok(Writes::Tensors(vec![[batch, &[out.clone(), grown]].concat()]))
        },
    ),
];

const fn row(target: &'static str, meaning: &'static str, rule: Rule) -> Row {
    Row { target, meaning, rule }
}

/// The rule of an op whose output has the sizes of its argument `self`.
fn same_self(n: &Node, k: &Known) -> Result<Writes, String> {
    Ok(Writes::Tensors(vec![k.tensor(n, "self")?.to_vec()]))
}

/// The rule of an op whose output has the sizes of its argument `input`.
fn same_input(n: &Node, k: &Known) -> Result<Writes, String> {
    Ok(Writes::Tensors(vec![k.tensor(n, "input")?.to_vec()]))
}

/// The rule of a binary op: `self` and `other` broadcast, `other` a tensor or a number.
fn broadcast2(n: &Node, k: &Known) -> Result<Writes, String> {
    let s = k.tensor(n, "self")?;
    Ok(Writes::Tensors(vec![match n.arg("other") {
        Some(Arg::Tensor(t)) => broadcast(s, k.named(t)?)?,
        _ => s.to_vec(),
    }]))
}

/// The rule of a reduction over `dim`, with `keepdim`.
fn reduced(n: &Node, k: &Known) -> Result<Writes, String> {
    let s = k.tensor(n, "self")?;
    let dims: Vec<usize> = ints(n, "dim")?.into_iter().map(|d| dim(d, s.len())).collect::<Result<_, _>>()?;
    let keep = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    let out = (0..s.len())
        .filter_map(|i| match (dims.contains(&i), keep) {
            (false, _) => Some(s[i].clone()),
            (true, true) => Some(Size::of(1)),
            (true, false) => None,
        })
        .collect();
    Ok(Writes::Tensors(vec![out]))
}

/// `a` and `b` broadcast (numpy's rule, aligned at the last dim).
fn broadcast(a: &[Size], b: &[Size]) -> Result<Vec<Size>, String> {
    let rank = a.len().max(b.len());
    let at = |s: &[Size], i: usize| (i + s.len()).checked_sub(rank).map_or(Size::of(1), |j| s[j].clone());
    (0..rank)
        .map(|i| {
            let (x, y) = (at(a, i), at(b, i));
            if x == y || y == Size::of(1) {
                Ok(x)
            } else if x == Size::of(1) {
                Ok(y)
            } else {
                Err(format!("{} and {} do not broadcast", shape(a), shape(b)))
            }
        })
        .collect()
}

/// `s` reshaped to `to`, one −1 inferred from the number of values.
fn reshaped(s: &[Size], to: &[Size]) -> Result<Vec<Size>, String> {
    let total = s.iter().try_fold(Size::of(1), |a, b| a.product(b)).ok_or("a size of symbolic dims multiplied")?;
    let free: Vec<usize> = (0..to.len()).filter(|&i| to[i].known() == Some(-1)).collect();
    let rest = (0..to.len())
        .filter(|i| !free.contains(i))
        .try_fold(Size::of(1), |a, i| a.product(&to[i]))
        .ok_or("a shape of symbolic dims multiplied")?;
    let mut out = to.to_vec();
    match free.as_slice() {
        [] if rest == total => Ok(out),
        [i] => {
            let k = rest.known().ok_or("a −1 beside a symbolic dim")?;
            out[*i] = total.divided(k).ok_or_else(|| format!("{} values do not fill {}", total, shape(to)))?;
            Ok(out)
        }
        _ => Err(format!("{} cannot be reshaped to {}", shape(s), shape(to))),
    }
}

/// The size of `size[start:end:step]`, bounds read as Python reads them: a negative bound counts
/// from the end, and both are clamped to `0..=size`.
fn sliced(size: &Size, start: i64, end: i64, step: i64) -> Result<Size, String> {
    if step <= 0 {
        return Err(format!("slice {start}:{end}:{step}: only positive steps are read"));
    }
    match size.known() {
        Some(n) => {
            let bound = |b: i64| if b < 0 { b.saturating_add(n).max(0) } else { b.min(n) };
            let (from, to) = (bound(start), bound(end));
            Ok(Size::of(if to > from { (to - from - 1) / step + 1 } else { 0 }))
        }
        // A symbolic size (its symbols at least 1): read only a slice by step 1 to its end from a
        // start no beyond it.
        None if start >= 0 && end == i64::MAX && step == 1 && size.at_least(&Size::of(start)) => {
            size.minus(&Size::of(start)).ok_or_else(|| "overflow".into())
        }
        None => Err(format!("slice {start}:{end}:{step} of the symbolic size {size}")),
    }
}

/// `s` with dim `d` set to `to`.
fn with(s: &[Size], d: usize, to: Size) -> Vec<Size> {
    let mut out = s.to_vec();
    out[d] = to;
    out
}

/// `d` counted from the end when negative, in a tensor of `rank` dims.
fn dim(d: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let at = if d < 0 { d.checked_add(r) } else { Some(d) };
    match at {
        Some(at) if (0..r).contains(&at) => Ok(at as usize),
        _ => Err(format!("dim {d} of a tensor of {rank} dims")),
    }
}

/// The int argument `name`.
fn int(n: &Node, name: &str) -> Result<i64, String> {
    match n.arg(name) {
        Some(Arg::Int(v)) => Ok(*v),
        other => Err(format!("argument `{name}` is {other:?}, not an int")),
    }
}

/// The int argument `name`, or `default` when absent or none.
fn int_or(n: &Node, name: &str, default: i64) -> Result<i64, String> {
    match n.arg(name) {
        None | Some(Arg::None) => Ok(default),
        _ => int(n, name),
    }
}

/// The int list argument `name`.
fn ints(n: &Node, name: &str) -> Result<Vec<i64>, String> {
    match n.arg(name) {
        Some(Arg::Ints(v)) => Ok(v.clone()),
        other => Err(format!("argument `{name}` is {other:?}, not a list of ints")),
    }
}

fn shape(s: &[Size]) -> String {
    format!("[{}]", s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
}

/// The sizes of the tensors and the values of the symbolic ints known so far.
pub struct Known<'g> {
    exported: &'g Exported,
    sym: BTreeMap<String, Size>,
}

impl Known<'_> {
    /// The sizes of tensor `name`.
    fn named(&self, name: &str) -> Result<&[Size], String> {
        self.exported.tensors.get(name).map(|m| m.sizes.as_slice()).ok_or_else(|| format!("no tensor {name}"))
    }

    /// The sizes of the tensor argument `arg`.
    fn tensor(&self, n: &Node, arg: &str) -> Result<&[Size], String> {
        match n.arg(arg) {
            Some(Arg::Tensor(t)) => self.named(t),
            other => Err(format!("argument `{arg}` is {other:?}, not a tensor")),
        }
    }

    /// The symbolic int argument `arg` (or a plain int).
    fn sym(&self, n: &Node, arg: &str) -> Result<Size, String> {
        match n.arg(arg) {
            Some(Arg::Int(v)) | Some(Arg::SymInt(SymInt::Int(v))) => Ok(Size::of(*v)),
            Some(Arg::SymInt(SymInt::Name(s))) => self.value(s),
            other => Err(format!("argument `{arg}` is {other:?}, not an int")),
        }
    }

    /// The value of the symbolic int `name`, as computed by the node that wrote it.
    fn value(&self, name: &str) -> Result<Size, String> {
        self.sym.get(name).cloned().ok_or_else(|| format!("the symbolic int {name} is read before it is written"))
    }

    /// The size list argument `arg` (ints, or symbolic ints).
    fn sizes(&self, n: &Node, arg: &str) -> Result<Vec<Size>, String> {
        match n.arg(arg) {
            Some(Arg::Ints(v)) => Ok(v.iter().map(|&x| Size::of(x)).collect()),
            Some(Arg::SymInts(v)) => v
                .iter()
                .map(|s| match s {
                    SymInt::Int(x) => Ok(Size::of(*x)),
                    SymInt::Name(name) => self.value(name),
                })
                .collect(),
            other => Err(format!("argument `{arg}` is {other:?}, not a list of sizes")),
        }
    }
}

/// The row of `target`.
pub fn row_of(target: &str) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.target == target)
}

/// Runs every node's shape rule in order and compares what it gives with what the graph declares:
/// each tensor output's sizes, each symbolic int's value.
pub fn check_shapes(exported: &Exported) -> Result<(), ImportError> {
    let mut known = Known { exported, sym: BTreeMap::new() };
    for n in &exported.nodes {
        let fail = |why: String| ImportError::Node {
            node: n.name.clone(),
            target: n.target.clone(),
            traced: n.source.clone(),
            why,
        };
        let row = row_of(&n.target).ok_or_else(|| ImportError::NoRow {
            node: n.name.clone(),
            target: n.target.clone(),
            traced: n.source.clone(),
        })?;
        match ((row.rule)(n, &known).map_err(&fail)?, n.outputs.as_slice()) {
            (Writes::Nothing, []) => {}
            (Writes::SymInt(value), [Output::SymInt(name)]) => {
                let declared = exported.sym_ints.get(name).ok_or_else(|| fail(format!("{name} has no value")))?;
                if *declared != value {
                    return Err(fail(format!("{name} is declared {declared}, its rule gives {value}")));
                }
                known.sym.insert(name.clone(), value);
            }
            (Writes::Tensors(sizes), _) => {
                let names = n.output_tensors();
                if names.len() != sizes.len() {
                    return Err(fail(format!("{} outputs, its rule gives {}", names.len(), sizes.len())));
                }
                for (name, rule) in names.iter().zip(&sizes) {
                    let declared =
                        exported.tensors.get(*name).ok_or_else(|| fail(format!("{name} has no metadata")))?;
                    if declared.sizes != *rule {
                        return Err(fail(format!(
                            "{name} is declared {}, its rule gives {}",
                            shape(&declared.sizes),
                            shape(rule)
                        )));
                    }
                }
            }
            (writes, outputs) => return Err(fail(format!("outputs {outputs:?}, its rule writes {writes:?}"))),
        }
    }
    Ok(())
}
