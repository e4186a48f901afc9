//! The step graph: one decode step of a model, as tensors, constants, state and ops.

use super::binding::Binding;
use super::op::{Op, OpKind, TensorId};
use super::ty::Ty;

/// One decode step: the token it reads, the constants it reads (each bound to a checkpoint tensor
/// and a view), the state it reads at the start of the step and writes at the end, and its ops in
/// the author's order. The step's output is its logits.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub name: String,
    /// Every tensor of the step, indexed by [`TensorId`]; names are unique.
    pub tensors: Vec<TensorDecl>,
    /// The token the step reads.
    pub token: TensorId,
    pub consts: Vec<Const>,
    pub states: Vec<State>,
    pub ops: Vec<Op>,
    /// The logits the step writes.
    pub logits: TensorId,
}

/// A named, typed tensor of the step.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    pub name: String,
    pub ty: Ty,
}

/// A constant: a tensor whose values are the view of a checkpoint tensor its binding names.
#[derive(Clone, Debug, PartialEq)]
pub struct Const {
    pub tensor: TensorId,
    pub binding: Binding,
}

/// A piece of state carried between steps: `read` holds it at the start of a step, `write` (written
/// by an op) holds it at the end.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub kind: StateKind,
    /// The layer it belongs to; `None` for the step's position.
    pub layer: Option<usize>,
    pub read: TensorId,
    pub write: TensorId,
}

/// What a piece of state is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// The position of the next token (starts at 0).
    Position,
    /// A Gated-DeltaNet layer's convolution window `[C, K]` (column `K−1` newest; starts at 0).
    Conv,
    /// A Gated-DeltaNet layer's delta-rule state `[Hv, dk, dv]` (starts at 0).
    Recurrent,
    /// An attention layer's key cache (starts empty).
    KeyCache,
    /// An attention layer's value cache (starts empty).
    ValueCache,
}

impl StateKind {
    pub const ALL: [StateKind; 5] =
        [StateKind::Position, StateKind::Conv, StateKind::Recurrent, StateKind::KeyCache, StateKind::ValueCache];

    /// The kind's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            StateKind::Position => "position",
            StateKind::Conv => "conv",
            StateKind::Recurrent => "recurrent",
            StateKind::KeyCache => "key_cache",
            StateKind::ValueCache => "value_cache",
        }
    }
}

/// Where a tensor's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Def {
    Token,
    Const(usize),
    State(usize),
    /// Output `1` of op `0`.
    Op(usize, usize),
}

impl Graph {
    /// The declaration of tensor `t`.
    pub fn decl(&self, t: TensorId) -> &TensorDecl {
        &self.tensors[t.0]
    }

    /// The type of tensor `t`.
    pub fn ty(&self, t: TensorId) -> &Ty {
        &self.tensors[t.0].ty
    }

    /// The name of tensor `t`.
    pub fn name_of(&self, t: TensorId) -> &str {
        &self.tensors[t.0].name
    }

    /// The tensor named `name`, if any.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|d| d.name == name).map(TensorId)
    }

    /// The definition of every tensor (`None` where none is given: an invalid graph).
    pub fn defs(&self) -> Vec<Option<Def>> {
        let mut defs = vec![None; self.tensors.len()];
        let mut set = |t: TensorId, d: Def| {
            if let Some(slot) = defs.get_mut(t.0) {
                slot.get_or_insert(d);
            }
        };
        set(self.token, Def::Token);
        for (i, c) in self.consts.iter().enumerate() {
            set(c.tensor, Def::Const(i));
        }
        for (i, s) in self.states.iter().enumerate() {
            set(s.read, Def::State(i));
        }
        for (i, op) in self.ops.iter().enumerate() {
            for (j, &t) in op.outputs.iter().enumerate() {
                set(t, Def::Op(i, j));
            }
        }
        defs
    }

    /// The constant whose tensor is `t`, if `t` is a constant.
    pub fn constant(&self, t: TensorId) -> Option<&Const> {
        self.consts.iter().find(|c| c.tensor == t)
    }

    /// Drops the tensors nothing refers to (left behind when ops are replaced), renumbering the
    /// rest in their order.
    pub fn compact(&mut self) {
        let mut used = vec![false; self.tensors.len()];
        let mut mark = |t: TensorId| {
            if let Some(u) = used.get_mut(t.0) {
                *u = true;
            }
        };
        mark(self.token);
        mark(self.logits);
        self.consts.iter().for_each(|c| mark(c.tensor));
        self.states.iter().for_each(|s| {
            mark(s.read);
            mark(s.write);
        });
        self.ops.iter().flat_map(|o| o.inputs.iter().chain(&o.outputs)).for_each(|&t| mark(t));
        if used.iter().all(|&u| u) {
            return;
        }
        let mut new_id = vec![TensorId(usize::MAX); self.tensors.len()];
        let mut kept = vec![];
        for (i, d) in std::mem::take(&mut self.tensors).into_iter().enumerate() {
            if used[i] {
                new_id[i] = TensorId(kept.len());
                kept.push(d);
            }
        }
        self.tensors = kept;
        let map = |t: &mut TensorId| *t = new_id.get(t.0).copied().unwrap_or(*t);
        map(&mut self.token);
        map(&mut self.logits);
        self.consts.iter_mut().for_each(|c| map(&mut c.tensor));
        self.states.iter_mut().for_each(|s| {
            map(&mut s.read);
            map(&mut s.write);
        });
        self.ops.iter_mut().flat_map(|o| o.inputs.iter_mut().chain(o.outputs.iter_mut())).for_each(map);
    }

    /// The position state's start-of-step tensor, if the graph has one.
    pub fn position(&self) -> Option<TensorId> {
        self.states.iter().find(|s| s.kind == StateKind::Position).map(|s| s.read)
    }
}

