//! `import`: llama.cpp's recorded decode step translated into the one IR.
//!
//! A ggml tensor is a strided view (`ne`, `nb` in bytes, `view_offs`) of a storage: a leaf's, or
//! a node's that is not a view. The importer keeps every storage as a list of what each of its
//! elements holds (`Elem`) — a value of an IR tensor, or a cell of a state as it was when the
//! step began — and reads a tensor through its recorded sizes and strides, so `VIEW`, `RESHAPE`,
//! `PERMUTE`, `TRANSPOSE`, `CONT`, `CPY`, `CONCAT`, `GET_ROWS` by a known index and `SET_ROWS`
//! into a state are followed element by element and write no IR op. A compute op's operands are
//! materialised by `follow`'s exact rules and the op is written by its row in `compute`; the
//! attention over the KV cache is read as one IR `attention` (`attention`).
//!
//! The conventions, each checked where it is used, are llama.cpp's for one sequence decoded one
//! token per step into an empty memory:
//!
//! | llama.cpp | the IR |
//! |---|---|
//! | `cache_r_l{i}`: the conv state, `[K−1, C]` | the conv window `[C, K]`'s newest `K−1` columns (its oldest is never read) |
//! | `cache_s_l{i}`: the delta state, `[S, S, H]`, element `(k, v, h)` | the delta state `[H, dk, dv]` at `(h, k, v)` |
//! | `cache_k_l{i}`, `cache_v_l{i}`: KV cells, cell `c` | the cache's position `c` |
//! | `inp_tokens`, `inp_pos`, `attn_inp_k_idxs`, `attn_inp_kq_mask` | the token; the position `p` (every M-RoPE section `p`, the fourth `0`); cell `p`; cells `0..=p` |
//! | `rs_s_copy`, `out_ids` | slot 0; row 0 |
//!
//! Weights are bound by their GGUF names: the file's values as llama.cpp reads them. What no row
//! reads, a view outside its storage, an input whose recorded values break a convention: a
//! [`GraphError`] naming the node.

mod attention;
mod compute;
mod delta;
mod store;

use std::collections::HashMap;

use ir::{Binding, Graph, GraphBuilder, OpKind, StateKind, TensorId, Ty};

use super::error::GraphError;
use super::graph::{Recording, Tensor, node_error};
use store::{Elem, Store};

/// The imported graph, and for each of its ops the ggml node it was written for.
#[derive(Clone, Debug)]
pub struct Imported {
    pub graph: Graph,
    /// For each op, the node it was written for (`node n192 `cache_k_l3 (view)` (SET_ROWS)`).
    pub origin: Vec<String>,
    /// The roundings llama.cpp's graph makes that the IR's values do not, each with the node that
    /// makes it: an F16 KV cache (`kv=f16`), a matrix product's column rounded to its weights'
    /// dot type (`act=q8_0`, `act=q8_K`). The numerics it runs at.
    pub numerics: Vec<String>,
    /// Where each of those roundings falls on the IR graph, when it is one op's input rounded to a
    /// type (not the flash attention's f16 sum, which no input rounding is).
    pub places: Vec<Place>,
}

/// The imported graph unpruned, with the IR values each computed node of the recording holds: for
/// comparing the graph's values with the recording's per-node figures (`trace`).
#[derive(Clone, Debug)]
pub struct Traced {
    pub imported: Imported,
    /// For each computed node whose elements are all IR values, its id and, in ggml's logical
    /// order, which value of which IR tensor each element is.
    pub nodes: Vec<NodeValues>,
}

/// A computed node's id and which value of which IR tensor each of its elements is.
pub type NodeValues = (String, Vec<(TensorId, usize)>);

/// A rounding llama.cpp makes, as an IR op's input rounded to a stored type.
#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    /// The op, by its index in the imported graph.
    pub op: usize,
    /// Which of its inputs.
    pub input: usize,
    /// The type: `f16`, `q8_0`, `q8_K`.
    pub to: String,
}

/// The most elements a storage the importer follows may hold.
pub const MAX_ELEMS: usize = 1 << 22;

