//! Where a model comes from: a built-in preset with seeded random weights, a Hugging Face model
//! folder, or a GGUF file.

use std::path::{Path, PathBuf};

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
    #[error(transparent)]
    Gguf(#[from] gguf::LoadError),
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

    /// The spec alone, without reading weights where the source allows it.
    pub fn spec(&self) -> Result<ModelSpec, SourceError> {
        match self {
            ModelSource::Preset { name, .. } => {
                presets::preset(name).ok_or_else(|| SourceError::NoSuchPreset { name: name.clone() })
            }
            _ => Ok(self.load()?.0),
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
            ModelSource::Gguf(path) => Ok(gguf::load_gguf(path)?),
        }
    }
}
