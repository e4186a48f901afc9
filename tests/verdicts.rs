//! Every family's verdict, from its real `config.json`: accepted, or refused with every construct
//! the engine has no unit for, in reading order (`docs/FAMILIES.md`).
//! The configs are the hub's (and transformers 5's forms where they differ); the mixtures of
//! experts keep their first few layers, so that authoring every expert keeps the test quick.
//!
//! Also: the attention variants the engine accepts compute what their graphs say; on every spec
//! mixing constructs, the scan names every construct present and begins with `lower_graph`'s
//! refusal; and `stepcheck verdict --json` on the reference fixtures.

use std::path::PathBuf;
use std::process::Command;

use proptest::prelude::*;
use serde_json::{Value, json};
use stepcheck::admission::{Admission, admit_config_json};
use stepcheck::check::{Verdict, compare};
use stepcheck::engine::lower::{lower_graph, refusals_in_order};
use stepcheck::engine::{Numerics, shim::EngineShim};
use stepcheck::ir::{Graph, RopeStyle};
use stepcheck::model::author::decode_step;
use stepcheck::model::config::FAMILIES;
use stepcheck::model::families::spec_of_folder;
use stepcheck::model::presets;
use stepcheck::model::random::random_checkpoint;
use stepcheck::model::spec::{AttentionSpec, Ffn, Mixer, ModelSpec, PostNorm, RopeScaling, SlidingWindow};

// ---- The boundary: a config's verdict. ----

fn admission(config: &Value) -> Admission {
    admit_config_json(&config.to_string(), "model", Numerics::F32).unwrap_or_else(|e| panic!("not judged: {e}"))
}

/// `config` with the fields of `patch` set (a null removes the field).
fn with(mut config: Value, patch: Value) -> Value {
    let obj = config.as_object_mut().expect("config object");
    for (k, v) in patch.as_object().expect("patch object") {
        if v.is_null() {
            obj.remove(k);
        } else {
            obj.insert(k.clone(), v.clone());
        }
    }
    config
}

fn wrap(model_type: &str, text: Value) -> Value {
    json!({"model_type": model_type, "architectures": ["ForConditionalGeneration"], "text_config": text})
}

/// `config` with its first `n` layers (`num_hidden_layers` and `layer_types`).
fn first_layers(mut config: Value, n: usize) -> Value {
    config["num_hidden_layers"] = n.into();
    if let Some(types) = config.get_mut("layer_types").and_then(Value::as_array_mut) {
        types.truncate(n);
    }
    config
}

/// `n` layer types: `odd` on layers whose index + 1 is not a multiple of `every`, `even` on the others.
fn pattern(n: usize, every: usize, odd: &str, even: &str) -> Value {
    (0..n).map(|i| if (i + 1) % every == 0 { even } else { odd }).collect::<Vec<_>>().into()
}

// ---- The configs, in their hub form and, where it differs, as transformers 5 writes them. ----

fn qwen35_text() -> Value {
    json!({
        "model_type": "qwen3_5_text", "hidden_size": 1024, "intermediate_size": 3584, "vocab_size": 248320,
        "num_hidden_layers": 24, "layer_types": pattern(24, 4, "linear_attention", "full_attention"),
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": true,
        "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "attention_bias": false, "max_position_embeddings": 262144, "tie_word_embeddings": true,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": true}
    })
}

fn qwen35_moe_text() -> Value {
    first_layers(
        with(
            qwen35_text(),
            json!({"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "intermediate_size": null,
               "num_hidden_layers": 40, "layer_types": pattern(40, 4, "linear_attention", "full_attention"),
               "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
               "shared_expert_intermediate_size": 512, "tie_word_embeddings": false}),
        ),
        8,
    )
}

fn qwen3_next() -> Value {
    first_layers(
        json!({
            "model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120, "vocab_size": 151936,
            "num_hidden_layers": 48, "full_attention_interval": 4, "num_attention_heads": 16,
            "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "norm_topk_prob": true, "rope_theta": 1e7, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "max_position_embeddings": 262144, "tie_word_embeddings": false
        }),
        8,
    )
}

fn qwen3() -> Value {
    json!({
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "vocab_size": 151936,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_scaling": null,
        "sliding_window": null, "use_sliding_window": false, "max_window_layers": 36, "attention_bias": false,
        "max_position_embeddings": 40960, "tie_word_embeddings": false
    })
}

/// transformers 5's form of a Qwen2/Qwen3 config: `rope_parameters`, `layer_types`, and a null
/// window when the flag is off.
fn v5_qwen(c: Value, layers: usize) -> Value {
    let theta = c["rope_theta"].clone();
    with(
        c,
        json!({"rope_theta": null, "rope_scaling": null, "sliding_window": null,
               "rope_parameters": {"rope_type": "default", "rope_theta": theta},
               "layer_types": vec!["full_attention"; layers]}),
    )
}

