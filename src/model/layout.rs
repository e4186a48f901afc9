//! The checkpoint tensors a spec's decode step reads: names, shapes and how seeded random weights
//! fill them.

use super::names::{self, layer as n};
use super::spec::{Ffn, Mixer, ModelSpec, PostNorm};

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
            Mixer::Attention => {
                let a = &spec.attention;
                let qd = a.heads * a.head_dim;
                let kvd = a.kv_heads * a.head_dim;
                let q_rows = if a.output_gate { 2 * qd } else { qd };
                m(n::ATTN_Q, &[q_rows, h], Init::Matrix { fan_in: h });
                m(n::ATTN_K, &[kvd, h], Init::Matrix { fan_in: h });
                m(n::ATTN_V, &[kvd, h], Init::Matrix { fan_in: h });
                m(n::ATTN_OUTPUT, &[h, qd], Init::Matrix { fan_in: qd });
                if a.qk_norm {
                    m(n::ATTN_Q_NORM, &[a.head_dim], Init::NormWeight);
                    m(n::ATTN_K_NORM, &[a.head_dim], Init::NormWeight);
                }
                if spec.constructs.attention_sinks {
                    m(n::ATTN_SINKS, &[a.heads], Init::Bias);
                }
            }
        }
        let ffn = spec.intermediate;
        let gated = !matches!(spec.constructs.ffn, Ffn::GeluMlp { .. } | Ffn::Relu2Mlp);
        if gated {
            m(n::FFN_GATE, &[ffn, h], Init::Matrix { fan_in: h });
        }
        m(n::FFN_UP, &[ffn, h], Init::Matrix { fan_in: h });
        m(n::FFN_DOWN, &[h, ffn], Init::Matrix { fan_in: ffn });
    }
    put(names::OUTPUT_NORM.into(), &[h], Init::NormWeight);
    if !spec.tied_embeddings {
        let (s, i) = mat(v, h);
        put(names::OUTPUT.into(), &s, i);
    }
    out
}
