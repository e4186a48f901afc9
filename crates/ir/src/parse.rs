//! The parser of the text form (see [`super::text`]): reads a listing back into a graph.
//!
//! The parser reads any text without panicking: every failure is a [`ParseError`] that names the
//! line and column, what was expected there and what was found. It checks the listing's syntax, that
//! names are declared once, that every name read is declared somewhere in the listing (a name may be
//! read before the line that declares it), and the attributes of each op; it leaves shapes and the
//! order of reads and writes to [`Graph::validate`].

use std::collections::HashMap;

use super::binding::{Binding, View};
use super::graph::{Const, Graph, State, StateKind, TensorDecl};
use super::op::{Act, Fused as F, HeadMap, Op, OpKind, RopeStyle, TensorId};
use super::text::{is_bare, listed_name};
use super::ty::Ty;

/// Why a listing is not the text form of a graph. Lines and columns count from 1; a column counts
/// characters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// The text is not what the grammar allows at this place.
    #[error("line {line}, column {column}: expected {expected}, found {found}")]
    Syntax { line: usize, column: usize, expected: String, found: String },
    /// A number that does not read as the number expected: not a number, or too large.
    #[error("line {line}, column {column}: expected {expected}, found '{text}'")]
    BadNumber { line: usize, column: usize, expected: String, text: String },
    /// An op name the IR does not have.
    #[error("line {line}, column {column}: unknown op '{name}'")]
    UnknownOp { line: usize, column: usize, name: String },
    /// An attribute the op does not have.
    #[error("line {line}, column {column}: {op} has no attribute '{attr}' ({known})")]
    UnknownAttribute { line: usize, column: usize, op: &'static str, attr: String, known: String },
    /// An attribute the op needs but the line does not give.
    #[error("line {line}, column {column}: {op} needs the attribute '{attr}'")]
    MissingAttribute { line: usize, column: usize, op: &'static str, attr: &'static str },
    /// An attribute given twice on one line.
    #[error("line {line}, column {column}: the attribute '{attr}' of {op} is given twice")]
    RepeatedAttribute { line: usize, column: usize, op: &'static str, attr: &'static str },
    /// A tensor name declared a second time.
    #[error("line {line}, column {column}: %{name} is declared twice, first on line {first}")]
    DuplicateName { line: usize, column: usize, name: String, first: usize },
    /// A tensor name read but declared nowhere in the listing.
    #[error("line {line}, column {column}: %{name} is not declared")]
    Undeclared { line: usize, column: usize, name: String },
}

impl ParseError {
    /// The line the error is on.
    pub fn line(&self) -> usize {
        match self {
            ParseError::Syntax { line, .. }
            | ParseError::BadNumber { line, .. }
            | ParseError::UnknownOp { line, .. }
            | ParseError::UnknownAttribute { line, .. }
            | ParseError::MissingAttribute { line, .. }
            | ParseError::RepeatedAttribute { line, .. }
            | ParseError::DuplicateName { line, .. }
            | ParseError::Undeclared { line, .. } => *line,
        }
    }

    /// The column the error is at.
    pub fn column(&self) -> usize {
        match self {
            ParseError::Syntax { column, .. }
            | ParseError::BadNumber { column, .. }
            | ParseError::UnknownOp { column, .. }
            | ParseError::UnknownAttribute { column, .. }
            | ParseError::MissingAttribute { column, .. }
            | ParseError::RepeatedAttribute { column, .. }
            | ParseError::DuplicateName { column, .. }
            | ParseError::Undeclared { column, .. } => *column,
        }
    }
}

/// Reads a listing in the text form back into a graph.
///
/// Tensor ids follow the listing: the token is tensor 0, and every other tensor takes the next id in
/// the order its line declares it, as `GraphBuilder` numbers them; so printing a parsed graph gives
/// the listing back, and a builder's graph reads back equal to itself. Blank lines and lines whose
/// first character (after spaces) is `#` are skipped, a `#` after a complete line starts a comment,
/// and a leading byte-order mark is ignored.
pub fn parse_graph(text: &str) -> Result<Graph, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser::default();
    let mut lines = 0;
    for (i, line) in text.lines().enumerate() {
        lines = i + 1;
        p.line(&mut Cursor::new(line, lines))?;
    }
    p.finish(lines + 1)
}

