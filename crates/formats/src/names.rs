//! Checkpoint tensor names, in GGUF naming: the one vocabulary bindings, checkpoints and the
//! engine's program share.

/// The embedding table, `[V, H]`.
pub const TOKEN_EMBD: &str = "token_embd.weight";
/// The final norm's weight, `[H]`.
pub const OUTPUT_NORM: &str = "output_norm.weight";
/// The head, `[V, H]` (absent when the embeddings are tied).
pub const OUTPUT: &str = "output.weight";

/// The name of tensor `what` of layer `layer`: `blk.{layer}.{what}`.
pub fn blk(layer: usize, what: &str) -> String {
    format!("blk.{layer}.{what}")
}

/// The per-layer tensors, by what they are (`blk.N.` + this).
pub mod layer {
    pub const ATTN_NORM: &str = "attn_norm.weight";
    /// The pre-FFN norm (transformers' `post_attention_layernorm`).
    pub const FFN_NORM: &str = "post_attention_norm.weight";
    pub const FFN_GATE: &str = "ffn_gate.weight";
    pub const FFN_UP: &str = "ffn_up.weight";
    pub const FFN_DOWN: &str = "ffn_down.weight";
    // Gated-DeltaNet.
    pub const ATTN_QKV: &str = "attn_qkv.weight";
    pub const ATTN_GATE: &str = "attn_gate.weight";
    pub const SSM_BETA: &str = "ssm_beta.weight";
    pub const SSM_ALPHA: &str = "ssm_alpha.weight";
    pub const SSM_CONV1D: &str = "ssm_conv1d.weight";
    pub const SSM_A: &str = "ssm_a";
    pub const SSM_DT_BIAS: &str = "ssm_dt.bias";
    pub const SSM_NORM: &str = "ssm_norm.weight";
    pub const SSM_OUT: &str = "ssm_out.weight";
    // Attention.
    pub const ATTN_Q: &str = "attn_q.weight";
    pub const ATTN_K: &str = "attn_k.weight";
    pub const ATTN_V: &str = "attn_v.weight";
    pub const ATTN_OUTPUT: &str = "attn_output.weight";
    pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
    pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
    pub const ATTN_SINKS: &str = "attn_sinks.weight";
    pub const ATTN_Q_BIAS: &str = "attn_q.bias";
    pub const ATTN_K_BIAS: &str = "attn_k.bias";
    pub const ATTN_V_BIAS: &str = "attn_v.bias";
    pub const ATTN_OUTPUT_BIAS: &str = "attn_output.bias";
    // Latent attention (DeepSeek-V2/V3): the query's compression, its norm and decompression; the
    // keys' and values' compression (latent and shared rotary key), the latent's norm and its
    // decompression into per-head keys and values.
    pub const ATTN_Q_A: &str = "attn_q_a.weight";
    pub const ATTN_Q_A_NORM: &str = "attn_q_a_norm.weight";
    pub const ATTN_Q_B: &str = "attn_q_b.weight";
    pub const ATTN_KV_A_MQA: &str = "attn_kv_a_mqa.weight";
    pub const ATTN_KV_A_NORM: &str = "attn_kv_a_norm.weight";
    pub const ATTN_KV_B: &str = "attn_kv_b.weight";
    // Experts: the router (and its bias, and DeepSeek-V3's choice bias), the experts' stacked
    // `[E, out, in]` matrices and `[E, out]` biases, the shared expert and its gate.
    pub const FFN_GATE_INP: &str = "ffn_gate_inp.weight";
    pub const FFN_GATE_INP_BIAS: &str = "ffn_gate_inp.bias";
    pub const FFN_EXP_PROBS_B: &str = "exp_probs_b.bias";
    pub const FFN_GATE_EXPS: &str = "ffn_gate_exps.weight";
    pub const FFN_UP_EXPS: &str = "ffn_up_exps.weight";
    pub const FFN_DOWN_EXPS: &str = "ffn_down_exps.weight";
    pub const FFN_GATE_EXPS_BIAS: &str = "ffn_gate_exps.bias";
    pub const FFN_UP_EXPS_BIAS: &str = "ffn_up_exps.bias";
    pub const FFN_DOWN_EXPS_BIAS: &str = "ffn_down_exps.bias";
    pub const FFN_GATE_SHEXP: &str = "ffn_gate_shexp.weight";
    pub const FFN_UP_SHEXP: &str = "ffn_up_shexp.weight";
    pub const FFN_DOWN_SHEXP: &str = "ffn_down_shexp.weight";
    pub const FFN_GATE_INP_SHEXP: &str = "ffn_gate_inp_shexp.weight";
    // Norms after the mixer and the FFN (Gemma 2/3, OLMo 2). llama.cpp names Gemma's post-mixer norm
    // `post_attention_norm`, which this vocabulary already gives the pre-FFN norm (qwen35's name).
    pub const POST_MIXER_NORM: &str = "post_mixer_norm.weight";
    pub const POST_FFN_NORM: &str = "post_ffw_norm.weight";
}
