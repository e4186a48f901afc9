//! `Exported`: the graph of torch's serialized `ExportedProgram` (`models/model.json` of a `.pt2`
//! archive, export schema 8), typed.
//!
//! What is read: the graph's inputs in order with their kind from the signature (a parameter with
//! its checkpoint name, a buffer, a user input), its outputs, every node (its ATen target, its
//! arguments by name, its outputs, and where in the model's source it was traced), every tensor's
//! dtype, sizes and strides, and the symbolic ints. Anything the reader does not recognise where it
//! needs it is an [`ImportError`] naming the node; fields it does not need are ignored.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::ImportError;
use super::size::Size;

/// The graph of an exported program.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    pub inputs: Vec<Input>,
    /// The names of the graph's outputs, in order.
    pub outputs: Vec<String>,
    pub nodes: Vec<Node>,
    /// Every tensor's metadata, by name.
    pub tensors: BTreeMap<String, TensorMeta>,
    /// Every symbolic int's value, by name.
    pub sym_ints: BTreeMap<String, Size>,
}

/// An input of the graph: its name in the graph and what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub name: String,
    pub kind: InputKind,
}

/// What an input is, by the program's signature.
#[derive(Clone, Debug, PartialEq)]
pub enum InputKind {
    /// A parameter, named as in the checkpoint (`model.layers.0.linear_attn.A_log`).
    Parameter(String),
    /// A buffer (`model.rotary_emb.inv_freq`); `persistent` when the checkpoint holds it.
    Buffer { name: String, persistent: bool },
    /// An input the caller passes (`input_ids`, `position_ids`, the states).
    User,
}

/// One call of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its place in the graph's order.
    pub index: usize,
    pub name: String,
    /// The operator, as torch names it (`torch.ops.aten.mul.Tensor`).
    pub target: String,
    /// The arguments, by the operator schema's names, in order.
    pub args: Vec<(String, Arg)>,
    pub outputs: Vec<Output>,
    /// The innermost frame of its stack trace: `file:line` and the line's code.
    pub source: String,
}

/// An argument of a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Tensor(String),
    Tensors(Vec<String>),
    OptionalTensors(Vec<Option<String>>),
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Bool(bool),
    None,
    /// A dtype, by torch's `ScalarType` number.
    ScalarType(i64),
    SymInt(SymInt),
    SymInts(Vec<SymInt>),
    /// A device, a layout or a memory format: what it is, as text.
    Placement(String),
    String(String),
}

/// A symbolic int argument: an integer or a symbolic int of the graph, by name.
#[derive(Clone, Debug, PartialEq)]
pub enum SymInt {
    Int(i64),
    Name(String),
}

/// An output of a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Tensor(String),
    Tensors(Vec<String>),
    SymInt(String),
    None,
}

/// A tensor's metadata: its dtype, sizes, strides and storage offset.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    /// torch's `ScalarType` number (7 f32, 5 i64, 12 bool).
    pub dtype: i64,
    pub sizes: Vec<Size>,
    pub strides: Vec<Size>,
    pub offset: Size,
}