/// What a node holds beyond its storage's elements: a computation the IR states as one op with a
/// later node (an RMS norm before its weight or its `1/√n`, attention before its values).
#[derive(Clone, Debug)]
enum Pending {
    /// `x · rsqrt(mean(x²) + eps)` over rows of `n`: `x` materialised as `[rows, n]`.
    RmsNorm { x: TensorId, eps: f32, n: usize },
    /// Attention scores of queries `q [nH, hd]` against KV cache `cache`.
    Scores(attention::Scores),
    /// Their softmax, with its scale.
    Probs(attention::Scores, f32),
}

/// A state of the graph as llama.cpp keeps it.
#[derive(Clone, Debug)]
struct StateSlot {
    kind: StateKind,
    layer: usize,
    /// The IR state read at the start of the step.
    read: TensorId,
    /// The leaf holding it.
    leaf: String,
}

/// The translator's state.
pub struct Importer<'a> {
    rec: &'a Recording,
    builder: GraphBuilder,
    stores: HashMap<String, Store>,
    pending: HashMap<String, Pending>,
    states: Vec<StateSlot>,
    kinds: HashMap<TensorId, StateKind>,
    weights: HashMap<String, TensorId>,
    memo: foldhash::HashMap<follow::Listed, TensorId>,
    origin: Vec<String>,
    numerics: Vec<String>,
    /// The roundings' places, by the op's index before pruning.
    places: Vec<Place>,
    /// The node that last wrote each storage.
    writer: HashMap<String, usize>,
    /// The op that wrote each IR tensor the importer emitted, and its inputs.
    produced: HashMap<TensorId, (OpKind, Vec<TensorId>)>,
    /// The parts of delta rules composed of primitive ops, and the new state each resolved to.
    parts: Vec<delta::Part>,
    resolved: HashMap<usize, TensorId>,
    /// The KV caches: for each, the IR tensor holding it now and the layout its cells were
    /// written in.
    caches: Vec<attention::Cache>,
    pos: TensorId,
    /// The node being read.
    at: usize,
    /// What each computed node holds, when tracing.
    traced: Option<Vec<NodeValues>>,
}

/// Translates `rec` into the IR as a graph named `name`.
pub fn import(rec: &Recording, name: &str) -> Result<Imported, GraphError> {
    translate(rec, name, false).map(|t| t.imported)
}

/// [`import`], keeping every op (no pruning, so the IR tensors keep their ids) and what each
/// computed node holds.
pub fn trace(rec: &Recording, name: &str) -> Result<Traced, GraphError> {
    translate(rec, name, true)
}

fn translate(rec: &Recording, name: &str, tracing: bool) -> Result<Traced, GraphError> {
    super::ops::check_shapes(rec)?;
    let mut builder = GraphBuilder::new(name);
    let pos = builder.state(StateKind::Position, None, "pos", Ty::Position);
    let mut im = Importer {
        rec,
        builder,
        stores: HashMap::new(),
        pending: HashMap::new(),
        states: vec![],
        kinds: HashMap::new(),
        weights: HashMap::new(),
        memo: foldhash::HashMap::default(),
        origin: vec![],
        numerics: vec![],
        places: vec![],
        writer: HashMap::new(),
        produced: HashMap::new(),
        parts: vec![],
        resolved: HashMap::new(),
        caches: vec![],
        pos,
        at: 0,
        traced: tracing.then(Vec::new),
    };
    check_rollout(rec)?;
    im.declare_states()?;
    let last = last_reads(rec);
    for (i, n) in rec.nodes.iter().enumerate() {
        im.at = i;
        im.node(n).map_err(|why| node_error(n, why))?;
        // A node's storage no later node reads is dropped: the 0.8B shape's delta states would
        // otherwise be kept five times a layer.
        for root in last.get(i).into_iter().flatten() {
            im.stores.remove(root);
        }
    }
    im.finish()
}

