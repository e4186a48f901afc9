//! `import`: transformers' exported decode step translated into the one IR.
//!
//! The translation follows the graph in order, keeping for every ATen tensor what it holds
//! ([`Val`]): the elements of a [`Strided`] tensor, each a value of an IR tensor, a number or an
//! expression in the position ([`Elem`]); a KV cache; or nothing the IR holds yet (a partial
//! computation such as an RMS norm's `pow` and `mean`). Each node is read by the first rule that
//! applies:
//!
//! 1. **Layout** (`view`, `reshape`, `transpose`, `permute`, `unsqueeze`, `squeeze`, `expand`,
//!    `select`, `slice`, `cat`, `split_with_sizes`, `chunk`, `repeat_interleave`, `clone`, `alias`,
//!    `copy_`, and the identities `to`, `type_as`, `dropout`): moved element by element, strides
//!    and writes through views included; no IR op is written.
//! 2. **Composites** ([`recognise::ROWS`]): an ATen computation the IR states as one op — an RMS
//!    norm, an L2 norm, a rotary embedding, a KV append, attention, a depthwise convolution, a
//!    delta rule — matched from the node that completes it, every node and argument on the way
//!    checked; the op is written on its operands.
//! 3. **Elementwise and matrix ops** ([`direct`]): `mul`, `add`, `sub`, `div` and `neg` with a
//!    number, the activations, `softmax`, `linear`, `embedding`, each its IR op on the operands
//!    materialised ([`materialise`]).
//! 4. Otherwise the node holds nothing the IR holds ([`Val::Lazy`], with the node that caused it).
//!    That is no error until something must be read from it: an output, or an op of rule 3.
//!
//! The graph's conventions are `reference/export_step.py`'s: the inputs are the parameters (by
//! their checkpoint names), the buffers, `input_ids`, `position_ids` and then the states, two per
//! layer in layer order (a conv window `[1, C, K]` and a delta state `[1, Hv, dk, dv]`, or keys and
//! values `[1, nKV, past, hd]`); the outputs the logits and the states in the same order. The
//! position the rotary embedding reads and the caches' past length are both the IR's position (a
//! cache entering step `p` holds `p` positions), and the step ends with the position's advance,
//! which transformers' caller does outside the graph. Weights are bound by their checkpoint names
//! (the HF convention, not GGUF's); the rotary frequencies are read from the archive's buffer.

pub mod direct;
pub mod elem;
pub mod materialise;
pub mod recognise;
pub mod strided;

use std::collections::{BTreeMap, HashMap};

use ir::{Binding, Graph, GraphBuilder, OpKind, StateKind, TensorId, Ty};

use super::error::ImportError;
use super::graph::{Arg, Exported, InputKind, Node};
use elem::{Elem, PosExpr};
use follow::Listed;
use strided::Strided;

/// What an ATen tensor holds while the graph is followed.
#[derive(Clone, Debug)]
pub enum Val {
    /// Elements, each an IR value, a number or a position expression.
    Elems(Strided<Elem>),
    /// All of IR tensor `t`'s values in order, as ATen `sizes`: a parameter, whose elements are
    /// listed only when a layout op or an elementwise op reads them (never for an embedding table
    /// or a projection, which `embedding` and `linear` read whole).
    Whole { t: TensorId, sizes: Vec<usize> },
    /// A KV cache: the IR tensor that holds it.
    Cache(TensorId),
    /// The step's token.
    Token,
    /// Nothing the IR holds; `cause` is the node where the translation could not follow.
    Lazy { cause: usize },
}

/// The imported graph, and for each of its ops the ATen node it was written for.
#[derive(Clone, Debug)]
pub struct Imported {
    pub graph: Graph,
    pub origin: Vec<String>,
}

/// The layout targets (after `torch.ops.aten.`) read element by element.
const LAYOUT: &[&str] = &[
    "clone.default",
    "alias.default",
    "type_as.default",
    "to.device",
    "dropout.default",
    "to.dtype",
    "view.default",
    "reshape.default",
    "expand.default",
    "transpose.int",
    "unsqueeze.default",
    "squeeze.dim",
    "select.int",
    "slice.Tensor",
    "split_with_sizes.default",
    "chunk.default",
    "repeat_interleave.self_int",
    "copy_.default",
    "zeros_like.default",
];

/// The most values of a parameter the importer lists one by one (a norm's weight, a conv's
/// kernel); an embedding table or a projection is read whole by its row.
pub const MAX_LISTED: usize = 1 << 24;

