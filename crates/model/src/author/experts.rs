//! A mixture of experts in place of a layer's FFN, as Mixtral, Qwen-MoE, gpt-oss and DeepSeek-V3
//! compute it: a router weighs the experts, each expert is an FFN of the spec's kind, and the
//! layer's output is the weighted sum of the experts plus the shared expert, if any.
//!
//! The reference evaluates every expert and weighs it by its entry of the router's weight vector,
//! which is zero for the experts not chosen: the same sum as evaluating only the chosen ones.
//! Experts are read from stacked `[E, out, in]` checkpoint tensors (llama.cpp's `ffn_*_exps`), one
//! constant per expert through `View::Expert`; their biases from `[E, out]` stacks the same way.

use super::Author;
use crate::spec::{Experts, Routing};
use formats::bind::Binding;
use formats::names::{self, layer as n};
use ir::{Act, OpKind, TensorId};

impl Author<'_> {
    /// Layer `l`'s experts on `x`: the router's weights, every expert weighed by its weight, and the
    /// shared expert.
    pub(super) fn experts(&mut self, l: usize, x: TensorId) -> TensorId {
        let Some(e) = self.spec.constructs.experts.clone() else { return x };
        let h = self.spec.hidden;
        let p = format!("l{l}.ffn");
        let weights = self.router(l, x, &e, &p);
        let gated = self.spec.constructs.ffn.gated();
        let mut sum: Option<TensorId> = None;
        for j in 0..e.count {
            let q = format!("{p}.e{j}");
            let project = |me: &mut Self, what: &str, bias: &str, rows: usize, cols: usize, x: TensorId, out: &str| {
                let w = me.expert(l, what, j, &[rows, cols]);
                let y = me.b.op1(OpKind::MatVec, &[w, x], out);
                if !e.expert_bias {
                    return y;
                }
                let b = me.expert(l, bias, j, &[rows]);
                me.b.op1(OpKind::Add, &[y, b], &format!("{out}.biased"))
            };
            let gate = gated.then(|| {
                project(self, n::FFN_GATE_EXPS, n::FFN_GATE_EXPS_BIAS, e.intermediate, h, x, &format!("{q}.gate"))
            });
            let up = project(self, n::FFN_UP_EXPS, n::FFN_UP_EXPS_BIAS, e.intermediate, h, x, &format!("{q}.up"));
            let hidden = self.ffn_hidden(gate, up, &q);
            let y = project(self, n::FFN_DOWN_EXPS, n::FFN_DOWN_EXPS_BIAS, h, e.intermediate, hidden, &q);
            let w = self.b.op1(OpKind::Pick { index: j }, &[weights], &format!("{q}.weight"));
            let weighed = self.b.op1(OpKind::Mul, &[y, w], &format!("{q}.weighed"));
            sum = Some(match sum {
                None => weighed,
                Some(s) => self.b.op1(OpKind::Add, &[s, weighed], &format!("{q}.sum")),
            });
        }
        let routed = sum.unwrap_or(x);
        let Some(width) = e.shared_intermediate else { return routed };
        let shared = self.shared_expert(l, x, width, e.shared_gate, &p);
        self.b.op1(OpKind::Add, &[routed, shared], &p)
    }

    /// The router's weight of every expert, `[E]`: zero for the experts not chosen.
    fn router(&mut self, l: usize, x: TensorId, e: &Experts, p: &str) -> TensorId {
        let w = self.param(l, n::FFN_GATE_INP, &[e.count, self.spec.hidden]);
        let mut logits = self.b.op1(OpKind::MatVec, &[w, x], &format!("{p}.router"));
        if e.router_bias {
            logits = self.biased(l, n::FFN_GATE_INP_BIAS, logits, &format!("{p}.router.biased"));
        }
        let out = format!("{p}.weights");
        let weights = match e.routing {
            // A softmax over every expert, then the top k.
            Routing::SoftmaxTopK => {
                let probs = self.b.op1(OpKind::Softmax, &[logits], &format!("{p}.probs"));
                self.b.op1(OpKind::TopK { k: e.top_k, renormalize: e.renormalize }, &[probs], &out)
            }
            // The top k of the logits, weighed by the softmax over those k: the softmax over every
            // expert at the chosen ones, divided by its sum there.
            Routing::TopKSoftmax => {
                let probs = self.b.op1(OpKind::Softmax, &[logits], &format!("{p}.probs"));
                self.b.op1(OpKind::TopK { k: e.top_k, renormalize: true }, &[logits, probs], &out)
            }
            // Sigmoid scores; the choice by the scores plus the correction bias, from the best
            // groups only (each scored by its two best); the weights the unbiased scores.
            Routing::SigmoidGroupLimited { groups, keep_groups } => {
                let scores = self.b.op1(OpKind::Act(Act::Sigmoid), &[logits], &format!("{p}.scores"));
                let choice = self.biased(l, n::FFN_EXP_PROBS_B, scores, &format!("{p}.choice"));
                let limit = OpKind::GroupLimit { groups, keep: keep_groups, top: 2 };
                let limited = self.b.op1(limit, &[choice], &format!("{p}.choice.limited"));
                self.b.op1(OpKind::TopK { k: e.top_k, renormalize: e.renormalize }, &[limited, scores], &out)
            }
        };
        match e.weight_scale {
            Some(factor) => self.b.op1(OpKind::Scale { factor }, &[weights], &format!("{p}.weights.scaled")),
            None => weights,
        }
    }

    /// The shared expert: an FFN of the spec's kind and width `width`, times `sigmoid(w · x)` when
    /// `gated`.
    fn shared_expert(&mut self, l: usize, x: TensorId, width: usize, gated: bool, p: &str) -> TensorId {
        let h = self.spec.hidden;
        let q = format!("{p}.shared");
        let wu = self.param(l, n::FFN_UP_SHEXP, &[width, h]);
        let gate = match self.spec.constructs.ffn.gated() {
            true => {
                let w = self.param(l, n::FFN_GATE_SHEXP, &[width, h]);
                Some(self.b.op1(OpKind::MatVec, &[w, x], &format!("{q}.gate")))
            }
            false => None,
        };
        let up = self.b.op1(OpKind::MatVec, &[wu, x], &format!("{q}.up"));
        let hidden = self.ffn_hidden(gate, up, &q);
        let wd = self.param(l, n::FFN_DOWN_SHEXP, &[h, width]);
        let y = self.b.op1(OpKind::MatVec, &[wd, hidden], &q);
        if !gated {
            return y;
        }
        let wg = self.param(l, n::FFN_GATE_INP_SHEXP, &[1, h]);
        let g = self.b.op1(OpKind::MatVec, &[wg, x], &format!("{q}.gate_inp"));
        let g = self.b.op1(OpKind::Act(Act::Sigmoid), &[g], &format!("{q}.gate_inp.sigmoid"));
        self.b.op1(OpKind::Mul, &[y, g], &format!("{q}.gated"))
    }

    /// Expert `j` of layer `l`'s stacked tensor `what`, of shape `shape`.
    fn expert(&mut self, l: usize, what: &str, j: usize, shape: &[usize]) -> TensorId {
        let tensor = names::blk(l, what);
        let name = format!("{}.{j}", tensor.trim_end_matches(".weight"));
        self.b.constant(&name, shape, Binding::expert(tensor, j))
    }
}
