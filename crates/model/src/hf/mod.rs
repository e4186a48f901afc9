//! Loading a Hugging Face Qwen3.5 folder (`config.json` and safetensors weights) into the canonical
//! checkpoint.
//!
//! The weights are read through the transforms llama.cpp's converter (`convert_hf_to_gguf.py`) applies, so the
//! checkpoint holds what a qwen35 GGUF of the same model holds: GGUF names; zero-centred norm
//! weights stored as `1 + w` (all but `linear_attn.norm`); `ssm_a = −exp(A_log)`; `dt_bias` as
//! `ssm_dt.bias`; the conv weight squeezed to `[C, K]`; value heads in tiled order wherever they
//! index rows or columns; `attn_q` unchanged. Only the text model is read: `mtp.*` and the vision
//! tower are skipped. The result holds exactly the tensors `layout(spec)` names, with their shapes;
//! anything else is an error naming the tensor.

pub(crate) mod files;
mod header;
pub mod names;
pub mod transform;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::checkpoint::{Checkpoint, Tensor};
use super::config::{ConfigError, family_of_config_json, spec_from_config_json};
use super::layout::layout;
use super::spec::{ModelSpec, SpecError};
pub use files::tensors_from_bytes;
use names::Role;
pub use transform::tile_value_heads;

/// Why a Hugging Face folder does not load. Each variant names the file, and the tensor or key.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{dir}: neither model.safetensors nor model.safetensors.index.json")]
    NoWeights { dir: PathBuf },
    #[error("{path}: bad safetensors header: {why}")]
    BadHeader { path: PathBuf, why: String },
    #[error("{path}: tensor {tensor} has dtype {dtype}; only F32, F16 and BF16 are read")]
    UnsupportedDtype { path: PathBuf, tensor: String, dtype: String },
    #[error("{path}: bad index: {why}")]
    BadIndex { path: PathBuf, why: String },
    #[error("{}: missing tensor {tensor} (HF {hf})", dir.display())]
    MissingTensor { dir: PathBuf, tensor: String, hf: String },
    #[error("{}: {size} bytes; the limit for it is {limit} bytes", path.display())]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
    #[error("{path}: tensor {hf} (for {tensor}): expected shape {expected:?}, found {found:?}")]
    ShapeMismatch { path: PathBuf, hf: String, tensor: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("{path}: tensor {hf} is not part of the spec's checkpoint: {why}")]
    UnexpectedTensor { path: PathBuf, hf: String, why: String },
    #[error("{path}: tensor {hf} gives {tensor}, which {first} already gave")]
    DuplicateTensor { path: PathBuf, hf: String, tensor: String, first: String },
    #[error("{path}: {source}")]
    Config { path: PathBuf, source: ConfigError },
    #[error(
        "{path}: a {family} model; this loader reads Qwen3.5 dense checkpoints only, through their transforms (`stepcheck verdict` judges any family's config)"
    )]
    NoLoader { path: PathBuf, family: &'static str },
    #[error("the spec describes no valid decode step: {0}")]
    Spec(#[from] SpecError),
}

/// The largest `config.json` read, in bytes. Real ones are under 100 KiB; the reader's JSON tree
/// takes several times the text, so a larger file is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The family whose checkpoints this loader reads: the transforms are Qwen3.5's (another family's
/// norms, for one, are not `1 + w`).
pub(crate) const FAMILY: &str = "qwen3_5_text";

/// The spec `dir/config.json` describes (named after the folder) and the checkpoint of `dir`'s
/// weights; a config of another family is refused before its weights are read.
pub fn load_hf_folder(dir: &Path) -> Result<(ModelSpec, Checkpoint), LoadError> {
    let spec = spec_of_hf_folder(dir)?;
    let checkpoint = checkpoint_from_hf_folder(dir, &spec)?;
    Ok((spec, checkpoint))
}

/// The spec `dir/config.json` describes, named after the folder, read without a weight; a config
/// of another family than the loader's is refused.
pub fn spec_of_hf_folder(dir: &Path) -> Result<ModelSpec, LoadError> {
    let path = dir.join("config.json");
    let text = read_bounded(&path, MAX_CONFIG_BYTES)?;
    let name = dir.file_name().map_or_else(|| "hf".into(), |n| n.to_string_lossy().into_owned());
    let family = family_of_config_json(&text).map_err(|source| LoadError::Config { path: path.clone(), source })?;
    if family != FAMILY {
        return Err(LoadError::NoLoader { path, family });
    }
    spec_from_config_json(&text, &name).map_err(|source| LoadError::Config { path, source })
}

/// The bytes of `dir`'s weight files: `model.safetensors`, or else every `*.safetensors` file.
pub fn weight_file_bytes(dir: &Path) -> Result<u128, LoadError> {
    let io = |path: &Path, source| LoadError::Io { path: path.to_path_buf(), source };
    let size = |path: &Path| std::fs::metadata(path).map(|m| u128::from(m.len())).map_err(|e| io(path, e));
    let single = dir.join(files::SINGLE);
    if single.is_file() {
        return size(&single);
    }
    let mut total = 0u128;
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            total += size(&path)?;
        }
    }
    Ok(total)
}

