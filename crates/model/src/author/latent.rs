//! DeepSeek-V2/V3 latent attention in place of an attention block, as transformers'
//! `DeepseekV3Attention` computes it.
//!
//! Queries come from the input directly or through a compressed latent (`q_a`, its norm, `q_b`);
//! each head's query is `[nope | rope]`, RoPE on the rope part only. Keys and values come from one
//! compression of the input (`kv_a_mqa`): a latent, normed (`kv_a_norm`) and decompressed by `kv_b`
//! into each head's `[k_nope | v]`, and a rotary key of `rope_dim` that all heads share. Each head's
//! key is `[k_nope | k_rope]`; scores are scaled by `1/√(nope + rope)` unless the spec says otherwise.
//!
//! transformers caches the normed latent and the rotary key and decompresses every cached latent at
//! each step; the graph caches what that decompression gives for the position instead (the keys and
//! values per head), which is the same value, so the scores and outputs are the same. With
//! DeepSeek's `rope_interleave`, transformers writes the turned pairs of queries and keys
//! de-interleaved; the graph leaves them in place. Both are one permutation of the dims of queries
//! and keys alike, which leaves every score unchanged.

use super::Author;
use formats::names::layer as n;
use ir::{OpKind, StateKind, TensorId, Ty};

impl Author<'_> {
    pub(super) fn latent_attention(&mut self, l: usize, x: TensorId, pos: TensorId) -> TensorId {
        let Some(la) = self.spec.constructs.latent_attention.clone() else { return x };
        let (h, nh, eps) = (self.spec.hidden, self.spec.attention.heads, self.spec.rms_eps);
        let (nope, rope, vd) = (la.nope_dim, la.rope_dim, la.value_dim);
        let qk = nope + rope;
        let p = format!("l{l}");
        // Queries: [nope | rope] per head, RoPE on the rope part.
        let q = match la.q_rank {
            Some(r) => {
                let wa = self.param(l, n::ATTN_Q_A, &[r, h]);
                let c = self.b.op1(OpKind::MatVec, &[wa, x], &format!("{p}.q_a"));
                let wn = self.param(l, n::ATTN_Q_A_NORM, &[r]);
                let c = self.b.op1(OpKind::RmsNorm { eps }, &[c, wn], &format!("{p}.q_a.normed"));
                let wb = self.param(l, n::ATTN_Q_B, &[nh * qk, r]);
                self.b.op1(OpKind::MatVec, &[wb, c], &format!("{p}.q.raw"))
            }
            None => {
                let wq = self.param(l, n::ATTN_Q, &[nh * qk, h]);
                self.b.op1(OpKind::MatVec, &[wq, x], &format!("{p}.q.raw"))
            }
        };
        let q = self.b.op1(OpKind::Reshape { shape: vec![nh, qk] }, &[q], &format!("{p}.q"));
        let q_nope = self.b.op1(OpKind::Slice { start: 0, end: nope }, &[q], &format!("{p}.q.nope"));
        let q_rot = self.b.op1(OpKind::Slice { start: nope, end: qk }, &[q], &format!("{p}.q.rot"));
        let rope_op = self.rope(l, rope);
        let q_rot = self.b.op1(rope_op.clone(), &[q_rot, pos], &format!("{p}.q.rope"));
        let q = self.b.op1(OpKind::Concat, &[q_nope, q_rot], &format!("{p}.q.full"));
        // Keys and values: the latent and the shared rotary key, from one projection.
        let wkv = self.param(l, n::ATTN_KV_A_MQA, &[la.kv_rank + rope, h]);
        let ckv = self.b.op1(OpKind::MatVec, &[wkv, x], &format!("{p}.kv_a"));
        let c = self.b.op1(OpKind::Slice { start: 0, end: la.kv_rank }, &[ckv], &format!("{p}.latent.raw"));
        let k_rot =
            self.b.op1(OpKind::Slice { start: la.kv_rank, end: la.kv_rank + rope }, &[ckv], &format!("{p}.k.rot.flat"));
        let wn = self.param(l, n::ATTN_KV_A_NORM, &[la.kv_rank]);
        let c = self.b.op1(OpKind::RmsNorm { eps }, &[c, wn], &format!("{p}.latent"));
        let wb = self.param(l, n::ATTN_KV_B, &[nh * (nope + vd), la.kv_rank]);
        let kv = self.b.op1(OpKind::MatVec, &[wb, c], &format!("{p}.kv"));
        let kv = self.b.op1(OpKind::Reshape { shape: vec![nh, nope + vd] }, &[kv], &format!("{p}.kv.heads"));
        let k_nope = self.b.op1(OpKind::Slice { start: 0, end: nope }, &[kv], &format!("{p}.k.nope"));
        let v = self.b.op1(OpKind::Slice { start: nope, end: nope + vd }, &[kv], &format!("{p}.v"));
        let k_rot = self.b.op1(OpKind::Reshape { shape: vec![1, rope] }, &[k_rot], &format!("{p}.k.rot"));
        let k_rot = self.b.op1(rope_op, &[k_rot, pos], &format!("{p}.k.rope"));
        let k_rot = self.b.op1(OpKind::Reshape { shape: vec![rope] }, &[k_rot], &format!("{p}.k.rope.flat"));
        let k_rot = self.b.op1(OpKind::Broadcast { rows: nh }, &[k_rot], &format!("{p}.k.rope.heads"));
        let k = self.b.op1(OpKind::Concat, &[k_nope, k_rot], &format!("{p}.k"));
        // The caches and the attention.
        let kc = self.b.state(StateKind::KeyCache, Some(l), &format!("{p}.kcache"), Ty::Cache { heads: nh, dim: qk });
        let vc = self.b.state(StateKind::ValueCache, Some(l), &format!("{p}.vcache"), Ty::Cache { heads: nh, dim: vd });
        let kc1 = self.b.op1(OpKind::KvAppend, &[kc, k], &format!("{p}.kcache.next"));
        let vc1 = self.b.op1(OpKind::KvAppend, &[vc, v], &format!("{p}.vcache.next"));
        self.b.write_state(kc, kc1);
        self.b.write_state(vc, vc1);
        let scale = self.spec.constructs.attention_scale.unwrap_or(1.0 / (qk as f64).sqrt());
        let o = self.attend(l, scale, [q, kc1, vc1], nh);
        let o = self.b.op1(OpKind::Reshape { shape: vec![nh * vd] }, &[o], &format!("{p}.attn.flat"));
        self.output_projection(l, o, nh * vd)
    }
}