impl<'a> Importer<'a> {
    /// Declares one IR state per state leaf (`cache_r_l{i}`, `cache_s_l{i}`, `cache_k_l{i}`,
    /// `cache_v_l{i}`), its sizes read off the weights of its layer, and lays out its storage.
    fn declare_states(&mut self) -> Result<(), GraphError> {
        let rec = self.rec;
        for leaf in rec.leaves.iter().filter(|l| l.op == "NONE") {
            let Some((kind, layer)) = state_leaf(&leaf.name) else { continue };
            let fail = |why: String| GraphError::Schema(format!("state {}: {why}", leaf.name));
            let numel = usize::try_from(leaf.numel().unwrap_or(-1)).map_err(|_| fail("no size".into()))?;
            if numel == 0 || numel > MAX_ELEMS {
                return Err(fail(format!(
                    "{numel} values: a state is followed value by value, 1 to {MAX_ELEMS} of them"
                )));
            }
            let weight = |suffix: &str| -> Result<&Tensor, GraphError> {
                let name = format!("blk.{layer}.{suffix}");
                rec.leaves.iter().find(|l| l.name == name).ok_or_else(|| fail(format!("no weight {name} to size it")))
            };
            let dim = |t: &Tensor, i: usize| usize::try_from(t.ne[i]).unwrap_or(0);
            let (ty, elems) = match kind {
                StateKind::Conv => {
                    let w = weight("ssm_conv1d.weight")?;
                    let (k, c) = (dim(w, 0), dim(w, 1));
                    if k < 2 || c.checked_mul(k - 1) != Some(numel) {
                        return Err(fail(format!("{numel} values, not (K−1)·C for a kernel of {k} by {c} channels")));
                    }
                    (Ty::tensor(&[c, k]), Layout::Conv { k })
                }
                StateKind::Recurrent => {
                    let h = dim(weight("ssm_a")?, 0);
                    let per = numel.checked_div(h).unwrap_or(0);
                    let s = (1..=per).find(|s| s * s == per).unwrap_or(0);
                    if h == 0 || s * s * h != numel {
                        return Err(fail(format!("{numel} values, not S·S·H for {h} heads")));
                    }
                    (Ty::tensor(&[h, s, s]), Layout::Delta { s })
                }
                _ => {
                    let hd = dim(weight("attn_k_norm.weight")?, 0);
                    let cells = usize::try_from(leaf.ne[1]).unwrap_or(0);
                    let row = numel.checked_div(cells).unwrap_or(0);
                    if hd == 0 || row % hd != 0 || row * cells != numel {
                        return Err(fail(format!("{numel} values, not cells × heads × a head dim of {hd}")));
                    }
                    (Ty::Cache { heads: row / hd, dim: hd }, Layout::Cache { row, cells })
                }
            };
            let short = match kind {
                StateKind::Conv => "conv",
                StateKind::Recurrent => "state",
                StateKind::KeyCache => "kcache",
                _ => "vcache",
            };
            let read = self.builder.state(kind, Some(layer), &format!("l{layer}.{short}"), ty);
            self.kinds.insert(read, kind);
            let store = match elems {
                Layout::Conv { k } => {
                    Store::new((0..numel).map(|o| Elem::Ir(read, (o / (k - 1)) * k + o % (k - 1) + 1)).collect(), 4)
                }
                Layout::Delta { s } => Store::new(
                    (0..numel)
                        .map(|o| {
                            let (head, v, k) = (o / (s * s), (o / s) % s, o % s);
                            Elem::Ir(read, head * s * s + k * s + v)
                        })
                        .collect(),
                    4,
                ),
                Layout::Cache { row, cells } => {
                    let cache = self.caches.len();
                    self.caches.push(attention::Cache::new(read, row, cells));
                    let bytes = elem_bytes(&leaf.ty).map_err(fail)?;
                    Store::new((0..numel).map(|o| Elem::Cell { cache, offset: o }).collect(), bytes)
                }
            };
            self.stores.insert(leaf.id.clone(), store);
            self.states.push(StateSlot { kind, layer, read, leaf: leaf.id.clone() });
        }
        Ok(())
    }

