//! Where a model comes from: a built-in preset with seeded random weights, a Hugging Face model
//! folder, or a GGUF file.

use std::path::{Path, PathBuf};

use crate::formats::finite::{NonFinite, first_non_finite};
use crate::formats::gguf::{GgmlType, GgufFile};
use crate::limits::{Budget, MemoryError, Need};
use crate::model::random::{RandomError, Weights, random_checkpoint_as};
use crate::model::{Checkpoint, ModelSpec, gguf, hf, presets};

/// A model's source, as the command line names it.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSource {
    /// A built-in preset with seeded random weights, its matrices stored as `weights`.
    Preset { name: String, seed: u64, weights: Weights },
    /// A Hugging Face model folder (`config.json` and safetensors).
    HfFolder(PathBuf),
    /// A GGUF file.
    Gguf(PathBuf),
}

/// Why a model could not be read from its source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no preset named {name:?}; the presets are {}", presets::PRESETS.join(", "))]
    NoSuchPreset { name: String },
    #[error("{0} is neither a model folder nor a .gguf file")]
    NotAModel(PathBuf),
    #[error("{0}: no such file or folder")]
    NoSuchPath(PathBuf),
    #[error(transparent)]
    Hf(#[from] hf::LoadError),
    #[error("{}", with_path(path, source))]
    Gguf { path: PathBuf, source: gguf::LoadError },
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error(transparent)]
    Random(#[from] RandomError),
    #[error(
        "{model}: weight {tensor} ({ty}) {at}: a weight that is not a finite number makes every value it reaches \
         meaningless, so the model is not run"
    )]
    NonFinite { model: String, tensor: String, ty: GgmlType, at: NonFinite },
    #[error("{model}: weight {tensor} cannot be read: {why}")]
    Tensor { model: String, tensor: String, why: crate::formats::checkpoint::TensorError },
}

/// `source`'s message, prefixed by `path` unless it names it already.
fn with_path(path: &Path, source: &gguf::LoadError) -> String {
    let (path, message) = (path.display().to_string(), source.to_string());
    if message.contains(&path) { message } else { format!("{path}: {message}") }
}

impl SourceError {
    /// A short name of the error, for a row of `stepcheck check` (`refused NAME`).
    pub fn name(&self) -> &'static str {
        match self {
            SourceError::NoSuchPreset { .. } => "NoSuchPreset",
            SourceError::NotAModel(_) => "NotAModel",
            SourceError::NoSuchPath(_) => "NoSuchPath",
            SourceError::Hf(_) => "HfFolder",
            SourceError::Gguf { .. } => "Gguf",
            SourceError::Memory(_) => "Memory",
            SourceError::Random(_) => "Random",
            SourceError::NonFinite { .. } => "NonFinite",
            SourceError::Tensor { .. } => "Tensor",
        }
    }
}

impl ModelSource {
    /// The source a path names: a `.gguf` file, or a folder.
    pub(crate) fn from_path(path: &Path) -> Result<ModelSource, SourceError> {
        if !path.exists() {
            Err(SourceError::NoSuchPath(path.to_path_buf()))
        } else if path.is_dir() {
            Ok(ModelSource::HfFolder(path.to_path_buf()))
        } else if path.extension().is_some_and(|e| e == "gguf") {
            Ok(ModelSource::Gguf(path.to_path_buf()))
        } else {
            Err(SourceError::NotAModel(path.to_path_buf()))
        }
    }

    /// A preset's source, with F32 weights.
    pub fn preset(name: &str, seed: u64) -> ModelSource {
        ModelSource::preset_as(name, seed, Weights::default())
    }

    /// A preset's source, its matrices stored as `weights`.
    pub(crate) fn preset_as(name: &str, seed: u64, weights: Weights) -> ModelSource {
        ModelSource::Preset { name: name.to_string(), seed, weights }
    }

    /// A short name for listings.
    pub fn label(&self) -> String {
        match self {
            ModelSource::Preset { name, .. } => name.clone(),
            ModelSource::HfFolder(p) | ModelSource::Gguf(p) => p.display().to_string(),
        }
    }

