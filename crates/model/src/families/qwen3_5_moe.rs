//! Qwen3.5-MoE text (`qwen3_5_moe_text`, `Qwen3_5MoeForCausalLM`), as transformers'
//! `modeling_qwen3_5_moe` computes it: dense Qwen3.5 in every part but the FFN, which in every layer
//! is a mixture of experts with a softmax router (top-k renormalised, always) and a shared expert
//! scaled by its sigmoid gate.
//!
//! The dense parts load as a qwen35 GGUF holds them (`model::hf`'s names and transforms: `1 + w`
//! norms, `ssm_a = −exp(A_log)`, tiled value heads, …). The experts, which `save_pretrained` writes
//! one tensor per expert, are stacked into llama.cpp's `ffn_{gate,up,down}_exps`; the router is
//! `ffn_gate_inp`, the shared expert `ffn_*_shexp` and its gate `ffn_gate_inp_shexp` (`[1, H]`).

use super::Values;
use super::{Builder, FamilyError, Fields, Source};
use crate::hf::names::{Role, classify};
use crate::spec::{AttentionSpec, Constructs, DeltaNetSpec, Experts, Mixer, ModelSpec};
use formats::checkpoint::Checkpoint;
use formats::names::{self, layer as n};
use ir::RopeStyle;

/// Reads a `Qwen3_5MoeTextConfig`. Class defaults fill what is absent: `rms_norm_eps` 1e-6,
/// `tie_word_embeddings` false, attention on every `full_attention_interval`-th layer (4) without
/// `layer_types`, RoPE θ 1e4 on `partial_rotary_factor` 0.25 of each head. The FFN's
/// `intermediate` is the experts' width (no layer has a dense FFN).
pub fn spec(c: &Fields, name: &str) -> Result<ModelSpec, FamilyError> {
    c.expect_str("hidden_act", "silu", "silu")?;
    if c.bool_or("attention_bias", false)? {
        return Err(FamilyError::Config { field: "attention_bias".into(), why: "true is not written".into() });
    }
    let count = c.size("num_hidden_layers")?;
    let layers = match c.strings_opt("layer_types")? {
        Some(types) => types
            .iter()
            .enumerate()
            .map(|(i, t)| match *t {
                "linear_attention" => Ok(Mixer::DeltaNet),
                "full_attention" => Ok(Mixer::Attention),
                other => Err(FamilyError::Config {
                    field: format!("layer_types[{i}]"),
                    why: format!("\"{other}\" is neither linear_attention nor full_attention"),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => ModelSpec::every_nth_attention(count, c.size_opt("full_attention_interval")?.unwrap_or(4)),
    };
    let rope = c.get("rope_parameters").map(|v| Fields::of(v, "rope_parameters.")).transpose()?;
    if let Some(p) = rope {
        p.expect_str("rope_type", "default", "default")?;
    }
    let number = |key: &str, default: f64| -> Result<f64, FamilyError> {
        match rope.map(|p| p.number_opt(key)).transpose()?.flatten() {
            Some(x) => Ok(x),
            None => Ok(c.number_opt(key)?.unwrap_or(default)),
        }
    };
    let head_dim = c.size("head_dim")?;
    let width = c.size("moe_intermediate_size")?;
    let mut experts = Experts::new(c.size("num_experts")?, c.size("num_experts_per_tok")?, width);
    experts.shared_intermediate = c.size_opt("shared_expert_intermediate_size")?.filter(|&s| s > 0);
    Ok(ModelSpec {
        name: name.to_string(),
        hidden: c.size("hidden_size")?,
        intermediate: width,
        vocab: c.size("vocab_size")?,
        layers,
        rms_eps: c.number_opt("rms_norm_eps")?.unwrap_or(1e-6),
        tied_embeddings: c.bool_or("tie_word_embeddings", false)?,
        attention: AttentionSpec {
            heads: c.size("num_attention_heads")?,
            kv_heads: c.size("num_key_value_heads")?,
            head_dim,
            rotary_dims: (head_dim as f64 * number("partial_rotary_factor", 0.25)?) as usize,
            rope_theta: number("rope_theta", 1e4)?,
            rope_style: RopeStyle::Neox,
            output_gate: true,
            qk_norm: true,
        },
        delta_net: DeltaNetSpec {
            key_heads: c.size("linear_num_key_heads")?,
            value_heads: c.size("linear_num_value_heads")?,
            key_dim: c.size("linear_key_head_dim")?,
            value_dim: c.size("linear_value_head_dim")?,
            conv_kernel: c.size("linear_conv_kernel_dim")?,
        },
        constructs: Constructs { experts: Some(experts), ..Constructs::default() },
    })
}

/// The canonical checkpoint: the experts stacked, everything else as the qwen35 loader reads it.
pub fn checkpoint(spec: &ModelSpec, source: &mut Source) -> Result<Checkpoint, FamilyError> {
    source.skip("mtp.");
    source.skip("model.visual.");
    let mut b = Builder::new(spec, source);
    for l in 0..spec.layers.len() {
        let hf = |what: &str| format!("layers.{l}.mlp.{what}");
        let gg = |what: &str| names::blk(l, what);
        b.copy(&gg(n::FFN_GATE_INP), &hf("gate.weight"))?;
        for (from, to) in
            [("gate_proj", n::FFN_GATE_EXPS), ("up_proj", n::FFN_UP_EXPS), ("down_proj", n::FFN_DOWN_EXPS)]
        {
            b.stack(&gg(to), |e| hf(&format!("experts.{e}.{from}.weight")))?;
        }
        if b.wants(&gg(n::FFN_GATE_SHEXP)) {
            b.copy(&gg(n::FFN_GATE_SHEXP), &hf("shared_expert.gate_proj.weight"))?;
            b.copy(&gg(n::FFN_UP_SHEXP), &hf("shared_expert.up_proj.weight"))?;
            b.copy(&gg(n::FFN_DOWN_SHEXP), &hf("shared_expert.down_proj.weight"))?;
            b.copy(&gg(n::FFN_GATE_INP_SHEXP), &hf("shared_expert_gate.weight"))?;
        }
    }
    // The dense Qwen3.5 parts, through the qwen35 loader's names and value rules.
    for hf in b.source().names() {
        let Role::Text { gguf, rule } = classify(&hf) else { continue };
        if !b.wants(&gguf) {
            continue;
        }
        let shape = b.shape(&gguf);
        let t = b.source().take_full(&hf, &rule.source_shape(&shape), &gguf)?;
        let data = crate::hf::transform::apply(rule, t.data, &shape, &spec.delta_net);
        b.put(&gguf, Values { shape, data });
    }
    Ok(b.finish())
}