/// The translator's state.
pub struct Importer<'a> {
    ex: &'a Exported,
    buffers: &'a BTreeMap<String, Vec<f64>>,
    builder: GraphBuilder,
    env: HashMap<String, Val>,
    producer: HashMap<String, usize>,
    origin: Vec<String>,
    /// The IR tensor already written for a list of values and a shape. Hashed by foldhash: the
    /// keys are long lists of the importer's own ids, with no adversary to flood the table.
    memo: foldhash::HashMap<Listed, TensorId>,
    kinds: HashMap<TensorId, StateKind>,
    pos: TensorId,
    /// The node being read.
    at: usize,
    /// Why a node was left unread, where more can be said than that no rule reads it.
    why: HashMap<usize, String>,
}

/// Translates `ex` into the IR as a graph named `name`; `buffers` are the archive's constant
/// buffers by name (the rotary frequencies).
pub fn import(ex: &Exported, buffers: &BTreeMap<String, Vec<f64>>, name: &str) -> Result<Imported, ImportError> {
    super::ops::check_shapes(ex)?;
    sizes_fit(ex)?;
    let mut builder = GraphBuilder::new(name);
    let pos = builder.state(StateKind::Position, None, "pos", Ty::Position);
    let mut im = Importer {
        ex,
        buffers,
        builder,
        env: HashMap::new(),
        producer: HashMap::new(),
        origin: vec![],
        memo: foldhash::HashMap::default(),
        kinds: HashMap::new(),
        pos,
        at: 0,
        why: HashMap::new(),
    };
    for (i, n) in ex.nodes.iter().enumerate() {
        for t in n.output_tensors() {
            im.producer.insert(t.to_string(), i);
        }
    }
    let states = im.inputs()?;
    for (i, n) in ex.nodes.iter().enumerate() {
        im.at = i;
        let fail = |why: String| ImportError::Node {
            node: n.name.clone(),
            target: n.target.clone(),
            traced: n.source.clone(),
            why,
        };
        let vals = im.node(n).map_err(fail)?;
        let names = n.output_tensors();
        if let Some(vals) = vals {
            for (t, v) in names.iter().zip(vals) {
                im.env.insert(t.to_string(), v);
            }
        } else {
            let cause = im.lazy_cause(n).unwrap_or(i);
            for t in names {
                im.env.insert(t.to_string(), Val::Lazy { cause });
            }
        }
    }
    im.outputs(&states)
}