    /// The spec alone, read without a weight: a preset's, a folder's `config.json`, a GGUF's
    /// metadata.
    pub fn spec(&self) -> Result<ModelSpec, SourceError> {
        match self {
            ModelSource::Preset { name, .. } => {
                presets::preset(name).ok_or_else(|| SourceError::NoSuchPreset { name: name.clone() })
            }
            ModelSource::HfFolder(dir) => Ok(hf::spec_of_hf_folder(dir)?),
            ModelSource::Gguf(path) => {
                let gguf = |source| SourceError::Gguf { path: path.clone(), source };
                let file = GgufFile::open(path).map_err(|e| gguf(e.into()))?;
                gguf::spec_from_gguf(file.info()).map_err(gguf)
            }
        }
    }

    /// The spec and the checkpoint. A checkpoint read from a file is scanned before it is
    /// returned: a weight the step reads that holds a value not finite (NaN or infinite, a block
    /// scale's included) is refused by tensor, row, value and block. A preset's random weights are
    /// finite by construction (`model::random`).
    pub fn load(&self) -> Result<(ModelSpec, Checkpoint), SourceError> {
        let (spec, ckpt) = match self {
            ModelSource::Preset { name, seed, weights } => {
                let spec = presets::preset(name).ok_or_else(|| SourceError::NoSuchPreset { name: name.clone() })?;
                let ckpt = random_checkpoint_as(&spec, *seed, *weights)?;
                return Ok((spec, ckpt));
            }
            ModelSource::HfFolder(dir) => hf::load_hf_folder(dir)?,
            ModelSource::Gguf(path) => {
                gguf::load_gguf(path).map_err(|source| SourceError::Gguf { path: path.clone(), source })?
            }
        };
        self.refuse_non_finite(&spec, &ckpt)?;
        Ok((spec, ckpt))
    }

    /// Refuses a checkpoint in which a tensor `spec`'s step reads holds a value that is not finite,
    /// naming the first one found.
    fn refuse_non_finite(&self, spec: &ModelSpec, ckpt: &Checkpoint) -> Result<(), SourceError> {
        for name in crate::model::layout::layout(spec).into_iter().map(|t| t.name) {
            let Some(tensor) = ckpt.get(&name) else { continue };
            let found = first_non_finite(tensor).map_err(|why| SourceError::Tensor {
                model: self.label(),
                tensor: name.clone(),
                why,
            })?;
            if let Some(at) = found {
                return Err(SourceError::NonFinite { model: self.label(), tensor: name, ty: tensor.ty(), at });
            }
        }
        Ok(())
    }

    /// The bytes the checkpoint of `spec` (this source's spec) is stored in, read without a
    /// weight: a preset's in its weights' types, a GGUF file's decoder tensors as the file stores
    /// them, a folder's weight files' sizes (the checkpoint maps them, and computes its few
    /// rewritten vectors in f32).
    pub fn checkpoint_bytes(&self, spec: &ModelSpec) -> Result<u128, SourceError> {
        match self {
            ModelSource::Preset { weights, .. } => Ok(weights.checkpoint_bytes(spec)),
            ModelSource::HfFolder(dir) => Ok(hf::weight_file_bytes(dir)?),
            ModelSource::Gguf(path) => {
                let gguf = |source| SourceError::Gguf { path: path.clone(), source };
                let file = GgufFile::open(path).map_err(|e| gguf(e.into()))?;
                let names: std::collections::HashSet<String> =
                    crate::model::layout::layout(spec).into_iter().map(|t| t.name).collect();
                let tensors = file.info().tensors().iter().filter(|t| names.contains(&t.name));
                Ok(tensors.map(|t| u128::from(t.n_bytes.unwrap_or(0))).sum())
            }
        }
    }

    /// The spec, then the checkpoint only when `need(spec, checkpoint bytes)` fits in `budget` (no
    /// budget: the machine says nothing, and the load goes ahead): a model too large for the
    /// machine is refused with how much it needs before a weight is made or read.
    pub(crate) fn load_within(
        &self,
        budget: Option<&Budget>,
        need: impl FnOnce(&ModelSpec, u128) -> Need,
    ) -> Result<(ModelSpec, Checkpoint), SourceError> {
        let spec = self.spec()?;
        if let Some(b) = budget {
            b.admit(&self.label(), &need(&spec, self.checkpoint_bytes(&spec)?))?;
        }
        self.load()
    }
}
