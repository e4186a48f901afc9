//! The reference interpreter: runs any valid step graph on a checkpoint, in f64, step after step.
//!
//! It is the plain semantics of the IR: each op computes what its doc comment says, on f64 arrays;
//! a fused op runs the primitive steps of its meaning in the shared fusion table; constants are read
//! in place from the checkpoint in their stored types, each row dequantized exactly and widened to
//! f64 as an op reads it. The state starts at zero (position 0, zero convolution windows and
//! delta-rule states, empty caches); a step reads it, runs the ops in order and carries each
//! state's end-of-step value to the next step.

#![forbid(unsafe_code)]

mod ops;
mod rounding;
mod values;

use formats::bind::{self, BindError};
use formats::checkpoint::Checkpoint;
use ir::{Graph, GraphError, StateKind, Ty};
pub use rounding::Rounding;
pub use values::Decoded;
use values::{ConstView, Fault, Value};

/// Why the interpreter cannot start on a graph and checkpoint, or cannot finish a step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("invalid graph: {0}")]
    Graph(#[from] GraphError),
    #[error("{0}")]
    Bind(#[from] BindError),
    #[error("constant %{constant} reads checkpoint tensor {tensor}: {why}")]
    Checkpoint { constant: String, tensor: String, why: String },
    #[error("state %{state} is of type {ty}, which has no start value")]
    State { state: String, ty: Ty },
    #[error("token {token} is out of range: the embedding table has {rows} rows")]
    TokenOutOfRange { token: u32, rows: usize },
    #[error("op {op} ({kind}): {why}")]
    Op { op: usize, kind: &'static str, why: String },
    #[error("the step has no value for {what}")]
    Missing { what: String },
}

/// The state a runner carries between steps, as plain data, in the order of the graph's states.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSnapshot {
    pub entries: Vec<StateEntry>,
}

/// One piece of carried state: which state of the graph it is, and its values row-major. The
/// position has shape `[]` and one value; a convolution window is `[C, K]`; a delta-rule state is
/// `[Hv, dk, dv]`; a key or value cache is `[heads, T, dim]` with `T` the positions cached so far.
#[derive(Clone, Debug, PartialEq)]
pub struct StateEntry {
    /// The index of the state in the graph's `states`.
    pub index: usize,
    pub kind: StateKind,
    pub layer: Option<usize>,
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

impl StateSnapshot {
    /// The entry of kind `kind` of layer `layer`, if any.
    pub fn find(&self, kind: StateKind, layer: Option<usize>) -> Option<&StateEntry> {
        self.entries.iter().find(|e| e.kind == kind && e.layer == layer)
    }
}

/// The values of a step's tensors by tensor index: each array's values in row-major order, `None`
/// for the token, the position, a cache or a constant.
pub type TensorValues = Vec<Option<Vec<f64>>>;

/// Runs a graph step by step on a checkpoint it borrows, carrying the graph's state.
pub struct Runner<'c> {
    graph: &'c Graph,
    /// The start-of-step value of each state of the graph, in the order of `graph.states`.
    state: Vec<Value<'c>>,
    /// The value of each tensor, by id, during a step. Between steps it holds the view of each
    /// constant (set once, by [`Runner::new`]) and nothing else: a step sets the token and the
    /// states, its ops write the rest, and it clears all of that again when it ends.
    env: Vec<Option<Value<'c>>>,
    /// For each op, an input to round before the op reads it, and how (none unless asked).
    rounded: Vec<Option<(usize, Rounding)>>,
}

impl<'c> Runner<'c> {
    /// A runner of `graph` on `checkpoint`, at the start state. The graph must be valid, and every
    /// constant must bind to a checkpoint tensor whose values fill its shape.
    pub fn new(graph: &'c Graph, checkpoint: &'c Checkpoint) -> Result<Runner<'c>, InterpError> {
        Runner::with_decoded(graph, checkpoint, &Decoded::default())
    }

    /// [`Runner::new`], taking the small constants' values from `decoded` where another runner on
    /// `checkpoint` decoded them (and keeping there those it decodes).
    pub fn with_decoded(
        graph: &'c Graph,
        checkpoint: &'c Checkpoint,
        decoded: &Decoded<'c>,
    ) -> Result<Runner<'c>, InterpError> {
        graph.validate()?;
        bind::check(graph, checkpoint)?;
        let mut env: Vec<Option<Value<'c>>> = vec![None; graph.tensors.len()];
        for c in &graph.consts {
            let fail = |why: String| InterpError::Checkpoint {
                constant: graph.name_of(c.tensor).to_string(),
                tensor: c.binding.tensor.clone(),
                why,
            };
            let t = checkpoint.get(&c.binding.tensor).ok_or_else(|| fail("missing".into()))?;
            env[c.tensor.0] = Some(Value::Const(ConstView::new(t, c.binding.view, decoded).map_err(fail)?));
        }
        let mut state = Vec::with_capacity(graph.states.len());
        for s in &graph.states {
            let ty = graph.ty(s.read);
            let start = Value::initial(ty)
                .ok_or_else(|| InterpError::State { state: graph.name_of(s.read).to_string(), ty: ty.clone() })?;
            state.push(start);
        }
        Ok(Runner { graph, state, env, rounded: vec![None; graph.ops.len()] })
    }

    /// Rounds input `input` of op `op` by `rounding` before the op reads it, at every step: another
    /// engine's rounding (llama.cpp's product columns, its F16 cache), so that its values can be
    /// compared with this graph's at f32 tolerance. The check never asks for one.
    pub fn round_input(&mut self, op: usize, input: usize, rounding: Rounding) -> Result<(), InterpError> {
        let arity = self.graph.ops.get(op).map(|o| o.inputs.len());
        if arity.is_none_or(|n| input >= n) {
            return Err(InterpError::Missing { what: format!("input {input} of op {op}") });
        }
        self.rounded[op] = Some((input, rounding));
        Ok(())
    }

    /// Runs one step on `token`: returns its logits and carries the state to the next step. A step
    /// that fails leaves the state as it was.
    pub fn step(&mut self, token: u32) -> Result<Vec<f64>, InterpError> {
        let result = self.run_step(token);
        let (g, env) = (&self.graph, &mut self.env);
        env[g.token.0] = None;
        for t in g.states.iter().map(|s| s.read).chain(g.ops.iter().flat_map(|op| op.outputs.iter().copied())) {
            env[t.0] = None;
        }
        result
    }

    /// [`Runner::step`], also returning the value of every tensor of the step that is an array (in
    /// row-major order), by tensor index: `None` for the token, the position, a cache or a
    /// constant. For comparing a graph's intermediate values with another engine's.
    pub fn step_values(&mut self, token: u32) -> Result<(Vec<f64>, TensorValues), InterpError> {
        let result = self.run_step(token);
        let values = self
            .env
            .iter()
            .map(|v| match v {
                Some(Value::Array(a)) => Some(a.iter().copied().collect()),
                _ => None,
            })
            .collect();
        let (g, env) = (&self.graph, &mut self.env);
        env[g.token.0] = None;
        for t in g.states.iter().map(|s| s.read).chain(g.ops.iter().flat_map(|op| op.outputs.iter().copied())) {
            env[t.0] = None;
        }
        result.map(|logits| (logits, values))
    }

    /// [`Runner::step`], leaving the step's values in `env` for `step` to clear.
    fn run_step(&mut self, token: u32) -> Result<Vec<f64>, InterpError> {
        let (g, env) = (&self.graph, &mut self.env);
        env[g.token.0] = Some(Value::Token(token));
        for (s, value) in g.states.iter().zip(&self.state) {
            env[s.read.0] = Some(value.clone());
        }
        for (i, op) in g.ops.iter().enumerate() {
            let kind = op.kind.name();
            let fail = |why: String| InterpError::Op { op: i, kind, why };
            let outs = {
                let rounded_input = match self.rounded[i] {
                    Some((k, r)) => {
                        let t = op.inputs[k];
                        let v = env[t.0].as_ref().ok_or_else(|| fail(format!("%{} has no value", g.name_of(t))))?;
                        let mut a =
                            v.array().map_err(|_| fail(format!("input {k}, rounded, is not an array")))?.into_owned();
                        let flat = a.as_slice_mut().ok_or_else(|| fail("a non-contiguous input".into()))?;
                        rounding::round(r, flat).map_err(fail)?;
                        Some((k, Value::Array(a)))
                    }
                    None => None,
                };
                let mut ins = op
                    .inputs
                    .iter()
                    .map(|t| env[t.0].as_ref().ok_or_else(|| fail(format!("%{} has no value", g.name_of(*t)))))
                    .collect::<Result<ops::Operands, _>>()?;
                if let Some((k, v)) = &rounded_input {
                    ins[*k] = v;
                }
                ops::eval(&op.kind, &ins, op.outputs.len()).map_err(|f| match f {
                    Fault::TokenOutOfRange { token, rows } => InterpError::TokenOutOfRange { token, rows },
                    Fault::Shape(why) => fail(why),
                })?
            };
            if outs.len() != op.outputs.len() {
                return Err(fail(format!("wrote {} values for {} tensors", outs.len(), op.outputs.len())));
            }
            for (&t, value) in op.outputs.iter().zip(outs) {
                if !value.fits(g.ty(t)) {
                    return Err(fail(format!("wrote {} for %{} of {}", value.describe(), g.name_of(t), g.ty(t))));
                }
                env[t.0] = Some(value);
            }
        }
        let logits = read_out(env, g.logits.0, "the logits")?.into_iter().collect();
        let mut next = Vec::with_capacity(g.states.len());
        for s in &g.states {
            let missing = || InterpError::Missing { what: format!("the end of state %{}", g.name_of(s.read)) };
            next.push(env[s.write.0].clone().ok_or_else(missing)?);
        }
        self.state = next;
        Ok(logits)
    }

    /// The state carried to the next step: after the last step, or the start state before the first.
    pub fn state(&self) -> StateSnapshot {
        let entries = self
            .graph
            .states
            .iter()
            .zip(&self.state)
            .enumerate()
            .map(|(index, (s, value))| {
                let (shape, values) = match value {
                    Value::Position(p) => (vec![], vec![*p as f64]),
                    Value::Array(a) => (a.shape().to_vec(), a.iter().copied().collect()),
                    Value::Cache(c) => (c.shape().to_vec(), c.iter().copied().collect()),
                    // A state's value is written by an op, so it is never the token or a constant.
                    Value::Token(_) | Value::Const(_) => (vec![], vec![]),
                };
                StateEntry { index, kind: s.kind, layer: s.layer, shape, values }
            })
            .collect();
        StateSnapshot { entries }
    }
}

/// The value of tensor `t` at the end of a step, as an array.
fn read_out(env: &[Option<Value>], t: usize, what: &str) -> Result<ndarray::ArrayD<f64>, InterpError> {
    let value = env[t].as_ref().ok_or_else(|| InterpError::Missing { what: what.to_string() })?;
    match value.array() {
        Ok(a) => Ok(a.into_owned()),
        Err(_) => Err(InterpError::Missing { what: format!("{what} as an array (found {})", value.describe()) }),
    }
}
