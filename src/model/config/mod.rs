//! Reading a Hugging Face `config.json` into a `ModelSpec`.
//!
//! A config comes in the forms the hub and transformers write: a multimodal wrapper whose text
//! hyper-parameters sit in `text_config` (Qwen3.5's `qwen3_5`), or a bare text config; RoPE as
//! top-level `rope_theta` and `partial_rotary_factor`, as a `rope_parameters` object, or as a legacy
//! `rope_scaling` object. Each family the reader knows is one row of [`FAMILIES`]: the `model_type`
//! of its text config, the wrappers that hold one, and the function that reads it. A field the
//! family's config class has a default for may be absent; a size the checkpoint's shapes depend on
//! may not. Every JSON value is checked for its type before it is used, and counts are bounded, so
//! no input makes the reader panic or allocate without limit.

use serde_json::{Map, Value};

use super::spec::{AttentionSpec, Constructs, DeltaNetSpec, Mixer, ModelSpec, SpecError};
use crate::ir::RopeStyle;

/// The most layers a config may declare: far above any real model, low enough that a default
/// `layer_types` list is small.
pub const MAX_LAYERS: usize = 4096;
/// The largest size (width, vocabulary, head count) a config may declare.
pub const MAX_SIZE: usize = 1 << 24;

/// Why a `config.json` does not describe a model stepcheck reads. Each variant names the field (its
/// path from the root, e.g. `text_config.hidden_size`) and what was expected and found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("config.json is not valid JSON: {0}")]
    Json(String),
    #[error("config field `{field}` is required but absent (or null)")]
    Missing { field: String },
    #[error("config field `{field}`: expected {expected}, found {found}")]
    WrongType { field: String, expected: &'static str, found: String },
    #[error("config field `{field}`: expected {expected}, found {found}")]
    BadValue { field: String, expected: String, found: String },
    #[error("model_type `{model_type}` is not a family stepcheck reads")]
    UnsupportedFamily { model_type: String },
    #[error("config field `{field}`: rope_type `{rope_type}` is not supported (only `default` RoPE is)")]
    UnsupportedRope { field: String, rope_type: String },
    #[error("config describes no valid decode step: {0}")]
    Spec(#[from] SpecError),
}

/// A family the reader knows: a row of [`FAMILIES`].
pub struct Family {
    /// The `model_type` of its text config.
    pub text_model_type: &'static str,
    /// The `model_type`s of the wrappers that hold its text config in `text_config`.
    pub wrapper_model_types: &'static [&'static str],
    /// Reads the text config (and the wrapper's overriding fields) into a spec named by the second
    /// argument.
    pub read: fn(&Source, &str) -> Result<ModelSpec, ConfigError>,
}

/// The families the reader knows.
pub const FAMILIES: &[Family] =
    &[Family { text_model_type: "qwen3_5_text", wrapper_model_types: &["qwen3_5"], read: read_qwen35 }];

/// The spec named `name` that a `config.json` text describes, checked by [`ModelSpec::validate`].
pub fn spec_from_config_json(text: &str, name: &str) -> Result<ModelSpec, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
    let root = Fields::object(&root, "", "(the config)")?;
    let model_type = root.required("model_type", Fields::str_of, "a string")?;
    let spec = read_family(&root, model_type, name)?;
    spec.validate()?;
    Ok(spec)
}

fn read_family(root: &Fields, model_type: &str, name: &str) -> Result<ModelSpec, ConfigError> {
    for family in FAMILIES {
        if family.wrapper_model_types.contains(&model_type) {
            let inner = root.required("text_config", Some, "an object")?;
            let text = Fields::object(inner, "text_config.", "text_config")?;
            if let Some(inner_type) = text.optional("model_type", Fields::str_of, "a string")?
                && inner_type != family.text_model_type
            {
                return Err(ConfigError::UnsupportedFamily { model_type: inner_type.to_string() });
            }
            return (family.read)(&Source { text, wrapper: Some(root.clone()) }, name);
        }
        if model_type == family.text_model_type {
            return (family.read)(&Source { text: root.clone(), wrapper: None }, name);
        }
    }
    Err(ConfigError::UnsupportedFamily { model_type: model_type.to_string() })
}

/// The config a family reads: its text config, and the wrapper around it if there is one.
pub struct Source<'a> {
    pub text: Fields<'a>,
    pub wrapper: Option<Fields<'a>>,
}