    /// Reads node `n`.
    fn node(&mut self, n: &Tensor) -> Result<(), String> {
        if n.ne.contains(&0) {
            return Ok(()); // no elements: llama.cpp's copies of empty state slots
        }
        match n.op.as_str() {
            "VIEW" | "RESHAPE" | "PERMUTE" | "TRANSPOSE" => {
                let src = self.src(n, 0)?;
                if let Some(p) = self.pending.get(&src.id).cloned() {
                    if n.op == "RESHAPE" || n.op == "VIEW" {
                        self.pending.insert(n.id.clone(), p);
                        return Ok(());
                    }
                    return Err("a layout op on a value the importer holds only as a pending computation".into());
                }
                if self.input_root(n).is_some() {
                    return Ok(()); // a view of an input, read by `input_values`
                }
                self.storage(n).map(|_| ())
            }
            "CONT" => {
                let src = self.src(n, 0)?;
                let elems = self.read(src)?;
                self.fresh(n, elems)
            }
            "CPY" => {
                let (a, b) = (self.src(n, 0)?, self.src(n, 1)?);
                if a.ty != b.ty {
                    return Err(format!("a copy from {} into {}, a rounding the importer does not read", a.ty, b.ty));
                }
                let elems = self.read(a)?;
                self.write(n, &elems)
            }
            "CONCAT" => self.concat(n),
            "REPEAT" => {
                let a = self.src(n, 0)?;
                let ea = self.read(a)?;
                let na = sizes(a)?;
                let out = index_space(&sizes(n)?)
                    .map(|i| ea[flat(&[i[0] % na[0], i[1] % na[1], i[2] % na[2], i[3] % na[3]], &na)])
                    .collect();
                self.fresh(n, out)
            }
            "GET_ROWS" => self.get_rows(n),
            "SET_ROWS" => attention::set_rows(self, n),
            _ => compute::read(self, n),
        }
    }

