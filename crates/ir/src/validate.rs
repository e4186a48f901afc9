//! Well-formedness of a step graph.

use super::graph::{Def, Graph, StateKind};
use super::op::TensorId;
use super::ty::Ty;

/// Why a graph is not well formed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("tensor {0} does not exist (the graph has {1} tensors)")]
    NoSuchTensor(usize, usize),
    #[error("two tensors are named %{0}")]
    DuplicateName(String),
    #[error("%{0} is written more than once")]
    WrittenTwice(String),
    #[error("%{0} is never written")]
    NeverWritten(String),
    #[error("op {op} ({kind}) reads %{tensor} before it is written")]
    ReadBeforeWrite { op: usize, kind: &'static str, tensor: String },
    #[error("op {op} ({kind}): {why}")]
    Shape { op: usize, kind: &'static str, why: String },
    #[error("op {op} ({kind}) declares %{tensor} as {declared}, but its shape rule gives {inferred}")]
    DeclaredType { op: usize, kind: &'static str, tensor: String, declared: Ty, inferred: Ty },
    #[error("{0}")]
    Role(String),
    #[error("op {op} ({kind}): {attribute} is {value}; {expected}")]
    Attribute { op: usize, kind: &'static str, attribute: &'static str, value: f64, expected: &'static str },
}

/// The rule each float attribute keeps, as a `config.json` reader holds the values they come from
/// (`rms_norm_eps`, `rope_theta`, …): an epsilon and a θ are finite and above 0; a factor, an
/// offset, a scale and a frequency are finite; a clamp's bounds are no NaN and in order.
type AttributeRule = (&'static str, fn(f64) -> bool, &'static str);

const POSITIVE: fn(f64) -> bool = |x| x.is_finite() && x > 0.0;
const FINITE: fn(f64) -> bool = f64::is_finite;
const ABOVE_ZERO: &str = "expected a finite number above 0";
const A_NUMBER: &str = "expected a finite number";

impl Graph {
    /// Checks every op's float attributes against their rules ([`AttributeRule`]): what a step
    /// graph given as text must keep, as the config it would be authored from must.
    pub fn validate_attributes(&self) -> Result<(), GraphError> {
        use super::op::OpKind::*;
        for (op, o) in self.ops.iter().enumerate() {
            let kind = o.kind.name();
            let rules: Vec<(f64, AttributeRule)> = match &o.kind {
                RmsNorm { eps } | LayerNorm { eps } | L2Norm { eps } => vec![(*eps, ("eps", POSITIVE, ABOVE_ZERO))],
                Rope { theta, .. } => vec![(*theta, ("theta", POSITIVE, ABOVE_ZERO))],
                Scale { factor } => vec![(*factor, ("factor", FINITE, A_NUMBER))],
                Offset { value } => vec![(*value, ("value", FINITE, A_NUMBER))],
                Attention { scale, .. } => vec![(*scale, ("scale", FINITE, A_NUMBER))],
                RopeFreqs { inv_freq, scale, .. } => std::iter::once((*scale, ("scale", FINITE, A_NUMBER)))
                    .chain(inv_freq.iter().map(|&f| (f, ("a frequency", FINITE, A_NUMBER))))
                    .collect(),
                // NaN fails the comparison, so either bound NaN is refused too.
                Clamp { min, max } if min <= max => vec![],
                Clamp { min, .. } => vec![(*min, ("min", |_| false, "expected a number no more than max"))],
                _ => vec![],
            };
            for (value, (attribute, holds, expected)) in rules {
                if !holds(value) {
                    return Err(GraphError::Attribute { op, kind, attribute, value, expected });
                }
            }
        }
        Ok(())
    }
}

impl Graph {
    /// Checks the graph is well formed: tensor ids exist and names are unique; every tensor is
    /// written exactly once (as the token, a constant, a start-of-step state or an op output); every
    /// op reads only tensors already written; each op's tensors agree with its kind's shape rule;
    /// each state is written by an op with its own type; the logits are a vector.
    pub fn validate(&self) -> Result<(), GraphError> {
        let n = self.tensors.len();
        let check = |t: TensorId| if t.0 < n { Ok(()) } else { Err(GraphError::NoSuchTensor(t.0, n)) };
        let mut names = foldhash::HashSet::with_capacity_and_hasher(n, Default::default());
        for d in &self.tensors {
            if !names.insert(d.name.as_str()) {
                return Err(GraphError::DuplicateName(d.name.clone()));
            }
        }
        check(self.token)?;
        check(self.logits)?;
        for c in &self.consts {
            check(c.tensor)?;
        }
        for s in &self.states {
            check(s.read)?;
            check(s.write)?;
        }
        for op in &self.ops {
            for &t in op.inputs.iter().chain(&op.outputs) {
                check(t)?;
            }
        }
        // Written exactly once.
        let mut writes = vec![0usize; n];
        writes[self.token.0] += 1;
        for c in &self.consts {
            writes[c.tensor.0] += 1;
        }
        for s in &self.states {
            writes[s.read.0] += 1;
        }
        for op in &self.ops {
            for t in &op.outputs {
                writes[t.0] += 1;
            }
        }
        for (i, &w) in writes.iter().enumerate() {
            let name = || self.tensors[i].name.clone();
            match w {
                0 => return Err(GraphError::NeverWritten(name())),
                1 => {}
                _ => return Err(GraphError::WrittenTwice(name())),
            }
        }
        // Roles of the token, constants and states.
        if self.tensors[self.token.0].ty != Ty::Token {
            return Err(GraphError::Role(format!("the token %{} is not of type token", self.name_of(self.token))));
        }
        for c in &self.consts {
            if self.ty(c.tensor).shape().is_none() {
                return Err(GraphError::Role(format!("constant %{} is not an array", self.name_of(c.tensor))));
            }
        }
        let defs = self.defs();
        for s in &self.states {
            if self.ty(s.read) != self.ty(s.write) {
                return Err(GraphError::Role(format!(
                    "state %{} is {} but is written as %{} of {}",
                    self.name_of(s.read),
                    self.ty(s.read),
                    self.name_of(s.write),
                    self.ty(s.write)
                )));
            }
            if !matches!(defs[s.write.0], Some(Def::Op(..))) {
                return Err(GraphError::Role(format!("state %{} is not written by an op", self.name_of(s.read))));
            }
            let want_layer = s.kind != StateKind::Position;
            if s.layer.is_some() != want_layer {
                return Err(GraphError::Role(format!(
                    "state %{} of kind {} {} a layer",
                    self.name_of(s.read),
                    s.kind.name(),
                    if want_layer { "needs" } else { "has no" }
                )));
            }
        }
        if self.states.iter().filter(|s| s.kind == StateKind::Position).count() > 1 {
            return Err(GraphError::Role("the step has more than one position".into()));
        }
        // Read after written, and shapes.
        let mut written = vec![false; n];
        written[self.token.0] = true;
        for c in &self.consts {
            written[c.tensor.0] = true;
        }
        for s in &self.states {
            written[s.read.0] = true;
        }
        let mut ins: Vec<&Ty> = vec![];
        for (i, op) in self.ops.iter().enumerate() {
            let kind = op.kind.name();
            for &t in &op.inputs {
                if !written[t.0] {
                    return Err(GraphError::ReadBeforeWrite { op: i, kind, tensor: self.name_of(t).into() });
                }
            }
            ins.clear();
            ins.extend(op.inputs.iter().map(|&t| self.ty(t)));
            let outs = op.kind.infer(&ins).map_err(|why| GraphError::Shape { op: i, kind, why })?;
            if outs.len() != op.outputs.len() {
                return Err(GraphError::Shape {
                    op: i,
                    kind,
                    why: format!("writes {} tensors, not {}", outs.len(), op.outputs.len()),
                });
            }
            for (&t, inferred) in op.outputs.iter().zip(outs) {
                if *self.ty(t) != inferred {
                    return Err(GraphError::DeclaredType {
                        op: i,
                        kind,
                        tensor: self.name_of(t).into(),
                        declared: self.ty(t).clone(),
                        inferred,
                    });
                }
                written[t.0] = true;
            }
        }
        match self.ty(self.logits) {
            Ty::Tensor(s) if s.len() == 1 => Ok(()),
            t => Err(GraphError::Role(format!("the logits %{} are {t}, not a vector", self.name_of(self.logits)))),
        }
    }
}
