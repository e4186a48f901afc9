//! Gemma 3 text (`gemma3_text`, `Gemma3ForCausalLM`), as transformers' `modeling_gemma3` computes it:
//! the embedding times √hidden (in the weights' dtype), zero-centred `(1 + w)` RMSNorms, sandwich
//! norms around attention and the FFN, a GeGLU FFN (`gelu_pytorch_tanh`), q/k norms, scores scaled by
//! `query_pre_attn_scalar^−½`, and RoPE and a sliding window per layer type.
//!
//! Names: llama.cpp's, except that Gemma's `post_attention_layernorm` (after the attention) becomes
//! `post_mixer_norm` and its `pre_feedforward_layernorm` becomes `post_attention_norm`, the name the
//! canonical vocabulary gives the pre-FFN norm of every family.

use super::{Builder, FamilyError, Fields, Source, no_delta_net, rope_of, sliding_layers};
use crate::spec::{AttentionSpec, Constructs, Ffn, LayerRope, Mixer, ModelSpec, PostNorm, SlidingWindow};
use formats::checkpoint::Checkpoint;
use formats::names::{self, layer as n};
use ir::RopeStyle;

/// Reads a `Gemma3TextConfig`. Class defaults fill what is absent: `rms_norm_eps` 1e-6,
/// `tie_word_embeddings` true, `sliding_window` 4096, layer `i` sliding unless `(i + 1) %
/// sliding_window_pattern == 0` (6), θ 1e6 for full and 1e4 for sliding layers,
/// `query_pre_attn_scalar` 256. Logit soft-capping is not written, so it must be null.
/// The embedding scale is √hidden in the config's `dtype`.
pub fn spec(c: &Fields, name: &str) -> Result<ModelSpec, FamilyError> {
    let hidden = c.size("hidden_size")?;
    let layers = c.size("num_hidden_layers")?;
    let head_dim = c.size("head_dim")?;
    c.expect_str("hidden_activation", "gelu_pytorch_tanh", "gelu_pytorch_tanh")?;
    c.expect_absent("final_logit_softcapping")?;
    c.expect_absent("attn_logit_softcapping")?;
    if c.bool_or("attention_bias", false)? {
        return Err(FamilyError::Config { field: "attention_bias".into(), why: "true is not written".into() });
    }
    let pattern = c.size_opt("sliding_window_pattern")?.or(c.size_opt("_sliding_window_pattern")?).unwrap_or(6);
    let sliding = sliding_layers(c, layers, |i| pattern == 0 || (i + 1) % pattern != 0)?;
    let params = c.get("rope_parameters").map(|v| Fields::of(v, "rope_parameters.")).transpose()?;
    let by_type = |t: &'static str| -> Result<Option<Fields>, FamilyError> {
        match params.and_then(|p| p.get(t)) {
            Some(v) => Fields::of(v, "rope_parameters.").map(Some),
            None => Ok(None),
        }
    };
    let (full_theta, full_scaling) = match by_type("full_attention")? {
        Some(p) => rope_of(Some(p), 1e6)?,
        None => rope_of(params, c.number_opt("rope_theta")?.unwrap_or(1e6))?,
    };
    let (local_theta, local_scaling) = match by_type("sliding_attention")? {
        Some(p) => rope_of(Some(p), 1e4)?,
        None => (c.number_opt("rope_local_base_freq")?.unwrap_or(1e4), None),
    };
    let scalar = c.number_opt("query_pre_attn_scalar")?.unwrap_or(256.0);
    Ok(ModelSpec {
        name: name.to_string(),
        hidden,
        intermediate: c.size("intermediate_size")?,
        vocab: c.size("vocab_size")?,
        layers: vec![Mixer::Attention; layers],
        rms_eps: c.number_opt("rms_norm_eps")?.unwrap_or(1e-6),
        tied_embeddings: c.bool_or("tie_word_embeddings", true)?,
        attention: AttentionSpec {
            heads: c.size("num_attention_heads")?,
            kv_heads: c.size("num_key_value_heads")?,
            head_dim,
            rotary_dims: head_dim,
            rope_theta: full_theta,
            rope_style: RopeStyle::Neox,
            output_gate: false,
            qk_norm: true,
        },
        delta_net: no_delta_net(),
        constructs: Constructs {
            post_norm: PostNorm::Sandwich,
            ffn: Ffn::GeGlu,
            embedding_scale: Some(embedding_scale(hidden, c.str_opt("dtype")?.or(c.str_opt("torch_dtype")?))),
            attention_scale: Some(1.0 / scalar.sqrt()),
            rope_scaling: full_scaling,
            sliding_window: match sliding.is_empty() {
                true => None,
                false => Some(SlidingWindow { window: c.size_opt("sliding_window")?.unwrap_or(4096), layers: sliding }),
            },
            sliding_rope: Some(LayerRope { theta: local_theta, scaling: local_scaling }),
            ..Constructs::default()
        },
    })
}

/// √hidden as transformers multiplies the embedding by it: kept in an f32 buffer and cast to the
/// weights' dtype (`GemmaTextScaledWordEmbedding`), which by default is the config's `dtype`; in
/// bf16 √3072 is 55.5, not 55.43.
fn embedding_scale(hidden: usize, dtype: Option<&str>) -> f64 {
    let scale = (hidden as f64).sqrt() as f32;
    match dtype {
        Some("bfloat16") => f64::from(half::bf16::from_f32(scale)),
        Some("float16") => f64::from(half::f16::from_f32(scale)),
        _ => f64::from(scale),
    }
}

/// The canonical checkpoint: every norm `1 + w`, matrices as they are.
pub fn checkpoint(spec: &ModelSpec, source: &mut Source) -> Result<Checkpoint, FamilyError> {
    let mut b = Builder::new(spec, source);
    b.copy(names::TOKEN_EMBD, "embed_tokens.weight")?;
    b.norm_plus_one(names::OUTPUT_NORM, "norm.weight")?;
    if !spec.tied_embeddings {
        let shape = b.shape(names::OUTPUT);
        let t = b.source().take_full("lm_head.weight", &shape, names::OUTPUT)?;
        b.put(names::OUTPUT, t);
    }
    for l in 0..spec.layers.len() {
        let hf = |what: &str| format!("layers.{l}.{what}");
        let gg = |what: &str| names::blk(l, what);
        for (from, to) in [
            ("input_layernorm.weight", n::ATTN_NORM),
            ("post_attention_layernorm.weight", n::POST_MIXER_NORM),
            ("pre_feedforward_layernorm.weight", n::FFN_NORM),
            ("post_feedforward_layernorm.weight", n::POST_FFN_NORM),
            ("self_attn.q_norm.weight", n::ATTN_Q_NORM),
            ("self_attn.k_norm.weight", n::ATTN_K_NORM),
        ] {
            b.norm_plus_one(&gg(to), &hf(from))?;
        }
        for (from, to) in [
            ("self_attn.q_proj.weight", n::ATTN_Q),
            ("self_attn.k_proj.weight", n::ATTN_K),
            ("self_attn.v_proj.weight", n::ATTN_V),
            ("self_attn.o_proj.weight", n::ATTN_OUTPUT),
            ("mlp.gate_proj.weight", n::FFN_GATE),
            ("mlp.up_proj.weight", n::FFN_UP),
            ("mlp.down_proj.weight", n::FFN_DOWN),
        ] {
            b.copy(&gg(to), &hf(from))?;
        }
    }
    Ok(b.finish())
}