/// Builds a graph tensor by tensor and op by op, inferring each op's output types from its shape
/// rule. The first error poisons the builder; [`GraphBuilder::finish`] returns it.
pub struct GraphBuilder {
    graph: Graph,
    error: Option<String>,
    /// The names declared so far: a graph of a mixture of experts declares tens of thousands of
    /// tensors, which a scan per name would make quadratic. Hashed by foldhash rather than SipHash:
    /// the names are the program's own, so there is no adversary to flood the table.
    taken: foldhash::HashSet<String>,
    /// Per name asked for whose search went past the bare name, the suffix its last search ended
    /// at (a name not here resumes at 1, the bare name).
    resume: foldhash::HashMap<String, usize>,
}

impl GraphBuilder {
    /// A builder for a graph named `name`, whose token tensor is `%token`.
    pub fn new(name: &str) -> GraphBuilder {
        let mut graph = Graph {
            name: name.to_string(),
            tensors: vec![],
            token: TensorId(0),
            consts: vec![],
            states: vec![],
            ops: vec![],
            logits: TensorId(0),
        };
        graph.tensors.push(TensorDecl { name: "token".into(), ty: Ty::Token });
        let taken = ["token".to_string()].into_iter().collect();
        GraphBuilder { graph, error: None, taken, resume: Default::default() }
    }

    /// The token tensor.
    pub fn token(&self) -> TensorId {
        self.graph.token
    }

    /// The type of tensor `t`, as declared so far.
    pub fn ty(&self, t: TensorId) -> &Ty {
        self.graph.ty(t)
    }

    /// A new tensor named `name` (made unique by a suffix if taken).
    fn declare(&mut self, name: &str, ty: Ty) -> TensorId {
        // Names are never removed, so every suffix before the one `name`'s last search ended at is
        // still taken: the search resumes there and finds what a search from the start would.
        let start = self.resume.get(name).copied().unwrap_or(1);
        let mut n = start;
        let mut unique = if n == 1 { name.to_string() } else { format!("{name}.{n}") };
        while self.taken.contains(&unique) {
            n += 1;
            unique = format!("{name}.{n}");
        }
        if n != start {
            self.resume.insert(name.to_string(), n);
        }
        self.taken.insert(unique.clone());
        self.graph.tensors.push(TensorDecl { name: unique, ty });
        TensorId(self.graph.tensors.len() - 1)
    }

    /// A constant named `name` of shape `shape`, bound to `binding`.
    pub fn constant(&mut self, name: &str, shape: &[usize], binding: Binding) -> TensorId {
        let t = self.declare(name, Ty::tensor(shape));
        self.graph.consts.push(Const { tensor: t, binding });
        t
    }

    /// The start-of-step tensor of a new piece of state; [`GraphBuilder::write_state`] names its end.
    pub fn state(&mut self, kind: StateKind, layer: Option<usize>, name: &str, ty: Ty) -> TensorId {
        let t = self.declare(name, ty);
        self.graph.states.push(State { kind, layer, read: t, write: t });
        t
    }

    /// Records that `write` holds the state read as `read` at the end of the step.
    pub fn write_state(&mut self, read: TensorId, write: TensorId) {
        match self.graph.states.iter_mut().find(|s| s.read == read) {
            Some(s) => s.write = write,
            None => self.fail(format!("{} is not state", self.graph.name_of(read))),
        }
    }

    /// Appends an op writing one tensor per name in `outs`, typed by the op's shape rule.
    pub fn op(&mut self, kind: OpKind, inputs: &[TensorId], outs: &[&str]) -> Vec<TensorId> {
        let tys: Vec<&Ty> = inputs.iter().map(|&t| self.graph.ty(t)).collect();
        let types = match kind.infer(&tys) {
            Ok(t) if t.len() == outs.len() => t,
            Ok(t) => {
                let msg = format!("{} writes {} tensors, not {}", kind.name(), t.len(), outs.len());
                self.fail(msg);
                return outs.iter().map(|_| TensorId(0)).collect();
            }
            Err(e) => {
                let msg = format!("{} writing {}: {e}", kind.name(), outs.join(", "));
                self.fail(msg);
                return outs.iter().map(|_| TensorId(0)).collect();
            }
        };
        let outputs: Vec<TensorId> = outs.iter().zip(types).map(|(n, ty)| self.declare(n, ty)).collect();
        self.graph.ops.push(Op { kind, inputs: inputs.to_vec(), outputs: outputs.clone() });
        outputs
    }

    /// Appends an op writing one tensor named `out`.
    pub fn op1(&mut self, kind: OpKind, inputs: &[TensorId], out: &str) -> TensorId {
        self.op(kind, inputs, &[out])[0]
    }

    fn fail(&mut self, msg: String) {
        self.error.get_or_insert(msg);
    }

    /// The graph, with `logits` as its output, or the first error met while building it.
    pub fn finish(mut self, logits: TensorId) -> Result<Graph, String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.graph.logits = logits;
        Ok(self.graph)
    }
}
