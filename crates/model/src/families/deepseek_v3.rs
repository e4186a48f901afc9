//! DeepSeek-V3 (`deepseek_v3`, `DeepseekV3ForCausalLM`; Kimi-K2 too), as transformers'
//! `modeling_deepseek_v3` computes it: plain-w RMSNorms, latent attention in every layer, dense
//! SwiGLU FFNs in the first `first_k_dense_replace` layers and a mixture of experts in the others,
//! whose router chooses by sigmoid scores plus a correction bias within the best groups and weighs
//! by the unbiased scores, renormalised and scaled by `routed_scaling_factor`; the shared experts
//! are added ungated.
//!
//! Names are llama.cpp's (`attn_q_a`, `attn_q_a_norm`, `attn_q_b`, `attn_kv_a_mqa`,
//! `attn_kv_a_norm`, `attn_kv_b`, `exp_probs_b.bias`, `ffn_*_exps`, `ffn_*_shexp`), the
//! per-expert tensors `save_pretrained` writes stacked. Weights keep transformers' order:
//! `rope_interleave` is a property of the RoPE op (interleaved pairs), not a permutation of the
//! weights.

use super::{Builder, FamilyError, Fields, Source, no_delta_net, rope_of};
use crate::spec::{AttentionSpec, Constructs, Experts, LatentAttention, Mixer, ModelSpec, Routing};
use formats::checkpoint::Checkpoint;
use formats::names::{self, layer as n};
use ir::RopeStyle;

/// Reads a `DeepseekV3Config`. Class defaults fill what is absent: `rms_norm_eps` 1e-6,
/// `tie_word_embeddings` false, `rope_interleave` true, `norm_topk_prob` true,
/// `routed_scaling_factor` 1 when absent, `n_group` 8, `topk_group` 4. With a scaled RoPE and
/// `mscale_all_dim`, the score scale is multiplied by `(0.1·mscale_all_dim·ln(factor) + 1)²`
/// (`DeepseekV3Attention.__init__`).
pub fn spec(c: &Fields, name: &str) -> Result<ModelSpec, FamilyError> {
    c.expect_str("hidden_act", "silu", "silu")?;
    c.expect_str("topk_method", "noaux_tc", "noaux_tc")?;
    if c.bool_or("attention_bias", false)? {
        return Err(FamilyError::Config { field: "attention_bias".into(), why: "true is not written".into() });
    }
    let layers = c.size("num_hidden_layers")?;
    let heads = c.size("num_attention_heads")?;
    let (nope, rope) = (c.size("qk_nope_head_dim")?, c.size("qk_rope_head_dim")?);
    let params = c.get("rope_parameters").map(|v| Fields::of(v, "rope_parameters.")).transpose()?;
    let (theta, scaling) = rope_of(params, c.number_opt("rope_theta")?.unwrap_or(10_000.0))?;
    let mut scale = 1.0 / ((nope + rope) as f64).sqrt();
    if let (Some(_), Some(p)) = (&scaling, params)
        && let Some(all) = p.number_opt("mscale_all_dim")?.filter(|m| *m != 0.0)
    {
        let factor = p.number("factor")?;
        let mscale = if factor <= 1.0 { 1.0 } else { 0.1 * all * factor.ln() + 1.0 };
        scale *= mscale * mscale;
    }
    let moe_width = c.size("moe_intermediate_size")?;
    let mut experts = Experts::new(c.size("n_routed_experts")?, c.size("num_experts_per_tok")?, moe_width);
    experts.renormalize = c.bool_or("norm_topk_prob", true)?;
    experts.routing = Routing::SigmoidGroupLimited {
        groups: c.size_opt("n_group")?.unwrap_or(8),
        keep_groups: c.size_opt("topk_group")?.unwrap_or(4),
    };
    experts.shared_intermediate = c.size_opt("n_shared_experts")?.filter(|&s| s > 0).map(|s| s * moe_width);
    experts.shared_gate = false;
    experts.weight_scale = c.number_opt("routed_scaling_factor")?.filter(|&f| f != 1.0);
    experts.dense_layers = (0..c.size_opt("first_k_dense_replace")?.unwrap_or(0).min(layers)).collect();
    Ok(ModelSpec {
        name: name.to_string(),
        hidden: c.size("hidden_size")?,
        intermediate: c.size("intermediate_size")?,
        vocab: c.size("vocab_size")?,
        layers: vec![Mixer::Attention; layers],
        rms_eps: c.number_opt("rms_norm_eps")?.unwrap_or(1e-6),
        tied_embeddings: c.bool_or("tie_word_embeddings", false)?,
        attention: AttentionSpec {
            heads,
            kv_heads: heads,
            head_dim: nope + rope,
            rotary_dims: rope,
            rope_theta: theta,
            rope_style: if c.bool_or("rope_interleave", true)? { RopeStyle::Interleaved } else { RopeStyle::Neox },
            output_gate: false,
            qk_norm: false,
        },
        delta_net: no_delta_net(),
        constructs: Constructs {
            experts: Some(experts),
            latent_attention: Some(LatentAttention {
                q_rank: c.size_opt("q_lora_rank")?,
                kv_rank: c.size("kv_lora_rank")?,
                nope_dim: nope,
                rope_dim: rope,
                value_dim: c.size("v_head_dim")?,
            }),
            attention_scale: Some(scale),
            rope_scaling: scaling,
            ..Constructs::default()
        },
    })
}