/// A JSON object and its path from the root, read field by field with typed errors. A null field
/// reads as absent, as transformers treats `None`.
#[derive(Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    /// `value` as an object whose fields are named `path` + key; `field` names it in errors.
    fn object(value: &'a Value, path: &str, field: &str) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Ok(Fields { map, path: path.to_string() }),
            other => Err(wrong_type(field.to_string(), "an object", other)),
        }
    }

    /// The full name of field `key`.
    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.path)
    }

    /// Field `key`, unless absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Field `key` read by `read`, which returns `None` when the value is not of the `expected`
    /// type; absent is an error.
    pub fn required<T>(
        &self,
        key: &str,
        read: fn(&'a Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<T, ConfigError> {
        self.optional(key, read, expected)?.ok_or_else(|| ConfigError::Missing { field: self.name(key) })
    }

    /// Field `key` read by `read`, or `None` when absent.
    pub fn optional<T>(
        &self,
        key: &str,
        read: fn(&'a Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<Option<T>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| wrong_type(self.name(key), expected, v)),
        }
    }

    /// Size field `key`: a non-negative integer of at most `limit`; absent is an error.
    pub fn size(&self, key: &str, limit: usize) -> Result<usize, ConfigError> {
        let n = self.required(key, Value::as_u64, "a non-negative integer")?;
        self.bounded(key, n, limit)
    }

    /// Size field `key`, or `default` when absent.
    pub fn size_or(&self, key: &str, limit: usize, default: usize) -> Result<usize, ConfigError> {
        match self.optional(key, Value::as_u64, "a non-negative integer")? {
            Some(n) => self.bounded(key, n, limit),
            None => Ok(default),
        }
    }

    fn bounded(&self, key: &str, n: u64, limit: usize) -> Result<usize, ConfigError> {
        match usize::try_from(n) {
            Ok(n) if n <= limit => Ok(n),
            _ => Err(ConfigError::BadValue {
                field: self.name(key),
                expected: format!("at most {limit}"),
                found: n.to_string(),
            }),
        }
    }

    /// Number field `key`, if present.
    pub fn number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.optional(key, Value::as_f64, "a number")
    }

    /// Boolean field `key`, if present.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.optional(key, Value::as_bool, "a boolean")
    }

    /// String field `key`, if present.
    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        self.optional(key, Fields::str_of, "a string")
    }

    fn str_of(v: &'a Value) -> Option<&'a str> {
        v.as_str()
    }
}

fn wrong_type(field: String, expected: &'static str, found: &Value) -> ConfigError {
    ConfigError::WrongType { field, expected, found: describe(found) }
}

/// A short description of a JSON value for an error: its kind, and its text when short.
fn describe(v: &Value) -> String {
    let kind = match v {
        Value::Null => return "null".into(),
        Value::Bool(b) => return b.to_string(),
        Value::Number(_) => "the number",
        Value::String(_) => "the string",
        Value::Array(a) => return format!("an array of {} entries", a.len()),
        Value::Object(_) => return "an object".into(),
    };
    let text = v.to_string();
    let short: String = text.chars().take(40).collect();
    let ellipsis = if short.len() < text.len() { "…" } else { "" };
    format!("{kind} {short}{ellipsis}")
}