    /// Source `i` of `n`.
    fn src(&self, n: &Tensor, i: usize) -> Result<&'a Tensor, String> {
        let id = n.src.get(i).cloned().flatten().ok_or_else(|| format!("no source {i}"))?;
        self.rec.get(&id).ok_or_else(|| format!("source {id} was not recorded"))
    }

    /// The storage `t` is a view of (itself when it is none), made for a leaf the first time it is
    /// read: a weight's values, listed when a view reads them.
    fn storage(&mut self, t: &Tensor) -> Result<String, String> {
        let root = t.view_src.clone().unwrap_or_else(|| t.id.clone());
        if self.stores.contains_key(&root) {
            return Ok(root);
        }
        let leaf = self.rec.get(&root).ok_or("a view of a storage that was not recorded")?;
        if leaf.op != "NONE" {
            return Err(format!("a view of node {root}, which holds nothing yet"));
        }
        let w = self.weight(leaf)?;
        let n = self.builder.ty(w).numel().ok_or("a weight that is not an array")?;
        if n > MAX_ELEMS {
            return Err(format!("a view of {} ({n} values): the importer lists at most {MAX_ELEMS}", leaf.name));
        }
        self.stores.insert(root.clone(), Store::new((0..n).map(|i| Elem::Ir(w, i)).collect(), elem_bytes(&leaf.ty)?));
        Ok(root)
    }

    /// The IR constant of weight leaf `leaf`, bound whole by its GGUF name, shaped as its `ne`
    /// reversed (`[rows, columns]`) without sizes of one above the first.
    fn weight(&mut self, leaf: &Tensor) -> Result<TensorId, String> {
        if let Some(&t) = self.weights.get(&leaf.id) {
            return Ok(t);
        }
        if leaf.op != "NONE" || leaf.input || state_leaf(&leaf.name).is_some() {
            return Err(format!("{} is not a weight", leaf.name));
        }
        let mut dims: Vec<usize> =
            leaf.ne.iter().rev().map(|&d| usize::try_from(d).unwrap_or(0)).skip_while(|&d| d == 1).collect();
        if dims.is_empty() {
            dims.push(1);
        }
        let t = self.builder.constant(&leaf.name, &dims, Binding::whole(leaf.name.clone()));
        self.weights.insert(leaf.id.clone(), t);
        Ok(t)
    }

    /// The logical elements of `t` (`ne0` fastest), read through its strides from its storage.
    fn read(&mut self, t: &Tensor) -> Result<Vec<Elem>, String> {
        let root = self.storage(t)?;
        let store = &self.stores[&root];
        let offs: Vec<usize> = offsets(t, store.bytes)?;
        offs.iter()
            .map(|&o| {
                store.elems.get(o).copied().ok_or_else(|| format!("element {o} of a storage of {}", store.elems.len()))
            })
            .collect()
    }

    /// Gives non-view node `n` a storage of its own holding `elems`.
    fn fresh(&mut self, n: &Tensor, elems: Vec<Elem>) -> Result<(), String> {
        if n.view_src.is_some() {
            return Err("a computed node that is a view".into());
        }
        if let Some(traced) = &mut self.traced {
            let ir: Option<Vec<(TensorId, usize)>> = elems.iter().map(|e| e.ir()).collect();
            if let Some(ir) = ir {
                traced.push((n.id.clone(), ir));
            }
        }
        let bytes = elem_bytes(&n.ty)?;
        let mut store = Store::new(vec![Elem::Unset; elems.len()], bytes);
        for (o, e) in offsets(n, bytes)?.into_iter().zip(elems) {
            *store.elems.get_mut(o).ok_or("a node whose strides run past its own values")? = e;
        }
        self.stores.insert(n.id.clone(), store);
        Ok(())
    }

    /// Writes `elems` through view node `n` into its storage (a `CPY`'s or `SET_ROWS`'s result).
    fn write(&mut self, n: &Tensor, elems: &[Elem]) -> Result<(), String> {
        let root = self.storage(n)?;
        let store = self.stores.get_mut(&root).ok_or("no storage")?;
        let offs = offsets(n, store.bytes)?;
        if offs.len() != elems.len() {
            return Err(format!("{} values written into {}", elems.len(), offs.len()));
        }
        for (o, &e) in offs.iter().zip(elems) {
            *store.elems.get_mut(*o).ok_or("a write past the end of its storage")? = e;
        }
        self.writer.insert(root, self.at);
        Ok(())
    }

    /// `CONCAT`: `a` then `b` along dim op param 0, into a storage of the node's own.
    fn concat(&mut self, n: &Tensor) -> Result<(), String> {
        let (a, b) = (self.src(n, 0)?, self.src(n, 1)?);
        let d = usize::try_from(*n.op_params.first().ok_or("no dim")?).map_err(|_| "a dim below zero")?;
        let (ea, eb) = (self.read(a)?, self.read(b)?);
        let ne = sizes(n)?;
        let mut out = Vec::with_capacity(ea.len() + eb.len());
        let split = usize::try_from(a.ne[d]).map_err(|_| "a size below zero")?;
        let (sa, sb) = (sizes(a)?, sizes(b)?);
        for i in index_space(&ne) {
            let mut j = i;
            let e = if i[d] < split {
                ea[flat(&j, &sa)]
            } else {
                j[d] -= split;
                eb[flat(&j, &sb)]
            };
            out.push(e);
        }
        self.fresh(n, out)
    }

    /// `GET_ROWS`: the token's row of the embedding table (an IR `embed`), or rows of elements at
    /// the indices the recorded input holds (a state's slot, the output row), checked to be the
    /// conventions' own.
    fn get_rows(&mut self, n: &Tensor) -> Result<(), String> {
        let (a, ids) = (self.src(n, 0)?, self.src(n, 1)?);
        if ids.name == "inp_tokens" {
            let table = self.weight(a)?;
            let token = self.builder.token();
            let row = self.emit(OpKind::Embed, &[table, token])?;
            let count = self.builder.ty(row).numel().unwrap_or(0);
            return self.fresh(n, (0..count).map(|i| Elem::Ir(row, i)).collect());
        }
        let index = self.input_values(ids)?;
        if index.iter().any(|&i| i != 0.0) {
            return Err(format!(
                "rows {index:?} of {}: one sequence reads slot 0 and row 0, the only rows the importer reads",
                ids.name
            ));
        }
        let elems = self.read(a)?;
        let row = usize::try_from(a.ne[0]).map_err(|_| "a size below zero")?;
        let first = elems.get(..row).ok_or("a first row past its tensor")?;
        let out: Vec<Elem> = index.iter().flat_map(|_| first.iter().copied()).collect();
        self.fresh(n, out)
    }

    /// The input leaf `t` is, or is a view of.
    fn input_root(&self, t: &Tensor) -> Option<&'a Tensor> {
        let root = self.rec.get(t.view_src.as_deref().unwrap_or(&t.id))?;
        root.input.then_some(root)
    }

    /// The recorded values input `t` reads: an input leaf's, or those a view of one selects.
    fn input_values(&self, t: &Tensor) -> Result<Vec<f64>, String> {
        let root = self.input_root(t).ok_or_else(|| format!("{} is not an input", t.name))?;
        let values = recorded_values(root)?;
        if t.view_src.is_none() {
            return Ok(values.to_vec());
        }
        offsets(t, elem_bytes(&root.ty)?)?
            .into_iter()
            .map(|o| {
                values
                    .get(o)
                    .copied()
                    .ok_or_else(|| format!("a view past the {} recorded values of {}", values.len(), root.name))
            })
            .collect()
    }

    /// Materialises `elems` as an IR tensor of `shape`: every element must be a value of an IR
    /// tensor.
    fn materialise(&mut self, elems: &[Elem], shape: &[usize]) -> Result<TensorId, String> {
        let ids: Vec<(TensorId, usize)> = elems
            .iter()
            .map(|&e| match delta::resolve(self, e) {
                Elem::Ir(t, i) => Ok((t, i)),
                other => Err(format!("an operand that holds {other:?}, not a value of the step")),
            })
            .collect::<Result<_, _>>()?;
        follow::materialise(self, &ids, shape)
    }

    /// The node being read, as a proof names it: `node n192 `cache_k_l3 (view)` (SET_ROWS)`.
    fn label(&self) -> String {
        self.rec.nodes.get(self.at).map_or(String::new(), |n| format!("node {} `{}` ({})", n.id, n.name, n.row_name()))
    }

    /// Writes op `kind` on `inputs`, one output named after the node being read.
    fn emit(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, String> {
        let tys: Vec<&Ty> = inputs.iter().map(|&t| self.builder.ty(t)).collect();
        kind.infer(&tys).map_err(|e| format!("{}: {e}", kind.name()))?;
        let name = self.rec.nodes.get(self.at).map_or("imported", |n| n.name.as_str()).to_string();
        self.origin.push(self.label());
        let out = self.builder.op1(kind.clone(), inputs, &name);
        self.produced.insert(out, (kind, inputs.to_vec()));
        Ok(out)
    }

    /// Records that llama.cpp rounds input `input` of the op just written to `to`.
    fn rounds(&mut self, input: usize, to: &str) {
        let op = self.origin.len().saturating_sub(1);
        self.places.push(Place { op, input, to: to.to_string() });
    }

    /// Writes op `kind` of two outputs on `inputs`.
    fn emit2(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<(TensorId, TensorId), String> {
        let tys: Vec<&Ty> = inputs.iter().map(|&t| self.builder.ty(t)).collect();
        kind.infer(&tys).map_err(|e| format!("{}: {e}", kind.name()))?;
        let name = self.rec.nodes.get(self.at).map_or("imported", |n| n.name.as_str()).to_string();
        self.origin.push(self.label());
        let out = self.builder.op(kind, inputs, &[&format!("{name}.state"), &name]);
        Ok((out[0], out[1]))
    }

    /// Ends the step: the logits are the last node's values; each state is written from its leaf's
    /// storage as it stands; the position advances.
    fn finish(mut self) -> Result<Traced, GraphError> {
        let last = self.rec.nodes.last().ok_or_else(|| GraphError::Schema("a graph of no nodes".into()))?;
        self.at = self.rec.nodes.len() - 1;
        let fail = |why: String| node_error(last, why);
        let logits = self.read(last).map_err(&fail)?;
        let logits = self.materialise(&logits, &[logits.len()]).map_err(|w| fail(format!("the logits: {w}")))?;
        for s in self.states.clone() {
            // The ops that read a state's end off its storage are the last write's.
            self.at = self.writer.get(&s.leaf).copied().unwrap_or(self.rec.nodes.len() - 1);
            let write = self.state_write(&s).map_err(|why| match self.rec.nodes.get(self.at) {
                Some(n) => node_error(n, format!("state {} (layer {}) at the end of the step: {why}", s.leaf, s.layer)),
                None => GraphError::Schema(format!("state {} at the end of the step: {why}", s.leaf)),
            })?;
            self.builder.write_state(s.read, write);
        }
        let next = self.emit(OpKind::Advance, &[self.pos]).map_err(GraphError::Schema)?;
        self.builder.write_state(self.pos, next);
        let graph = self.builder.finish(logits).map_err(GraphError::Schema)?;
        let mut im = Imported { graph, origin: self.origin, numerics: self.numerics, places: self.places };
        if self.traced.is_none() {
            let moved = follow::prune(&mut im.graph, &mut im.origin);
            im.places = im.places.into_iter().filter_map(|p| Some(Place { op: (*moved.get(p.op)?)?, ..p })).collect();
        }
        Ok(Traced { imported: im, nodes: self.traced.unwrap_or_default() })
    }

    /// The IR tensor the state `s` holds at the end of the step, from its storage.
    fn state_write(&mut self, s: &StateSlot) -> Result<TensorId, String> {
        let store = self.stores.get(&s.leaf).ok_or("no storage")?.elems.clone();
        match (s.kind, self.builder.ty(s.read).clone()) {
            (StateKind::Conv, Ty::Tensor(shape)) => {
                let (c, k) = (shape[0], shape[1]);
                // The IR window's oldest column is never read; it is completed as the window
                // shifted by one, which is what an IR step leaves there.
                let mut list = Vec::with_capacity(c * k);
                for ch in 0..c {
                    list.push(Elem::Ir(s.read, ch * k + 1));
                    list.extend_from_slice(&store[ch * (k - 1)..(ch + 1) * (k - 1)]);
                }
                self.materialise(&list, &[c, k])
            }
            (StateKind::Recurrent, Ty::Tensor(shape)) => {
                let (h, sk, sv) = (shape[0], shape[1], shape[2]);
                let mut list = Vec::with_capacity(h * sk * sv);
                for head in 0..h {
                    for k in 0..sk {
                        for v in 0..sv {
                            list.push(store[head * sk * sv + v * sk + k]);
                        }
                    }
                }
                self.materialise(&list, &shape)
            }
            (StateKind::KeyCache | StateKind::ValueCache, _) => attention::cache_write(self, s.read),
            (kind, ty) => Err(format!("a {kind:?} state of {ty}")),
        }
    }
}

impl follow::Emitter for Importer<'_> {
    fn ty(&self, t: TensorId) -> &Ty {
        self.builder.ty(t)
    }

    fn emit(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, String> {
        Importer::emit(self, kind, inputs)
    }

    fn state_kind(&self, t: TensorId) -> Option<StateKind> {
        self.kinds.get(&t).copied()
    }

    fn memo(&mut self) -> &mut foldhash::HashMap<follow::Listed, TensorId> {
        &mut self.memo
    }
}

/// For each node, the storages of nodes (never of leaves: the states' are read at the step's end)
/// that no node after it reads, through a source or a view.
fn last_reads(rec: &Recording) -> Vec<Vec<String>> {
    let root = |id: &str| rec.get(id).map_or(id.to_string(), |t| t.view_src.clone().unwrap_or_else(|| t.id.clone()));
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, n) in rec.nodes.iter().enumerate() {
        for id in n.src.iter().flatten().chain(&n.view_src).chain(std::iter::once(&n.id)) {
            last.insert(root(id), i);
        }
    }
    let mut out = vec![vec![]; rec.nodes.len()];
    for (r, i) in last {
        if rec.get(&r).is_some_and(|t| t.op != "NONE") && i + 1 < rec.nodes.len() {
            out[i].push(r);
        }
    }
    out
}