/// What the parser has read so far.
struct Parser {
    name: Option<String>,
    /// Tensor 0 is the token; its declaration is filled in by the `token` line.
    tensors: Vec<TensorDecl>,
    /// Each declared name: its tensor and the line declaring it.
    declared: HashMap<String, (TensorId, usize)>,
    token_line: Option<usize>,
    logits_line: Option<usize>,
    consts: Vec<Const>,
    states: Vec<State>,
    ops: Vec<Op>,
    /// Names read, resolved once the whole listing is read.
    refs: Vec<Ref>,
}

impl Default for Parser {
    fn default() -> Parser {
        Parser {
            name: None,
            tensors: vec![TensorDecl { name: String::new(), ty: Ty::Token }],
            declared: HashMap::new(),
            token_line: None,
            logits_line: None,
            consts: vec![],
            states: vec![],
            ops: vec![],
            refs: vec![],
        }
    }
}

/// A name read at `line`, `column`, to be resolved into `slot`.
struct Ref {
    name: String,
    line: usize,
    column: usize,
    slot: Slot,
}

/// Where a resolved name goes.
enum Slot {
    Input { op: usize, index: usize },
    StateWrite(usize),
    Logits,
}

/// The op names of the text form and the attributes each one has, in the order they print.
const OPS: &[(&str, &[&str])] = &[
    ("embed", &[]),
    ("matvec", &[]),
    ("add", &[]),
    ("mul", &[]),
    ("scale", &["factor"]),
    ("offset", &["value"]),
    ("clamp", &["min", "max"]),
    ("rms_norm", &["eps"]),
    ("layer_norm", &["eps"]),
    ("l2_norm", &["eps"]),
    ("softmax", &[]),
    ("concat", &[]),
    ("slice", &["start", "end"]),
    ("reshape", &["shape"]),
    ("broadcast", &["rows"]),
    ("conv_shift", &[]),
    ("depthwise_conv", &[]),
    ("delta_rule", &["head_map"]),
    ("rope", &["theta", "rotary_dims", "style"]),
    ("rope_freqs", &["inv_freq", "scale", "style"]),
    ("kv_append", &[]),
    ("attention", &["scale", "window", "head_map"]),
    ("top_k", &["k", "renormalize"]),
    ("group_limit", &["groups", "keep", "top"]),
    ("pick", &["index"]),
    ("advance", &[]),
    ("merged_qkv", &[]),
    ("conv_bias_silu", &[]),
    ("gdn_gating", &[]),
    ("glu_act_mul", &["act"]),
];

/// The kind of value an attribute holds; each attribute name has one kind, whatever its op.
#[derive(Clone, Copy)]
enum ValueKind {
    Float,
    Floats,
    Count,
    Shape,
    HeadMap,
    Style,
    Window,
    Bool,
    Act,
}

fn value_kind(attr: &str) -> ValueKind {
    match attr {
        "start" | "end" | "rows" | "rotary_dims" | "k" | "index" | "groups" | "keep" | "top" => ValueKind::Count,
        "inv_freq" => ValueKind::Floats,
        "shape" => ValueKind::Shape,
        "head_map" => ValueKind::HeadMap,
        "style" => ValueKind::Style,
        "window" => ValueKind::Window,
        "renormalize" => ValueKind::Bool,
        "act" => ValueKind::Act,
        _ => ValueKind::Float,
    }
}

/// An attribute's value.
enum Value {
    Float(f64),
    Floats(Vec<f64>),
    Count(usize),
    Shape(Vec<usize>),
    HeadMap(HeadMap),
    Style(RopeStyle),
    Window(Option<usize>),
    Bool(bool),
    Act(Act),
}