/// The text of the file at `path`, refused unread when it holds more than `limit` bytes (a JSON
/// tree takes several times its text).
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, LoadError> {
    use std::io::Read as _;
    let io = |source| LoadError::Io { path: path.to_path_buf(), source };
    let file = formats::open::open_regular(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > limit {
        return Err(LoadError::TooLarge { path: path.to_path_buf(), size, limit });
    }
    let mut text = String::with_capacity(size as usize);
    // `take` bounds the read even when the file grows after its size was read.
    file.take(limit + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > limit {
        return Err(LoadError::TooLarge { path: path.to_path_buf(), size: text.len() as u64, limit });
    }
    Ok(text)
}

/// The tensor `t` (F32, F16 or BF16) with its values moved by `rule` (one that only moves them),
/// in its stored type: each value's bytes are moved whole.
fn moved(t: Tensor, rule: transform::Rule, shape: &[usize], d: &super::spec::DeltaNetSpec) -> Tensor {
    fn move_as<const W: usize>(
        bytes: &[u8],
        rule: transform::Rule,
        shape: &[usize],
        d: &super::spec::DeltaNetSpec,
    ) -> Vec<u8> {
        let values: Vec<[u8; W]> = bytes.as_chunks::<W>().0.to_vec();
        transform::permute(rule, values, shape, d).into_iter().flatten().collect()
    }
    let bytes = match t.ty() {
        formats::gguf::GgmlType::F32 => move_as::<4>(t.bytes(), rule, shape, d),
        _ => move_as::<2>(t.bytes(), rule, shape, d),
    };
    Tensor::stored(shape.to_vec(), t.ty(), super::checkpoint::Bytes::owned(bytes))
}

/// The canonical checkpoint of `dir`'s weights for `spec`: exactly the tensors of `layout(spec)`,
/// each with its shape, read through the converter's transforms. A tensor the transforms leave as
/// it is stays in place in its mapped file, in its stored type; one whose values they only move
/// (the value heads tiled) is moved in its stored type; one whose values they compute (`1 + w`,
/// `−exp(A_log)`, small vectors) is computed in f32 and stored as F32, as the converter does.
pub fn checkpoint_from_hf_folder(dir: &Path, spec: &ModelSpec) -> Result<Checkpoint, LoadError> {
    spec.validate()?;
    let expected: BTreeMap<String, Vec<usize>> = layout(spec).into_iter().map(|t| (t.name, t.shape)).collect();
    let mut checkpoint = Checkpoint::default();
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    files::for_each_tensor(dir, |path, hf, view, map| {
        let unexpected = |why: String| LoadError::UnexpectedTensor { path: path.to_path_buf(), hf: hf.into(), why };
        let (tensor, rule) = match names::classify(hf) {
            Role::Skipped => return Ok(()),
            Role::Unknown => return Err(unexpected("no Qwen3.5 dense text model has it".into())),
            Role::Text { gguf, rule } => (gguf, rule),
        };
        let Some(shape) = expected.get(&tensor) else {
            return Err(unexpected(format!("{tensor} is not a tensor of spec {}", spec.name)));
        };
        if let Some(first) = sources.insert(tensor.clone(), hf.to_string()) {
            return Err(LoadError::DuplicateTensor { path: path.to_path_buf(), hf: hf.into(), tensor, first });
        }
        let source_shape = rule.source_shape(shape);
        if view.shape() != source_shape {
            return Err(LoadError::ShapeMismatch {
                path: path.to_path_buf(),
                hf: hf.into(),
                tensor,
                expected: source_shape,
                found: view.shape().to_vec(),
            });
        }
        let t = if rule == transform::Rule::Copy {
            files::in_place(path, hf, view, map, shape.clone())?
        } else if rule.computes() {
            Tensor::f32(shape.clone(), &transform::apply(rule, files::widen(path, hf, view)?, shape, &spec.delta_net))
        } else {
            moved(files::in_place(path, hf, view, map, shape.clone())?, rule, shape, &spec.delta_net)
        };
        checkpoint.insert(tensor, t);
        Ok(())
    })?;
    match expected.keys().find(|name| checkpoint.get(name).is_none()) {
        Some(tensor) => Err(LoadError::MissingTensor {
            dir: dir.to_path_buf(),
            tensor: tensor.clone(),
            hf: names::hf_name(tensor).unwrap_or_default(),
        }),
        None => Ok(checkpoint),
    }
}