fn qwen3_moe() -> Value {
    first_layers(
        with(
            qwen3(),
            json!({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
               "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
               "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
               "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true}),
        ),
        8,
    )
}

fn qwen25() -> Value {
    json!({
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_act": "silu",
        "max_position_embeddings": 32768, "max_window_layers": 28, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "sliding_window": 131072, "use_sliding_window": false, "tie_word_embeddings": false
    })
}

fn llama2() -> Value {
    json!({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "vocab_size": 32000,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_scaling": null, "rope_theta": 10000.0,
        "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false
    })
}

fn llama31() -> Value {
    with(
        llama2(),
        json!({"intermediate_size": 14336, "vocab_size": 128256, "num_key_value_heads": 8,
               "max_position_embeddings": 131072, "rope_theta": 500000.0,
               "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"}}),
    )
}

fn mistral_v01() -> Value {
    json!({
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32000,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": false
    })
}

fn mixtral() -> Value {
    with(
        mistral_v01(),
        json!({"model_type": "mixtral", "sliding_window": null, "rope_theta": 1e6,
               "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02}),
    )
}

fn gemma() -> Value {
    json!({
        "model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "vocab_size": 256000,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0
    })
}

fn gemma2() -> Value {
    json!({
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "vocab_size": 256000,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_size": 4096,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "cache_implementation": "hybrid",
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 10000.0
    })
}

fn gemma3_text() -> Value {
    json!({
        "model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "vocab_size": 262208,
        "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "sliding_window": 1024, "sliding_window_pattern": 6,
        "attn_logit_softcapping": null, "final_logit_softcapping": null, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6
    })
}

fn olmo2() -> Value {
    json!({
        "model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "vocab_size": 100352,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000, "attention_bias": false,
        "rope_scaling": null, "tie_word_embeddings": false
    })
}

fn deepseek_v2_lite() -> Value {
    first_layers(
        json!({
            "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "vocab_size": 102400,
            "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
            "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "norm_topk_prob": false, "topk_method": "greedy",
            "kv_lora_rank": 512, "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
            "rope_theta": 10000,
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                             "original_max_position_embeddings": 4096, "type": "yarn"}
        }),
        4,
    )
}

fn deepseek_v3() -> Value {
    first_layers(
        with(
            deepseek_v2_lite(),
            json!({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
               "vocab_size": 129280, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "moe_intermediate_size": 2048, "n_routed_experts": 256,
               "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "n_group": 8,
               "topk_group": 4, "norm_topk_prob": true, "q_lora_rank": 1536, "topk_method": "noaux_tc",
               "routed_scaling_factor": 2.5}),
        ),
        6,
    )
}

fn gpt_oss() -> Value {
    json!({
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "vocab_size": 201088,
        "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
        "layer_types": pattern(24, 2, "sliding_attention", "full_attention"), "sliding_window": 128,
        "attention_bias": true, "hidden_act": "silu", "swiglu_limit": 7.0, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_theta": 150000,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
        "tie_word_embeddings": false
    })
}

fn phi3_mini_4k() -> Value {
    json!({
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "vocab_size": 32064,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu",
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": null, "sliding_window": 2047, "tie_word_embeddings": false
    })
}

fn phi3_mini_128k() -> Value {
    let factors: Vec<f64> = vec![1.0; 48];
    with(
        phi3_mini_4k(),
        json!({"max_position_embeddings": 131072, "sliding_window": 262144,
               "rope_scaling": {"type": "longrope", "long_factor": factors, "short_factor": factors}}),
    )
}

fn phi2() -> Value {
    json!({
        "model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "vocab_size": 51200,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "partial_rotary_factor": 0.4, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5, "rope_theta": 10000.0,
        "qk_layernorm": false, "max_position_embeddings": 2048, "tie_word_embeddings": false
    })
}

fn gpt2() -> Value {
    json!({
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": null, "n_ctx": 1024,
        "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "scale_attn_weights": true
    })
}

fn starcoder2() -> Value {
    json!({
        "model_type": "starcoder2", "hidden_size": 4608, "intermediate_size": 18432, "vocab_size": 49152,
        "num_hidden_layers": 32, "num_attention_heads": 36, "num_key_value_heads": 4,
        "hidden_act": "gelu_pytorch_tanh", "norm_epsilon": 1e-5, "rope_theta": 1000000, "sliding_window": 4096,
        "max_position_embeddings": 16384, "use_bias": true
    })
}

fn falcon_7b() -> Value {
    json!({
        "model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "vocab_size": 65024,
        "multi_query": true, "parallel_attn": true, "bias": false, "alibi": false,
        "new_decoder_architecture": false, "layer_norm_epsilon": 1e-5
    })
}

fn granite4_h() -> Value {
    let types: Vec<&str> = (0..40).map(|i| if i % 8 == 5 { "attention" } else { "mamba" }).collect();
    json!({
        "model_type": "granitemoehybrid", "hidden_size": 4096, "intermediate_size": 1536,
        "shared_intermediate_size": 8192, "vocab_size": 100352, "num_hidden_layers": 40, "layer_types": types,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 16.0, "position_embedding_type": "nope", "mamba_d_state": 128, "mamba_n_heads": 128,
        "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": true
    })
}

fn mamba2() -> Value {
    json!({
        "model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50288,
        "state_size": 128, "num_heads": 80, "head_dim": 64, "n_groups": 1, "expand": 2, "conv_kernel": 4,
        "layer_norm_epsilon": 1e-5
    })
}

fn granite3() -> Value {
    json!({
        "model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "vocab_size": 49155,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 16.0, "rope_theta": 10000000.0, "rms_norm_eps": 1e-5, "attention_bias": false,
        "mlp_bias": false, "max_position_embeddings": 131072, "tie_word_embeddings": true
    })
}

fn olmo3() -> Value {
    with(
        olmo2(),
        json!({"model_type": "olmo3", "sliding_window": 4096, "max_position_embeddings": 65536,
               "layer_types": pattern(32, 4, "sliding_attention", "full_attention")}),
    )
}

fn jamba() -> Value {
    json!({
        "model_type": "jamba", "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 65536,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "num_experts": 16,
        "num_experts_per_tok": 2, "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8,
        "attn_layer_offset": 4, "sliding_window": null, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144
    })
}

fn falcon_h1() -> Value {
    json!({
        "model_type": "falcon_h1", "hidden_size": 2048, "intermediate_size": 8192, "vocab_size": 65537,
        "num_hidden_layers": 36, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
        "embedding_multiplier": 5.656854249492381, "lm_head_multiplier": 0.0390625,
        "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "mlp_multipliers": [0.8838, 0.5859],
        "mamba_d_ssm": 3072, "mamba_n_heads": 24, "rope_theta": 1e11, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "attention_bias": false, "mlp_bias": false, "max_position_embeddings": 131072
    })
}

fn glm4() -> Value {
    json!({
        "model_type": "glm4", "hidden_size": 4096, "intermediate_size": 13696, "vocab_size": 151552,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
        "partial_rotary_factor": 0.5, "attention_bias": true, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 32768
    })
}

fn exaone4() -> Value {
    json!({
        "model_type": "exaone4", "hidden_size": 5120, "intermediate_size": 27392, "vocab_size": 102400,
        "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "layer_types": pattern(64, 4, "sliding_attention", "full_attention"), "sliding_window": 4096,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 1000000, "max_position_embeddings": 131072
    })
}

fn cohere() -> Value {
    json!({
        "model_type": "cohere", "hidden_size": 8192, "intermediate_size": 22528, "vocab_size": 256000,
        "num_hidden_layers": 40, "num_attention_heads": 64, "num_key_value_heads": 64, "logit_scale": 0.0625,
        "layer_norm_eps": 1e-5, "rope_theta": 8000000.0, "use_qk_norm": false, "hidden_act": "silu",
        "max_position_embeddings": 8192
    })
}

fn mamba() -> Value {
    json!({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
           "state_size": 16, "expand": 2, "conv_kernel": 4, "layer_norm_epsilon": 1e-5})
}

/// A family's config and the names of its verdict's reasons, in reading order (none: accepted).
struct Case {
    what: &'static str,
    config: Value,
    reasons: &'static [&'static str],
}

fn case(what: &'static str, config: Value, reasons: &'static [&'static str]) -> Case {
    Case { what, config, reasons }
}

fn cases() -> Vec<Case> {
    vec![
        case("Qwen3.5-0.8B, hub wrapper", wrap("qwen3_5", qwen35_text()), &[]),
        case("Qwen3.5-0.8B, transformers 5", qwen35_text(), &[]),
        case("Qwen3.5-MoE, hub wrapper", wrap("qwen3_5_moe", qwen35_moe_text()), &["Experts"]),
        case("Qwen3.5-MoE, transformers 5", qwen35_moe_text(), &["Experts"]),
        case("Qwen3-Next-80B-A3B", qwen3_next(), &["Experts"]),
        case(
            "Qwen3-Next, transformers 5",
            with(
                qwen3_next(),
                json!({"full_attention_interval": null, "rope_theta": null, "partial_rotary_factor": null,
                       "layer_types": pattern(8, 4, "linear_attention", "full_attention"),
                       "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}}),
            ),
            &["Experts"],
        ),
        case("Qwen3-Next with num_experts 0: dense", with(qwen3_next(), json!({"num_experts": 0})), &[]),
        case("Qwen3-8B", qwen3(), &[]),
        case("Qwen3-8B, transformers 5", v5_qwen(qwen3(), 36), &[]),
        case(
            "Qwen3 with use_sliding_window from layer 28",
            with(qwen3(), json!({"use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 28})),
            &["SlidingWindow"],
        ),
        case(
            "Qwen3 with YaRN",
            with(
                qwen3(),
                json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 32768}}),
            ),
            &["ScaledRope"],
        ),
        case("Qwen3-30B-A3B", qwen3_moe(), &["Experts"]),
        case(
            "Qwen3-30B-A3B, transformers 5 (num_local_experts)",
            with(v5_qwen(qwen3_moe(), 8), json!({"num_experts": null, "num_local_experts": 128})),
            &["Experts"],
        ),
        case("Qwen2.5-7B: a window with use_sliding_window false does not slide", qwen25(), &["AttentionBias"]),
        case("Qwen2.5-7B, transformers 5", v5_qwen(qwen25(), 28), &["AttentionBias"]),
        case(
            "Qwen2 with use_sliding_window from layer 21",
            with(qwen25(), json!({"use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 21})),
            &["AttentionBias", "SlidingWindow"],
        ),
        case("Llama-2-7B", llama2(), &[]),
        case("Llama-3.1-8B", llama31(), &["Llama3Rope"]),
        case(
            "Llama-3.1-8B, transformers 5",
            with(
                llama31(),
                json!({"rope_scaling": null, "rope_theta": null,
                       "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192}}),
            ),
            &["Llama3Rope"],
        ),
        case(
            "Llama with attention and MLP biases",
            with(llama2(), json!({"attention_bias": true, "mlp_bias": true})),
            &["AttentionBias", "FfnBias"],
        ),
        case("Mistral-7B-v0.1", mistral_v01(), &["SlidingWindow"]),
        case("Mistral-7B-v0.3", with(mistral_v01(), json!({"sliding_window": null, "rope_theta": 1e6})), &[]),
        case(
            "Mistral-Small-3.1 text, hub wrapper",
            wrap("mistral3", with(mistral_v01(), json!({"sliding_window": null}))),
            &[],
        ),
        case("Mixtral-8x7B", mixtral(), &["Experts"]),
        case(
            "Mixtral, num_experts alias",
            with(mixtral(), json!({"num_local_experts": null, "num_experts": 8})),
            &["Experts"],
        ),
        case("Mixtral with a window", with(mixtral(), json!({"sliding_window": 4096})), &["SlidingWindow", "Experts"]),
        case("Gemma-7B", gemma(), &["ScaledEmbedding", "NotSwiGlu"]),
        case(
            "Gemma-2-9B",
            gemma2(),
            &["ScaledEmbedding", "SlidingWindow", "AttentionSoftcap", "NormAfterMixer", "NotSwiGlu", "LogitSoftcap"],
        ),
        case(
            "Gemma-2-9B, transformers 5",
            with(
                gemma2(),
                json!({"sliding_window_size": null, "rope_theta": null, "cache_implementation": null,
                       "layer_types": pattern(42, 2, "sliding_attention", "full_attention"),
                       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
            ),
            &["ScaledEmbedding", "SlidingWindow", "AttentionSoftcap", "NormAfterMixer", "NotSwiGlu", "LogitSoftcap"],
        ),
        case(
            "Gemma-2-27B: query_pre_attn_scalar 144 on heads of 128",
            with(gemma2(), json!({"head_dim": 128, "query_pre_attn_scalar": 144, "num_attention_heads": 32})),
            &[
                "ScaledEmbedding",
                "SlidingWindow",
                "AttentionScale",
                "AttentionSoftcap",
                "NormAfterMixer",
                "NotSwiGlu",
                "LogitSoftcap",
            ],
        ),
        case(
            "Gemma-3-4B, hub wrapper: layer 5's linear RoPE is read after layer 0's FFN",
            wrap("gemma3", gemma3_text()),
            &["ScaledEmbedding", "SlidingWindow", "NormAfterMixer", "NotSwiGlu", "ScaledRope"],
        ),
        case(
            "Gemma-3 text, transformers 5 (rope_parameters per layer type)",
            with(
                gemma3_text(),
                json!({"rope_scaling": null, "rope_theta": null, "rope_local_base_freq": null,
                       "sliding_window_pattern": null,
                       "layer_types": pattern(34, 6, "sliding_attention", "full_attention"),
                       "rope_parameters": {
                           "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
            ),
            &["ScaledEmbedding", "SlidingWindow", "NormAfterMixer", "NotSwiGlu", "ScaledRope"],
        ),
        case("OLMo-2-7B", olmo2(), &["NormAfterMixer", "FullWidthQkNorm"]),
        case("OLMo-3", olmo3(), &["NormAfterMixer", "SlidingWindow", "FullWidthQkNorm"]),
        case(
            "DeepSeek-V2-Lite: YaRN's mscale² scales the scores",
            deepseek_v2_lite(),
            &["LatentAttention", "AttentionScale", "ScaledRope", "Experts"],
        ),
        case(
            "DeepSeek-V3",
            deepseek_v3(),
            &["LatentAttention", "AttentionScale", "InterleavedRope", "ScaledRope", "Experts"],
        ),
        case(
            "DeepSeek-V3, transformers 5",
            with(
                deepseek_v3(),
                json!({"rope_scaling": null, "rope_theta": null, "rope_interleave": true,
                       "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000, "factor": 40,
                                           "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32,
                                           "beta_slow": 1, "original_max_position_embeddings": 4096}}),
            ),
            &["LatentAttention", "AttentionScale", "InterleavedRope", "ScaledRope", "Experts"],
        ),
        case(
            "gpt-oss-20b",
            gpt_oss(),
            &["AttentionSinks", "SlidingWindow", "ScaledRope", "AttentionBias", "Experts", "NotSwiGlu"],
        ),
        case(
            "gpt-oss without layer_types: sliding layers alternate",
            with(gpt_oss(), json!({"layer_types": null})),
            &["AttentionSinks", "SlidingWindow", "ScaledRope", "AttentionBias", "Experts", "NotSwiGlu"],
        ),
        case(
            "gpt-oss, transformers 5",
            with(
                gpt_oss(),
                json!({"rope_scaling": null, "rope_theta": null,
                       "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000, "factor": 32.0,
                                           "beta_fast": 32.0, "beta_slow": 1.0,
                                           "original_max_position_embeddings": 4096, "truncate": false}}),
            ),
            &["AttentionSinks", "SlidingWindow", "ScaledRope", "AttentionBias", "Experts", "NotSwiGlu"],
        ),
        case("Phi-3-mini-4k: a window of 2047", phi3_mini_4k(), &["SlidingWindow"]),
        case("Phi-3-mini-128k: its window spans the context, its RoPE is LongRoPE", phi3_mini_128k(), &["LongRope"]),
        case("Phi-3 without a window", with(phi3_mini_4k(), json!({"sliding_window": null})), &[]),
        case("Phi-2", phi2(), &["LayerNorm", "AttentionBias", "ParallelBlock", "NotSwiGlu", "FfnBias", "HeadBias"]),
        case("GPT-2", gpt2(), &["LearnedPositions", "LayerNorm", "AttentionBias", "NotSwiGlu", "FfnBias"]),
        case("StarCoder2-7B", starcoder2(), &["LayerNorm", "SlidingWindow", "AttentionBias", "NotSwiGlu", "FfnBias"]),
        case("Falcon-7B", falcon_7b(), &["LayerNorm", "ParallelBlock", "NotSwiGlu"]),
        case(
            "Falcon-40B: the new decoder architecture",
            with(
                falcon_7b(),
                json!({"hidden_size": 8192, "n_head": 128, "num_kv_heads": 8, "n_layer": 60,
                       "new_decoder_architecture": true, "multi_query": null}),
            ),
            &["LayerNorm", "ParallelBlock", "NotSwiGlu"],
        ),
        case(
            "Falcon with ALiBi",
            with(falcon_7b(), json!({"alibi": true})),
            &["LayerNorm", "Alibi", "ParallelBlock", "NotSwiGlu"],
        ),
        case(
            "Granite-4.0-H-Small",
            granite4_h(),
            &["ScaledEmbedding", "Mamba2Mixer", "ResidualMultiplier", "Experts", "AttentionScale", "LogitScale"],
        ),
        case(
            "Granite-4.0-H, transformers 5 layer type names",
            with(
                granite4_h(),
                json!({"layer_types": (0..40).map(|i| if i % 8 == 5 { "full_attention" } else { "linear_attention" })
                       .collect::<Vec<_>>()}),
            ),
            &["ScaledEmbedding", "Mamba2Mixer", "ResidualMultiplier", "Experts", "AttentionScale", "LogitScale"],
        ),
        case(
            "Granite-4.0-H with no attention layer: the Mamba2 mixers do not hide the rest",
            with(granite4_h(), json!({"layer_types": vec!["mamba"; 40]})),
            &["ScaledEmbedding", "Mamba2Mixer", "ResidualMultiplier", "Experts", "LogitScale"],
        ),
        case("Granite-3.1-8B", granite3(), &["ScaledEmbedding", "AttentionScale", "ResidualMultiplier", "LogitScale"]),
        case("Mamba2-2.7B: no layer a spec can state", mamba2(), &["Mamba2Mixer", "NoFfn"]),
        case("Mamba-130M", mamba(), &["MambaMixer", "NoFfn"]),
        case("falcon-mamba", with(mamba(), json!({"model_type": "falcon_mamba"})), &["MambaMixer", "NoFfn"]),
        case("Jamba: its experts sit on Mamba layers, listed all the same", jamba(), &["MambaMixer", "Experts"]),
        case("Falcon-H1", falcon_h1(), &["ScaledEmbedding", "Mamba2Mixer", "ParallelBlock", "MupMultipliers"]),
        case("GLM-4-9B-0414", glm4(), &["InterleavedRope", "AttentionBias", "NormAfterMixer"]),
        case("EXAONE-4.0", exaone4(), &["NormAfterMixer", "SlidingWindow"]),
        case("Command-R", cohere(), &["LayerNorm", "InterleavedRope", "ParallelBlock", "LogitScale"]),
        case(
            "Command-R7B (cohere2)",
            with(cohere(), json!({"model_type": "cohere2", "sliding_window": 4096, "sliding_window_pattern": 4})),
            &["LayerNorm", "SlidingWindow", "InterleavedRope", "ParallelBlock", "LogitScale"],
        ),
        case(
            "Qwen2-MoE",
            with(
                qwen25(),
                json!({"model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                                  "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}),
            ),
            &["AttentionBias", "Experts"],
        ),
    ]
}

#[test]
fn every_family_has_the_verdict_and_reasons_its_config_implies() {
    for c in cases() {
        let a = admission(&c.config);
        assert_eq!(a.names(), c.reasons, "{}", c.what);
        assert_eq!(a.accepted(), c.reasons.is_empty(), "{}", c.what);
        assert_eq!(a.program.is_some(), c.reasons.is_empty(), "{}", c.what);
        assert_eq!(a.refusal().map(|r| r.name()), c.reasons.first().copied(), "{}", c.what);
    }
}

#[test]
fn every_family_the_reader_knows_has_a_case() {
    let cases = cases();
    for family in FAMILIES {
        let covered = cases.iter().any(|c| {
            let t = &c.config["model_type"];
            t == family.model_type || c.config["text_config"]["model_type"] == family.model_type
        });
        assert!(covered, "{} has no case", family.model_type);
    }
}

#[test]
fn reasons_sit_at_their_layers_as_the_config_numbers_them() {
    // Granite-4.0-H's first attention layer is layer 5: its spec's layer 0.
    let a = admission(&granite4_h());
    let scale = a.reasons.iter().find(|r| r.name() == "AttentionScale").expect("AttentionScale");
    assert!(scale.to_string().starts_with("layer 5's attention block"), "{scale}");
    // Qwen3 slides from layer 28 on.
    let q =
        admission(&with(qwen3(), json!({"use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 28})));
    let layers: Vec<String> = q.reasons.iter().map(|r| r.to_string()).collect();
    assert_eq!(layers.len(), 8, "{layers:#?}");
    assert!(layers[0].starts_with("layer 28's attention block"), "{layers:#?}");
}

#[test]
fn configs_the_reader_cannot_judge_are_errors_not_verdicts() {
    for (what, config) in [
        ("an unknown family", json!({"model_type": "bloom", "hidden_size": 64})),
        (
            "a window layer type in a Qwen3.5 config",
            with(qwen35_text(), json!({"layer_types": vec!["sliding_attention"; 24]})),
        ),
        ("a Llama without its width", with(llama2(), json!({"hidden_size": null}))),
    ] {
        assert!(admit_config_json(&config.to_string(), "m", Numerics::F32).is_err(), "{what}");
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u64..300).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec!["silu", "gelu", "yarn", "default", "sliding_attention", "mamba", "llama3"])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A family's config with some of its own fields replaced by random values or removed.
fn mutated_family_config() -> impl Strategy<Value = Value> {
    let configs: Vec<Value> = cases().into_iter().map(|c| c.config).collect();
    (prop::sample::select(configs), prop::collection::vec((any::<prop::sample::Index>(), json_value()), 0..4)).prop_map(
        |(mut config, edits)| {
            for (at, value) in edits {
                let obj = config.as_object_mut().expect("object");
                let keys: Vec<String> = obj.keys().cloned().collect();
                obj.insert(at.get(&keys).clone(), value);
            }
            config
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn mutated_family_configs_never_panic_and_are_judged_or_refused(config in mutated_family_config()) {
        let text = config.to_string();
        if let Ok(reading) = stepcheck::model::config::read_config_json(&text, "m") {
            let spec = &reading.spec;
            prop_assert!(spec.validate().is_ok());
            let experts = spec.constructs.experts.as_ref().map_or(1, |e| e.count.max(1));
            if spec.layers.len() * experts <= 256 && spec.vocab <= 1 << 20 {
                let judged = admit_config_json(&text, "m", Numerics::F32);
                prop_assert!(
                    !matches!(judged, Err(stepcheck::admission::AdmitError::Malformed(_))),
                    "an authored step the lowering cannot read: {:?}",
                    judged
                );
            }
        }
    }
}

// ---- The accepted attention variants compute what their graphs say. ----

/// A small model of attention layers only, with the given gate and q/k norms.
fn attention_only(name: &str, output_gate: bool, qk_norm: bool, rotary_dims: usize) -> ModelSpec {
    let mut s = presets::tiny();
    s.name = name.into();
    s.layers = vec![Mixer::Attention; 3];
    s.attention = AttentionSpec {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        rotary_dims,
        rope_theta: 1e6,
        rope_style: RopeStyle::Neox,
        output_gate,
        qk_norm,
    };
    s
}

#[test]
fn the_accepted_attention_variants_agree_with_the_reference() {
    let mut hybrid = presets::tiny();
    hybrid.attention.output_gate = false;
    let specs = [
        attention_only("qwen3-like", false, true, 16),
        attention_only("llama-like", false, false, 16),
        attention_only("gated, no q/k norms", true, false, 8),
        attention_only("no RoPE (NoPE)", false, false, 0),
        hybrid,
    ];
    for spec in specs {
        let g = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
        for numerics in [Numerics::F32, Numerics::BF16] {
            let p = lower_graph(&g, numerics).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let v = compare(&g, &p, &random_checkpoint(&spec, 5), &[1, 17, 3, 96, 0, 42, 42, 5]).expect("compare");
            assert!(matches!(v, Verdict::Agree { .. }), "{} at {numerics}: {v}", spec.name);
        }
    }
}

// ---- The scan names every construct and begins with lower_graph's refusal. ----

fn spec_mixing_constructs() -> impl Strategy<Value = ModelSpec> {
    let layers = prop::collection::vec(prop_oneof![Just(Mixer::DeltaNet), Just(Mixer::Attention)], 1..5);
    let ffn = prop_oneof![
        Just(Ffn::SwiGlu),
        Just(Ffn::GeGlu),
        any::<bool>().prop_map(|tanh| Ffn::GeluMlp { tanh }),
        Just(Ffn::Relu2Mlp),
        Just(Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 }),
    ];
    let post = prop_oneof![Just(PostNorm::None), Just(PostNorm::Sandwich), Just(PostNorm::PostOnly)];
    let attention = (any::<bool>(), any::<bool>(), 0usize..=4, any::<bool>());
    let extras =
        (any::<bool>(), prop::option::of(1usize..8), prop::option::of(0.5f64..4.0), prop::option::of(0.1f64..1.0));
    let more = (any::<bool>(), any::<bool>(), prop::option::of(1.5f64..8.0));
    (layers, ffn, post, attention, extras, more).prop_map(
        |(layers, ffn, post, (gate, qk_norm, quarter, interleaved), (sinks, window, emb, scale), (qkv, o, linear))| {
            let mut s = presets::tiny();
            s.constructs.ffn = ffn;
            s.constructs.post_norm = post;
            s.attention.output_gate = gate;
            s.attention.qk_norm = qk_norm;
            s.attention.rotary_dims = 8 * quarter;
            if interleaved {
                s.attention.rope_style = RopeStyle::Interleaved;
            }
            s.constructs.attention_sinks = sinks;
            let attention_layers: Vec<usize> = (0..layers.len()).filter(|&l| layers[l] == Mixer::Attention).collect();
            s.constructs.sliding_window = window
                .map(|w| SlidingWindow { window: w, layers: attention_layers.iter().copied().step_by(2).collect() });
            s.constructs.embedding_scale = emb;
            s.constructs.attention_scale = scale;
            // Biases on a gated attn_q are not a model anyone wrote: the author refuses them.
            (s.constructs.qkv_bias, s.constructs.output_bias) = (qkv && !gate, o);
            s.constructs.rope_scaling = linear.map(|factor| RopeScaling::Linear { factor });
            s.layers = layers;
            s
        },
    )
}

/// The constructs of `spec` the engine has no unit for, by the name the lowering gives them.
fn constructs_of(spec: &ModelSpec) -> Vec<&'static str> {
    let c = &spec.constructs;
    let attention = spec.layers.contains(&Mixer::Attention);
    let hd = spec.attention.head_dim as f64;
    [
        ("ScaledEmbedding", c.embedding_scale.is_some()),
        ("NormAfterMixer", c.post_norm != PostNorm::None),
        ("AttentionSinks", attention && c.attention_sinks),
        ("SlidingWindow", c.sliding_window.as_ref().is_some_and(|w| !w.layers.is_empty())),
        ("AttentionScale", attention && c.attention_scale.is_some_and(|s| s != 1.0 / hd.sqrt())),
        ("InterleavedRope", attention && spec.attention.rope_style == RopeStyle::Interleaved),
        ("ScaledRope", attention && c.rope_scaling.is_some()),
        ("AttentionBias", attention && (c.qkv_bias || c.output_bias)),
        ("NotSwiGlu", c.ffn != Ffn::SwiGlu),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| name)
    .collect()
}

fn fused(spec: &ModelSpec) -> Graph {
    EngineShim::default().prepare(&decode_step(spec).expect("the author writes every spec of this test"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_scan_names_every_construct_and_begins_with_lower_graphs_refusal(spec in spec_mixing_constructs()) {
        let g = fused(&spec);
        let found = refusals_in_order(&g, Numerics::F32);
        let mut names: Vec<&str> = found.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        let mut want = constructs_of(&spec);
        want.sort_unstable();
        prop_assert_eq!(&names, &want, "{:#?}", spec);
        match lower_graph(&g, Numerics::F32) {
            Ok(_) => prop_assert!(found.is_empty()),
            Err(e) => {
                prop_assert!(e.is_refused_construct(), "an authored graph refused as malformed: {}", e);
                prop_assert_eq!(found.first(), Some(&e));
            }
        }
    }
}

// ---- The config reader and the refused families' own readers agree. ----

#[test]
fn the_refused_fixtures_read_as_their_families_read_them() {
    for family in ["deepseek_v3", "gemma3_text", "gpt_oss", "qwen3_5_moe_text"] {
        let dir = fixture(&format!("refused/{family}"));
        let theirs = spec_of_folder(&dir).unwrap_or_else(|e| panic!("{family}: {e}"));
        let text = std::fs::read_to_string(dir.join("config.json")).expect("config.json");
        let reading = stepcheck::model::config::read_config_json(&text, &theirs.name).expect("read");
        assert_eq!(reading.spec, theirs, "{family}");
        assert!(reading.unsupported.is_empty(), "{family}: {:?}", reading.unsupported);
    }
}

// ---- The command line on the reference fixtures. ----

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(path)
}

fn verdict_json(path: &str) -> (Value, Option<i32>) {
    let out = Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(["verdict", "--json"])
        .arg(fixture(path))
        .output()
        .expect("run stepcheck");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text:?}"));
    (v, out.status.code())
}

#[test]
fn verdict_json_on_the_reference_fixtures() {
    let cases: [(&str, Value, i32); 7] = [
        ("qwen35-a", json!({"accepted": true, "error": null, "reasons": []}), 0),
        ("qwen35-a/config.json", json!({"accepted": true, "error": null, "reasons": []}), 0),
        (
            "qwen35-b/model.gguf",
            json!({"accepted": true, "error": null, "reasons": [],
                   "gguf": {"decoder_layers": 5, "mtp": null, "types": [["BF16", 39], ["F32", 27]]}}),
            0,
        ),
        (
            "refused/deepseek_v3/config.json",
            json!({"accepted": false, "error": "LatentAttention",
                   "reasons": ["LatentAttention", "InterleavedRope", "Experts"]}),
            1,
        ),
        (
            "refused/gemma3_text/config.json",
            json!({"accepted": false, "error": "ScaledEmbedding",
                   "reasons": ["ScaledEmbedding", "SlidingWindow", "AttentionScale", "NormAfterMixer", "NotSwiGlu",
                               "ScaledRope"]}),
            1,
        ),
        (
            "refused/gpt_oss/config.json",
            json!({"accepted": false, "error": "AttentionSinks",
                   "reasons": ["AttentionSinks", "SlidingWindow", "ScaledRope", "AttentionBias", "Experts", "NotSwiGlu"]}),
            1,
        ),
        (
            "refused/qwen3_5_moe_text/config.json",
            json!({"accepted": false, "error": "Experts", "reasons": ["Experts"]}),
            1,
        ),
    ];
    for (path, want, code) in cases {
        let (got, status) = verdict_json(path);
        assert_eq!(got, want, "{path}");
        assert_eq!(status, Some(code), "{path}");
    }
}

#[test]
fn verdict_text_names_the_refusal_then_every_construct() {
    let out = Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .arg("verdict")
        .arg(fixture("refused/gpt_oss/config.json"))
        .output()
        .expect("run stepcheck");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("refused: AttentionSinks — layer 0's attention block"), "{text}");
    let listed: Vec<&str> = lines[2..].iter().filter_map(|l| l.trim().split([' ', ':']).next()).collect();
    assert_eq!(listed, ["AttentionSinks", "SlidingWindow", "ScaledRope", "AttentionBias", "Experts", "NotSwiGlu"]);
}

// ---- A config and a GGUF of the same architecture get the same kind of answer. ----

#[allow(dead_code)]
#[path = "common/gguf_writer.rs"]
mod gguf_writer;
#[path = "common/scratch.rs"]
mod scratch;

/// A GGUF file of metadata alone (llama.cpp's keys for `arch`, no tensors), written in `dir`.
fn attention_gguf(dir: &std::path::Path, arch: &str, sizes: &[(&str, u32)], floats: &[(&str, f32)]) -> PathBuf {
    use stepcheck::formats::gguf::Value as Meta;
    let mut w = gguf_writer::GgufWriter::default().kv("general.architecture", Meta::String(arch.into()));
    for (key, n) in sizes {
        w = w.kv(&format!("{arch}.{key}"), Meta::U32(*n));
    }
    for (key, x) in floats {
        w = w.kv(&format!("{arch}.{key}"), Meta::F32(*x));
    }
    let path = dir.join(format!("{arch}.gguf"));
    std::fs::write(&path, w.to_bytes()).expect("written");
    path
}

#[test]
fn a_gguf_of_an_architecture_whose_config_is_judged_is_judged_too() {
    let dir = scratch::scratch("verdict-attention-gguf");
    let sizes = |hidden, heads, kv, blocks, ff, vocab| {
        [
            ("embedding_length", hidden),
            ("attention.head_count", heads),
            ("attention.head_count_kv", kv),
            ("block_count", blocks),
            ("feed_forward_length", ff),
            ("vocab_size", vocab),
        ]
    };
    // (the config, the same model's GGUF, the GGUF's verdict). Each GGUF was "the GGUF's
    // architecture is `llama`; this loader reads `qwen35`…", exit 2.
    let llama_gguf = attention_gguf(
        &dir,
        "llama",
        &sizes(4096, 32, 32, 32, 11008, 32000),
        &[("attention.layer_norm_rms_epsilon", 1e-5), ("rope.freq_base", 10000.0)],
    );
    let qwen3_gguf = attention_gguf(
        &dir,
        "qwen3",
        &[&sizes(4096, 32, 8, 36, 12288, 151936)[..], &[("attention.key_length", 128)]].concat(),
        &[("attention.layer_norm_rms_epsilon", 1e-6), ("rope.freq_base", 1e6)],
    );
    let qwen2_gguf = attention_gguf(
        &dir,
        "qwen2",
        &sizes(3584, 28, 4, 28, 18944, 152064),
        &[("attention.layer_norm_rms_epsilon", 1e-6), ("rope.freq_base", 1e6)],
    );
    let cases = [
        // llama.cpp's converter permutes a llama's query and key rows for its interleaved rope.
        (
            llama2(),
            llama_gguf,
            json!({"accepted": false, "error": "InterleavedRope", "reasons": ["InterleavedRope"]}),
            1,
        ),
        (qwen3(), qwen3_gguf, json!({"accepted": true, "error": null, "reasons": []}), 0),
        (qwen25(), qwen2_gguf, json!({"accepted": false, "error": "AttentionBias", "reasons": ["AttentionBias"]}), 1),
    ];
    for (config, gguf, want, code) in cases {
        let config_path = dir.join("config.json");
        std::fs::write(&config_path, config.to_string()).expect("written");
        let (from_config, config_code) = verdict_json(config_path.to_str().expect("UTF-8"));
        assert!(matches!(config_code, Some(0 | 1)), "{config}: {from_config}");
        let (got, status) = verdict_json(gguf.to_str().expect("UTF-8"));
        assert_eq!(got, want, "{}", gguf.display());
        assert_eq!(status, Some(code), "{}", gguf.display());
        // The same answer but for the rope convention, which is the file's own.
        if want["error"] != "InterleavedRope" {
            assert_eq!(from_config, want, "the config of {}", gguf.display());
        } else {
            assert_eq!(from_config, json!({"accepted": true, "error": null, "reasons": []}), "{}", gguf.display());
        }
    }
}

#[test]
fn a_gguf_whose_token_list_is_not_its_vocab_is_not_judged() {
    use stepcheck::formats::gguf::{Array, Value as Meta};
    let dir = scratch::scratch("verdict-token-count");
    let mut w = gguf_writer::GgufWriter::default().kv("general.architecture", Meta::String("qwen3".into()));
    for (key, n) in [
        ("embedding_length", 64),
        ("attention.head_count", 4),
        ("block_count", 2),
        ("feed_forward_length", 128),
        ("vocab_size", 100),
    ] {
        w = w.kv(&format!("qwen3.{key}"), Meta::U32(n));
    }
    w = w.kv("qwen3.attention.layer_norm_rms_epsilon", Meta::F32(1e-6));
    w = w.kv("tokenizer.ggml.tokens", Meta::Array(Array::String(vec!["a".into(), "b".into(), "c".into()])));
    let path = dir.join("qwen3.gguf");
    std::fs::write(&path, w.to_bytes()).expect("written");
    let out = Command::new(env!("CARGO_BIN_EXE_stepcheck")).arg("verdict").arg(&path).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`tokenizer.ggml.tokens`: 3 tokens, but the model's vocab is 100"), "{err}");
}