impl Parser {
    /// Reads one line.
    fn line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        if c.at_end() {
            return Ok(());
        }
        if self.name.is_none() {
            return self.header(c);
        }
        if matches!(c.peek(), Some('%' | '(')) {
            return self.op_line(c);
        }
        let start = c.pos;
        match c.word().as_deref() {
            Some("token") => self.token_line(c),
            Some("state") => self.state_line(c),
            Some("const") => self.const_line(c),
            Some("unwritten") => {
                let (name, column) = c.name("a tensor name like %x after 'unwritten'")?;
                let ty = c.typed()?;
                self.declare(name, ty, c.line, column)?;
                c.end()
            }
            Some("logits") => {
                if let Some(first) = self.logits_line {
                    c.pos = start;
                    return Err(c.syntax_found("one logits line", format!("a second (the first is on line {first})")));
                }
                let (name, column) = c.name("the logits' name like %logits after 'logits'")?;
                self.logits_line = Some(c.line);
                self.refs.push(Ref { name, line: c.line, column, slot: Slot::Logits });
                c.end()
            }
            Some("graph") => {
                c.pos = start;
                Err(c.syntax_found("one header", "a second 'graph' line".into()))
            }
            _ => {
                c.pos = start;
                Err(c.syntax("a line starting with token, state, const, unwritten, logits or a tensor name like %x"))
            }
        }
    }

    /// `graph "name"`.
    fn header(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        let start = c.pos;
        if c.word().as_deref() != Some("graph") {
            c.pos = start;
            return Err(c.syntax("the header graph \"name\""));
        }
        c.skip_ws();
        if c.peek() != Some('"') {
            return Err(c.syntax("the graph's name in quotes like \"tiny\" after 'graph'"));
        }
        self.name = Some(c.quoted()?);
        c.end()
    }

    /// `token %name`, or `token %name: type` when its type is not `token`.
    fn token_line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        if let Some(first) = self.token_line {
            c.pos = 0;
            c.skip_ws();
            return Err(c.syntax_found("one token line", format!("a second (the first is on line {first})")));
        }
        let (name, column) = c.name("the token's name like %token after 'token'")?;
        let ty = if c.eat(':') { c.ty("a type like [64] after ':'")? } else { Ty::Token };
        if let Some(&(_, first)) = self.declared.get(&name) {
            return Err(ParseError::DuplicateName { line: c.line, column, name: listed_name(&name), first });
        }
        self.declared.insert(name.clone(), (TensorId(0), c.line));
        if let Some(slot) = self.tensors.get_mut(0) {
            *slot = TensorDecl { name, ty };
        }
        self.token_line = Some(c.line);
        c.end()
    }

    /// `state kind [layer N] %read: type -> %write`.
    fn state_line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        c.skip_ws();
        let start = c.pos;
        let word = c.word();
        let Some(kind) = StateKind::ALL.into_iter().find(|k| word.as_deref() == Some(k.name())) else {
            c.pos = start;
            return Err(c.syntax("a state kind (position, conv, recurrent, key_cache or value_cache) after 'state'"));
        };
        c.skip_ws();
        let before = c.pos;
        let layer = if c.word().as_deref() == Some("layer") {
            Some(c.count("a layer number after 'layer'")?)
        } else {
            c.pos = before;
            None
        };
        let (name, column) = c.name("the state's name like %pos")?;
        let ty = c.typed()?;
        if !c.eat_str("->") {
            return Err(c.syntax("'->' and the tensor that holds the state at the end of the step"));
        }
        let (write, write_column) = c.name("the name of the tensor that holds the state at the end of the step")?;
        let read = self.declare(name, ty, c.line, column)?;
        self.refs.push(Ref {
            name: write,
            line: c.line,
            column: write_column,
            slot: Slot::StateWrite(self.states.len()),
        });
        self.states.push(State { kind, layer, read, write: read });
        c.end()
    }

    /// `const %name: type = checkpoint.tensor [view]`.
    fn const_line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        let (name, column) = c.name("the constant's name like %w after 'const'")?;
        let ty = c.typed()?;
        if !c.eat('=') {
            return Err(c.syntax("'=' and the checkpoint tensor the constant reads"));
        }
        let binding = binding(c)?;
        let tensor_id = self.declare(name, ty, c.line, column)?;
        self.consts.push(Const { tensor: tensor_id, binding });
        c.end()
    }

    /// `%out: type, … = op(attr=value, …) %in, …`, or `() = op …` for an op that writes nothing.
    fn op_line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        let mut outputs = vec![];
        if c.eat('(') {
            if !c.eat(')') {
                return Err(c.syntax("')' in '()', the outputs of an op that writes nothing"));
            }
        } else {
            loop {
                let (name, column) = c.name("an output name like %x")?;
                let ty = c.typed()?;
                outputs.push((name, ty, column));
                if !c.eat(',') {
                    break;
                }
            }
        }
        if !c.eat('=') {
            return Err(c.syntax("',' and another output, or '=' and the op"));
        }
        c.skip_ws();
        let op_column = c.column();
        let Some(op_name) = c.word() else {
            return Err(c.syntax("an op name like matvec after '='"));
        };
        let Some((op, allowed)) = op_schema(&op_name) else {
            return Err(ParseError::UnknownOp { line: c.line, column: op_column, name: op_name });
        };
        let mut attrs = Attrs { op, line: c.line, column: op_column, given: vec![] };
        if c.peek() == Some('(') {
            c.pos += 1;
            attrs.read(c, allowed)?;
        }
        let kind = attrs.kind()?;
        let mut inputs = vec![];
        if !c.at_end() {
            loop {
                let (name, column) = c.name("an input name like %x, or the end of the line")?;
                inputs.push((name, column));
                if !c.eat(',') {
                    break;
                }
            }
        }
        c.end()?;
        let index = self.ops.len();
        let mut ids = Vec::with_capacity(outputs.len());
        for (name, ty, column) in outputs {
            ids.push(self.declare(name, ty, c.line, column)?);
        }
        let unresolved = vec![TensorId(0); inputs.len()];
        for (i, (name, column)) in inputs.into_iter().enumerate() {
            self.refs.push(Ref { name, line: c.line, column, slot: Slot::Input { op: index, index: i } });
        }
        self.ops.push(Op { kind, inputs: unresolved, outputs: ids });
        Ok(())
    }

    /// Declares tensor `name` of type `ty` as the next tensor.
    fn declare(&mut self, name: String, ty: Ty, line: usize, column: usize) -> Result<TensorId, ParseError> {
        if let Some(&(_, first)) = self.declared.get(&name) {
            return Err(ParseError::DuplicateName { line, column, name: listed_name(&name), first });
        }
        let id = TensorId(self.tensors.len());
        self.declared.insert(name.clone(), (id, line));
        self.tensors.push(TensorDecl { name, ty });
        Ok(id)
    }

    /// The graph, once the token and logits are given and every name read is declared.
    fn finish(mut self, end_line: usize) -> Result<Graph, ParseError> {
        let missing = |what: &str| ParseError::Syntax {
            line: end_line,
            column: 1,
            expected: what.to_string(),
            found: "the end of the listing".into(),
        };
        let Some(name) = self.name.take() else { return Err(missing("the header graph \"name\"")) };
        if self.token_line.is_none() {
            return Err(missing("a token line like 'token %token'"));
        }
        if self.logits_line.is_none() {
            return Err(missing("a logits line like 'logits %logits'"));
        }
        let mut logits = TensorId(0);
        for r in std::mem::take(&mut self.refs) {
            let Some(&(id, _)) = self.declared.get(&r.name) else {
                return Err(ParseError::Undeclared { line: r.line, column: r.column, name: listed_name(&r.name) });
            };
            match r.slot {
                Slot::Input { op, index } => {
                    if let Some(t) = self.ops.get_mut(op).and_then(|op| op.inputs.get_mut(index)) {
                        *t = id;
                    }
                }
                Slot::StateWrite(s) => {
                    if let Some(s) = self.states.get_mut(s) {
                        s.write = id;
                    }
                }
                Slot::Logits => logits = id,
            }
        }
        Ok(Graph {
            name,
            tensors: self.tensors,
            token: TensorId(0),
            consts: self.consts,
            states: self.states,
            ops: self.ops,
            logits,
        })
    }
}

