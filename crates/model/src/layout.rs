//! The checkpoint tensors a spec's decode step reads: names, shapes and how seeded random weights
//! fill them.

use super::names::{self, layer as n};
use super::spec::{Mixer, ModelSpec, PostNorm, Routing};

/// How seeded random weights fill a tensor: at O(1) scales, so that no norm weight is 1 and no gate
/// is trivial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// `U(−1, 1)·√(3/fan_in)`: unit-variance outputs for unit-variance inputs.
    Matrix { fan_in: usize },
    /// `1 + U(−0.5, 0.5)`: a norm's multiplier near, but not, 1.
    NormWeight,
    /// `−U(0.05, 1)`: `ssm_a = −exp(A_log)`, a decay rate.
    Decay,
    /// `U(−0.87, 0.87)` (σ 0.5): the decay bias `ssm_dt.bias`, and sink logits.
    Bias,
}

/// One tensor of a spec's checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

/// The tensors of `spec`'s checkpoint, in GGUF naming and shapes (outermost first).
pub fn layout(spec: &ModelSpec) -> Vec<TensorInfo> {
    let (h, v) = (spec.hidden, spec.vocab);
    let mut out = vec![];
    let mut put =
        |name: String, shape: &[usize], init: Init| out.push(TensorInfo { name, shape: shape.to_vec(), init });
    let mat = |rows: usize, cols: usize| ([rows, cols], Init::Matrix { fan_in: cols });
    let (s, i) = mat(v, h);
    put(names::TOKEN_EMBD.into(), &s, i);
    for (l, mixer) in spec.layers.iter().enumerate() {
        let mut m = |what: &str, shape: &[usize], init: Init| put(names::blk(l, what), shape, init);
        if spec.constructs.post_norm != PostNorm::PostOnly {
            m(n::ATTN_NORM, &[h], Init::NormWeight);
            m(n::FFN_NORM, &[h], Init::NormWeight);
        }
        if spec.constructs.post_norm != PostNorm::None {
            m(n::POST_MIXER_NORM, &[h], Init::NormWeight);
            m(n::POST_FFN_NORM, &[h], Init::NormWeight);
        }
        match mixer {
            Mixer::DeltaNet => {
                let d = &spec.delta_net;
                let vd = d.value_heads * d.value_dim;
                let c = spec.conv_channels();
                m(n::ATTN_QKV, &[c, h], Init::Matrix { fan_in: h });
                m(n::ATTN_GATE, &[vd, h], Init::Matrix { fan_in: h });
                m(n::SSM_BETA, &[d.value_heads, h], Init::Matrix { fan_in: h });
                m(n::SSM_ALPHA, &[d.value_heads, h], Init::Matrix { fan_in: h });
                m(n::SSM_CONV1D, &[c, d.conv_kernel], Init::Matrix { fan_in: d.conv_kernel });
                m(n::SSM_A, &[d.value_heads], Init::Decay);
                m(n::SSM_DT_BIAS, &[d.value_heads], Init::Bias);
                m(n::SSM_NORM, &[d.value_dim], Init::NormWeight);
                m(n::SSM_OUT, &[h, vd], Init::Matrix { fan_in: vd });
            }
            Mixer::Attention => match &spec.constructs.latent_attention {
                Some(la) => {
                    let nh = spec.attention.heads;
                    let qk = la.nope_dim + la.rope_dim;
                    match la.q_rank {
                        Some(r) => {
                            m(n::ATTN_Q_A, &[r, h], Init::Matrix { fan_in: h });
                            m(n::ATTN_Q_A_NORM, &[r], Init::NormWeight);
                            m(n::ATTN_Q_B, &[nh * qk, r], Init::Matrix { fan_in: r });
                        }
                        None => m(n::ATTN_Q, &[nh * qk, h], Init::Matrix { fan_in: h }),
                    }
                    m(n::ATTN_KV_A_MQA, &[la.kv_rank + la.rope_dim, h], Init::Matrix { fan_in: h });
                    m(n::ATTN_KV_A_NORM, &[la.kv_rank], Init::NormWeight);
                    m(
                        n::ATTN_KV_B,
                        &[nh * (la.nope_dim + la.value_dim), la.kv_rank],
                        Init::Matrix { fan_in: la.kv_rank },
                    );
                    m(n::ATTN_OUTPUT, &[h, nh * la.value_dim], Init::Matrix { fan_in: nh * la.value_dim });
                    if spec.constructs.attention_sinks {
                        m(n::ATTN_SINKS, &[nh], Init::Bias);
                    }
                }
                None => {
                    let a = &spec.attention;
                    let qd = a.heads * a.head_dim;
                    let kvd = a.kv_heads * a.head_dim;
                    let q_rows = if a.output_gate { 2 * qd } else { qd };
                    m(n::ATTN_Q, &[q_rows, h], Init::Matrix { fan_in: h });
                    m(n::ATTN_K, &[kvd, h], Init::Matrix { fan_in: h });
                    m(n::ATTN_V, &[kvd, h], Init::Matrix { fan_in: h });
                    m(n::ATTN_OUTPUT, &[h, qd], Init::Matrix { fan_in: qd });
                    if spec.constructs.qkv_bias {
                        m(n::ATTN_Q_BIAS, &[qd], Init::Bias);
                        m(n::ATTN_K_BIAS, &[kvd], Init::Bias);
                        m(n::ATTN_V_BIAS, &[kvd], Init::Bias);
                    }
                    if spec.constructs.output_bias {
                        m(n::ATTN_OUTPUT_BIAS, &[h], Init::Bias);
                    }
                    if a.qk_norm {
                        m(n::ATTN_Q_NORM, &[a.head_dim], Init::NormWeight);
                        m(n::ATTN_K_NORM, &[a.head_dim], Init::NormWeight);
                    }
                    if spec.constructs.attention_sinks {
                        m(n::ATTN_SINKS, &[a.heads], Init::Bias);
                    }
                }
            },
        }
        let gated = spec.constructs.ffn.gated();
        match &spec.constructs.experts {
            Some(e) if e.in_layer(l) => {
                let (count, i) = (e.count, e.intermediate);
                m(n::FFN_GATE_INP, &[count, h], Init::Matrix { fan_in: h });
                if e.router_bias {
                    m(n::FFN_GATE_INP_BIAS, &[count], Init::Bias);
                }
                if matches!(e.routing, Routing::SigmoidGroupLimited { .. }) {
                    m(n::FFN_EXP_PROBS_B, &[count], Init::Bias);
                }
                if gated {
                    m(n::FFN_GATE_EXPS, &[count, i, h], Init::Matrix { fan_in: h });
                }
                m(n::FFN_UP_EXPS, &[count, i, h], Init::Matrix { fan_in: h });
                m(n::FFN_DOWN_EXPS, &[count, h, i], Init::Matrix { fan_in: i });
                if e.expert_bias {
                    if gated {
                        m(n::FFN_GATE_EXPS_BIAS, &[count, i], Init::Bias);
                    }
                    m(n::FFN_UP_EXPS_BIAS, &[count, i], Init::Bias);
                    m(n::FFN_DOWN_EXPS_BIAS, &[count, h], Init::Bias);
                }
                if let Some(s) = e.shared_intermediate {
                    if gated {
                        m(n::FFN_GATE_SHEXP, &[s, h], Init::Matrix { fan_in: h });
                    }
                    m(n::FFN_UP_SHEXP, &[s, h], Init::Matrix { fan_in: h });
                    m(n::FFN_DOWN_SHEXP, &[h, s], Init::Matrix { fan_in: s });
                    if e.shared_gate {
                        m(n::FFN_GATE_INP_SHEXP, &[1, h], Init::Matrix { fan_in: h });
                    }
                }
            }
            _ => {
                let ffn = spec.intermediate;
                if gated {
                    m(n::FFN_GATE, &[ffn, h], Init::Matrix { fan_in: h });
                }
                m(n::FFN_UP, &[ffn, h], Init::Matrix { fan_in: h });
                m(n::FFN_DOWN, &[h, ffn], Init::Matrix { fan_in: ffn });
            }
        }
    }
    put(names::OUTPUT_NORM.into(), &[h], Init::NormWeight);
    if !spec.tied_embeddings {
        let (s, i) = mat(v, h);
        put(names::OUTPUT.into(), &s, i);
    }
    out
}