/// Checks the conventions at every step of the recorded rollout, where the recording holds its
/// inputs: at step `p`, the token is embedded from `inp_tokens`, every position section but the
/// fourth is `p` (the fourth `0`), the key is written at cell `p`, the state is slot 0, and the
/// mask shows cells `0..=p`. The recorded step's own inputs are checked where they are read too.
fn check_rollout(rec: &Recording) -> Result<(), GraphError> {
    for (p, inputs) in rec.steps.iter().enumerate() {
        let at = p as f64;
        let fail = |name: &str, why: String| GraphError::Schema(format!("step {p}'s `{name}`: {why}"));
        for (name, values) in inputs {
            let ok = match name.as_str() {
                "inp_pos" => {
                    !values.is_empty()
                        && values.len() % 4 == 0
                        && values
                            .chunks(values.len() / 4)
                            .enumerate()
                            .all(|(s, c)| c.iter().all(|&v| v == if s < 3 { at } else { 0.0 }))
                }
                "attn_inp_k_idxs" => values == &[at],
                "rs_s_copy" => values.first() == Some(&0.0),
                "out_ids" => values == &[0.0],
                "attn_inp_kq_mask" => {
                    // the first row: the one token's
                    let cells = rec.leaves.iter().find(|l| l.name == *name).map_or(0, |l| l.ne[0].max(0) as usize);
                    values.len() >= cells
                        && values[..cells]
                            .iter()
                            .enumerate()
                            .all(|(c, &m)| m == if c <= p { 0.0 } else { f64::NEG_INFINITY })
                }
                _ => true,
            };
            if !ok {
                let shown: Vec<f64> = values.iter().take(8).copied().collect();
                return Err(fail(
                    name,
                    format!("{shown:?}…, not the conventions' (docs/IMPORT.md) for one sequence at position {p}"),
                ));
            }
        }
    }
    Ok(())
}