/// Reads a Qwen3.5 dense text config (`Qwen3_5TextConfig`). Sizes are required; the class defaults
/// fill the rest: `rms_norm_eps` 1e-6, `tie_word_embeddings` false (the wrapper's value wins when it
/// has one), `full_attention_interval` 4 when `layer_types` is absent, RoPE θ 10000 and
/// `partial_rotary_factor` 0.25, `hidden_act` silu, `attention_bias` false.
fn read_qwen35(src: &Source, name: &str) -> Result<ModelSpec, ConfigError> {
    let c = &src.text;
    let size = |key: &str| c.size(key, MAX_SIZE);
    let hidden = size("hidden_size")?;
    let intermediate = size("intermediate_size")?;
    let vocab = size("vocab_size")?;
    let layers = layer_types(c)?;
    let heads = size("num_attention_heads")?;
    let kv_heads = size("num_key_value_heads")?;
    let head_dim = size("head_dim")?;
    let delta_net = DeltaNetSpec {
        key_heads: size("linear_num_key_heads")?,
        value_heads: size("linear_num_value_heads")?,
        key_dim: size("linear_key_head_dim")?,
        value_dim: size("linear_value_head_dim")?,
        conv_kernel: size("linear_conv_kernel_dim")?,
    };
    let rms_eps = c.number("rms_norm_eps")?.unwrap_or(1e-6);
    let wrapper_tie = match &src.wrapper {
        Some(w) => w.bool("tie_word_embeddings")?,
        None => None,
    };
    let tied_embeddings = match wrapper_tie {
        Some(t) => t,
        None => c.bool("tie_word_embeddings")?.unwrap_or(false),
    };
    let rope = rope(c)?;
    let act = c.str("hidden_act")?.unwrap_or("silu");
    if act != "silu" {
        let found = describe(&Value::String(act.into()));
        return Err(bad_value(c.name("hidden_act"), "\"silu\" (a SwiGLU FFN)", found));
    }
    if c.bool("attention_bias")?.unwrap_or(false) {
        return Err(bad_value(c.name("attention_bias"), "false (no q/k/v/o biases)", "true".into()));
    }
    Ok(ModelSpec {
        name: name.to_string(),
        hidden,
        intermediate,
        vocab,
        layers,
        rms_eps,
        tied_embeddings,
        attention: AttentionSpec {
            heads,
            kv_heads,
            head_dim,
            // transformers' int(head_dim · partial_rotary_factor): truncation, on a factor in [0, 1].
            rotary_dims: (head_dim as f64 * rope.partial_rotary_factor) as usize,
            rope_theta: rope.theta,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net,
        constructs: Constructs::default(),
    })
}

fn bad_value(field: String, expected: &str, found: String) -> ConfigError {
    ConfigError::BadValue { field, expected: expected.to_string(), found }
}

/// The mixer of each layer: `layer_types` when present (legacy `mamba`/`attention` read as
/// transformers remaps them), else attention on every `full_attention_interval`-th layer.
fn layer_types(c: &Fields) -> Result<Vec<Mixer>, ConfigError> {
    let count = c.size("num_hidden_layers", MAX_LAYERS)?;
    let Some(types) = c.optional("layer_types", Value::as_array, "an array of strings")? else {
        let interval = c.size_or("full_attention_interval", MAX_LAYERS, 4)?;
        if interval == 0 {
            return Err(bad_value(c.name("full_attention_interval"), "a positive integer", "0".into()));
        }
        return Ok(ModelSpec::every_nth_attention(count, interval));
    };
    let field = c.name("layer_types");
    if types.len() != count {
        return Err(bad_value(
            field,
            &format!("{count} entries (num_hidden_layers)"),
            format!("{} entries", types.len()),
        ));
    }
    types
        .iter()
        .enumerate()
        .map(|(i, t)| match t.as_str() {
            Some("linear_attention" | "mamba") => Ok(Mixer::DeltaNet),
            Some("full_attention" | "attention") => Ok(Mixer::Attention),
            _ => Err(bad_value(format!("{field}[{i}]"), "\"linear_attention\" or \"full_attention\"", describe(t))),
        })
        .collect()
}

/// The RoPE a config asks for.
struct Rope {
    theta: f64,
    partial_rotary_factor: f64,
}

/// The RoPE parameters, with transformers' precedence: a non-null legacy `rope_scaling` replaces
/// `rope_parameters`; a value inside that object and one at the top level must agree; a per-layer-type
/// object is read at its `full_attention` entry. Only `default` RoPE (M-RoPE sections included:
/// text-only positions make them plain RoPE) is accepted.
fn rope(c: &Fields) -> Result<Rope, ConfigError> {
    let key = if c.get("rope_scaling").is_some() { "rope_scaling" } else { "rope_parameters" };
    let params = match c.get(key) {
        None => None,
        Some(v) => {
            let p = Fields::object(v, &format!("{}.", c.name(key)), &c.name(key))?;
            let per_layer_type = !p.map.is_empty()
                && p.map.keys().all(|k| k == "full_attention" || k == "linear_attention")
                && p.get("full_attention").is_some();
            if per_layer_type {
                let full = p.required("full_attention", Some, "an object")?;
                Some(Fields::object(full, &p.name("full_attention."), &p.name("full_attention"))?)
            } else {
                Some(p)
            }
        }
    };
    if let Some(p) = &params {
        let (field, rope_type) = match p.str("rope_type")? {
            Some(t) => (p.name("rope_type"), t),
            None => (p.name("type"), p.str("type")?.unwrap_or("default")),
        };
        if rope_type != "default" {
            return Err(ConfigError::UnsupportedRope { field, rope_type: rope_type.to_string() });
        }
    }
    let theta = agreed(c, params.as_ref(), "rope_theta")?.map_or(10_000.0, |(_, t)| t);
    let (field, partial_rotary_factor) =
        agreed(c, params.as_ref(), "partial_rotary_factor")?.unwrap_or((String::new(), 0.25));
    if !(0.0..=1.0).contains(&partial_rotary_factor) {
        return Err(bad_value(field, "a fraction in [0, 1]", partial_rotary_factor.to_string()));
    }
    Ok(Rope { theta, partial_rotary_factor })
}

/// Number `key` and the field it came from: the RoPE object's, else the top level's; when both
/// hold it they must agree.
fn agreed(c: &Fields, params: Option<&Fields>, key: &str) -> Result<Option<(String, f64)>, ConfigError> {
    let inner = match params {
        Some(p) => p.number(key)?.map(|v| (p.name(key), v)),
        None => None,
    };
    let top = c.number(key)?.map(|v| (c.name(key), v));
    match (inner, top) {
        (Some((field, a)), Some((top_field, b))) if a != b => {
            Err(bad_value(field, &format!("the value of `{top_field}` ({b})"), a.to_string()))
        }
        (inner, top) => Ok(inner.or(top)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_of_long_values_are_cut() {
        let v = Value::String("x".repeat(100));
        assert!(describe(&v).chars().count() < 60);
    }
}