/// The op named `name` and its attributes, or `None` if the IR has no such op.
fn op_schema(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    if let Some(a) = Act::ALL.iter().find(|a| a.name() == name) {
        return Some((a.name(), &[]));
    }
    OPS.iter().find(|(n, _)| *n == name).copied()
}

/// Reads an op kind with its attributes as an op line writes them after `=`, e.g.
/// `rope(theta=500.0, rotary_dims=8, style=neox)`; the whole text must be the kind.
pub fn parse_op_kind(text: &str) -> Result<OpKind, ParseError> {
    let mut c = Cursor::new(text, 1);
    c.skip_ws();
    let column = c.column();
    let Some(name) = c.word() else {
        return Err(c.syntax("an op name like matvec"));
    };
    let Some((op, allowed)) = op_schema(&name) else {
        return Err(ParseError::UnknownOp { line: 1, column, name });
    };
    let mut attrs = Attrs { op, line: 1, column, given: vec![] };
    if c.peek() == Some('(') {
        c.pos += 1;
        attrs.read(&mut c, allowed)?;
    }
    let kind = attrs.kind()?;
    c.end()?;
    Ok(kind)
}

/// Reads a binding as a const line writes it after `=`: a checkpoint tensor and its view, e.g.
/// `blk.1.attn_qkv.weight rows 0..16`; the whole text must be the binding.
pub fn parse_binding(text: &str) -> Result<Binding, ParseError> {
    let mut c = Cursor::new(text, 1);
    let b = binding(&mut c)?;
    c.end()?;
    Ok(b)
}

