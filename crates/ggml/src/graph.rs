//! `Recording`: a recorded decode step of llama.cpp (`format` `stepcheck llama.cpp graph v1`),
//! typed.
//!
//! What is read: the cache type, the delta-rule mode, the position the step ran at, and every
//! leaf and node: id, name, op (with its unary or GLU kind), type, `ne`, `nb`, op params, view
//! source and offset, and sources by id. A source or view source that is not a tensor recorded
//! before it, an id used twice, a size below zero or a stride that is not a whole byte count is an
//! error; fields the reader does not need are ignored.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::error::GraphError;

/// The largest recording read: the 0.8B shape's is a few MB.
pub const MAX_RECORDING_BYTES: u64 = 64 << 20;

/// The most dims a ggml tensor has.
pub const DIMS: usize = 4;

/// A recorded step.
#[derive(Clone, Debug, PartialEq)]
pub struct Recording {
    /// The KV cache's type (`F32`, `F16`).
    pub kv_cache_type: String,
    /// `fused` (the `GATED_DELTA_NET` op) or `primitive` (its composition).
    pub delta_rule: String,
    /// The position the recorded step decoded.
    pub position: u64,
    /// Every step's input values of the recorded rollout, by input leaf name, step 0 first (empty
    /// when the recording has none).
    pub steps: Vec<BTreeMap<String, Vec<f64>>>,
    pub leaves: Vec<Tensor>,
    pub nodes: Vec<Tensor>,
    /// Every tensor's index: `(false, i)` leaf `i`, `(true, i)` node `i`.
    index: HashMap<String, (bool, usize)>,
}

/// A tensor of the graph: a leaf (op `NONE`) or a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub id: String,
    pub name: String,
    /// The ggml op (`MUL_MAT`, `VIEW`, …); for `UNARY` and `GLU`, [`Tensor::kind`] says which.
    pub op: String,
    /// The unary op or GLU of a `UNARY` or `GLU` node (`SILU`, `SWIGLU`, …).
    pub kind: Option<String>,
    /// `f32`, `f16`, `q8_0`, `i32`, ….
    pub ty: String,
    pub ne: [i64; DIMS],
    /// Strides in bytes.
    pub nb: [u64; DIMS],
    pub op_params: Vec<i32>,
    pub view_src: Option<String>,
    pub view_offs: u64,
    /// The sources by id (`None` where ggml's slot is empty).
    pub src: Vec<Option<String>>,
    /// Whether it is a graph input (ggml's `INPUT` flag).
    pub input: bool,
    /// An input leaf's values as the recorded step read them, `ne0` fastest (the token, the
    /// positions, the cache cells and slots, the mask); `None` for any other tensor.
    pub values: Option<Vec<f64>>,
}

impl Tensor {
    /// The op as rows name it: `UNARY:SILU`, `GLU:SWIGLU`, or the op.
    pub fn row_name(&self) -> String {
        match &self.kind {
            Some(k) => format!("{}:{k}", self.op),
            None => self.op.clone(),
        }
    }

    /// The number of values, if it does not overflow.
    pub fn numel(&self) -> Option<i64> {
        self.ne.iter().try_fold(1i64, |n, &d| n.checked_mul(d))
    }

    /// Op param `i` as an f32's bits.
    pub fn param_f32(&self, i: usize) -> Option<f32> {
        self.op_params.get(i).map(|&b| f32::from_bits(b as u32))
    }
}

impl Recording {
    /// The tensor `id` names, if it was recorded.
    pub fn get(&self, id: &str) -> Option<&Tensor> {
        match self.index.get(id)? {
            (false, i) => self.leaves.get(*i),
            (true, i) => self.nodes.get(*i),
        }
    }

    /// The recording in `json`.
    pub fn from_json(json: &[u8]) -> Result<Recording, GraphError> {
        let v: Value = serde_json::from_slice(json).map_err(|e| GraphError::Schema(format!("not JSON: {e}")))?;
        let format = v["format"].as_str().unwrap_or_default();
        if format != "stepcheck llama.cpp graph v1" {
            return Err(GraphError::Schema(format!("format `{format}`, not `stepcheck llama.cpp graph v1`")));
        }
        let text =
            |k: &str| v[k].as_str().map(str::to_string).ok_or_else(|| GraphError::Schema(format!("no `{k}` string")));
        let position =
            v["graph_position"].as_u64().ok_or_else(|| GraphError::Schema("no `graph_position` count".into()))?;
        let mut rec = Recording {
            kv_cache_type: text("kv_cache_type")?,
            delta_rule: text("delta_rule")?,
            position,
            steps: steps(&v["inputs"])?,
            leaves: vec![],
            nodes: vec![],
            index: HashMap::new(),
        };
        for (is_node, key) in [(false, "leaves"), (true, "nodes")] {
            let list = v[key].as_array().ok_or_else(|| GraphError::Schema(format!("no `{key}` list")))?;
            for t in list {
                let t = tensor(t)?;
                for s in t.src.iter().flatten().chain(&t.view_src) {
                    if !rec.index.contains_key(s) {
                        return Err(node_error(&t, format!("reads {s}, which is not a tensor recorded before it")));
                    }
                }
                let list = if is_node { &mut rec.nodes } else { &mut rec.leaves };
                if rec.index.insert(t.id.clone(), (is_node, list.len())).is_some() {
                    return Err(node_error(&t, "its id is used twice".into()));
                }
                list.push(t);
            }
        }
        Ok(rec)
    }
}

