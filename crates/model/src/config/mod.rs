//! Reading a Hugging Face `config.json` into a `ModelSpec`.
//!
//! A config comes in the forms the hub and transformers write: a multimodal wrapper whose text
//! hyper-parameters sit in `text_config` (Qwen3.5's `qwen3_5`, Gemma 3's `gemma3`), or a bare text
//! config; RoPE as top-level `rope_theta` and `partial_rotary_factor`, as a `rope_parameters`
//! object (per layer type in Gemma 3), or as a legacy `rope_scaling` object; sizes under the names
//! each family uses (`hidden_size` or `n_embd`, …). Each family the reader knows is one row of
//! [`FAMILIES`]: how its config names its layers, what its code writes when the config does not
//! say, and the rules that turn its fields into the constructs of its step. A field the family's
//! config class has a default for may be absent; a size the checkpoint's shapes depend on may not.
//! Every JSON value is checked for its type before it is used, and counts are bounded, so no input
//! makes the reader panic or allocate without limit.
//!
//! A construct a spec can state (experts, latent attention, a sliding window, attention biases,
//! linear and YaRN RoPE, …) goes into the spec's `Constructs`, where the lowering refuses it from the
//! step graph. One it cannot state (LayerNorm, FFN biases, Llama 3's RoPE, a Mamba mixer, …) is a
//! [`Construct`] of the reading, and [`spec_from_config_json`] refuses the config with
//! [`ConfigError::Unsupported`]. For the four refused families `model::families` loads, the spec is
//! the one that module reads (`tests/verdicts.rs` checks it).

mod construct;
mod families;
mod fields;
mod read;

pub use construct::{Construct, Part, RopeKind};
pub use families::{Attention, Bias, COMMON, FAMILIES, Family, FfnForm, Layers, Routing, Rule, Then, When, Window};
pub use fields::{Fields, Source};

use super::spec::{ModelSpec, SpecError};

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
    #[error("config field `{field}`: rope_type `{rope_type}` is not one stepcheck knows")]
    UnsupportedRope { field: String, rope_type: String },
    #[error("{family} has {construct} (`{field}`): a model spec cannot state it")]
    Unsupported { family: String, construct: Construct, field: String },
    #[error("config describes no valid decode step: {0}")]
    Spec(#[from] SpecError),
}

/// A construct a spec cannot state, found in a config: the field that says so and the first layer
/// it applies to (`None` for the embedding and the head), numbered as in the config.
#[derive(Clone, Debug, PartialEq)]
pub struct Unsupported {
    pub construct: Construct,
    pub field: String,
    pub layer: Option<usize>,
}

/// What a config describes: the spec of the layers a spec can state, and what it cannot.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigReading {
    /// The `model_type` of the family's text config.
    pub family: &'static str,
    /// The spec, validated. A layer whose mixer a spec cannot state (Mamba, Mamba2) is in it with an
    /// attention block standing in for the mixer (see `stand_in`); such a spec is never run, since
    /// its mixer is among `unsupported`.
    pub spec: ModelSpec,
    /// The config's index of each of the spec's layers.
    pub layers: Vec<usize>,
    /// The spec's layers whose mixer is a stand-in: what the step graph says of their mixer block
    /// is the stand-in's, not the model's; their norms, FFN and residual adds are the model's.
    pub stand_in: Vec<usize>,
    /// The constructs a spec cannot state, in the order of the rules that found them.
    pub unsupported: Vec<Unsupported>,
}

/// What a `config.json` text describes, its spec named `name`.
pub fn read_config_json(text: &str, name: &str) -> Result<ConfigReading, ConfigError> {
    read::read(text, name)
}

/// The family (its text config's `model_type`) a `config.json` text belongs to, without reading it.
pub(crate) fn family_of_config_json(text: &str) -> Result<&'static str, ConfigError> {
    read::family(text)
}

/// The spec named `name` that a `config.json` text describes, checked by [`ModelSpec::validate`]; a
/// config holding a construct a spec cannot state is refused by the first of them.
pub fn spec_from_config_json(text: &str, name: &str) -> Result<ModelSpec, ConfigError> {
    let reading = read_config_json(text, name)?;
    match reading.unsupported.first() {
        Some(u) => Err(ConfigError::Unsupported {
            family: reading.family.to_string(),
            construct: u.construct,
            field: u.field.clone(),
        }),
        None => Ok(reading.spec),
    }
}

#[cfg(test)]
mod tests {
    use super::fields::describe;
    use serde_json::Value;

    #[test]
    fn descriptions_of_long_values_are_cut() {
        let v = Value::String("x".repeat(100));
        assert!(describe(&v).chars().count() < 60);
    }
}
