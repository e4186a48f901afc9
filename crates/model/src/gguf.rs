//! Reading a qwen35 GGUF file: its checkpoint and its spec.
//!
//! A `qwen35moe` file (Qwen3.5-MoE) is read the same way into a spec whose FFNs are experts
//! (`expert_count`, `expert_used_count`, `expert_feed_forward_length`, the shared expert's
//! `expert_shared_feed_forward_length`): the engine refuses it by name, as it refuses the family's
//! `config.json`, and the reference interpreter runs it.
//!
//! A GGUF file written by llama.cpp's converter already keeps the canonical conventions of a
//! [`Checkpoint`] (norms hold the final multiplier, `ssm_a`, `ssm_dt.bias`, the conv weight `[C, K]`,
//! tiled value heads), so its tensors are taken as they are: each tensor of the decoder, its shape
//! outermost first as stored, in its stored type, read in place from the mapped file. The spec comes from the `qwen35.*` metadata, read the
//! way llama.cpp reads it, except that each layer's mixer is the one its tensors hold.
//!
//! The converter keeps a checkpoint's multi-token-prediction (MTP) head by default: it writes
//! `qwen35.nextn_predict_layers = n` and `block_count` layers of which the last `n` are the MTP
//! head's. As in llama.cpp, the decoder is the first `block_count − n` blocks; the MTP blocks are
//! not part of a decode step and are skipped (never read), and [`GgufModel::mtp`] says so.
//!
//! Metadata and tensors are checked against each other before anything is read: every tensor of the
//! decoder must be one the spec's step reads, with the shape the metadata gives it; every tensor of
//! an MTP block one an MTP block holds; nothing else may be in the file. Every size is bounded by
//! [`MAX_SIZE`] (the limit of `config.json` sizes). docs/GGUF.md lists every key the converter writes
//! and the rule the reader keeps for it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use super::checkpoint::{Bytes, Checkpoint, Tensor};
use super::layout::layout;
use super::names::{self, layer as n};
use super::spec::{AttentionSpec, Constructs, DeltaNetSpec, Experts, Mixer, ModelSpec, SpecError};
use formats::gguf::{GgmlType, Gguf, GgufError, GgufFile, GgufInfo, TensorInfo, Value};
use ir::RopeStyle;

/// The architecture this loader reads and runs.
pub const ARCHITECTURE: &str = "qwen35";
/// The Qwen3.5 mixture-of-experts architecture: read into a spec with experts, which the engine
/// refuses by name (`verdict` says so; the reference interpreter runs it).
pub(crate) const MOE_ARCHITECTURE: &str = "qwen35moe";
/// The key naming the architecture.
pub(crate) const ARCHITECTURE_KEY: &str = "general.architecture";
/// The key naming the model, used as the spec's name when present.
pub(crate) const NAME_KEY: &str = "general.name";
/// The key listing the tokenizer's tokens; when present, its length must be the vocab.
pub(crate) const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
/// Every `full_attention_interval`-th layer is attention when the file does not say otherwise.
pub(crate) const DEFAULT_FULL_ATTENTION_INTERVAL: u64 = 4;
/// The most layers (blocks) a file may declare: the limit `config.json` has.
pub const MAX_LAYERS: usize = super::config::MAX_LAYERS;
/// The largest size (width, vocabulary, head count, head dim, …) a file may declare: the limit
/// `config.json` has, so that no size read from a file asks for unbounded memory.
pub const MAX_SIZE: usize = super::config::MAX_SIZE;

/// The `qwen35.*` keys the reader knows, each with its rule (docs/GGUF.md). Any other key of the
/// architecture is refused: the reader cannot tell what it would change.
pub(crate) const KNOWN_KEYS: [&str; 23] = [
    "block_count",
    "nextn_predict_layers",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.recurrent_layers",
    "full_attention_interval",
    "rope.freq_base",
    "rope.dimension_count",
    "rope.dimension_sections",
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "ssm.inner_size",
    "rope.scaling.type",
    "attention.causal",
];

/// The keys a `qwen35moe` file has besides [`KNOWN_KEYS`] (which for it need no
/// `feed_forward_length`: its FFNs are experts of `expert_feed_forward_length`).
pub(crate) const MOE_KEYS: [&str; 4] =
    ["expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"];

/// The tensors of an MTP block that have no decoder counterpart (gguf-py's `NEXTN_*`), after
/// `blk.N.`; llama.cpp requires the first three.
pub(crate) const MTP_ONLY: [&str; 6] = [
    "nextn.eh_proj.weight",
    "nextn.enorm.weight",
    "nextn.hnorm.weight",
    "nextn.embed_tokens.weight",
    "nextn.shared_head_head.weight",
    "nextn.shared_head_norm.weight",
];