/// How a state leaf's elements map to its IR state's.
enum Layout {
    /// A conv window of kernel `k`: llama.cpp's element `c·(k−1) + j` is the window's `c·k + j + 1`.
    Conv { k: usize },
    /// A delta state of `s × s` per head: llama.cpp's `(k, v)` is the IR's `(k, v)` transposed.
    Delta { s: usize },
    /// A KV cache of `cells` rows of `row` values.
    Cache { row: usize, cells: usize },
}

/// The state kind and layer of a leaf named as llama.cpp's memory names them.
fn state_leaf(name: &str) -> Option<(StateKind, usize)> {
    let (kind, layer) = name.strip_prefix("cache_")?.split_once("_l")?;
    let kind = match kind {
        "r" => StateKind::Conv,
        "s" => StateKind::Recurrent,
        "k" => StateKind::KeyCache,
        "v" => StateKind::ValueCache,
        _ => return None,
    };
    Some((kind, layer.parse().ok()?))
}

/// The bytes of one element of type `ty`, for the types whose elements the importer follows.
fn elem_bytes(ty: &str) -> Result<usize, String> {
    match ty {
        "f32" | "i32" => Ok(4),
        "f16" | "bf16" => Ok(2),
        "i64" => Ok(8),
        other => Err(format!("elements of type {other}, which are read only whole, by a matrix product")),
    }
}

