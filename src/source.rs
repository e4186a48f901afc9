//! Where a model comes from: a built-in preset with seeded random weights, a Hugging Face model
//! folder, or a GGUF file.

use std::path::{Path, PathBuf};

use crate::formats::gguf::GgufFile;
use crate::limits::{Budget, MemoryError, Need};
use crate::model::{Checkpoint, ModelSpec, gguf, hf, presets, random::random_checkpoint};

/// A model's source, as the command line names it.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSource {
    /// A built-in preset with seeded random weights.
    Preset { name: String, seed: u64 },
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
    #[error(transparent)]
    Hf(#[from] hf::LoadError),
    #[error("{}", with_path(path, source))]
    Gguf { path: PathBuf, source: gguf::LoadError },
    #[error(transparent)]
    Memory(#[from] MemoryError),
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
            SourceError::Hf(_) => "HfFolder",
            SourceError::Gguf { .. } => "Gguf",
            SourceError::Memory(_) => "Memory",
        }
    }
}

impl ModelSource {
    /// The source a path names: a `.gguf` file, or a folder.
    pub fn from_path(path: &Path) -> Result<ModelSource, SourceError> {
        if path.is_dir() {
            Ok(ModelSource::HfFolder(path.to_path_buf()))
        } else if path.extension().is_some_and(|e| e == "gguf") {
            Ok(ModelSource::Gguf(path.to_path_buf()))
        } else {
            Err(SourceError::NotAModel(path.to_path_buf()))
        }
    }

    /// A preset's source.
    pub fn preset(name: &str, seed: u64) -> ModelSource {
        ModelSource::Preset { name: name.to_string(), seed }
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

    /// The spec and the checkpoint.
    pub fn load(&self) -> Result<(ModelSpec, Checkpoint), SourceError> {
        match self {
            ModelSource::Preset { name, seed } => {
                let spec = presets::preset(name).ok_or_else(|| SourceError::NoSuchPreset { name: name.clone() })?;
                let ckpt = random_checkpoint(&spec, *seed);
                Ok((spec, ckpt))
            }
            ModelSource::HfFolder(dir) => Ok(hf::load_hf_folder(dir)?),
            ModelSource::Gguf(path) => {
                gguf::load_gguf(path).map_err(|source| SourceError::Gguf { path: path.clone(), source })
            }
        }
    }

    /// The spec, then the checkpoint only when `need(spec)` fits in `budget` (no budget: the
    /// machine says nothing, and the load goes ahead): a model too large for the machine is refused
    /// with how much it needs before a weight is made or read.
    pub fn load_within(
        &self,
        budget: Option<&Budget>,
        need: impl FnOnce(&ModelSpec) -> Need,
    ) -> Result<(ModelSpec, Checkpoint), SourceError> {
        let spec = self.spec()?;
        if let Some(b) = budget {
            b.admit(&self.label(), &need(&spec))?;
        }
        self.load()
    }
}