impl<'a> Importer<'a> {
    /// Declares the inputs; returns the IR state read for each state input, in order.
    fn inputs(&mut self) -> Result<Vec<TensorId>, ImportError> {
        let users: Vec<&str> =
            self.ex.inputs.iter().filter(|i| i.kind == InputKind::User).map(|i| i.name.as_str()).collect();
        let [ids, position, states @ ..] = users.as_slice() else {
            return Err(ImportError::Schema("the inputs are not input_ids, position_ids and the states".into()));
        };
        if states.len() % 2 != 0 {
            return Err(ImportError::Schema(format!("{} state inputs, not two per layer", states.len())));
        }
        self.env.insert(ids.to_string(), Val::Token);
        self.env
            .insert(position.to_string(), Val::Elems(Strided::new(vec![1, 1], vec![Elem::Pos(PosExpr::Angle(1.0))])));
        for input in &self.ex.inputs {
            if input.kind == InputKind::User {
                continue;
            }
            let sizes = self.known(&input.name).map_err(ImportError::Schema)?;
            match &input.kind {
                InputKind::Parameter(name) => {
                    let shape = if sizes.is_empty() { vec![1] } else { sizes.clone() };
                    let t = self.builder.constant(&input.name, &shape, Binding::whole(name.clone()));
                    self.env.insert(input.name.clone(), Val::Whole { t, sizes });
                }
                InputKind::Buffer { name, .. } => {
                    let values = self.buffers.get(name).cloned().unwrap_or_default();
                    if Some(values.len()) != numel(&sizes) {
                        return Err(ImportError::Archive(format!(
                            "buffer {name}: the archive holds {} values for its {sizes:?}; the importer reads the rotary frequencies from the .pt2 archive's constants",
                            values.len()
                        )));
                    }
                    self.env.insert(
                        input.name.clone(),
                        Val::Elems(Strided::new(sizes, values.into_iter().map(Elem::Num).collect())),
                    );
                }
                InputKind::User => {}
            }
        }
        let mut reads = vec![];
        let pairs = states.iter().step_by(2).zip(states.iter().skip(1).step_by(2));
        for (i, (a, b)) in pairs.enumerate() {
            let meta = |n: &str| self.ex.tensors.get(n).map(|m| m.sizes.clone()).unwrap_or_default();
            let (ma, mb) = (meta(a), meta(b));
            let known =
                |s: &[super::size::Size]| s.iter().map(|d| d.known().map(|k| k as usize)).collect::<Option<Vec<_>>>();
            match (known(&ma), known(&mb)) {
                (Some(conv), Some(rec)) if conv.len() == 3 && rec.len() == 4 => {
                    let c = self.builder.state(StateKind::Conv, Some(i), &format!("l{i}.conv"), Ty::tensor(&conv[1..]));
                    let r = self.builder.state(
                        StateKind::Recurrent,
                        Some(i),
                        &format!("l{i}.state"),
                        Ty::tensor(&rec[1..]),
                    );
                    self.kinds.insert(c, StateKind::Conv);
                    self.kinds.insert(r, StateKind::Recurrent);
                    self.env.insert(a.to_string(), Val::Elems(ir_elems(c, conv)));
                    self.env.insert(b.to_string(), Val::Elems(ir_elems(r, rec)));
                    reads.extend([c, r]);
                }
                _ if ma.len() == 4 && mb.len() == 4 && ma[2].known().is_none() => {
                    let dims = |s: &[super::size::Size]| (s[1].known(), s[3].known());
                    let (Some(heads), Some(dim)) = dims(&ma) else {
                        return Err(ImportError::Schema(format!("state {a}: a cache of unknown heads or dims")));
                    };
                    let ty = Ty::Cache { heads: heads as usize, dim: dim as usize };
                    let k = self.builder.state(StateKind::KeyCache, Some(i), &format!("l{i}.kcache"), ty.clone());
                    let (Some(vh), Some(vd)) = dims(&mb) else {
                        return Err(ImportError::Schema(format!("state {b}: a cache of unknown heads or dims")));
                    };
                    let v = self.builder.state(
                        StateKind::ValueCache,
                        Some(i),
                        &format!("l{i}.vcache"),
                        Ty::Cache { heads: vh as usize, dim: vd as usize },
                    );
                    self.kinds.insert(k, StateKind::KeyCache);
                    self.kinds.insert(v, StateKind::ValueCache);
                    self.env.insert(a.to_string(), Val::Cache(k));
                    self.env.insert(b.to_string(), Val::Cache(v));
                    reads.extend([k, v]);
                }
                _ => {
                    return Err(ImportError::Schema(format!(
                        "states {a} and {b} are neither a conv window and a delta state nor a key and a value cache"
                    )));
                }
            }
        }
        Ok(reads)
    }

    /// The values node `n` writes, or `None` when the IR holds nothing of them.
    fn node(&mut self, n: &Node) -> Result<Option<Vec<Val>>, String> {
        if n.output_tensors().is_empty() {
            return Ok(Some(vec![]));
        }
        if let Some(v) = self.layout(n)? {
            return Ok(Some(v));
        }
        for row in recognise::ROWS {
            if row.root == n.target
                && let Some(v) = (row.read)(self, n)?
            {
                return Ok(Some(v));
            }
        }
        direct::read(self, n)
    }

