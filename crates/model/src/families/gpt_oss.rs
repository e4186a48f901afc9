//! gpt-oss (`gpt_oss`, `GptOssForCausalLM`), as transformers' `modeling_gpt_oss` computes it:
//! plain-w RMSNorms, attention with q/k/v/o biases, a learned sink logit per head, YaRN RoPE and a
//! sliding window on alternate layers; in every layer a mixture of experts whose router (with a
//! bias) takes the top k of its logits and a softmax over them, and whose experts are clamped
//! SwiGLUs with biases, `(up + 1) · gate · sigmoid(α · gate)`.
//!
//! Names are llama.cpp's (`attn_sinks`, `ffn_gate_inp`, `ffn_{gate,up,down}_exps` with their
//! `.bias`). transformers keeps each expert's gate and up projections as one input-major
//! `gate_up_proj [E, H, 2I]` whose columns interleave gate and up (`[..., ::2]` is the gate); they
//! are split and transposed to `[E, I, H]`, and `down_proj [E, I, H]` is transposed to `[E, H, I]`,
//! as llama.cpp's converter does.

use super::Values;
use super::{Builder, FamilyError, Fields, Source, no_delta_net, rope_of, sliding_layers};
use crate::spec::{AttentionSpec, Constructs, Experts, Ffn, Mixer, ModelSpec, Routing, SlidingWindow};
use formats::checkpoint::Checkpoint;
use formats::names::{self, layer as n};
use ir::RopeStyle;

/// Reads a `GptOssConfig`. Class defaults fill what is absent: `rms_norm_eps` 1e-5,
/// `tie_word_embeddings` false, `sliding_window` 128 on layer `i` when `(i + 1) % 2 != 0`,
/// `attention_bias` true, `swiglu_alpha` 1.702, `swiglu_limit` 7, YaRN RoPE from `rope_parameters`
/// (`truncate` true when absent, as `_compute_yarn_parameters` reads it; v5 writes false).
pub fn spec(c: &Fields, name: &str) -> Result<ModelSpec, FamilyError> {
    let layers = c.size("num_hidden_layers")?;
    let head_dim = c.size("head_dim")?;
    let intermediate = c.size("intermediate_size")?;
    let sliding = sliding_layers(c, layers, |i| (i + 1) % 2 != 0)?;
    let params = c.get("rope_parameters").map(|v| Fields::of(v, "rope_parameters.")).transpose()?;
    let (theta, scaling) = rope_of(params, c.number_opt("rope_theta")?.unwrap_or(150_000.0))?;
    let mut experts = Experts::new(c.size("num_local_experts")?, c.size("num_experts_per_tok")?, intermediate);
    experts.routing = Routing::TopKSoftmax;
    experts.router_bias = true;
    experts.expert_bias = true;
    let bias = c.bool_or("attention_bias", true)?;
    Ok(ModelSpec {
        name: name.to_string(),
        hidden: c.size("hidden_size")?,
        intermediate,
        vocab: c.size("vocab_size")?,
        layers: vec![Mixer::Attention; layers],
        rms_eps: c.number_opt("rms_norm_eps")?.unwrap_or(1e-5),
        tied_embeddings: c.bool_or("tie_word_embeddings", false)?,
        attention: AttentionSpec {
            heads: c.size("num_attention_heads")?,
            kv_heads: c.size("num_key_value_heads")?,
            head_dim,
            rotary_dims: head_dim,
            rope_theta: theta,
            rope_style: RopeStyle::Neox,
            output_gate: false,
            qk_norm: false,
        },
        delta_net: no_delta_net(),
        constructs: Constructs {
            ffn: Ffn::ClampedSwiGlu {
                alpha: c.number_opt("swiglu_alpha")?.unwrap_or(1.702),
                limit: c.number_opt("swiglu_limit")?.unwrap_or(7.0),
            },
            experts: Some(experts),
            attention_sinks: true,
            sliding_window: match sliding.is_empty() {
                true => None,
                false => Some(SlidingWindow { window: c.size_opt("sliding_window")?.unwrap_or(128), layers: sliding }),
            },
            qkv_bias: bias,
            output_bias: bias,
            rope_scaling: scaling,
            ..Constructs::default()
        },
    })
}

