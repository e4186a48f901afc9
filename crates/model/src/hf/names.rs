//! Hugging Face Qwen3.5 tensor names and the GGUF names they map to, as llama.cpp's converter
//! (`convert_hf_to_gguf.py`) maps them.

use super::transform::Rule;
use formats::convention::{Convention, Equation, tiling_moves};
use formats::names::{self, layer as n};

/// Per-layer tensors: HF name after `layers.N.`, GGUF name after `blk.N.`, and the value rule.
const LAYER: [(&str, &str, Rule); 20] = [
    ("input_layernorm.weight", n::ATTN_NORM, Rule::Norm),
    ("post_attention_layernorm.weight", n::FFN_NORM, Rule::Norm),
    ("mlp.gate_proj.weight", n::FFN_GATE, Rule::Copy),
    ("mlp.up_proj.weight", n::FFN_UP, Rule::Copy),
    ("mlp.down_proj.weight", n::FFN_DOWN, Rule::Copy),
    ("linear_attn.in_proj_qkv.weight", n::ATTN_QKV, Rule::QkvValueRows),
    ("linear_attn.in_proj_z.weight", n::ATTN_GATE, Rule::ValueRows),
    ("linear_attn.in_proj_b.weight", n::SSM_BETA, Rule::ValueRows),
    ("linear_attn.in_proj_a.weight", n::SSM_ALPHA, Rule::ValueRows),
    ("linear_attn.conv1d.weight", n::SSM_CONV1D, Rule::Conv),
    ("linear_attn.A_log", n::SSM_A, Rule::Decay),
    ("linear_attn.dt_bias", n::SSM_DT_BIAS, Rule::ValueRows),
    ("linear_attn.norm.weight", n::SSM_NORM, Rule::Copy),
    ("linear_attn.out_proj.weight", n::SSM_OUT, Rule::ValueColumns),
    ("self_attn.q_proj.weight", n::ATTN_Q, Rule::Copy),
    ("self_attn.k_proj.weight", n::ATTN_K, Rule::Copy),
    ("self_attn.v_proj.weight", n::ATTN_V, Rule::Copy),
    ("self_attn.o_proj.weight", n::ATTN_OUTPUT, Rule::Copy),
    ("self_attn.q_norm.weight", n::ATTN_Q_NORM, Rule::Norm),
    ("self_attn.k_norm.weight", n::ATTN_K_NORM, Rule::Norm),
];

/// Whole-model tensors under the text model's prefix.
const TOP: [(&str, &str, Rule); 2] =
    [("embed_tokens.weight", names::TOKEN_EMBD, Rule::Copy), ("norm.weight", names::OUTPUT_NORM, Rule::Norm)];

/// The head, at the checkpoint's top level.
const HEAD: &str = "lm_head.weight";

/// The prefixes of the text model: `Qwen3_5ForConditionalGeneration`'s, then `Qwen3_5ForCausalLM`'s.
const PREFIXES: [&str; 2] = ["model.language_model.", "model."];

/// Parts of a checkpoint that are not the text model: the vision tower and multi-token prediction.
const OTHER_MODELS: [&str; 2] = ["visual.", "mtp."];

/// What an HF tensor name is to the loader.
#[derive(Debug, PartialEq)]
pub enum Role {
    /// A tensor of the text model, its GGUF name and its value rule.
    Text { gguf: String, rule: Rule },
    /// A tensor outside the text model (vision tower, multi-token prediction, …), not read.
    Skipped,
    /// A name under the text model's prefix that no Qwen3.5 dense text model has.
    Unknown,
}

/// What the HF tensor `name` is.
pub(crate) fn classify(name: &str) -> Role {
    if name == HEAD {
        return Role::Text { gguf: names::OUTPUT.into(), rule: Rule::Copy };
    }
    let Some(inner) = PREFIXES.iter().find_map(|p| name.strip_prefix(p)) else {
        return if name.starts_with("lm_head.") { Role::Unknown } else { Role::Skipped };
    };
    if OTHER_MODELS.iter().any(|p| inner.starts_with(p)) {
        return Role::Skipped;
    }
    if let Some(&(_, gguf, rule)) = TOP.iter().find(|(hf, ..)| *hf == inner) {
        return Role::Text { gguf: gguf.into(), rule };
    }
    let Some((index, rest)) = inner.strip_prefix("layers.").and_then(|r| r.split_once('.')) else {
        return Role::Unknown;
    };
    let layer = match index.bytes().all(|b| b.is_ascii_digit()) {
        true => index.parse::<usize>().ok(),
        false => None,
    };
    match (layer, LAYER.iter().find(|(hf, ..)| *hf == rest)) {
        (Some(l), Some(&(_, gguf, rule))) => Role::Text { gguf: names::blk(l, gguf), rule },
        _ => Role::Unknown,
    }
}

/// The HF name (under `model.`) that GGUF tensor `gguf` comes from, for error messages.
pub fn hf_name(gguf: &str) -> Option<String> {
    if gguf == names::OUTPUT {
        return Some(HEAD.into());
    }
    if let Some((hf, ..)) = TOP.iter().find(|(_, g, _)| *g == gguf) {
        return Some(format!("model.{hf}"));
    }
    let (index, rest) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let (hf, ..) = LAYER.iter().find(|(_, g, _)| *g == rest)?;
    Some(format!("model.layers.{index}.{hf}"))
}

/// The checkpoint convention of `spec`: for every tensor of its layout, the HF tensor it is
/// converted from (under `model.`, as `Qwen3_5ForCausalLM` and its export name them) and the rule
/// of this table that converts it. A tied head's `lm_head.weight` is the embedding.
pub fn convention(spec: &crate::spec::ModelSpec) -> Result<Convention, String> {
    let mut equations = vec![];
    for t in crate::layout::layout(spec) {
        let source = hf_name(&t.name).ok_or_else(|| format!("{}: no HF tensor converts to it", t.name))?;
        let Role::Text { rule, .. } = classify(&source) else {
            return Err(format!("{}: {source} is not a tensor of the text model", t.name));
        };
        equations.push(Equation { gguf: t.name, source, rule });
    }
    let aliases = match spec.tied_embeddings {
        true => vec![(HEAD.to_string(), format!("model.{}", TOP[0].0))],
        false => vec![],
    };
    Ok(Convention {
        equations,
        tiling_moves: tiling_moves(spec.delta_net.key_heads, spec.delta_net.value_heads),
        delta_heads: [
            spec.delta_net.key_heads,
            spec.delta_net.value_heads,
            spec.delta_net.key_dim,
            spec.delta_net.value_dim,
        ],
        aliases,
        rope_theta: spec.attention.rope_theta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        for (hf, gguf) in [
            ("model.layers.3.linear_attn.A_log", "blk.3.ssm_a"),
            ("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("lm_head.weight", "output.weight"),
        ] {
            assert!(matches!(classify(hf), Role::Text { gguf: g, .. } if g == gguf), "{hf}");
            assert_eq!(hf_name(gguf).as_deref(), Some(hf));
        }
    }

    #[test]
    fn other_models_are_skipped_and_strangers_are_unknown() {
        for name in ["mtp.layers.0.mlp.up_proj.weight", "model.visual.blocks.0.attn.qkv.weight", "visual.x"] {
            assert_eq!(classify(name), Role::Skipped, "{name}");
        }
        for name in ["model.layers.0.self_attn.q_proj.bias", "model.layers.+1.input_layernorm.weight", "lm_head.bias"] {
            assert_eq!(classify(name), Role::Unknown, "{name}");
        }
    }
}