/// The error of node `t`.
pub(crate) fn node_error(t: &Tensor, why: String) -> GraphError {
    GraphError::Node { id: t.id.clone(), name: t.name.clone(), op: t.row_name(), why }
}

/// One tensor of the JSON.
fn tensor(v: &Value) -> Result<Tensor, GraphError> {
    let id = v["id"].as_str().ok_or_else(|| GraphError::Schema("a tensor without an `id`".into()))?.to_string();
    let fail = |why: String| GraphError::Schema(format!("tensor {id}: {why}"));
    let text = |k: &str| v[k].as_str().map(str::to_string).ok_or_else(|| fail(format!("no `{k}`")));
    let four = |k: &str| -> Result<Vec<i64>, GraphError> {
        let a = v[k].as_array().filter(|a| a.len() == DIMS).ok_or_else(|| fail(format!("`{k}` is not 4 numbers")))?;
        a.iter().map(|x| x.as_i64().ok_or_else(|| fail(format!("`{k}` holds a non-integer")))).collect()
    };
    let ne = four("ne")?;
    if ne.iter().any(|&d| d < 0) {
        return Err(fail(format!("sizes {ne:?} below zero")));
    }
    let nb = four("nb")?;
    let nb: Vec<u64> = nb
        .iter()
        .map(|&b| u64::try_from(b).map_err(|_| fail(format!("strides {nb:?} below zero"))))
        .collect::<Result<_, _>>()?;
    let op_params = match v["op_params"].as_array() {
        Some(a) => a
            .iter()
            .map(|x| {
                x.as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| fail("an op param that is not an i32".into()))
            })
            .collect::<Result<_, _>>()?,
        None => vec![],
    };
    let src_id = |s: &Value| -> Result<Option<String>, GraphError> {
        match s {
            Value::Null => Ok(None),
            s => s["id"].as_str().map(|i| Some(i.to_string())).ok_or_else(|| fail("a source without an `id`".into())),
        }
    };
    let src = match v["src"].as_array() {
        Some(a) => a.iter().map(src_id).collect::<Result<_, _>>()?,
        None => vec![],
    };
    Ok(Tensor {
        name: text("name")?,
        op: text("op")?,
        kind: v["unary"].as_str().or(v["glu"].as_str()).map(str::to_string),
        ty: text("type")?,
        ne: [ne[0], ne[1], ne[2], ne[3]],
        nb: [nb[0], nb[1], nb[2], nb[3]],
        op_params,
        view_src: src_id(&v["view_src"])?,
        view_offs: v["view_offs"].as_u64().unwrap_or(0),
        src,
        input: v["flags"].as_array().is_some_and(|f| f.iter().any(|x| x.as_str() == Some("INPUT"))),
        values: match &v["values"] {
            Value::Array(a) => Some(
                a.iter()
                    .map(number)
                    .collect::<Option<_>>()
                    .ok_or_else(|| fail("a value that is not a number".into()))?,
            ),
            _ => None,
        },
        id,
    })
}

/// Every step's input values, from the recording's `inputs` list (absent: none).
fn steps(v: &Value) -> Result<Vec<BTreeMap<String, Vec<f64>>>, GraphError> {
    let Some(list) = v.as_array() else { return Ok(vec![]) };
    let fail = |why: &str| GraphError::Schema(format!("`inputs`: {why}"));
    list.iter()
        .map(|step| {
            let step = step.as_object().ok_or_else(|| fail("a step that is not an object"))?;
            step.iter()
                .map(|(name, values)| {
                    let values = match values {
                        Value::Array(a) => a.iter().map(number).collect::<Option<Vec<f64>>>(),
                        _ => None,
                    };
                    Ok((name.clone(), values.ok_or_else(|| fail("values that are not numbers"))?))
                })
                .collect()
        })
        .collect()
}

/// A recorded value: a JSON number, or `"inf"`, `"-inf"`, `"nan"` (which JSON has no numbers for).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => match s.as_str() {
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            "nan" => Some(f64::NAN),
            _ => None,
        },
        v => v.as_f64(),
    }
}

/// The recording at `path`, at most [`MAX_RECORDING_BYTES`] of it.
pub fn read_recording(path: &Path) -> Result<Recording, GraphError> {
    let fail = |e: String| GraphError::File(format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut json = Vec::new();
    file.take(MAX_RECORDING_BYTES + 1).read_to_end(&mut json).map_err(|e| fail(e.to_string()))?;
    if json.len() as u64 > MAX_RECORDING_BYTES {
        return Err(fail(format!("over {MAX_RECORDING_BYTES} bytes")));
    }
    Recording::from_json(&json)
}