    /// The node's values when it is a layout op on elements, or `None`.
    fn layout(&mut self, n: &Node) -> Result<Option<Vec<Val>>, String> {
        let short = n.target.strip_prefix("torch.ops.aten.").unwrap_or(&n.target);
        let out_sizes = |i: usize| -> Option<Vec<usize>> {
            let name = n.output_tensors().get(i).copied()?;
            self.known(name).ok()
        };
        let first_arg = n.args.first().map(|(_, a)| a);
        let Some(Arg::Tensor(src)) = first_arg else {
            if short == "cat.default"
                && let Some(Arg::Tensors(ts)) = first_arg
            {
                let mut parts = vec![];
                for t in ts {
                    match self.env.get(t) {
                        Some(Val::Elems(e)) => parts.push(e.clone()),
                        _ => return Ok(None),
                    }
                }
                let rank = parts[0].sizes.len();
                let d = strided::dim(int_arg(n, "dim").unwrap_or(0), rank)?;
                return Ok(Some(vec![Val::Elems(strided::cat(&parts, d)?)]));
            }
            return Ok(None);
        };
        let x = match self.env.get(src).cloned() {
            Some(Val::Elems(x)) => x,
            Some(whole @ Val::Whole { .. }) => {
                let keeps = match short {
                    "alias.default" | "type_as.default" | "to.device" | "dropout.default" => true,
                    "to.dtype" => matches!(n.arg("dtype"), Some(Arg::ScalarType(7))),
                    _ => false,
                };
                if keeps {
                    return Ok(Some(vec![whole]));
                }
                if !LAYOUT.contains(&short) {
                    return Ok(None);
                }
                self.elems(src)?
            }
            _ => return Ok(None),
        };
        let rank = x.sizes.len();
        let one = |t: Strided<Elem>| Ok(Some(vec![Val::Elems(t)]));
        match short {
            "clone.default" => one(x.copy()),
            "alias.default" | "type_as.default" | "to.device" | "dropout.default" => one(x),
            "to.dtype" => match n.arg("dtype") {
                Some(Arg::ScalarType(7)) => one(x),
                _ => Err("a rounding to a dtype other than f32, which the importer does not read".into()),
            },
            "view.default" | "reshape.default" | "expand.default" => {
                let sizes = out_sizes(0).ok_or("sizes the importer cannot read as numbers")?;
                match short {
                    "view.default" => one(x.view_as(&sizes)?),
                    "reshape.default" => one(x.reshape(&sizes)?),
                    _ => one(x.broadcast_to(&sizes)?),
                }
            }
            "transpose.int" => {
                let (a, b) = (strided::dim(int_arg(n, "dim0")?, rank)?, strided::dim(int_arg(n, "dim1")?, rank)?);
                one(x.transpose(a, b))
            }
            "unsqueeze.default" => one(x.unsqueeze(strided::dim(int_arg(n, "dim")?, rank + 1)?)),
            "squeeze.dim" => one(x.squeeze(strided::dim(int_arg(n, "dim")?, rank)?)),
            "select.int" => {
                let d = strided::dim(int_arg(n, "dim")?, rank)?;
                let i = int_arg(n, "index")?;
                let i = if i < 0 { i + x.sizes[d] as i64 } else { i };
                one(x.select(d, usize::try_from(i).map_err(|_| "an index before the start")?)?)
            }
            "slice.Tensor" => {
                let d = strided::dim(int_arg(n, "dim").unwrap_or(0), rank)?;
                let len = x.sizes[d] as i64;
                let clamp = |v: i64| (if v < 0 { v + len } else { v }).clamp(0, len) as usize;
                let start = clamp(int_arg(n, "start").unwrap_or(0));
                let end = clamp(int_arg(n, "end").unwrap_or(i64::MAX));
                let step = usize::try_from(int_arg(n, "step").unwrap_or(1)).map_err(|_| "a step below one")?.max(1);
                one(x.slice(d, start, end.max(start), step))
            }
            "split_with_sizes.default" | "chunk.default" => {
                let d = strided::dim(int_arg(n, "dim").unwrap_or(0), rank)?;
                let mut start = 0;
                let mut out = vec![];
                for i in 0..n.output_tensors().len() {
                    let len = *out_sizes(i).ok_or("pieces of unknown sizes")?.get(d).ok_or("a piece of fewer dims")?;
                    if start + len > x.sizes[d] {
                        return Err(format!("pieces longer than dim {d} of {:?}", x.sizes));
                    }
                    out.push(Val::Elems(x.slice(d, start, start + len, 1)));
                    start += len;
                }
                Ok(Some(out))
            }
            "repeat_interleave.self_int" => {
                let d = strided::dim(int_arg(n, "dim")?, rank)?;
                let r = usize::try_from(int_arg(n, "repeats")?).map_err(|_| "negative repeats")?;
                let mut wide = x.sizes.clone();
                wide.insert(d + 1, r);
                let mut merged = x.sizes.clone();
                merged[d] *= r;
                one(x.unsqueeze(d + 1).broadcast_to(&wide)?.reshape(&merged)?.copy())
            }
            "copy_.default" => {
                let Some(Val::Elems(from)) = n.arg("src").and_then(|a| self.tensor_val(a)) else {
                    return Err(self.unread("src", n));
                };
                x.write(&from)?;
                one(x)
            }
            "zeros_like.default" => one(Strided::new(x.sizes.clone(), vec![Elem::Num(0.0); x.numel()])),
            _ => Ok(None),
        }
    }