/// The tensors an MTP block holds besides [`MTP_ONLY`]: those of a full-attention decoder block.
pub(crate) const MTP_DECODER_PART: [&str; 11] = [
    n::ATTN_NORM,
    n::FFN_NORM,
    n::ATTN_Q,
    n::ATTN_K,
    n::ATTN_V,
    n::ATTN_OUTPUT,
    n::ATTN_Q_NORM,
    n::ATTN_K_NORM,
    n::FFN_GATE,
    n::FFN_UP,
    n::FFN_DOWN,
];

/// Why a GGUF file is not a qwen35 model this loader can read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("the GGUF's architecture is `{found}`; this loader reads `{ARCHITECTURE}` and `{MOE_ARCHITECTURE}`")]
    UnsupportedArchitecture { found: String },
    #[error("metadata key `{key}` is missing")]
    MissingKey { key: String },
    #[error("metadata key `{key}` is {found}; expected {expected}")]
    WrongType { key: String, expected: &'static str, found: String },
    #[error("metadata key `{key}`: {why}")]
    BadValue { key: String, why: String },
    #[error("metadata key `{key}` is not one this reader knows the meaning of (docs/GGUF.md lists those it does)")]
    UnknownKey { key: String },
    #[error(
        "metadata key `{arch}.nextn_predict_layers` is {nextn}, more than the {blocks} blocks of `{arch}.block_count`: the MTP head cannot have more blocks than the file"
    )]
    NextnExceedsBlocks { arch: &'static str, nextn: usize, blocks: usize },
    #[error("layer {layer} has no mixer this loader can name: {why}")]
    LayerKind { layer: usize, why: String },
    #[error("tensor `{tensor}` is missing")]
    MissingTensor { tensor: String },
    #[error("tensor `{tensor}` has shape {shape:?}; {why}")]
    BadTensorShape { tensor: String, shape: Vec<usize>, why: String },
    #[error("tensor `{tensor}` has shape {found:?}, but the metadata gives it {expected:?} ({keys})")]
    TensorDisagrees { tensor: String, found: Vec<usize>, expected: Vec<usize>, keys: String },
    #[error("tensor `{tensor}` is in block {block}, but `{arch}.block_count` is {blocks}")]
    BlockBeyondCount { arch: &'static str, tensor: String, block: usize, blocks: usize },
    #[error(
        "tensor `{tensor}` belongs to an MTP head, but block {block} is decoder layer {block} of {decoder_layers} (`{arch}.block_count` − `{arch}.nextn_predict_layers`)"
    )]
    MtpTensorInDecoderLayer { arch: &'static str, tensor: String, block: usize, decoder_layers: usize },
    #[error(
        "tensor `{tensor}` is in block {block}, one of the MTP head's (`{arch}.nextn_predict_layers`), which holds no such tensor"
    )]
    NotAnMtpTensor { arch: &'static str, tensor: String, block: usize },
    #[error(
        "block {block} is one of the MTP head's (`{arch}.nextn_predict_layers`), but it has no `{missing}`, which every MTP block has"
    )]
    MtpBlockIncomplete { arch: &'static str, block: usize, missing: String },
    #[error("tensor `{tensor}` is not part of a qwen35 decoder's checkpoint: {why}")]
    UnexpectedTensor { tensor: String, why: String },
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// What a qwen35 GGUF file holds: the spec of its decoder, its skipped MTP head, its tensor types.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufModel {
    /// The decoder's spec.
    pub spec: ModelSpec,
    /// The MTP head's blocks, when the file has one: present, checked by name, and skipped.
    pub mtp: Option<MtpBlocks>,
    /// How many of the file's tensors are of each ggml type.
    pub types: TypeMix,
}

/// The blocks of a file's multi-token-prediction head: `blk.{first}` … `blk.{first + count − 1}`.
/// They are not part of a decode step; no command reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtpBlocks {
    /// The file's architecture, whose `nextn_predict_layers` key declares the blocks.
    pub arch: &'static str,
    pub first: usize,
    pub count: usize,
    /// The tensors they hold.
    pub tensors: usize,
    /// The values those tensors hold.
    pub values: usize,
}