impl Node {
    /// The argument named `name`.
    pub fn arg(&self, name: &str) -> Option<&Arg> {
        self.args.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The names of the tensors it writes, in order.
    pub fn output_tensors(&self) -> Vec<&str> {
        let mut out = vec![];
        for o in &self.outputs {
            match o {
                Output::Tensor(t) => out.push(t.as_str()),
                Output::Tensors(ts) => out.extend(ts.iter().map(String::as_str)),
                Output::SymInt(_) | Output::None => {}
            }
        }
        out
    }
}

#[derive(Deserialize)]
struct RawProgram {
    graph_module: RawModule,
}

#[derive(Deserialize)]
struct RawModule {
    graph: RawGraph,
    signature: RawSignature,
}

#[derive(Deserialize)]
struct RawGraph {
    inputs: Vec<Value>,
    outputs: Vec<Value>,
    nodes: Vec<RawNode>,
    tensor_values: BTreeMap<String, RawTensorMeta>,
    #[serde(default)]
    sym_int_values: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct RawNode {
    target: String,
    inputs: Vec<RawNamedArg>,
    outputs: Vec<Value>,
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawNamedArg {
    name: String,
    arg: Value,
}

#[derive(Deserialize)]
struct RawTensorMeta {
    dtype: i64,
    sizes: Vec<Value>,
    strides: Vec<Value>,
    storage_offset: Value,
}

#[derive(Deserialize)]
struct RawSignature {
    input_specs: Vec<Value>,
}

impl Exported {
    /// Reads the serialized program `json` (a `.pt2` archive's `models/model.json`).
    pub fn from_json(json: &[u8]) -> Result<Exported, ImportError> {
        let raw: RawProgram =
            serde_json::from_slice(json).map_err(|e| ImportError::Schema(format!("not an exported program: {e}")))?;
        let g = raw.graph_module.graph;
        let names = |args: &[Value], what: &str| -> Result<Vec<String>, ImportError> {
            args.iter()
                .map(|a| {
                    a.pointer("/as_tensor/name")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| ImportError::Schema(format!("a graph {what} that is not a tensor: {a}")))
                })
                .collect()
        };
        let input_names = names(&g.inputs, "input")?;
        let specs = raw.graph_module.signature.input_specs;
        if specs.len() != input_names.len() {
            return Err(ImportError::Schema(format!(
                "the signature gives {} inputs, the graph {}",
                specs.len(),
                input_names.len()
            )));
        }
        let inputs = input_names
            .into_iter()
            .zip(&specs)
            .map(|(name, spec)| Ok(Input { kind: input_kind(&name, spec)?, name }))
            .collect::<Result<Vec<_>, ImportError>>()?;
        let outputs = names(&g.outputs, "output")?;
        let mut tensors = BTreeMap::new();
        for (name, m) in g.tensor_values {
            let size = |v: &Value| sym_size(v).map_err(|why| ImportError::Schema(format!("tensor {name}: {why}")));
            let meta = TensorMeta {
                dtype: m.dtype,
                sizes: m.sizes.iter().map(size).collect::<Result<_, _>>()?,
                strides: m.strides.iter().map(size).collect::<Result<_, _>>()?,
                offset: size(&m.storage_offset)?,
            };
            tensors.insert(name, meta);
        }
        let mut sym_ints = BTreeMap::new();
        for (name, v) in &g.sym_int_values {
            let value = sym_size(v).map_err(|why| ImportError::Schema(format!("symbolic int {name}: {why}")))?;
            sym_ints.insert(name.clone(), value);
        }
        let nodes = g.nodes.into_iter().enumerate().map(|(index, n)| node(index, n)).collect::<Result<_, _>>()?;
        Ok(Exported { inputs, outputs, nodes, tensors, sym_ints })
    }
}

/// The kind of input `name` by its signature entry.
fn input_kind(name: &str, spec: &Value) -> Result<InputKind, ImportError> {
    let bad = || ImportError::Schema(format!("input {name}: a signature entry this reader does not know: {spec}"));
    if let Some(p) = spec.get("parameter") {
        let checkpoint = p.get("parameter_name").and_then(Value::as_str).ok_or_else(bad)?;
        return Ok(InputKind::Parameter(checkpoint.to_string()));
    }
    if let Some(b) = spec.get("buffer") {
        let buffer = b.get("buffer_name").and_then(Value::as_str).ok_or_else(bad)?;
        let persistent = b.get("persistent").and_then(Value::as_bool).unwrap_or(true);
        return Ok(InputKind::Buffer { name: buffer.to_string(), persistent });
    }
    if spec.get("user_input").is_some() {
        return Ok(InputKind::User);
    }
    Err(bad())
}

/// A size given as `{"as_int": n}` or `{"as_expr": {"expr_str": …}}`.
fn sym_size(v: &Value) -> Result<Size, String> {
    if let Some(n) = v.get("as_int").and_then(Value::as_i64) {
        return Ok(Size::of(n));
    }
    if let Some(e) = v.pointer("/as_expr/expr_str").and_then(Value::as_str) {
        return Size::parse_sympy(e);
    }
    Err(format!("a size this reader does not know: {v}"))
}

/// The typed node `index` of `raw`.
fn node(index: usize, raw: RawNode) -> Result<Node, ImportError> {
    let name = raw.name.unwrap_or_else(|| format!("node {index}"));
    let source = raw.metadata.get("stack_trace").and_then(Value::as_str).map(innermost_frame).unwrap_or_default();
    let at =
        |why: String| ImportError::Node { node: name.clone(), target: raw.target.clone(), traced: source.clone(), why };
    let args = raw
        .inputs
        .iter()
        .map(|a| Ok((a.name.clone(), arg(&a.arg).map_err(|why| at(format!("argument `{}`: {why}", a.name)))?)))
        .collect::<Result<Vec<_>, ImportError>>()?;
    let outputs = raw
        .outputs
        .iter()
        .map(|o| output(o).map_err(|why| at(format!("an output: {why}"))))
        .collect::<Result<_, _>>()?;
    Ok(Node { index, name, target: raw.target, args, outputs, source })
}

/// The last frame of a Python stack trace, as `file:line: code`.
fn innermost_frame(trace: &str) -> String {
    let lines: Vec<&str> = trace.lines().collect();
    let Some(i) = lines.iter().rposition(|l| l.trim_start().starts_with("File \"")) else {
        return trace.trim().to_string();
    };
    let frame = lines[i].trim();
    let file = frame.split('"').nth(1).unwrap_or("?");
    let line = frame.split(", line ").nth(1).and_then(|r| r.split(',').next()).unwrap_or("?");
    let code = lines.get(i + 1).map_or("", |c| c.trim());
    format!("{file}:{line}: {code}")
}

/// An argument from its one-key union.
fn arg(v: &Value) -> Result<Arg, String> {
    let Some((kind, x)) = v.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("not an argument: {v}"));
    };
    let tensor_name = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_string);
    let bad = || format!("`{kind}` holds {x}");
    Ok(match kind.as_str() {
        "as_tensor" => Arg::Tensor(tensor_name(x).ok_or_else(bad)?),
        "as_tensors" => {
            Arg::Tensors(x.as_array().ok_or_else(bad)?.iter().map(tensor_name).collect::<Option<_>>().ok_or_else(bad)?)
        }
        "as_optional_tensors" => Arg::OptionalTensors(
            x.as_array()
                .ok_or_else(bad)?
                .iter()
                .map(|t| match t.get("as_tensor") {
                    Some(t) => tensor_name(t).map(Some),
                    None => t.get("as_none").map(|_| None),
                })
                .collect::<Option<_>>()
                .ok_or_else(bad)?,
        ),
        "as_int" => Arg::Int(x.as_i64().ok_or_else(bad)?),
        "as_ints" => {
            Arg::Ints(x.as_array().ok_or_else(bad)?.iter().map(Value::as_i64).collect::<Option<_>>().ok_or_else(bad)?)
        }
        "as_float" => Arg::Float(float(x).ok_or_else(bad)?),
        "as_bool" => Arg::Bool(x.as_bool().ok_or_else(bad)?),
        "as_none" => Arg::None,
        "as_scalar_type" => Arg::ScalarType(x.as_i64().ok_or_else(bad)?),
        "as_string" => Arg::String(x.as_str().ok_or_else(bad)?.to_string()),
        "as_device" | "as_layout" | "as_memory_format" => Arg::Placement(format!("{kind} {x}")),
        "as_sym_int" => Arg::SymInt(sym_int(x).ok_or_else(bad)?),
        "as_sym_ints" => {
            Arg::SymInts(x.as_array().ok_or_else(bad)?.iter().map(sym_int).collect::<Option<_>>().ok_or_else(bad)?)
        }
        other => return Err(format!("an argument of kind `{other}`, which this reader does not know")),
    })
}