    /// Writes the outputs as the graph's logits and state writes.
    fn outputs(mut self, states: &[TensorId]) -> Result<Imported, ImportError> {
        let ex = self.ex;
        let [logits, written @ ..] = ex.outputs.as_slice() else {
            return Err(ImportError::Schema("a graph with no outputs".into()));
        };
        if written.len() != states.len() {
            return Err(ImportError::Schema(format!(
                "{} state outputs for {} state inputs",
                written.len(),
                states.len()
            )));
        }
        let logits = self.output(logits, None)?;
        for (name, &read) in written.iter().zip(states) {
            let write = self.output(name, Some(read))?;
            self.builder.write_state(read, write);
        }
        let next = self.emit(OpKind::Advance, &[self.pos]).map_err(ImportError::Schema)?;
        self.builder.write_state(self.pos, next);
        let graph = self.builder.finish(logits).map_err(ImportError::Schema)?;
        Ok(prune(Imported { graph, origin: self.origin }))
    }

    /// The IR tensor output `name` holds, shaped as the state `read` (or as a vector of logits).
    fn output(&mut self, name: &str, read: Option<TensorId>) -> Result<TensorId, ImportError> {
        let at = self.producer.get(name).copied();
        let fail = |why: String| match at.map(|i| &self.ex.nodes[i]) {
            Some(n) => {
                ImportError::Node { node: n.name.clone(), target: n.target.clone(), traced: n.source.clone(), why }
            }
            None => ImportError::Schema(format!("output {name}: {why}")),
        };
        let value = match self.env.get(name).cloned() {
            Some(Val::Whole { .. }) => self.elems(name).map(Val::Elems).map_err(&fail)?,
            other => other.unwrap_or(Val::Token),
        };
        match Some(value) {
            Some(Val::Cache(t)) => Ok(t),
            Some(Val::Elems(e)) => {
                let shape = match read.map(|r| self.builder.ty(r).clone()) {
                    Some(Ty::Tensor(s)) => s.to_vec(),
                    None => vec![e.numel()],
                    Some(other) => {
                        return Err(fail(format!("output {name} is elements, the state it writes is {other}")));
                    }
                };
                self.materialise(&e, &shape).map_err(|why| fail(format!("output {name}: {why}")))
            }
            Some(Val::Lazy { cause }) => Err(self.lazy_error(name, cause)),
            _ => Err(fail(format!("output {name} holds nothing an output can be"))),
        }
    }

