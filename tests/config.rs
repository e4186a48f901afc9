//! Reading `config.json`: every form of a Qwen3.5 dense config gives the spec it describes, and
//! every config that does not describe one is refused with an error naming the field or, for a
//! construct a spec cannot state, the construct. (Every family's verdict: `tests/families.rs`.)

use proptest::prelude::*;
use serde_json::{Value, json};
use stepcheck::model::author::rope::yarn_attention_factor;
use stepcheck::model::config::{ConfigError, Construct, RopeKind, spec_from_config_json};
use stepcheck::model::presets;
use stepcheck::model::spec::{Ffn, Mixer, ModelSpec, RopeScaling};

/// The text config of `presets::tiny()`, as transformers 5 writes it for `Qwen3_5ForCausalLM`.
fn tiny_text_config() -> Value {
    json!({
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "dtype": "float32",
        "hidden_size": 64,
        "intermediate_size": 96,
        "vocab_size": 97,
        "num_hidden_layers": 4,
        "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 12,
        "linear_conv_kernel_dim": 4,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": false,
        "hidden_act": "silu",
        "attention_bias": false,
        "attention_dropout": 0.0,
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": true
        },
        "transformers_version": "5.24.0"
    })
}

/// The hub form: a `qwen3_5` wrapper holding the text config in `text_config`.
fn wrapped(text: Value) -> Value {
    json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "image_token_id": 248056,
        "text_config": text,
        "vision_config": {"model_type": "qwen3_5", "depth": 2, "hidden_size": 16}
    })
}

/// `config` with the fields of `patch` set (a null removes the field).
fn with(mut config: Value, patch: Value) -> Value {
    for (k, v) in patch.as_object().expect("patch object") {
        let obj = config.as_object_mut().expect("config object");
        if v.is_null() {
            obj.remove(k);
        } else {
            obj.insert(k.clone(), v.clone());
        }
    }
    config
}

/// `presets::tiny()` changed by `change`.
fn tiny_with(change: fn(&mut ModelSpec)) -> ModelSpec {
    let mut s = presets::tiny();
    change(&mut s);
    s
}

fn read(config: &Value) -> Result<ModelSpec, ConfigError> {
    spec_from_config_json(&config.to_string(), "tiny")
}