/// A float, as torch writes one (a number, or `"Infinity"`, `"-Infinity"`, `"NaN"`).
fn float(x: &Value) -> Option<f64> {
    match x {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => None,
        },
        _ => None,
    }
}

/// A symbolic int argument: `{"as_int": n}` or `{"as_name": s}`.
fn sym_int(x: &Value) -> Option<SymInt> {
    if let Some(n) = x.get("as_int").and_then(Value::as_i64) {
        return Some(SymInt::Int(n));
    }
    x.get("as_name").and_then(Value::as_str).map(|s| SymInt::Name(s.to_string()))
}

/// An output from its one-key union.
fn output(v: &Value) -> Result<Output, String> {
    let Some((kind, x)) = v.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("not an output: {v}"));
    };
    let name = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_string);
    let bad = || format!("`{kind}` holds {x}");
    Ok(match kind.as_str() {
        "as_tensor" => Output::Tensor(name(x).ok_or_else(bad)?),
        "as_tensors" => {
            Output::Tensors(x.as_array().ok_or_else(bad)?.iter().map(name).collect::<Option<_>>().ok_or_else(bad)?)
        }
        "as_sym_int" => Output::SymInt(x.get("as_name").and_then(Value::as_str).ok_or_else(bad)?.to_string()),
        "as_none" => Output::None,
        other => return Err(format!("an output of kind `{other}`, which this reader does not know")),
    })
}