    /// Writes op `kind` on `inputs`, one output named after the node being read.
    pub(super) fn emit(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, String> {
        let tys: Vec<&Ty> = inputs.iter().map(|&t| self.builder.ty(t)).collect();
        let types = kind.infer(&tys).map_err(|e| format!("{}: {e}", kind.name()))?;
        if types.len() != 1 {
            return Err(format!("{} writes {} tensors", kind.name(), types.len()));
        }
        let name = self.ex.nodes.get(self.at).map_or("imported", |n| n.name.as_str()).to_string();
        self.origin.push(name.clone());
        Ok(self.builder.op1(kind, inputs, &name))
    }

    /// Writes op `kind` of two outputs on `inputs`.
    pub(super) fn emit2(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<(TensorId, TensorId), String> {
        let tys: Vec<&Ty> = inputs.iter().map(|&t| self.builder.ty(t)).collect();
        kind.infer(&tys).map_err(|e| format!("{}: {e}", kind.name()))?;
        let name = self.ex.nodes.get(self.at).map_or("imported", |n| n.name.as_str()).to_string();
        self.origin.push(name.clone());
        let out = self.builder.op(kind, inputs, &[&format!("{name}.state"), &name]);
        Ok((out[0], out[1]))
    }

    /// The known sizes of ATen tensor `name`.
    pub(super) fn known(&self, name: &str) -> Result<Vec<usize>, String> {
        let meta = self.ex.tensors.get(name).ok_or_else(|| format!("{name} has no metadata"))?;
        meta.sizes
            .iter()
            .map(|s| s.known().and_then(|k| usize::try_from(k).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("{name} has a symbolic size"))
    }

    /// The value an argument names.
    pub(super) fn tensor_val(&self, a: &Arg) -> Option<Val> {
        match a {
            Arg::Tensor(t) => self.env.get(t).cloned(),
            _ => None,
        }
    }

    /// The elements of tensor `name`, or why it has none.
    pub(super) fn elems(&self, name: &str) -> Result<Strided<Elem>, String> {
        match self.env.get(name) {
            Some(Val::Elems(e)) => Ok(e.clone()),
            Some(Val::Whole { t, sizes }) => {
                let n = numel(sizes).unwrap_or(usize::MAX);
                if n > MAX_LISTED {
                    return Err(format!(
                        "{name} has {n} values; a tensor is followed value by value only up to {MAX_LISTED}"
                    ));
                }
                Ok(ir_elems(*t, sizes.clone()))
            }
            Some(Val::Lazy { cause }) => Err(format!("{name} holds nothing the IR holds ({})", self.cause(*cause))),
            _ => Err(format!("{name} is not a tensor of values")),
        }
    }

    /// The node that caused the first operand of `n` that holds nothing the IR holds, if any.
    fn lazy_cause(&self, n: &Node) -> Option<usize> {
        let cause = |t: &String| match self.env.get(t) {
            Some(Val::Lazy { cause }) => Some(*cause),
            _ => None,
        };
        n.args.iter().find_map(|(_, a)| match a {
            Arg::Tensor(t) => cause(t),
            Arg::Tensors(ts) => ts.iter().find_map(cause),
            _ => None,
        })
    }

    /// The kind of the state `t` is the start-of-step read of, if it is one.
    pub(super) fn state_kind(&self, t: TensorId) -> Option<StateKind> {
        self.kinds.get(&t).copied()
    }

    fn cause(&self, i: usize) -> String {
        let n = &self.ex.nodes[i];
        let because = self.why.get(&i).map_or(String::new(), |w| format!(": {w}"));
        format!("node {} ({}, traced at {}) is read by no row here{because}", n.name, n.target, n.source)
    }

    /// Leaves the node being read unread, keeping why its operands could not be materialised.
    pub(super) fn unread_because(&mut self, why: String) -> Option<Vec<Val>> {
        self.why.insert(self.at, why);
        None
    }

    fn unread(&self, arg: &str, n: &Node) -> String {
        match n.arg(arg) {
            Some(Arg::Tensor(t)) => match self.env.get(t) {
                Some(Val::Lazy { cause }) => format!("`{arg}` {t} holds nothing the IR holds: {}", self.cause(*cause)),
                _ => format!("`{arg}` {t} is not a tensor of values"),
            },
            _ => format!("`{arg}` is not a tensor"),
        }
    }

    fn lazy_error(&self, name: &str, cause: usize) -> ImportError {
        let n = &self.ex.nodes[cause];
        let because = self.why.get(&cause).map_or(String::new(), |w| format!(": {w}"));
        ImportError::Node {
            node: n.name.clone(),
            target: n.target.clone(),
            traced: n.source.clone(),
            why: format!("output {name} depends on it, and no row of the importer reads it here{because}"),
        }
    }
}

/// The number of values of `sizes`, if it does not overflow.
pub fn numel(sizes: &[usize]) -> Option<usize> {
    sizes.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Checks every size before anything is allocated from it: every tensor's known sizes multiply
/// without overflow, and every tensor but a parameter (read whole, never listed) has at most
/// [`MAX_LISTED`] values.
fn sizes_fit(ex: &Exported) -> Result<(), ImportError> {
    let params: std::collections::HashSet<&str> =
        ex.inputs.iter().filter(|i| matches!(i.kind, InputKind::Parameter(_))).map(|i| i.name.as_str()).collect();
    for (name, meta) in &ex.tensors {
        let known: Option<Vec<usize>> =
            meta.sizes.iter().map(|s| s.known().and_then(|k| usize::try_from(k).ok())).collect();
        let Some(sizes) = known else { continue };
        let count = numel(&sizes).ok_or_else(|| ImportError::Schema(format!("{name}: sizes {sizes:?} overflow")))?;
        if count > MAX_LISTED && !params.contains(name.as_str()) {
            return Err(ImportError::Schema(format!(
                "{name} has {count} values; a tensor other than a parameter is followed value by value only up to {MAX_LISTED}"
            )));
        }
    }
    Ok(())
}

/// The elements of IR tensor `t` laid out as ATen `sizes`: its values in order, made when read.
pub(super) fn ir_elems(t: TensorId, sizes: Vec<usize>) -> Strided<Elem> {
    Strided::made(sizes, Elem::Ir(t, 0), elem::nth_value)
}

/// Integer argument `name` of `n`.
pub(super) fn int_arg(n: &Node, name: &str) -> Result<i64, String> {
    match n.arg(name) {
        Some(Arg::Int(i)) => Ok(*i),
        other => Err(format!("argument `{name}` is {other:?}, not an integer")),
    }
}

/// `im` without the ops nothing reads (`follow::prune`).
fn prune(mut im: Imported) -> Imported {
    follow::prune(&mut im.graph, &mut im.origin);
    im
}