/// A checkpoint tensor and its view, up to the end of the line.
fn binding(c: &mut Cursor) -> Result<Binding, ParseError> {
    let tensor = c.bare_or_quoted("a checkpoint tensor name like blk.0.attn_q.weight after '='")?;
    c.skip_ws();
    let start = c.pos;
    let view = match c.word().as_deref() {
        None if c.at_end() => View::Whole,
        Some("rows") => {
            let start = c.count("the first row of 'rows a..b'")?;
            if !c.eat_str("..") {
                return Err(c.syntax("'..' in 'rows a..b'"));
            }
            let end = c.count("the end row of 'rows a..b'")?;
            View::Rows { start, end }
        }
        Some("head_half") => {
            let head_dim = c.count("the head size of 'head_half head_dim half'")?;
            let half = c.count("the half (0 or 1) of 'head_half head_dim half'")?;
            View::HeadHalf { head_dim, half }
        }
        Some("expert") => View::Expert { index: c.count("the expert's index after 'expert'")? },
        _ => {
            c.pos = start;
            return Err(c.syntax("a view (rows a..b, head_half d h or expert i) or the end of the line"));
        }
    };
    Ok(Binding { tensor, view })
}

/// The attributes given on an op's line.
struct Attrs {
    op: &'static str,
    line: usize,
    column: usize,
    given: Vec<(&'static str, Value)>,
}

impl Attrs {
    /// Reads `attr=value, …)` (the `(` already read), each attribute one of `allowed`, none twice.
    fn read(&mut self, c: &mut Cursor, allowed: &'static [&'static str]) -> Result<(), ParseError> {
        if c.eat(')') {
            return Ok(());
        }
        loop {
            c.skip_ws();
            let column = c.column();
            let Some(key) = c.word() else {
                return Err(c.syntax(format!("an attribute name of {} like {}", self.op, example_attr(allowed))));
            };
            let Some(&attr) = allowed.iter().find(|a| **a == key) else {
                let known = match allowed {
                    [] => "it has none".to_string(),
                    _ => format!("it has {}", allowed.join(", ")),
                };
                return Err(ParseError::UnknownAttribute { line: c.line, column, op: self.op, attr: key, known });
            };
            if self.given.iter().any(|(a, _)| *a == attr) {
                return Err(ParseError::RepeatedAttribute { line: c.line, column, op: self.op, attr });
            }
            if !c.eat('=') {
                return Err(c.syntax(format!("'=' and a value after '{attr}'")));
            }
            let value = c.value(attr)?;
            self.given.push((attr, value));
            if c.eat(')') {
                return Ok(());
            }
            if !c.eat(',') {
                return Err(c.syntax("',' and another attribute, or ')'"));
            }
        }
    }

    fn get(&self, attr: &'static str) -> Result<&Value, ParseError> {
        match self.given.iter().find(|(a, _)| *a == attr) {
            Some((_, v)) => Ok(v),
            None => Err(ParseError::MissingAttribute { line: self.line, column: self.column, op: self.op, attr }),
        }
    }

    fn missing(&self, attr: &'static str) -> ParseError {
        ParseError::MissingAttribute { line: self.line, column: self.column, op: self.op, attr }
    }

    fn float(&self, attr: &'static str) -> Result<f64, ParseError> {
        match self.get(attr)? {
            Value::Float(x) => Ok(*x),
            _ => Err(self.missing(attr)),
        }
    }

    fn count(&self, attr: &'static str) -> Result<usize, ParseError> {
        match self.get(attr)? {
            Value::Count(n) => Ok(*n),
            _ => Err(self.missing(attr)),
        }
    }

    fn head_map(&self, attr: &'static str) -> Result<HeadMap, ParseError> {
        match self.get(attr)? {
            Value::HeadMap(m) => Ok(*m),
            _ => Err(self.missing(attr)),
        }
    }

