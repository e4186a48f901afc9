//! Reading a qwen35 GGUF file: its checkpoint and its spec.
//!
//! A GGUF file written by llama.cpp's converter already keeps the canonical conventions of a
//! [`Checkpoint`] (norms hold the final multiplier, `ssm_a`, `ssm_dt.bias`, the conv weight `[C, K]`,
//! tiled value heads), so its tensors are taken as they are: every tensor, its shape outermost first
//! as stored, widened to f32. The spec comes from the `qwen35.*` metadata, read the way llama.cpp
//! reads it, except that each layer's mixer is the one its tensors hold.

use std::path::Path;

use super::checkpoint::{Checkpoint, Tensor};
use super::names;
use super::spec::{AttentionSpec, Constructs, DeltaNetSpec, Mixer, ModelSpec, SpecError};
use crate::formats::gguf::{Gguf, GgufError, GgufFile, GgufInfo, TensorInfo, Value};
use crate::ir::RopeStyle;

/// The only architecture this loader reads.
pub const ARCHITECTURE: &str = "qwen35";
/// The key naming the architecture.
pub const ARCHITECTURE_KEY: &str = "general.architecture";
/// The key naming the model, used as the spec's name when present.
pub const NAME_KEY: &str = "general.name";
/// Every `full_attention_interval`-th layer is attention when the file does not say otherwise.
pub const DEFAULT_FULL_ATTENTION_INTERVAL: u64 = 4;
/// The most layers a spec may have, so that a corrupt block count cannot ask for unbounded memory.
pub const MAX_LAYERS: usize = 1 << 16;

