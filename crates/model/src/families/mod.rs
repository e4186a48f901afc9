//! Hugging Face folders of the families the engine refuses, loaded into a spec and the canonical
//! checkpoint: Gemma 3 text, gpt-oss, Qwen3.5-MoE and DeepSeek-V3, one file each.
//!
//! Each family reads its `config.json` into a [`ModelSpec`] whose constructs are the family's (the
//! reader of this module, not `model::config`, which reads the accepted family), and maps its
//! safetensors names to the canonical GGUF-style names, with llama.cpp's names where llama.cpp has
//! the tensor and the canonical checkpoint's conventions: norm weights hold the final multiplier
//! (`1 + w` for Gemma's and Qwen's zero-centred norms), experts stacked `[E, out, in]`
//! (`ffn_*_exps`), matrices `[out, in]`. The checkpoint then holds exactly the tensors
//! `layout(spec)` names, with their shapes; a tensor the family does not read is an error naming it.

mod deepseek_v3;
mod fields;
mod gemma3;
mod gpt_oss;
mod qwen3_5_moe;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::checkpoint::{Checkpoint, Tensor};
use super::hf::{LoadError, files};
use super::layout::layout;
use super::spec::{ModelSpec, RopeScaling, SpecError};
use fields::Fields;
pub use values::Values;