#[test]
fn every_form_reads_as_the_spec_it_describes() {
    let text = tiny_text_config;
    let cases: Vec<(&str, Value, ModelSpec)> = vec![
        ("bare transformers-5 form", text(), presets::tiny()),
        ("hub wrapper with rope_parameters", wrapped(with(text(), json!({"dtype": null}))), presets::tiny()),
        (
            "rope_theta and partial_rotary_factor at the top level",
            with(text(), json!({"rope_parameters": null, "rope_theta": 1e7, "partial_rotary_factor": 0.5})),
            tiny_with(|s| {
                s.attention.rope_theta = 1e7;
                s.attention.rotary_dims = 16;
            }),
        ),
        (
            "rope_parameters and the top level agree",
            with(text(), json!({"rope_theta": 10000, "partial_rotary_factor": 0.25})),
            presets::tiny(),
        ),
        (
            "legacy rope_scaling replaces rope_parameters",
            with(text(), json!({"rope_scaling": {"type": "default", "rope_theta": 5e5}, "rope_parameters": null})),
            tiny_with(|s| s.attention.rope_theta = 5e5),
        ),
        (
            "per-layer-type rope_parameters read at full_attention",
            with(text(), json!({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}}})),
            tiny_with(|s| s.attention.rope_theta = 1e6),
        ),
        (
            "absent RoPE fields take the class defaults θ 10000, factor 0.25",
            with(text(), json!({"rope_parameters": null})),
            presets::tiny(),
        ),
        (
            "rotary dims truncate head_dim · factor (32 · 0.33 = 10.56)",
            with(text(), json!({"rope_parameters": {"partial_rotary_factor": 0.33}})),
            tiny_with(|s| s.attention.rotary_dims = 10),
        ),
        (
            "layer_types absent: attention every full_attention_interval-th layer",
            with(text(), json!({"layer_types": null, "full_attention_interval": 2})),
            tiny_with(|s| s.layers = vec![Mixer::DeltaNet, Mixer::Attention, Mixer::DeltaNet, Mixer::Attention]),
        ),
        (
            "layer_types and interval absent: attention every 4th layer",
            with(text(), json!({"layer_types": null})),
            tiny_with(|s| s.layers = vec![Mixer::DeltaNet, Mixer::DeltaNet, Mixer::DeltaNet, Mixer::Attention]),
        ),
        (
            "legacy layer type names mamba and attention",
            with(text(), json!({"layer_types": ["attention", "mamba", "mamba", "attention"]})),
            presets::tiny(),
        ),
        ("rms_norm_eps absent: 1e-6", with(text(), json!({"rms_norm_eps": null})), presets::tiny()),
        ("rms_norm_eps as given", with(text(), json!({"rms_norm_eps": 1e-5})), tiny_with(|s| s.rms_eps = 1e-5)),
        ("hidden_act and attention_bias absent", with(text(), json!({"hidden_act": null, "attention_bias": null})), {
            presets::tiny()
        }),
        (
            "tie_word_embeddings in the bare config",
            with(text(), json!({"tie_word_embeddings": true})),
            tiny_with(|s| s.tied_embeddings = true),
        ),
        ("tie_word_embeddings absent: untied", with(text(), json!({"tie_word_embeddings": null})), presets::tiny()),
        (
            "wrapper's tie_word_embeddings wins over text_config's",
            with(wrapped(text()), json!({"tie_word_embeddings": true})),
            tiny_with(|s| s.tied_embeddings = true),
        ),
        (
            "wrapper's false wins over text_config's true",
            with(wrapped(with(text(), json!({"tie_word_embeddings": true}))), json!({"tie_word_embeddings": false})),
            presets::tiny(),
        ),
        (
            "wrapper without tie_word_embeddings: text_config's",
            wrapped(with(text(), json!({"tie_word_embeddings": true}))),
            tiny_with(|s| s.tied_embeddings = true),
        ),
        (
            "text_config without model_type inside a wrapper",
            wrapped(with(text(), json!({"model_type": null}))),
            presets::tiny(),
        ),
        ("null fields read as absent", with(text(), json!({"rope_parameters": Value::Null})), presets::tiny()),
        (
            "a GELU activation: a GeGLU FFN, which the lowering refuses",
            with(text(), json!({"hidden_act": "gelu_pytorch_tanh"})),
            tiny_with(|s| s.constructs.ffn = Ffn::GeGlu),
        ),
        ("attention_bias false", with(text(), json!({"attention_bias": false})), presets::tiny()),
        (
            "YaRN, as a spec states it",
            wrapped(with(
                text(),
                json!({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
            )),
            tiny_with(|s| {
                s.constructs.rope_scaling = Some(RopeScaling::Yarn {
                    factor: 4.0,
                    original_context: 32768,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    truncate: true,
                    attention_factor: yarn_attention_factor(4.0, None, None),
                })
            }),
        ),
    ];
    for (what, config, want) in cases {
        match read(&config) {
            Ok(spec) => assert_eq!(spec, want, "{what}"),
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A predicate on the error a config must be refused with.
type Refusal = fn(&ConfigError) -> bool;

#[test]
fn configs_that_describe_no_accepted_model_are_refused_by_name() {
    use ConfigError::*;
    let text = tiny_text_config;
    let cases: Vec<(&str, String, Refusal)> = vec![
        ("garbage", "{\"model_type\": ".into(), |e| matches!(e, Json(_))),
        ("not an object", "[1, 2]".into(), |e| matches!(e, WrongType { expected: "an object", .. })),
        (
            "no model_type",
            with(text(), json!({"model_type": null})).to_string(),
            |e| matches!(e, Missing { field } if field == "model_type"),
        ),
        (
            "unknown family",
            with(text(), json!({"model_type": "bloom"})).to_string(),
            |e| matches!(e, UnsupportedFamily { model_type } if model_type == "bloom"),
        ),
        (
            "wrapper around another family's text config",
            wrapped(with(text(), json!({"model_type": "qwen3_5_moe_text"}))).to_string(),
            |e| matches!(e, UnsupportedFamily { model_type } if model_type == "qwen3_5_moe_text"),
        ),
        (
            "wrapper without text_config",
            json!({"model_type": "qwen3_5"}).to_string(),
            |e| matches!(e, Missing { field } if field == "text_config"),
        ),
        (
            "text_config not an object",
            json!({"model_type": "qwen3_5", "text_config": 3}).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "text_config"),
        ),
        (
            "missing hidden_size (bare)",
            with(text(), json!({"hidden_size": null})).to_string(),
            |e| matches!(e, Missing { field } if field == "hidden_size"),
        ),
        (
            "missing head_dim (wrapped)",
            wrapped(with(text(), json!({"head_dim": null}))).to_string(),
            |e| matches!(e, Missing { field } if field == "text_config.head_dim"),
        ),
        (
            "missing linear_num_value_heads",
            with(text(), json!({"linear_num_value_heads": null})).to_string(),
            |e| matches!(e, Missing { field } if field == "linear_num_value_heads"),
        ),
        (
            "size as a string",
            with(text(), json!({"hidden_size": "64"})).to_string(),
            |e| matches!(e, WrongType { field, found, .. } if field == "hidden_size" && found.contains("\"64\"")),
        ),
        (
            "size as a fraction",
            with(text(), json!({"vocab_size": 97.5})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "vocab_size"),
        ),
        (
            "negative size",
            with(text(), json!({"num_attention_heads": -4})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "num_attention_heads"),
        ),
        (
            "eps as a string",
            with(text(), json!({"rms_norm_eps": "1e-6"})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "rms_norm_eps"),
        ),
        (
            "tie as a string",
            with(wrapped(text()), json!({"tie_word_embeddings": "yes"})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "tie_word_embeddings"),
        ),
        (
            "layer_types not an array",
            with(text(), json!({"layer_types": "full_attention"})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "layer_types"),
        ),
        (
            "sliding_attention layer",
            with(
                text(),
                json!({"layer_types": ["full_attention", "linear_attention", "sliding_attention", "full_attention"]}),
            )
            .to_string(),
            |e| matches!(e, BadValue { field, found, .. } if field == "layer_types[2]" && found.contains("sliding")),
        ),
        (
            "layer_types shorter than num_hidden_layers",
            with(text(), json!({"layer_types": ["full_attention", "linear_attention"]})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "layer_types"),
        ),
        (
            "full_attention_interval 0",
            with(text(), json!({"layer_types": null, "full_attention_interval": 0})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "full_attention_interval"),
        ),
        (
            "llama3 RoPE in legacy rope_scaling",
            with(text(), json!({"rope_scaling": {"type": "llama3", "factor": 8.0}})).to_string(),
            |e| matches!(e, Unsupported { construct: Construct::ScaledRope(RopeKind::Llama3), field, .. } if field == "rope_scaling.type"),
        ),
        (
            "a RoPE type stepcheck does not know",
            with(text(), json!({"rope_parameters": {"rope_type": "spiral"}})).to_string(),
            |e| matches!(e, UnsupportedRope { field, rope_type } if rope_type == "spiral" && field == "rope_parameters.rope_type"),
        ),
        (
            "rope_parameters not an object",
            with(text(), json!({"rope_parameters": [1]})).to_string(),
            |e| matches!(e, WrongType { field, .. } if field == "rope_parameters"),
        ),
        (
            "RoPE θ given twice, differently",
            with(text(), json!({"rope_theta": 1e6})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "rope_parameters.rope_theta"),
        ),
        (
            "partial_rotary_factor above 1",
            with(text(), json!({"rope_parameters": {"partial_rotary_factor": 1.5}})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "rope_parameters.partial_rotary_factor"),
        ),
        (
            "an activation the graph has no op for",
            with(text(), json!({"hidden_act": "relu"})).to_string(),
            |e| matches!(e, Unsupported { construct: Construct::Activation, field, .. } if field == "hidden_act"),
        ),
        (
            "attention biases on a gated attn_q: no spec states them",
            with(text(), json!({"attention_bias": true})).to_string(),
            |e| matches!(e, Spec(_)),
        ),
        (
            "absurd layer count",
            with(text(), json!({"layer_types": null, "num_hidden_layers": 1u64 << 40})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "num_hidden_layers"),
        ),
        (
            "absurd width",
            with(text(), json!({"hidden_size": u64::MAX})).to_string(),
            |e| matches!(e, BadValue { field, .. } if field == "hidden_size"),
        ),
        ("heads that do not share KV heads", with(text(), json!({"num_attention_heads": 3})).to_string(), |e| {
            matches!(e, Spec(_))
        }),
        (
            "value heads that do not share key heads",
            with(text(), json!({"linear_num_value_heads": 5})).to_string(),
            |e| matches!(e, Spec(_)),
        ),
    ];
    for (what, config, refusal) in cases {
        match spec_from_config_json(&config, "tiny") {
            Ok(spec) => panic!("{what}: accepted as {spec:?}"),
            Err(e) => assert!(refusal(&e), "{what}: refused with the wrong error: {e:?}"),
        }
    }
}

#[test]
fn errors_name_the_field_in_their_message() {
    let e = read(&wrapped(with(tiny_text_config(), json!({"hidden_size": "64"})))).unwrap_err();
    let message = e.to_string();
    assert!(message.contains("text_config.hidden_size") && message.contains("integer"), "{message}");
}

/// The names of the fields the reader looks at, so random objects reach past the first check.
const FIELDS: [&str; 24] = [
    "model_type",
    "text_config",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "num_hidden_layers",
    "layer_types",
    "full_attention_interval",
    "rms_norm_eps",
    "tie_word_embeddings",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "partial_rotary_factor",
    "rope_theta",
    "rope_parameters",
    "rope_scaling",
    "rope_type",
    "full_attention",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_conv_kernel_dim",
    "hidden_act",
    "attention_bias",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..300).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec!["qwen3_5", "qwen3_5_text", "silu", "default", "yarn", "linear_attention"])
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        let key = prop_oneof![prop::sample::select(FIELDS.to_vec()).prop_map(String::from), "[a-z_]{0,10}"];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..12).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid config (bare or wrapped) with some fields replaced by random values or removed.
fn mutated_config() -> impl Strategy<Value = Value> {
    let edits = prop::collection::vec((prop::sample::select(FIELDS.to_vec()), json_value()), 0..6);
    (any::<bool>(), edits).prop_map(|(wrap, edits)| {
        let mut text = tiny_text_config();
        for (field, value) in edits {
            text.as_object_mut().expect("object").insert(field.into(), value);
        }
        if wrap { wrapped(text) } else { text }
    })
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let _ = spec_from_config_json(&text, "x");
    }

    #[test]
    fn arbitrary_json_never_panics(value in json_value()) {
        let _ = spec_from_config_json(&value.to_string(), "x");
    }

    #[test]
    fn mutated_configs_never_panic_and_accepted_ones_validate(config in mutated_config()) {
        if let Ok(spec) = spec_from_config_json(&config.to_string(), "x") {
            prop_assert!(spec.validate().is_ok());
        }
    }
}