impl fmt::Display for MtpBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = self.first + self.count - 1;
        let blocks = if self.count == 1 { format!("blk.{last}") } else { format!("blk.{}–blk.{last}", self.first) };
        write!(
            f,
            "MTP head present and skipped: {blocks} (`{}.nextn_predict_layers` = {}), {} tensors, {} values; \
             a multi-token-prediction head is not part of a decode step",
            self.arch, self.count, self.tensors, self.values
        )
    }
}

/// How many tensors of a file are of each ggml type, the most common first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeMix(pub Vec<(GgmlType, usize)>);

impl TypeMix {
    /// The type mix of `tensors`.
    pub fn of(tensors: &[TensorInfo]) -> TypeMix {
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for t in tensors {
            *counts.entry(t.ggml_type.0).or_default() += 1;
        }
        let mut mix: Vec<(GgmlType, usize)> = counts.into_iter().map(|(id, n)| (GgmlType(id), n)).collect();
        mix.sort_by_key(|&(t, n)| (std::cmp::Reverse(n), t.0));
        TypeMix(mix)
    }
}

/// `Q8_0 ×41, F32 ×30`.
impl fmt::Display for TypeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// The spec and the checkpoint of the qwen35 GGUF file at `path`: the decoder's tensors only (an MTP
/// head is skipped), each checked against the metadata, then borrowed in place from the mapped file
/// in its stored type.
pub fn load_gguf(path: impl AsRef<Path>) -> Result<(ModelSpec, Checkpoint), LoadError> {
    let file = GgufFile::open(path)?;
    let model = read_gguf(file.info())?;
    let ckpt = decoder_checkpoint(file.info(), &model.spec, &mapped(&file))?;
    Ok((model.spec, ckpt))
}

/// What the qwen35 GGUF file at `path` holds (see [`read_gguf`]); no tensor data is read.
pub fn gguf_model(path: impl AsRef<Path>) -> Result<GgufModel, LoadError> {
    read_gguf(GgufFile::open(path)?.info())
}

/// Every tensor of the GGUF file at `path`, MTP head included: its shape outermost first, its bytes
/// in place in the mapped file. No check against the metadata: this is the file's contents, not a
/// model.
pub fn checkpoint_from_gguf(path: impl AsRef<Path>) -> Result<Checkpoint, LoadError> {
    checkpoint_of_file(&GgufFile::open(path)?)
}

/// The checkpoint of a GGUF file already mapped (see [`checkpoint_from_gguf`]).
pub(crate) fn checkpoint_of_file(file: &GgufFile) -> Result<Checkpoint, LoadError> {
    checkpoint_of(file.info(), &mapped(file))
}

/// Every tensor of the GGUF file held in `bytes` (see [`checkpoint_from_gguf`]), each tensor's
/// bytes copied as stored.
pub fn checkpoint_from_bytes(bytes: &[u8]) -> Result<Checkpoint, LoadError> {
    let gguf = Gguf::parse(bytes)?;
    let info = gguf.info();
    checkpoint_of(info, &|t| Ok(Bytes::owned(bytes[info.data_range(bytes.len(), t)?].to_vec())))
}

/// How a tensor's bytes are taken: checked (its type decodes, its data lies in the file), then
/// borrowed or copied.
type Take<'a> = dyn Fn(&TensorInfo) -> Result<Bytes, GgufError> + 'a;

/// Each tensor of `file`, borrowed in place from its map.
fn mapped(file: &GgufFile) -> impl Fn(&TensorInfo) -> Result<Bytes, GgufError> + '_ {
    move |t| {
        let map = file.map();
        let range = file.info().data_range(map.len(), t)?;
        Ok(Bytes::mapped(map, range).expect("data_range lies inside the file"))
    }
}

fn tensor(t: &TensorInfo, take: &Take) -> Result<Tensor, GgufError> {
    Ok(Tensor::stored(t.shape.clone(), t.ggml_type, take(t)?))
}

fn checkpoint_of(info: &GgufInfo, take: &Take) -> Result<Checkpoint, LoadError> {
    let mut ckpt = Checkpoint::default();
    for t in info.tensors() {
        ckpt.insert(t.name.clone(), tensor(t, take)?);
    }
    Ok(ckpt)
}

/// The tensors of `spec`'s checkpoint, taken from the file; each must be there.
fn decoder_checkpoint(info: &GgufInfo, spec: &ModelSpec, take: &Take) -> Result<Checkpoint, LoadError> {
    let mut ckpt = Checkpoint::default();
    for want in layout(spec) {
        let t = info.tensor(&want.name).ok_or_else(|| LoadError::MissingTensor { tensor: want.name.clone() })?;
        ckpt.insert(want.name, tensor(t, take)?);
    }
    Ok(ckpt)
}