    /// The op's kind with its attributes.
    fn kind(&self) -> Result<OpKind, ParseError> {
        use OpKind::*;
        if let Some(&a) = super::op::Act::ALL.iter().find(|a| a.name() == self.op) {
            return Ok(Act(a));
        }
        Ok(match self.op {
            "embed" => Embed,
            "matvec" => MatVec,
            "add" => Add,
            "mul" => Mul,
            "scale" => Scale { factor: self.float("factor")? },
            "offset" => Offset { value: self.float("value")? },
            "clamp" => Clamp { min: self.float("min")?, max: self.float("max")? },
            "rms_norm" => RmsNorm { eps: self.float("eps")? },
            "layer_norm" => LayerNorm { eps: self.float("eps")? },
            "l2_norm" => L2Norm { eps: self.float("eps")? },
            "softmax" => Softmax,
            "concat" => Concat,
            "slice" => Slice { start: self.count("start")?, end: self.count("end")? },
            "reshape" => match self.get("shape")? {
                Value::Shape(shape) => Reshape { shape: shape.clone() },
                _ => return Err(self.missing("shape")),
            },
            "broadcast" => Broadcast { rows: self.count("rows")? },
            "conv_shift" => ConvShift,
            "depthwise_conv" => DepthwiseConv,
            "delta_rule" => DeltaRule { head_map: self.head_map("head_map")? },
            "rope" => Rope {
                theta: self.float("theta")?,
                rotary_dims: self.count("rotary_dims")?,
                style: match self.get("style")? {
                    Value::Style(s) => *s,
                    _ => return Err(self.missing("style")),
                },
            },
            "rope_freqs" => RopeFreqs {
                inv_freq: match self.get("inv_freq")? {
                    Value::Floats(x) => x.clone(),
                    _ => return Err(self.missing("inv_freq")),
                },
                scale: self.float("scale")?,
                style: match self.get("style")? {
                    Value::Style(s) => *s,
                    _ => return Err(self.missing("style")),
                },
            },
            "kv_append" => KvAppend,
            "attention" => Attention {
                scale: self.float("scale")?,
                window: match self.get("window")? {
                    Value::Window(w) => *w,
                    _ => return Err(self.missing("window")),
                },
                head_map: self.head_map("head_map")?,
            },
            "top_k" => TopK {
                k: self.count("k")?,
                renormalize: match self.get("renormalize")? {
                    Value::Bool(b) => *b,
                    _ => return Err(self.missing("renormalize")),
                },
            },
            "pick" => Pick { index: self.count("index")? },
            "group_limit" => {
                GroupLimit { groups: self.count("groups")?, keep: self.count("keep")?, top: self.count("top")? }
            }
            "advance" => Advance,
            "merged_qkv" => Fused(F::MergedQkv),
            "conv_bias_silu" => Fused(F::ConvBiasSilu),
            "gdn_gating" => Fused(F::GdnGating),
            "glu_act_mul" => match self.get("act")? {
                Value::Act(act) => Fused(F::GluActMul { act: *act }),
                _ => return Err(self.missing("act")),
            },
            other => {
                return Err(ParseError::UnknownOp { line: self.line, column: self.column, name: other.to_string() });
            }
        })
    }
}

fn example_attr(allowed: &[&str]) -> String {
    allowed.first().map_or("eps".to_string(), |a| a.to_string())
}

/// A position in one line of a listing.
struct Cursor {
    chars: Vec<char>,
    pos: usize,
    line: usize,
}

impl Cursor {
    fn new(text: &str, line: usize) -> Cursor {
        Cursor { chars: text.chars().collect(), pos: 0, line }
    }

    fn column(&self) -> usize {
        self.pos + 1
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    /// Whether only spaces or a comment are left.
    fn at_end(&mut self) -> bool {
        self.skip_ws();
        matches!(self.peek(), None | Some('#'))
    }

    /// The end of the line (or a comment), or an error.
    fn end(&mut self) -> Result<(), ParseError> {
        if self.at_end() { Ok(()) } else { Err(self.syntax("the end of the line")) }
    }

    /// Reads `c` after any spaces, if it is there.
    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Reads `s` after any spaces, if it is there.
    fn eat_str(&mut self, s: &str) -> bool {
        self.skip_ws();
        let n = s.chars().count();
        let here = self.chars.get(self.pos..self.pos.saturating_add(n));
        if here.is_some_and(|h| h.iter().copied().eq(s.chars())) {
            self.pos += n;
            true
        } else {
            false
        }
    }

    /// The text at the cursor, for a message: the next word (at most 24 characters) in quotes, or
    /// the end of the line.
    fn found(&self) -> String {
        let rest = self.chars.get(self.pos..).unwrap_or(&[]);
        let word: String = rest.iter().take_while(|c| !c.is_whitespace()).take(24).collect();
        if word.is_empty() {
            return "the end of the line".into();
        }
        let more = rest.iter().take_while(|c| !c.is_whitespace()).count() > 24;
        format!("'{word}{}'", if more { "…" } else { "" })
    }

    fn syntax(&self, expected: impl Into<String>) -> ParseError {
        self.syntax_found(expected, self.found())
    }

    fn syntax_found(&self, expected: impl Into<String>, found: String) -> ParseError {
        ParseError::Syntax { line: self.line, column: self.column(), expected: expected.into(), found }
    }

    /// A word of letters, digits and `_` after any spaces, if there is one.
    fn word(&mut self) -> Option<String> {
        self.skip_ws();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.chars.get(start..self.pos).unwrap_or(&[]).iter().collect())
    }