/// The sizes of `t` as `usize`s.
fn sizes(t: &Tensor) -> Result<[usize; 4], String> {
    let mut out = [0; 4];
    for (o, &d) in out.iter_mut().zip(&t.ne) {
        *o = usize::try_from(d).map_err(|_| "a size below zero")?;
    }
    Ok(out)
}

/// Every index of `ne`, `ne0` fastest.
fn index_space(ne: &[usize; 4]) -> impl Iterator<Item = [usize; 4]> + use<> {
    let ne = *ne;
    (0..ne[3]).flat_map(move |i3| {
        (0..ne[2]).flat_map(move |i2| (0..ne[1]).flat_map(move |i1| (0..ne[0]).map(move |i0| [i0, i1, i2, i3])))
    })
}

/// The flat index of `i` in contiguous sizes `ne`.
fn flat(i: &[usize; 4], ne: &[usize; 4]) -> usize {
    ((i[3] * ne[2] + i[2]) * ne[1] + i[1]) * ne[0] + i[0]
}

/// The element offsets of `t`'s logical elements in its storage, `ne0` fastest.
fn offsets(t: &Tensor, bytes: usize) -> Result<Vec<usize>, String> {
    let ne = sizes(t)?;
    let count = ne.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or("sizes that overflow")?;
    if count > MAX_ELEMS {
        return Err(format!("{count} elements: the importer follows at most {MAX_ELEMS}"));
    }
    let base = usize::try_from(t.view_offs).map_err(|_| "an offset past memory")?;
    let nb: Vec<usize> = t.nb.iter().map(|&b| usize::try_from(b).unwrap_or(usize::MAX)).collect();
    let mut out = Vec::with_capacity(count);
    for i in index_space(&ne) {
        let byte = (0..4).try_fold(base, |acc, d| acc.checked_add(i[d].checked_mul(nb[d])?)).ok_or("overflow")?;
        if !byte.is_multiple_of(bytes) {
            return Err(format!("byte {byte}, not a whole element of {bytes} bytes"));
        }
        out.push(byte / bytes);
    }
    Ok(out)
}

/// The recorded values of input leaf `t`.
fn recorded_values(t: &Tensor) -> Result<&[f64], String> {
    t.values.as_deref().ok_or_else(|| format!("input {} has no recorded values", t.name))
}