/// The canonical checkpoint: norms as they are (plain w), the experts' interleaved gate/up split
/// and every expert matrix transposed to `[out, in]`.
pub fn checkpoint(spec: &ModelSpec, source: &mut Source) -> Result<Checkpoint, FamilyError> {
    let mut b = Builder::new(spec, source);
    b.copy(names::TOKEN_EMBD, "embed_tokens.weight")?;
    b.copy(names::OUTPUT_NORM, "norm.weight")?;
    if !spec.tied_embeddings {
        let shape = b.shape(names::OUTPUT);
        let t = b.source().take_full("lm_head.weight", &shape, names::OUTPUT)?;
        b.put(names::OUTPUT, t);
    }
    let (h, i) = (spec.hidden, spec.intermediate);
    let count = spec.constructs.experts.as_ref().map_or(0, |e| e.count);
    for l in 0..spec.layers.len() {
        let hf = |what: &str| format!("layers.{l}.{what}");
        let gg = |what: &str| names::blk(l, what);
        let mut copies = vec![
            ("input_layernorm.weight", n::ATTN_NORM),
            ("post_attention_layernorm.weight", n::FFN_NORM),
            ("self_attn.q_proj.weight", n::ATTN_Q),
            ("self_attn.k_proj.weight", n::ATTN_K),
            ("self_attn.v_proj.weight", n::ATTN_V),
            ("self_attn.o_proj.weight", n::ATTN_OUTPUT),
            ("self_attn.sinks", n::ATTN_SINKS),
            ("mlp.router.weight", n::FFN_GATE_INP),
            ("mlp.router.bias", n::FFN_GATE_INP_BIAS),
        ];
        if spec.constructs.qkv_bias {
            copies.extend([
                ("self_attn.q_proj.bias", n::ATTN_Q_BIAS),
                ("self_attn.k_proj.bias", n::ATTN_K_BIAS),
                ("self_attn.v_proj.bias", n::ATTN_V_BIAS),
            ]);
        }
        if spec.constructs.output_bias {
            copies.push(("self_attn.o_proj.bias", n::ATTN_OUTPUT_BIAS));
        }
        for (from, to) in copies {
            b.copy(&gg(to), &hf(from))?;
        }
        let gate_up = b.source().take(&hf("mlp.experts.gate_up_proj"), &[count, h, 2 * i], &gg(n::FFN_GATE_EXPS))?;
        let gate_up_bias =
            b.source().take(&hf("mlp.experts.gate_up_proj_bias"), &[count, 2 * i], &gg(n::FFN_GATE_EXPS_BIAS))?;
        let down = b.source().take(&hf("mlp.experts.down_proj"), &[count, i, h], &gg(n::FFN_DOWN_EXPS))?;
        let down_bias = b.source().take(&hf("mlp.experts.down_proj_bias"), &[count, h], &gg(n::FFN_DOWN_EXPS_BIAS))?;
        for (half, weight, bias) in
            [(0, n::FFN_GATE_EXPS, n::FFN_GATE_EXPS_BIAS), (1, n::FFN_UP_EXPS, n::FFN_UP_EXPS_BIAS)]
        {
            // Column 2j + half of expert e's [H, 2I] block is row j of its [I, H] matrix.
            let w = (0..count * i * h).map(|x| {
                let (e, j, k) = (x / (i * h), x / h % i, x % h);
                gate_up.data[e * h * 2 * i + k * 2 * i + 2 * j + half]
            });
            b.put(&gg(weight), Values { shape: vec![count, i, h], data: w.collect() });
            let bias_data = (0..count * i).map(|x| gate_up_bias.data[x / i * 2 * i + 2 * (x % i) + half]);
            b.put(&gg(bias), Values { shape: vec![count, i], data: bias_data.collect() });
        }
        // Expert e's [I, H] down_proj, transposed to [H, I].
        let d = (0..count * h * i).map(|x| {
            let (e, r, k) = (x / (h * i), x / i % h, x % i);
            down.data[e * i * h + k * h + r]
        });
        b.put(&gg(n::FFN_DOWN_EXPS), Values { shape: vec![count, h, i], data: d.collect() });
        b.put(&gg(n::FFN_DOWN_EXPS_BIAS), down_bias);
    }
    Ok(b.finish())
}