    /// A tensor name, `%name` or `%"quoted name"`, and the column of its `%`.
    fn name(&mut self, expected: &str) -> Result<(String, usize), ParseError> {
        self.skip_ws();
        let column = self.column();
        if self.peek() != Some('%') {
            return Err(self.syntax(expected));
        }
        self.pos += 1;
        let name = self.bare_or_quoted("a name of letters, digits, '.', '_' and '-', or a quoted name, after '%'")?;
        Ok((name, column))
    }

    /// A name printed bare (letters, digits, `.`, `_`, `-`) or quoted.
    fn bare_or_quoted(&mut self, expected: &str) -> Result<String, ParseError> {
        self.skip_ws();
        if self.peek() == Some('"') {
            return self.quoted();
        }
        let start = self.pos;
        while self.peek().is_some_and(is_bare) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.syntax(expected));
        }
        Ok(self.chars.get(start..self.pos).unwrap_or(&[]).iter().collect())
    }

    /// A quoted string (the cursor at its `"`), with the escapes `\"`, `\\`, `\n`, `\r`, `\t` and
    /// `\u{hex}`.
    fn quoted(&mut self) -> Result<String, ParseError> {
        self.pos += 1;
        let mut s = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.syntax("a closing '\"'"));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(s),
                '\\' => {
                    let escape = self.pos - 1;
                    let decoded = match self.peek() {
                        Some('u') => self.unicode_escape(),
                        Some(e) => {
                            let d = match e {
                                '"' => Some('"'),
                                '\\' => Some('\\'),
                                'n' => Some('\n'),
                                'r' => Some('\r'),
                                't' => Some('\t'),
                                _ => None,
                            };
                            self.pos += 1;
                            d
                        }
                        None => None,
                    };
                    let Some(d) = decoded else {
                        self.pos = escape;
                        return Err(self.syntax("an escape \\\", \\\\, \\n, \\r, \\t or \\u{hex}"));
                    };
                    s.push(d);
                }
                c => s.push(c),
            }
        }
    }

    /// The character of `u{hex}` (the cursor at its `u`), moving past its `}`; `None` if malformed.
    fn unicode_escape(&mut self) -> Option<char> {
        let start = self.pos;
        if self.chars.get(start + 1) != Some(&'{') {
            return None;
        }
        let digits: String = self.chars.get(start + 2..)?.iter().take_while(|c| c.is_ascii_hexdigit()).collect();
        let n = digits.chars().count();
        if n == 0 || n > 6 || self.chars.get(start + 2 + n) != Some(&'}') {
            return None;
        }
        let c = u32::from_str_radix(&digits, 16).ok().and_then(char::from_u32)?;
        self.pos = start + 3 + n;
        Some(c)
    }

    /// A count (a dimension, an index): decimal digits that fit in a `usize`.
    fn count(&mut self, expected: &str) -> Result<usize, ParseError> {
        self.skip_ws();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+')) {
            self.pos += 1;
        }
        let text: String = self.chars.get(start..self.pos).unwrap_or(&[]).iter().collect();
        let column = start + 1;
        if text.is_empty() {
            self.pos = start;
            return Err(self.syntax(expected));
        }
        if !text.chars().all(|c| c.is_ascii_digit()) {
            return Err(ParseError::BadNumber { line: self.line, column, expected: expected.to_string(), text });
        }
        text.parse::<usize>().map_err(|_| ParseError::BadNumber {
            line: self.line,
            column,
            expected: format!("{expected} no larger than {}", usize::MAX),
            text,
        })
    }

    /// A float as Rust writes and reads it: `1e-6`, `0.5`, `-inf`, `NaN`.
    fn float(&mut self, expected: &str) -> Result<f64, ParseError> {
        self.skip_ws();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+')) {
            self.pos += 1;
        }
        let text: String = self.chars.get(start..self.pos).unwrap_or(&[]).iter().collect();
        if text.is_empty() {
            return Err(self.syntax(expected));
        }
        text.parse::<f64>().map_err(|_| ParseError::BadNumber {
            line: self.line,
            column: start + 1,
            expected: expected.to_string(),
            text,
        })
    }

    /// `: type`.
    fn typed(&mut self) -> Result<Ty, ParseError> {
        if !self.eat(':') {
            return Err(self.syntax("':' and the tensor's type"));
        }
        self.ty("a type like [64] after ':'")
    }

    /// A type: `token`, `position`, `[d, …]` or `cache[heads, dim]`.
    fn ty(&mut self, expected: &str) -> Result<Ty, ParseError> {
        self.skip_ws();
        if self.peek() == Some('[') {
            self.pos += 1;
            return Ok(Ty::Tensor(self.dims()?.into()));
        }
        let start = self.pos;
        match self.word().as_deref() {
            Some("token") => Ok(Ty::Token),
            Some("position") => Ok(Ty::Position),
            Some("cache") => {
                if !self.eat('[') {
                    return Err(self.syntax("'[' in 'cache[heads, dim]'"));
                }
                let heads = self.count("the number of heads of 'cache[heads, dim]'")?;
                if !self.eat(',') {
                    return Err(self.syntax("',' in 'cache[heads, dim]'"));
                }
                let dim = self.count("the head size of 'cache[heads, dim]'")?;
                if !self.eat(']') {
                    return Err(self.syntax("']' closing 'cache[heads, dim]'"));
                }
                Ok(Ty::Cache { heads, dim })
            }
            _ => {
                self.pos = start;
                Err(self.syntax(expected))
            }
        }
    }

    /// The dims of a shape up to its `]` (the `[` already read).
    fn dims(&mut self) -> Result<Vec<usize>, ParseError> {
        let mut dims = vec![];
        if self.eat(']') {
            return Ok(dims);
        }
        loop {
            dims.push(self.count("a dimension like 64")?);
            if self.eat(']') {
                return Ok(dims);
            }
            if !self.eat(',') {
                return Err(self.syntax("',' or ']' in a shape"));
            }
        }
    }

    /// The numbers of a list up to its `]` (the `[` already read).
    fn floats(&mut self) -> Result<Vec<f64>, ParseError> {
        let mut xs = vec![];
        if self.eat(']') {
            return Ok(xs);
        }
        loop {
            xs.push(self.float("a number like 0.5 in a list")?);
            if self.eat(']') {
                return Ok(xs);
            }
            if !self.eat(',') {
                return Err(self.syntax("',' or ']' in a list of numbers"));
            }
        }
    }

    /// The value of attribute `attr`.
    fn value(&mut self, attr: &str) -> Result<Value, ParseError> {
        Ok(match value_kind(attr) {
            ValueKind::Float => Value::Float(self.float(&format!("a number like 1e-6 or -inf for '{attr}'"))?),
            ValueKind::Floats => {
                if !self.eat('[') {
                    return Err(self.syntax(format!("a list of numbers like [1.0, 0.5] for '{attr}'")));
                }
                Value::Floats(self.floats()?)
            }
            ValueKind::Count => Value::Count(self.count(&format!("a count like 8 for '{attr}'"))?),
            ValueKind::Shape => {
                if !self.eat('[') {
                    return Err(self.syntax(format!("a shape like [4, 8] for '{attr}'")));
                }
                Value::Shape(self.dims()?)
            }
            ValueKind::HeadMap => {
                Value::HeadMap(self.choose(attr, &[HeadMap::Grouped, HeadMap::Tiled], HeadMap::name)?)
            }
            ValueKind::Style => {
                Value::Style(self.choose(attr, &[RopeStyle::Neox, RopeStyle::Interleaved], RopeStyle::name)?)
            }
            ValueKind::Act => Value::Act(self.choose(attr, &Act::ALL, Act::name)?),
            ValueKind::Bool => Value::Bool(self.choose(attr, &[false, true], |b| if *b { "true" } else { "false" })?),
            ValueKind::Window => {
                self.skip_ws();
                if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    Value::Window(Some(self.count("a window like 128")?))
                } else {
                    let start = self.pos;
                    if self.word().as_deref() != Some("none") {
                        self.pos = start;
                        return Err(self.syntax("a window like 128, or none"));
                    }
                    Value::Window(None)
                }
            }
        })
    }

    /// One of `options`, by name.
    fn choose<T: Copy>(&mut self, attr: &str, options: &[T], name: fn(&T) -> &'static str) -> Result<T, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let word = self.word();
        if let Some(t) = options.iter().find(|t| word.as_deref() == Some(name(t))) {
            return Ok(*t);
        }
        self.pos = start;
        let names: Vec<&str> = options.iter().map(name).collect();
        Err(self.syntax(format!("one of {} for '{attr}'", names.join(", "))))
    }
}