/// Why a family's folder does not load.
#[derive(Debug, thiserror::Error)]
pub enum FamilyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("config.json is not valid JSON: {0}")]
    Json(String),
    #[error("model_type `{0}` is not a family this module reads")]
    UnknownFamily(String),
    #[error("config field `{field}`: {why}")]
    Config { field: String, why: String },
    #[error("{0}")]
    Weights(#[from] LoadError),
    #[error("missing tensor {hf} (for {tensor})")]
    MissingTensor { tensor: String, hf: String },
    #[error("tensor {hf}: expected shape {expected:?}, found {found:?}")]
    Shape { hf: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("tensor {hf} is not a tensor of the spec's checkpoint")]
    Unexpected { hf: String },
    #[error("the canonical checkpoint of {tensor} is {found:?}, but the spec's layout says {expected:?}")]
    Layout { tensor: String, expected: Option<Vec<usize>>, found: Option<Vec<usize>> },
    #[error("{0}")]
    Spec(#[from] SpecError),
}

/// A family this module reads: the `model_type` of its config, and its reader.
struct Family {
    model_type: &'static str,
    /// The spec a config describes, named by the second argument.
    spec: fn(&Fields, &str) -> Result<ModelSpec, FamilyError>,
    /// The canonical checkpoint of a spec from the folder's tensors.
    checkpoint: fn(&ModelSpec, &mut Source) -> Result<Checkpoint, FamilyError>,
}

const FAMILIES: [Family; 4] = [
    Family { model_type: "gemma3_text", spec: gemma3::spec, checkpoint: gemma3::checkpoint },
    Family { model_type: "gpt_oss", spec: gpt_oss::spec, checkpoint: gpt_oss::checkpoint },
    Family { model_type: "qwen3_5_moe_text", spec: qwen3_5_moe::spec, checkpoint: qwen3_5_moe::checkpoint },
    Family { model_type: "deepseek_v3", spec: deepseek_v3::spec, checkpoint: deepseek_v3::checkpoint },
];

/// The spec `dir/config.json` describes (named after the folder), read as its family reads it.
pub fn spec_of_folder(dir: &Path) -> Result<ModelSpec, FamilyError> {
    let (spec, _) = read_config(dir)?;
    Ok(spec)
}

/// The spec of `dir`'s config and the canonical checkpoint of its weights.
pub fn load_family_folder(dir: &Path) -> Result<(ModelSpec, Checkpoint), FamilyError> {
    let (spec, family) = read_config(dir)?;
    let mut source = Source::read(dir)?;
    let checkpoint = (family.checkpoint)(&spec, &mut source)?;
    if let Some(hf) = source.tensors.into_keys().next() {
        return Err(FamilyError::Unexpected { hf });
    }
    check_layout(&spec, &checkpoint)?;
    Ok((spec, checkpoint))
}

fn read_config(dir: &Path) -> Result<(ModelSpec, &'static Family), FamilyError> {
    let path = dir.join("config.json");
    let text = crate::hf::read_bounded(&path, crate::hf::MAX_CONFIG_BYTES)?;
    let root: Value = serde_json::from_str(&text).map_err(|e| FamilyError::Json(e.to_string()))?;
    let c = Fields::of(&root, "")?;
    let model_type = c.str_opt("model_type")?.unwrap_or_default();
    let family = FAMILIES
        .iter()
        .find(|f| f.model_type == model_type)
        .ok_or_else(|| FamilyError::UnknownFamily(model_type.to_string()))?;
    let name = dir.file_name().map_or_else(|| model_type.to_string(), |n| n.to_string_lossy().into_owned());
    let spec = (family.spec)(&c, &name)?;
    spec.validate()?;
    Ok((spec, family))
}

/// Every tensor of `layout(spec)` is in the checkpoint with its shape, and nothing else is.
fn check_layout(spec: &ModelSpec, checkpoint: &Checkpoint) -> Result<(), FamilyError> {
    let expected: BTreeMap<String, Vec<usize>> = layout(spec).into_iter().map(|t| (t.name, t.shape)).collect();
    for (name, shape) in &expected {
        let found = checkpoint.get(name).map(|t| t.shape.clone());
        if found.as_ref() != Some(shape) {
            return Err(FamilyError::Layout { tensor: name.clone(), expected: Some(shape.clone()), found });
        }
    }
    match checkpoint.tensors.iter().find(|(name, _)| !expected.contains_key(*name)) {
        Some((name, t)) => {
            Err(FamilyError::Layout { tensor: name.clone(), expected: None, found: Some(t.shape.clone()) })
        }
        None => Ok(()),
    }
}

/// The tensors of a folder's safetensors, widened to f32, by HF name; a family takes the ones it
/// reads, and what is left over is not part of the model. (These families are the engine's
/// refusals, which only the reference runs, on small fixtures: their transforms move and compute
/// values in f32.)
pub struct Source {
    tensors: BTreeMap<String, Values>,
    /// The text model's prefix: `model.` or (in a multimodal wrapper) `model.language_model.`.
    prefix: &'static str,
}

impl Source {
    fn read(dir: &Path) -> Result<Source, FamilyError> {
        let mut tensors = BTreeMap::new();
        files::for_each_tensor(dir, |path, name, view, _| {
            let data = files::widen(path, name, view)?;
            tensors.insert(name.to_string(), Values { shape: view.shape().to_vec(), data });
            Ok(())
        })?;
        let prefix = if tensors.keys().any(|k| k.starts_with("model.language_model.")) {
            "model.language_model."
        } else {
            "model."
        };
        Ok(Source { tensors, prefix })
    }

    /// The full HF name of the text model's tensor `name` (`embed_tokens.weight`, `layers.0.…`).
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Takes the text model's tensor `name` (under the prefix) of shape `shape`; `tensor` names
    /// what it becomes, for errors.
    pub fn take(&mut self, name: &str, shape: &[usize], tensor: &str) -> Result<Values, FamilyError> {
        let hf = self.name(name);
        self.take_full(&hf, shape, tensor)
    }

    /// Takes the tensor of full HF name `hf`.
    pub(crate) fn take_full(&mut self, hf: &str, shape: &[usize], tensor: &str) -> Result<Values, FamilyError> {
        let t = self
            .tensors
            .remove(hf)
            .ok_or_else(|| FamilyError::MissingTensor { tensor: tensor.to_string(), hf: hf.to_string() })?;
        if t.shape != shape {
            return Err(FamilyError::Shape { hf: hf.to_string(), expected: shape.to_vec(), found: t.shape });
        }
        Ok(t)
    }

    /// Whether the text model has tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(&self.name(name))
    }

    /// The HF names left, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    /// Drops the tensors whose full name starts with `prefix` (parts of the checkpoint that are not
    /// the text model).
    pub fn skip(&mut self, prefix: &str) {
        self.tensors.retain(|k, _| !k.starts_with(prefix));
    }
}

/// The canonical tensors of a family, built tensor by tensor from a [`Source`] and a spec's layout.
pub struct Builder<'s> {
    shapes: BTreeMap<String, Vec<usize>>,
    out: Checkpoint,
    source: &'s mut Source,
}