/// The canonical checkpoint: norms as they are (plain w), the experts stacked.
pub fn checkpoint(spec: &ModelSpec, source: &mut Source) -> Result<Checkpoint, FamilyError> {
    let mut b = Builder::new(spec, source);
    b.copy(names::TOKEN_EMBD, "embed_tokens.weight")?;
    b.copy(names::OUTPUT_NORM, "norm.weight")?;
    if !spec.tied_embeddings {
        let shape = b.shape(names::OUTPUT);
        let t = b.source().take_full("lm_head.weight", &shape, names::OUTPUT)?;
        b.put(names::OUTPUT, t);
    }
    let moe = |l: usize| spec.constructs.experts.as_ref().is_some_and(|e| e.in_layer(l));
    for l in 0..spec.layers.len() {
        let hf = |what: &str| format!("layers.{l}.{what}");
        let gg = |what: &str| names::blk(l, what);
        let mut copies = vec![
            ("input_layernorm.weight", n::ATTN_NORM),
            ("post_attention_layernorm.weight", n::FFN_NORM),
            ("self_attn.kv_a_proj_with_mqa.weight", n::ATTN_KV_A_MQA),
            ("self_attn.kv_a_layernorm.weight", n::ATTN_KV_A_NORM),
            ("self_attn.kv_b_proj.weight", n::ATTN_KV_B),
            ("self_attn.o_proj.weight", n::ATTN_OUTPUT),
        ];
        if b.wants(&gg(n::ATTN_Q_A)) {
            copies.extend([
                ("self_attn.q_a_proj.weight", n::ATTN_Q_A),
                ("self_attn.q_a_layernorm.weight", n::ATTN_Q_A_NORM),
                ("self_attn.q_b_proj.weight", n::ATTN_Q_B),
            ]);
        } else {
            copies.push(("self_attn.q_proj.weight", n::ATTN_Q));
        }
        if moe(l) {
            copies.extend([
                ("mlp.gate.weight", n::FFN_GATE_INP),
                ("mlp.gate.e_score_correction_bias", n::FFN_EXP_PROBS_B),
            ]);
            if b.wants(&gg(n::FFN_GATE_SHEXP)) {
                copies.extend([
                    ("mlp.shared_experts.gate_proj.weight", n::FFN_GATE_SHEXP),
                    ("mlp.shared_experts.up_proj.weight", n::FFN_UP_SHEXP),
                    ("mlp.shared_experts.down_proj.weight", n::FFN_DOWN_SHEXP),
                ]);
            }
        } else {
            copies.extend([
                ("mlp.gate_proj.weight", n::FFN_GATE),
                ("mlp.up_proj.weight", n::FFN_UP),
                ("mlp.down_proj.weight", n::FFN_DOWN),
            ]);
        }
        for (from, to) in copies {
            b.copy(&gg(to), &hf(from))?;
        }
        if moe(l) {
            for (from, to) in
                [("gate_proj", n::FFN_GATE_EXPS), ("up_proj", n::FFN_UP_EXPS), ("down_proj", n::FFN_DOWN_EXPS)]
            {
                b.stack(&gg(to), |e| hf(&format!("mlp.experts.{e}.{from}.weight")))?;
            }
        }
    }
    Ok(b.finish())
}