/// The spec a qwen35 GGUF file's metadata describes (see [`read_gguf`]).
pub fn spec_from_gguf(info: &GgufInfo) -> Result<ModelSpec, LoadError> {
    Ok(read_gguf(info)?.spec)
}

/// What a qwen35 GGUF file's metadata and tensor infos describe: the decoder's spec, its MTP head,
/// its type mix. No tensor data is read.
///
/// The decoder has `block_count − nextn_predict_layers` layers (no `nextn_predict_layers`: 0). Each
/// layer's mixer is the one its tensors hold (`attn_qkv` a Gated-DeltaNet, `attn_q` attention); only
/// a file without them follows `attention.recurrent_layers`, else `full_attention_interval` (default
/// 4). A `recurrent_layers` array must agree with the tensors, and call every MTP block not
/// recurrent. The head count and KV head count may be a scalar or one value per block; the attention
/// layers' values must then agree. `dv` is `ssm.inner_size / ssm.time_step_rank`. The vocab is
/// `vocab_size`, or else the rows of `token_embd.weight`; a tokenizer's token list must be as long.
/// The embeddings are tied iff there is no `output.weight`. Output gate and q/k norms are on, RoPE
/// is NeoX-style on the first `rope.dimension_count` dims of each head. The spec is validated, and
/// when the file holds tensors they are checked against it (see the module doc).
pub fn read_gguf(info: &GgufInfo) -> Result<GgufModel, LoadError> {
    let m = Meta { info, arch: ARCHITECTURE };
    let arch = match m.str(ARCHITECTURE_KEY)? {
        ARCHITECTURE => ARCHITECTURE,
        MOE_ARCHITECTURE => MOE_ARCHITECTURE,
        found => return Err(LoadError::UnsupportedArchitecture { found: found.to_owned() }),
    };
    let m = Meta { info, arch };
    let moe = arch == MOE_ARCHITECTURE;
    refuse_unknown_keys(info, arch)?;
    let name = info.get_str(NAME_KEY).unwrap_or(arch).to_owned();
    let layers_key = m.key("block_count");
    let blocks = m.usize(&layers_key)?;
    if blocks > MAX_LAYERS {
        return Err(LoadError::BadValue { key: layers_key, why: format!("{blocks} layers; at most {MAX_LAYERS}") });
    }
    let nextn_key = m.key("nextn_predict_layers");
    let nextn = match info.metadata(&nextn_key) {
        None => 0,
        Some(_) => m.usize(&nextn_key)?,
    };
    if nextn > blocks {
        return Err(LoadError::NextnExceedsBlocks { arch, nextn, blocks });
    }
    let n_layers = blocks - nextn;
    let interval_key = m.key("full_attention_interval");
    let interval = match info.metadata(&interval_key) {
        None => DEFAULT_FULL_ATTENTION_INTERVAL,
        Some(_) => m.u64(&interval_key)?,
    };
    if interval == 0 {
        return Err(LoadError::BadValue { key: interval_key, why: "an interval of 0 layers".into() });
    }
    let recurrent = recurrent_layers(&m, blocks)?;
    let interval = usize::try_from(interval).unwrap_or(usize::MAX);
    let layers = layer_kinds(info, n_layers, interval, recurrent.as_deref())?;
    if let Some(flags) = &recurrent {
        check_recurrent_layers(&m.key("attention.recurrent_layers"), flags, &layers)?;
    }

    let head_dim_key = m.key("attention.key_length");
    let head_dim = m.size(&head_dim_key)?;
    let value_length_key = m.key("attention.value_length");
    if info.metadata(&value_length_key).is_some() {
        let v = m.size(&value_length_key)?;
        if v != head_dim {
            let why = format!("{v} differs from `{head_dim_key}` {head_dim}; the spec has one head dim");
            return Err(LoadError::BadValue { key: value_length_key, why });
        }
    }

    let inner_key = m.key("ssm.inner_size");
    let inner = m.size(&inner_key)?;
    let value_heads = m.size(&m.key("ssm.time_step_rank"))?;
    if value_heads == 0 || inner % value_heads != 0 {
        let why = format!("{inner} does not split into {value_heads} value heads");
        return Err(LoadError::BadValue { key: inner_key, why });
    }
    let causal_key = m.key("attention.causal");
    if let Some(v) = info.metadata(&causal_key)
        && v.as_bool() != Some(true)
    {
        return Err(LoadError::BadValue { key: causal_key, why: format!("{v}; a decode step is causal") });
    }
    let scaling_key = m.key("rope.scaling.type");
    if info.metadata(&scaling_key).is_some() && m.str(&scaling_key)? != "none" {
        let why = format!("{:?}; this reader has no scaled RoPE", m.str(&scaling_key)?);
        return Err(LoadError::BadValue { key: scaling_key, why });
    }

    let (intermediate, experts) = if moe {
        let width = m.size(&m.key("expert_feed_forward_length"))?;
        let mut e = Experts::new(m.size(&m.key("expert_count"))?, m.size(&m.key("expert_used_count"))?, width);
        let shared_key = m.key("expert_shared_feed_forward_length");
        if info.metadata(&shared_key).is_some() {
            e.shared_intermediate = Some(m.size(&shared_key)?).filter(|&s| s > 0);
        }
        (width, Some(e))
    } else {
        (m.size(&m.key("feed_forward_length"))?, None)
    };
    let spec = ModelSpec {
        name,
        hidden: m.size(&m.key("embedding_length"))?,
        intermediate,
        vocab: vocab(&m)?,
        rms_eps: m.f64(&m.key("attention.layer_norm_rms_epsilon"))?,
        tied_embeddings: info.tensor(names::OUTPUT).is_none(),
        attention: AttentionSpec {
            heads: m.per_layer(&m.key("attention.head_count"), &layers, blocks)?,
            kv_heads: m.per_layer(&m.key("attention.head_count_kv"), &layers, blocks)?,
            head_dim,
            rotary_dims: m.size(&m.key("rope.dimension_count"))?,
            rope_theta: m.f64(&m.key("rope.freq_base"))?,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net: DeltaNetSpec {
            key_heads: m.size(&m.key("ssm.group_count"))?,
            value_heads,
            key_dim: m.size(&m.key("ssm.state_size"))?,
            value_dim: inner / value_heads,
            conv_kernel: m.size(&m.key("ssm.conv_kernel"))?,
        },
        layers,
        constructs: Constructs { experts, ..Constructs::default() },
    };
    spec.validate()?;
    check_token_count(info, spec.vocab)?;
    let mtp = if info.tensors().is_empty() { None } else { check_tensors(info, &spec, blocks, arch)? };
    Ok(GgufModel { spec, mtp, types: TypeMix::of(info.tensors()) })
}

/// Refuses a `{arch}.*` key that is not one of [`KNOWN_KEYS`] (or, for `qwen35moe`, [`MOE_KEYS`]).
fn refuse_unknown_keys(info: &GgufInfo, arch: &str) -> Result<(), LoadError> {
    let prefix = format!("{arch}.");
    let moe = arch == MOE_ARCHITECTURE;
    for (key, _) in info.metadata_entries() {
        if let Some(rest) = key.strip_prefix(&prefix)
            && !KNOWN_KEYS.contains(&rest)
            && !(moe && MOE_KEYS.contains(&rest))
        {
            return Err(LoadError::UnknownKey { key: key.clone() });
        }
    }
    Ok(())
}

/// `attention.recurrent_layers`, when present: one bool per block.
fn recurrent_layers(m: &Meta, blocks: usize) -> Result<Option<Vec<bool>>, LoadError> {
    let key = m.key("attention.recurrent_layers");
    let Some(v) = m.info.metadata(&key) else { return Ok(None) };
    let flags = match v.as_array() {
        Some(formats::gguf::Array::Bool(b)) => b.clone(),
        _ => return Err(Meta::wrong(&key, "an array of bools", v)),
    };
    if flags.len() != blocks {
        let why = format!("{} values for {blocks} blocks (`{}`)", flags.len(), m.key("block_count"));
        return Err(LoadError::BadValue { key, why });
    }
    Ok(Some(flags))
}

/// A `recurrent_layers` array must call each decoder layer what its tensors make it, and every MTP
/// block (an attention block) not recurrent.
fn check_recurrent_layers(key: &str, flags: &[bool], layers: &[Mixer]) -> Result<(), LoadError> {
    for (block, &recurrent) in flags.iter().enumerate() {
        let holds = layers.get(block).copied().unwrap_or(Mixer::Attention);
        if recurrent != (holds == Mixer::DeltaNet) {
            let what = if block < layers.len() { format!("layer {block}") } else { format!("MTP block {block}") };
            let why = format!(
                "it calls {what} {}, but its tensors make it {}",
                if recurrent { "recurrent" } else { "attention" },
                if holds == Mixer::DeltaNet { "a Gated-DeltaNet (recurrent)" } else { "attention" }
            );
            return Err(LoadError::BadValue { key: key.into(), why });
        }
    }
    Ok(())
}

/// Checks every tensor of the file against `spec` (whose layers are the first blocks) and the MTP
/// blocks `spec.layers.len()..blocks`, and describes the MTP head, if any.
fn check_tensors(
    info: &GgufInfo,
    spec: &ModelSpec,
    blocks: usize,
    arch: &'static str,
) -> Result<Option<MtpBlocks>, LoadError> {
    let decoder_layers = spec.layers.len();
    let expected: HashMap<String, Vec<usize>> = layout(spec).into_iter().map(|t| (t.name, t.shape)).collect();
    let mut mtp = MtpBlocks { arch, first: decoder_layers, count: blocks - decoder_layers, tensors: 0, values: 0 };
    for t in info.tensors() {
        let tensor = || t.name.clone();
        match block_of(&t.name) {
            Some((block, _)) if block >= blocks => {
                return Err(LoadError::BlockBeyondCount { arch, tensor: tensor(), block, blocks });
            }
            Some((block, rest)) if block >= decoder_layers => {
                if !MTP_ONLY.contains(&rest) && !MTP_DECODER_PART.contains(&rest) {
                    return Err(LoadError::NotAnMtpTensor { arch, tensor: tensor(), block });
                }
                mtp.tensors += 1;
                mtp.values = mtp.values.saturating_add(t.numel());
            }
            Some((block, rest)) if MTP_ONLY.contains(&rest) => {
                return Err(LoadError::MtpTensorInDecoderLayer { arch, tensor: tensor(), block, decoder_layers });
            }
            _ => match expected.get(&t.name) {
                Some(shape) if *shape == t.shape => {}
                Some(shape) => {
                    let keys = shape_keys(arch, &t.name, shape, &t.shape);
                    return Err(LoadError::TensorDisagrees {
                        tensor: tensor(),
                        found: t.shape.clone(),
                        expected: shape.clone(),
                        keys,
                    });
                }
                None => return Err(unexpected(&t.name, spec)),
            },
        }
    }
    if let Some(missing) = expected.keys().filter(|name| info.tensor(name).is_none()).min() {
        return Err(LoadError::MissingTensor { tensor: missing.clone() });
    }
    let h = spec.hidden;
    for block in decoder_layers..blocks {
        for (what, shape) in [(MTP_ONLY[0], vec![h, 2 * h]), (MTP_ONLY[1], vec![h]), (MTP_ONLY[2], vec![h])] {
            let name = names::blk(block, what);
            let Some(t) = info.tensor(&name) else {
                return Err(LoadError::MtpBlockIncomplete { arch, block, missing: name });
            };
            if t.shape != shape {
                let keys = format!("`{arch}.embedding_length` = {h}");
                return Err(LoadError::TensorDisagrees { tensor: name, found: t.shape.clone(), expected: shape, keys });
            }
        }
    }
    Ok((mtp.count > 0).then_some(mtp))
}

/// The block number and the rest of a `blk.N.rest` name.
fn block_of(name: &str) -> Option<(usize, &str)> {
    let (block, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    Some((block.parse().ok()?, rest))
}

/// The error for a tensor of a decoder layer (or outside the blocks) that the step does not read.
fn unexpected(name: &str, spec: &ModelSpec) -> LoadError {
    let why = match block_of(name) {
        Some((block, _)) => match spec.layers.get(block) {
            Some(Mixer::DeltaNet) => format!("layer {block} is a Gated-DeltaNet layer, which has no such tensor"),
            _ => format!("layer {block} is an attention layer, which has no such tensor"),
        },
        None => "the step reads no such tensor outside the blocks".into(),
    };
    LoadError::UnexpectedTensor { tensor: name.into(), why }
}

/// The metadata keys that give each dim of a decoder tensor, for the dims where `found` differs
/// from `expected`: `dim 0 is `qwen35.feed_forward_length``.
fn shape_keys(arch: &str, name: &str, expected: &[usize], found: &[usize]) -> String {
    let k = |s: &str| format!("`{arch}.{s}`");
    let (h, ff, vocab) =
        (k("embedding_length"), k("feed_forward_length"), format!("{} or `token_embd.weight`'s rows", k("vocab_size")));
    let q = format!("2 × {} × {}", k("attention.head_count"), k("attention.key_length"));
    let kv = format!("{} × {}", k("attention.head_count_kv"), k("attention.key_length"));
    let o = format!("{} × {}", k("attention.head_count"), k("attention.key_length"));
    let conv = format!("2 × {} × {} + {}", k("ssm.group_count"), k("ssm.state_size"), k("ssm.inner_size"));
    let rest = block_of(name).map_or(name, |(_, rest)| rest);
    let dims: Vec<String> = match rest {
        names::TOKEN_EMBD | names::OUTPUT => vec![vocab, h],
        names::OUTPUT_NORM | n::ATTN_NORM | n::FFN_NORM => vec![h],
        n::FFN_GATE | n::FFN_UP => vec![ff, h],
        n::FFN_DOWN => vec![h, ff],
        n::ATTN_Q => vec![q, h],
        n::ATTN_K | n::ATTN_V => vec![kv, h],
        n::ATTN_OUTPUT => vec![h, o],
        n::ATTN_Q_NORM | n::ATTN_K_NORM => vec![k("attention.key_length")],
        n::ATTN_QKV => vec![conv, h],
        n::ATTN_GATE => vec![k("ssm.inner_size"), h],
        n::SSM_BETA | n::SSM_ALPHA => vec![k("ssm.time_step_rank"), h],
        n::SSM_CONV1D => vec![conv, k("ssm.conv_kernel")],
        n::SSM_A | n::SSM_DT_BIAS => vec![k("ssm.time_step_rank")],
        n::SSM_NORM => vec![format!("{} / {}", k("ssm.inner_size"), k("ssm.time_step_rank"))],
        n::SSM_OUT => vec![h, k("ssm.inner_size")],
        n::FFN_GATE_INP => vec![k("expert_count"), h],
        n::FFN_GATE_EXPS | n::FFN_UP_EXPS => vec![k("expert_count"), k("expert_feed_forward_length"), h],
        n::FFN_DOWN_EXPS => vec![k("expert_count"), h, k("expert_feed_forward_length")],
        n::FFN_GATE_SHEXP | n::FFN_UP_SHEXP => vec![k("expert_shared_feed_forward_length"), h],
        n::FFN_DOWN_SHEXP => vec![h, k("expert_shared_feed_forward_length")],
        n::FFN_GATE_INP_SHEXP => vec!["1".into(), h],
        _ => vec![],
    };
    if expected.len() != found.len() {
        return format!("it has {} dims, not {}", found.len(), expected.len());
    }
    let named: Vec<String> = (0..expected.len())
        .filter(|&i| expected[i] != found[i])
        .map(|i| match dims.get(i) {
            Some(key) => format!("dim {i} is {key} = {}", expected[i]),
            None => format!("dim {i} is {}", expected[i]),
        })
        .collect();
    named.join("; ")
}

/// The mixer of each layer. When the file holds the mixer tensors, each layer's are its truth:
/// `blk.N.attn_qkv.weight` makes a Gated-DeltaNet layer, `blk.N.attn_q.weight` an attention layer.
/// Only a file without them (metadata alone) falls back on `recurrent` (the file's
/// `attention.recurrent_layers`), else on every `interval`-th layer being attention.
///
/// This departs from llama.cpp, which reads the metadata alone: converters always write an interval
/// (default 4), even for a `layer_types` it cannot express, such as `[full, linear, linear, full]`.
/// llama.cpp refuses such a file for lack of the tensors its interval asks for; here it reads as the
/// model its weights are. A `recurrent_layers` array is checked against the tensors.
fn layer_kinds(
    info: &GgufInfo,
    n_layers: usize,
    interval: usize,
    recurrent: Option<&[bool]>,
) -> Result<Vec<Mixer>, LoadError> {
    let has = |layer: usize, what: &str| info.tensor(&names::blk(layer, what)).is_some();
    let (delta_net, attention) = (names::layer::ATTN_QKV, names::layer::ATTN_Q);
    if !(0..n_layers).any(|l| has(l, delta_net) || has(l, attention)) {
        return Ok(match recurrent {
            Some(flags) => {
                flags.iter().take(n_layers).map(|&r| if r { Mixer::DeltaNet } else { Mixer::Attention }).collect()
            }
            None => ModelSpec::every_nth_attention(n_layers, interval),
        });
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

/// Refuses a tokenizer's token list (`tokenizer.ggml.tokens`) whose length is not the vocab.
pub(crate) fn check_token_count(info: &GgufInfo, vocab: usize) -> Result<(), LoadError> {
    match info.get_array(TOKENS_KEY) {
        Some(tokens) if tokens.len() != vocab => Err(LoadError::BadValue {
            key: TOKENS_KEY.into(),
            why: format!("{} tokens, but the model's vocab is {vocab}", tokens.len()),
        }),
        _ => Ok(()),
    }
}

/// The vocab: `{arch}.vocab_size`, or else the rows of the embedding table.
pub(crate) fn vocab(m: &Meta) -> Result<usize, LoadError> {
    let key = m.key("vocab_size");
    if m.info.metadata(&key).is_some() {
        return m.size(&key);
    }
    let tensor = names::TOKEN_EMBD;
    let t = m.info.tensor(tensor).ok_or_else(|| LoadError::MissingTensor { tensor: tensor.into() })?;
    match t.shape.as_slice() {
        &[rows, _] if rows <= MAX_SIZE => Ok(rows),
        &[rows, _] => Err(LoadError::BadTensorShape {
            tensor: tensor.into(),
            shape: vec![rows, t.shape[1]],
            why: format!("a vocab of {rows} rows; at most {MAX_SIZE}"),
        }),
        shape => Err(LoadError::BadTensorShape {
            tensor: tensor.into(),
            shape: shape.to_vec(),
            why: "the embedding table is [vocab, hidden]".into(),
        }),
    }
}

/// Typed reads of one architecture's metadata; each failure names its key.
pub(crate) struct Meta<'a> {
    pub(crate) info: &'a GgufInfo,
    pub(crate) arch: &'a str,
}

impl Meta<'_> {
    /// The key `{arch}.{suffix}`.
    pub(crate) fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    pub(crate) fn get(&self, key: &str) -> Result<&Value, LoadError> {
        self.info.metadata(key).ok_or_else(|| LoadError::MissingKey { key: key.into() })
    }

    fn wrong(key: &str, expected: &'static str, found: &Value) -> LoadError {
        LoadError::WrongType { key: key.into(), expected, found: found.to_string() }
    }

    pub(crate) fn str(&self, key: &str) -> Result<&str, LoadError> {
        let v = self.get(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "a string", v))
    }

    pub(crate) fn u64(&self, key: &str) -> Result<u64, LoadError> {
        let v = self.get(key)?;
        v.as_u64().ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    pub(crate) fn usize(&self, key: &str) -> Result<usize, LoadError> {
        let n = self.u64(key)?;
        usize::try_from(n).map_err(|_| LoadError::BadValue { key: key.into(), why: format!("{n} is too large") })
    }

    /// A size: a non-negative integer of at most [`MAX_SIZE`].
    pub(crate) fn size(&self, key: &str) -> Result<usize, LoadError> {
        bounded(key, self.u64(key)?)
    }

    /// A float. An f32 becomes the f64 with the same shortest decimal form, the value its writer
    /// meant: a config's `1e-6`, stored as the f32 nearest it, reads back as `1e-6`.
    pub(crate) fn f64(&self, key: &str) -> Result<f64, LoadError> {
        match self.get(key)? {
            Value::F32(x) => Ok(x.to_string().parse().unwrap_or(f64::from(*x))),
            Value::F64(x) => Ok(*x),
            v => Err(Self::wrong(key, "a float", v)),
        }
    }

    /// A per-layer count given as a scalar, or as an array of one value per block (llama.cpp's
    /// `get_key_or_arr`) whose attention layers must agree; with no attention layer, the largest.
    /// The values of MTP blocks (after `layers`) are not the decoder's and are only bounded.
    fn per_layer(&self, key: &str, layers: &[Mixer], blocks: usize) -> Result<usize, LoadError> {
        let v = self.get(key)?;
        let Some(array) = v.as_array() else { return self.size(key) };
        let expected = "a non-negative integer or an array of them";
        let values = array.as_u64s().ok_or_else(|| Self::wrong(key, expected, v))?;
        if values.len() != blocks {
            let why = format!("{} values for {} layers", values.len(), blocks);
            return Err(LoadError::BadValue { key: key.into(), why });
        }
        for &n in &values {
            bounded(key, n)?;
        }
        let values = &values[..layers.len()];
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
        bounded(key, n)
    }
}

/// `n` as a size of key `key`: at most [`MAX_SIZE`], or an error with the limit.
fn bounded(key: &str, n: u64) -> Result<usize, LoadError> {
    match usize::try_from(n) {
        Ok(n) if n <= MAX_SIZE => Ok(n),
        _ => Err(LoadError::BadValue { key: key.into(), why: format!("{n}; a size is at most {MAX_SIZE} (2^24)") }),
    }
}