impl<'s> Builder<'s> {
    pub fn new(spec: &ModelSpec, source: &'s mut Source) -> Builder<'s> {
        let shapes = layout(spec).into_iter().map(|t| (t.name, t.shape)).collect();
        Builder { shapes, out: Checkpoint::default(), source }
    }

    /// The shape the spec's layout gives canonical tensor `tensor` (empty when it has none: the
    /// final check names it).
    pub fn shape(&self, tensor: &str) -> Vec<usize> {
        self.shapes.get(tensor).cloned().unwrap_or_default()
    }

    /// Whether the spec's layout has canonical tensor `tensor`.
    pub fn wants(&self, tensor: &str) -> bool {
        self.shapes.contains_key(tensor)
    }

    pub fn source(&mut self) -> &mut Source {
        self.source
    }

    /// Canonical tensor `tensor` from the text model's tensor `hf`, values unchanged.
    pub fn copy(&mut self, tensor: &str, hf: &str) -> Result<(), FamilyError> {
        let shape = self.shape(tensor);
        let t = self.source.take(hf, &shape, tensor)?;
        self.put(tensor, t);
        Ok(())
    }

    /// Canonical tensor `tensor` from the zero-centred norm weight `hf`: stored as `1 + w`.
    pub(crate) fn norm_plus_one(&mut self, tensor: &str, hf: &str) -> Result<(), FamilyError> {
        let shape = self.shape(tensor);
        let mut t = self.source.take(hf, &shape, tensor)?;
        t.data.iter_mut().for_each(|w| *w += 1.0);
        self.put(tensor, t);
        Ok(())
    }

    /// Canonical stack `tensor` `[E, …]` from the per-expert tensors `hf(e)`, `e` in `0..E`.
    pub fn stack(&mut self, tensor: &str, hf: impl Fn(usize) -> String) -> Result<(), FamilyError> {
        let shape = self.shape(tensor);
        let (count, inner) = shape.split_first().map_or((0, &[][..]), |(e, rest)| (*e, rest));
        let mut data = Vec::with_capacity(shape.iter().product());
        for e in 0..count {
            data.extend(self.source.take(&hf(e), inner, tensor)?.data);
        }
        self.put(tensor, Values { shape, data });
        Ok(())
    }

    /// Canonical tensor `tensor`, of `t`'s values, stored as F32.
    pub fn put(&mut self, tensor: &str, t: Values) {
        self.out.insert(tensor, Tensor::f32(t.shape, &t.data));
    }

    pub fn finish(self) -> Checkpoint {
        self.out
    }
}

/// A RoPE parameters object (`rope_parameters`, or one layer type's entry of it): θ, and the
/// scaling of a `linear` or `yarn` `rope_type`. `default_theta` is the config class's default θ.
pub(crate) fn rope_of(p: Option<Fields>, default_theta: f64) -> Result<(f64, Option<RopeScaling>), FamilyError> {
    let Some(p) = p else { return Ok((default_theta, None)) };
    let theta = p.number_opt("rope_theta")?.unwrap_or(default_theta);
    let scaling = match p.str_opt("rope_type")?.unwrap_or("default") {
        "default" => None,
        "linear" => Some(RopeScaling::Linear { factor: p.number("factor")? }),
        "yarn" => {
            let factor = p.number("factor")?;
            let attention_factor = match p.number_opt("attention_factor")? {
                Some(a) => a,
                None => crate::author::rope::yarn_attention_factor(
                    factor,
                    p.number_opt("mscale")?,
                    p.number_opt("mscale_all_dim")?,
                ),
            };
            Some(RopeScaling::Yarn {
                factor,
                original_context: p.size("original_max_position_embeddings")?,
                beta_fast: p.number_opt("beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0),
                beta_slow: p.number_opt("beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0),
                truncate: p.bool_or("truncate", true)?,
                attention_factor,
            })
        }
        other => {
            return Err(FamilyError::Config {
                field: p.name("rope_type"),
                why: format!("rope_type \"{other}\" is not read (default, linear and yarn are)"),
            });
        }
    };
    Ok((theta, scaling))
}

/// The no-Gated-DeltaNet sizes of a spec whose layers are all attention.
pub(crate) fn no_delta_net() -> super::spec::DeltaNetSpec {
    super::spec::DeltaNetSpec { key_heads: 0, value_heads: 0, key_dim: 0, value_dim: 0, conv_kernel: 0 }
}

/// The attention layers a `layer_types` list (or, when absent, `default_sliding(i)`) makes sliding.
pub(crate) fn sliding_layers(
    c: &Fields,
    layers: usize,
    default_sliding: impl Fn(usize) -> bool,
) -> Result<Vec<usize>, FamilyError> {
    match c.strings_opt("layer_types")? {
        Some(types) => {
            if types.len() != layers {
                return Err(FamilyError::Config {
                    field: c.name("layer_types"),
                    why: format!("{} entries for {layers} layers", types.len()),
                });
            }
            let mut sliding = vec![];
            for (i, t) in types.iter().enumerate() {
                match *t {
                    "sliding_attention" => sliding.push(i),
                    "full_attention" => {}
                    other => {
                        return Err(FamilyError::Config {
                            field: format!("{}[{i}]", c.name("layer_types")),
                            why: format!("\"{other}\" is not an attention layer type"),
                        });
                    }
                }
            }
            Ok(sliding)
        }
        None => Ok((0..layers).filter(|&i| default_sliding(i)).collect()),
    }
}