/// Why a GGUF file is not a qwen35 model this loader can read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("the GGUF's architecture is `{found}`; this loader reads `{ARCHITECTURE}`")]
    UnsupportedArchitecture { found: String },
    #[error("metadata key `{key}` is missing")]
    MissingKey { key: String },
    #[error("metadata key `{key}` is {found}; expected {expected}")]
    WrongType { key: String, expected: &'static str, found: String },
    #[error("metadata key `{key}`: {why}")]
    BadValue { key: String, why: String },
    #[error("layer {layer} has no mixer this loader can name: {why}")]
    LayerKind { layer: usize, why: String },
    #[error("tensor `{tensor}` is missing")]
    MissingTensor { tensor: String },
    #[error("tensor `{tensor}` has shape {shape:?}; {why}")]
    BadTensorShape { tensor: String, shape: Vec<usize>, why: String },
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// The spec and the checkpoint of the qwen35 GGUF file at `path`.
pub fn load_gguf(path: impl AsRef<Path>) -> Result<(ModelSpec, Checkpoint), LoadError> {
    let file = GgufFile::open(path)?;
    let spec = spec_from_gguf(file.info())?;
    let ckpt = checkpoint_of(file.info(), |t| file.read_f32(t))?;
    Ok((spec, ckpt))
}

/// Every tensor of the GGUF file at `path`: its shape outermost first, its values widened to f32.
pub fn checkpoint_from_gguf(path: impl AsRef<Path>) -> Result<Checkpoint, LoadError> {
    let file = GgufFile::open(path)?;
    checkpoint_of(file.info(), |t| file.read_f32(t))
}

/// Every tensor of the GGUF file held in `bytes` (see [`checkpoint_from_gguf`]).
pub fn checkpoint_from_bytes(bytes: &[u8]) -> Result<Checkpoint, LoadError> {
    let gguf = Gguf::parse(bytes)?;
    checkpoint_of(gguf.info(), |t| gguf.read_f32(t))
}

fn checkpoint_of(
    info: &GgufInfo,
    read: impl Fn(&TensorInfo) -> Result<Vec<f32>, GgufError>,
) -> Result<Checkpoint, LoadError> {
    let mut ckpt = Checkpoint::default();
    for t in info.tensors() {
        ckpt.insert(t.name.clone(), Tensor { shape: t.shape.clone(), data: read(t)? });
    }
    Ok(ckpt)
}

/// The spec a qwen35 GGUF file's metadata describes.
///
/// Each layer's mixer is the one its tensors hold (`attn_qkv` a Gated-DeltaNet, `attn_q`
/// attention); only a file without them follows `qwen35.full_attention_interval` (default 4), which
/// llama.cpp reads alone but converters write even for patterns it cannot express. The head count
/// and KV head count may be a scalar or one value per layer; the attention layers' values must then
/// agree. `dv` is `ssm.inner_size / ssm.time_step_rank`. The vocab is `qwen35.vocab_size`, or else
/// the rows of `token_embd.weight`; the embeddings are tied iff there is no `output.weight`. Output
/// gate and q/k norms are on, RoPE is NeoX-style on the first `rope.dimension_count` dims of each
/// head. The spec is validated before it is returned.
pub fn spec_from_gguf(info: &GgufInfo) -> Result<ModelSpec, LoadError> {
    let m = Meta { info, arch: ARCHITECTURE };
    let arch = m.str(ARCHITECTURE_KEY)?;
    if arch != ARCHITECTURE {
        return Err(LoadError::UnsupportedArchitecture { found: arch.to_owned() });
    }
    let name = info.get_str(NAME_KEY).unwrap_or(ARCHITECTURE).to_owned();
    let layers_key = m.key("block_count");
    let n_layers = m.usize(&layers_key)?;
    if n_layers > MAX_LAYERS {
        return Err(LoadError::BadValue { key: layers_key, why: format!("{n_layers} layers; at most {MAX_LAYERS}") });
    }
    let interval_key = m.key("full_attention_interval");
    let interval = match info.metadata(&interval_key) {
        None => DEFAULT_FULL_ATTENTION_INTERVAL,
        Some(_) => m.u64(&interval_key)?,
    };
    if interval == 0 {
        return Err(LoadError::BadValue { key: interval_key, why: "an interval of 0 layers".into() });
    }
    let layers = layer_kinds(info, n_layers, usize::try_from(interval).unwrap_or(usize::MAX))?;

    let head_dim_key = m.key("attention.key_length");
    let head_dim = m.usize(&head_dim_key)?;
    let value_length_key = m.key("attention.value_length");
    if info.metadata(&value_length_key).is_some() {
        let v = m.usize(&value_length_key)?;
        if v != head_dim {
            let why = format!("{v} differs from `{head_dim_key}` {head_dim}; the spec has one head dim");
            return Err(LoadError::BadValue { key: value_length_key, why });
        }
    }

    let inner_key = m.key("ssm.inner_size");
    let inner = m.usize(&inner_key)?;
    let value_heads = m.usize(&m.key("ssm.time_step_rank"))?;
    if value_heads == 0 || inner % value_heads != 0 {
        let why = format!("{inner} does not split into {value_heads} value heads");
        return Err(LoadError::BadValue { key: inner_key, why });
    }

    let spec = ModelSpec {
        name,
        hidden: m.usize(&m.key("embedding_length"))?,
        intermediate: m.usize(&m.key("feed_forward_length"))?,
        vocab: vocab(&m)?,
        rms_eps: m.f64(&m.key("attention.layer_norm_rms_epsilon"))?,
        tied_embeddings: info.tensor(names::OUTPUT).is_none(),
        attention: AttentionSpec {
            heads: m.per_layer(&m.key("attention.head_count"), &layers)?,
            kv_heads: m.per_layer(&m.key("attention.head_count_kv"), &layers)?,
            head_dim,
            rotary_dims: m.usize(&m.key("rope.dimension_count"))?,
            rope_theta: m.f64(&m.key("rope.freq_base"))?,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net: DeltaNetSpec {
            key_heads: m.usize(&m.key("ssm.group_count"))?,
            value_heads,
            key_dim: m.usize(&m.key("ssm.state_size"))?,
            value_dim: inner / value_heads,
            conv_kernel: m.usize(&m.key("ssm.conv_kernel"))?,
        },
        layers,
        constructs: Constructs::default(),
    };
    spec.validate()?;
    Ok(spec)
}

/// The mixer of each layer. When the file holds the mixer tensors, each layer's are its truth:
/// `blk.N.attn_qkv.weight` makes a Gated-DeltaNet layer, `blk.N.attn_q.weight` an attention layer.
/// Only a file without them (metadata alone) falls back on every `interval`-th layer being attention.
///
/// This departs from llama.cpp, which reads the interval alone: converters always write one
/// (default 4), even for a `layer_types` it cannot express, such as `[full, linear, linear, full]`.
/// llama.cpp refuses such a file for lack of the tensors its interval asks for; here it reads as the
/// model its weights are.
fn layer_kinds(info: &GgufInfo, n_layers: usize, interval: usize) -> Result<Vec<Mixer>, LoadError> {
    let has = |layer: usize, what: &str| info.tensor(&names::blk(layer, what)).is_some();
    let (delta_net, attention) = (names::layer::ATTN_QKV, names::layer::ATTN_Q);
    if !(0..n_layers).any(|l| has(l, delta_net) || has(l, attention)) {
        return Ok(ModelSpec::every_nth_attention(n_layers, interval));
    }
    (0..n_layers)
        .map(|layer| match (has(layer, delta_net), has(layer, attention)) {
            (true, false) => Ok(Mixer::DeltaNet),
            (false, true) => Ok(Mixer::Attention),
            (both, _) => {
                let holds = if both { "both" } else { "neither" };
                let why = format!("it holds {holds} `{delta_net}` (Gated-DeltaNet) and `{attention}` (attention)");
                Err(LoadError::LayerKind { layer, why })
            }
        })
        .collect()
}

/// The vocab: `{arch}.vocab_size`, or else the rows of the embedding table.
fn vocab(m: &Meta) -> Result<usize, LoadError> {
    let key = m.key("vocab_size");
    if m.info.metadata(&key).is_some() {
        return m.usize(&key);
    }
    let tensor = names::TOKEN_EMBD;
    let t = m.info.tensor(tensor).ok_or_else(|| LoadError::MissingTensor { tensor: tensor.into() })?;
    match t.shape.as_slice() {
        &[rows, _] => Ok(rows),
        shape => Err(LoadError::BadTensorShape {
            tensor: tensor.into(),
            shape: shape.to_vec(),
            why: "the embedding table is [vocab, hidden]".into(),
        }),
    }
}

/// Typed reads of one architecture's metadata; each failure names its key.
struct Meta<'a> {
    info: &'a GgufInfo,
    arch: &'a str,
}

impl Meta<'_> {
    /// The key `{arch}.{suffix}`.
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn get(&self, key: &str) -> Result<&Value, LoadError> {
        self.info.metadata(key).ok_or_else(|| LoadError::MissingKey { key: key.into() })
    }

    fn wrong(key: &str, expected: &'static str, found: &Value) -> LoadError {
        LoadError::WrongType { key: key.into(), expected, found: found.to_string() }
    }

    fn str(&self, key: &str) -> Result<&str, LoadError> {
        let v = self.get(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "a string", v))
    }

    fn u64(&self, key: &str) -> Result<u64, LoadError> {
        let v = self.get(key)?;
        v.as_u64().ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    fn usize(&self, key: &str) -> Result<usize, LoadError> {
        let n = self.u64(key)?;
        usize::try_from(n).map_err(|_| LoadError::BadValue { key: key.into(), why: format!("{n} is too large") })
    }

    /// A float. An f32 becomes the f64 with the same shortest decimal form, the value its writer
    /// meant: a config's `1e-6`, stored as the f32 nearest it, reads back as `1e-6`.
    fn f64(&self, key: &str) -> Result<f64, LoadError> {
        match self.get(key)? {
            Value::F32(x) => Ok(x.to_string().parse().unwrap_or(f64::from(*x))),
            Value::F64(x) => Ok(*x),
            v => Err(Self::wrong(key, "a float", v)),
        }
    }

    /// A per-layer count given as a scalar, or as an array of one value per layer (llama.cpp's
    /// `get_key_or_arr`) whose attention layers must agree; with no attention layer, the largest.
    fn per_layer(&self, key: &str, layers: &[Mixer]) -> Result<usize, LoadError> {
        let v = self.get(key)?;
        let Some(array) = v.as_array() else { return self.usize(key) };
        let expected = "a non-negative integer or an array of them";
        let values = array.as_u64s().ok_or_else(|| Self::wrong(key, expected, v))?;
        if values.len() != layers.len() {
            let why = format!("{} values for {} layers", values.len(), layers.len());
            return Err(LoadError::BadValue { key: key.into(), why });
        }
        let attention: Vec<u64> =
            values.iter().zip(layers).filter(|(_, m)| **m == Mixer::Attention).map(|(&n, _)| n).collect();
        let n = match attention.split_first() {
            Some((&first, rest)) => {
                if let Some(&other) = rest.iter().find(|&&n| n != first) {
                    let why = format!("the attention layers disagree ({first} and {other}); the spec has one value");
                    return Err(LoadError::BadValue { key: key.into(), why });
                }
                first
            }
            None => values.iter().copied().max().unwrap_or(0),
        };
        usize::try_from(n).map_err(|_| LoadError::BadValue { key: key.into(), why: format!("{n} is too large") })
    }
}
