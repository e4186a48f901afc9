//! The author: writes one decode step of a spec as a step graph, op by op, in the order
//! transformers computes it (`modeling_qwen3_5.py`'s decoder layer, its Gated DeltaNet and its
//! attention), with every constant bound to its checkpoint tensor and view. The constructs of other families are written the way those families
//! compute them: experts in [`experts`], latent attention in [`latent`], scaled RoPE in [`rope`].

mod experts;
mod latent;
pub mod rope;

use super::bind::Binding;
use super::names::{self, layer as n};
use super::spec::{Ffn, Mixer, ModelSpec, PostNorm, SpecError};
use ir::{Act, Graph, GraphBuilder, HeadMap, OpKind, StateKind, TensorId, Ty};

/// The decode step `spec` describes: the embedding; per layer the norm, the mixer, the residual
/// add, the FFN's norm, the FFN and its add; then the step's advance, the final norm and the head.
/// Constants are bound in GGUF naming; a Gated-DeltaNet reads value heads in the checkpoint's
/// tiled order.
pub fn decode_step(spec: &ModelSpec) -> Result<Graph, SpecError> {
    spec.validate()?;
    let mut a = Author { spec, b: GraphBuilder::new(&spec.name) };
    let graph = a.step();
    graph.map_err(|why| SpecError { spec: spec.name.clone(), why })
}

struct Author<'s> {
    spec: &'s ModelSpec,
    b: GraphBuilder,
}

impl Author<'_> {
    fn step(&mut self) -> Result<Graph, String> {
        let (h, v) = (self.spec.hidden, self.spec.vocab);
        let pos = self.b.state(StateKind::Position, None, "pos", Ty::Position);
        let table = self.b.constant("token_embd", &[v, h], Binding::whole(names::TOKEN_EMBD));
        let token = self.b.token();
        let mut x = self.b.op1(OpKind::Embed, &[table, token], "h0");
        if let Some(factor) = self.spec.constructs.embedding_scale {
            x = self.b.op1(OpKind::Scale { factor }, &[x], "h0.scaled");
        }
        for (l, &mixer) in self.spec.layers.iter().enumerate() {
            x = self.layer(l, mixer, x, pos);
        }
        let next = self.b.op1(OpKind::Advance, &[pos], "pos.next");
        self.b.write_state(pos, next);
        let norm = self.whole("output_norm", &[h], names::OUTPUT_NORM);
        let xn = self.b.op1(OpKind::RmsNorm { eps: self.spec.rms_eps }, &[x, norm], "h.final");
        let head = if self.spec.tied_embeddings { table } else { self.whole("output", &[v, h], names::OUTPUT) };
        let logits = self.b.op1(OpKind::MatVec, &[head, xn], "logits");
        std::mem::replace(&mut self.b, GraphBuilder::new("")).finish(logits)
    }

    /// A constant holding the whole of checkpoint tensor `tensor`.
    fn whole(&mut self, name: &str, shape: &[usize], tensor: &str) -> TensorId {
        self.b.constant(name, shape, Binding::whole(tensor))
    }

    /// A constant holding the whole of layer `l`'s tensor `what`, named after it.
    fn param(&mut self, l: usize, what: &str, shape: &[usize]) -> TensorId {
        let tensor = names::blk(l, what);
        let name = tensor.trim_end_matches(".weight").to_string();
        self.b.constant(&name, shape, Binding::whole(tensor))
    }

    fn norm(&mut self, l: usize, what: &str, x: TensorId, out: &str) -> TensorId {
        let w = self.param(l, what, &[self.spec.hidden]);
        self.b.op1(OpKind::RmsNorm { eps: self.spec.rms_eps }, &[x, w], out)
    }

    /// Layer `l`: `h + mixer(norm(h))`, then `h + ffn(norm(h))`, with the constructs' extra norms.
    fn layer(&mut self, l: usize, mixer: Mixer, h: TensorId, pos: TensorId) -> TensorId {
        let post = self.spec.constructs.post_norm;
        let x = if post == PostNorm::PostOnly { h } else { self.norm(l, n::ATTN_NORM, h, &format!("l{l}.x")) };
        let mut y = match mixer {
            Mixer::DeltaNet => self.delta_net(l, x),
            Mixer::Attention if self.spec.constructs.latent_attention.is_some() => self.latent_attention(l, x, pos),
            Mixer::Attention => self.attention(l, x, pos),
        };
        if post != PostNorm::None {
            y = self.norm(l, n::POST_MIXER_NORM, y, &format!("l{l}.mix.normed"));
        }
        let h1 = self.b.op1(OpKind::Add, &[h, y], &format!("l{l}.h.mix"));
        let x2 = if post == PostNorm::PostOnly { h1 } else { self.norm(l, n::FFN_NORM, h1, &format!("l{l}.x.ffn")) };
        let mut f = match &self.spec.constructs.experts {
            Some(e) if e.in_layer(l) => self.experts(l, x2),
            _ => self.ffn(l, x2),
        };
        if post != PostNorm::None {
            f = self.norm(l, n::POST_FFN_NORM, f, &format!("l{l}.ffn.normed"));
        }
        self.b.op1(OpKind::Add, &[h1, f], &format!("l{l}.h"))
    }

    /// A Gated-DeltaNet block (§4): projections, the causal conv with SiLU, the gates, the delta
    /// rule over l2-normed queries and keys, the gated norm and the output projection.
    fn delta_net(&mut self, l: usize, x: TensorId) -> TensorId {
        let d = self.spec.delta_net.clone();
        let h = self.spec.hidden;
        let (kd, vd) = (d.key_heads * d.key_dim, d.value_heads * d.value_dim);
        let c = 2 * kd + vd;
        let qkv = names::blk(l, n::ATTN_QKV);
        let p = format!("l{l}");
        let wq = self.b.constant(&format!("blk.{l}.attn_qkv.q"), &[kd, h], Binding::rows(&qkv, 0, kd));
        let wk = self.b.constant(&format!("blk.{l}.attn_qkv.k"), &[kd, h], Binding::rows(&qkv, kd, 2 * kd));
        let wv = self.b.constant(&format!("blk.{l}.attn_qkv.v"), &[vd, h], Binding::rows(&qkv, 2 * kd, c));
        let q = self.b.op1(OpKind::MatVec, &[wq, x], &format!("{p}.q.raw"));
        let k = self.b.op1(OpKind::MatVec, &[wk, x], &format!("{p}.k.raw"));
        let v = self.b.op1(OpKind::MatVec, &[wv, x], &format!("{p}.v.raw"));
        let wz = self.param(l, n::ATTN_GATE, &[vd, h]);
        let z = self.b.op1(OpKind::MatVec, &[wz, x], &format!("{p}.z"));
        let wb = self.param(l, n::SSM_BETA, &[d.value_heads, h]);
        let b = self.b.op1(OpKind::MatVec, &[wb, x], &format!("{p}.b"));
        let wa = self.param(l, n::SSM_ALPHA, &[d.value_heads, h]);
        let a = self.b.op1(OpKind::MatVec, &[wa, x], &format!("{p}.a"));
        // The causal conv over the window of the last K pre-conv vectors.
        let mixed = self.b.op1(OpKind::Concat, &[q, k, v], &format!("{p}.qkv"));
        let window = self.b.state(StateKind::Conv, Some(l), &format!("{p}.conv"), Ty::tensor(&[c, d.conv_kernel]));
        let shifted = self.b.op1(OpKind::ConvShift, &[window, mixed], &format!("{p}.conv.next"));
        self.b.write_state(window, shifted);
        let wconv = self.param(l, n::SSM_CONV1D, &[c, d.conv_kernel]);
        let conv = self.b.op1(OpKind::DepthwiseConv, &[shifted, wconv], &format!("{p}.conv.out"));
        let conv = self.b.op1(OpKind::Act(Act::Silu), &[conv], &format!("{p}.conv.silu"));
        let q = self.b.op1(OpKind::Slice { start: 0, end: kd }, &[conv], &format!("{p}.q.flat"));
        let k = self.b.op1(OpKind::Slice { start: kd, end: 2 * kd }, &[conv], &format!("{p}.k.flat"));
        let v = self.b.op1(OpKind::Slice { start: 2 * kd, end: c }, &[conv], &format!("{p}.v.flat"));
        let q = self.b.op1(OpKind::Reshape { shape: vec![d.key_heads, d.key_dim] }, &[q], &format!("{p}.q"));
        let k = self.b.op1(OpKind::Reshape { shape: vec![d.key_heads, d.key_dim] }, &[k], &format!("{p}.k"));
        let v = self.b.op1(OpKind::Reshape { shape: vec![d.value_heads, d.value_dim] }, &[v], &format!("{p}.v"));
        // The gates: β = sigmoid(b), g = ssm_a · softplus(a + dt_bias).
        let beta = self.b.op1(OpKind::Act(Act::Sigmoid), &[b], &format!("{p}.beta"));
        let dt = self.param(l, n::SSM_DT_BIAS, &[d.value_heads]);
        let a = self.b.op1(OpKind::Add, &[a, dt], &format!("{p}.a.biased"));
        let a = self.b.op1(OpKind::Act(Act::Softplus), &[a], &format!("{p}.a.softplus"));
        let ssm_a =
            self.b.constant(&format!("blk.{l}.ssm_a"), &[d.value_heads], Binding::whole(names::blk(l, n::SSM_A)));
        let g = self.b.op1(OpKind::Mul, &[ssm_a, a], &format!("{p}.g"));
        // The delta rule over l2-normed keys and l2-normed queries scaled by 1/√dk.
        let q = self.b.op1(OpKind::L2Norm { eps: 1e-6 }, &[q], &format!("{p}.q.normed"));
        let q = self.b.op1(OpKind::Scale { factor: 1.0 / (d.key_dim as f64).sqrt() }, &[q], &format!("{p}.q.scaled"));
        let k = self.b.op1(OpKind::L2Norm { eps: 1e-6 }, &[k], &format!("{p}.k.normed"));
        let shape = Ty::tensor(&[d.value_heads, d.key_dim, d.value_dim]);
        let s = self.b.state(StateKind::Recurrent, Some(l), &format!("{p}.state"), shape);
        let outs = self.b.op(
            OpKind::DeltaRule { head_map: HeadMap::Tiled },
            &[s, q, k, v, g, beta],
            &[&format!("{p}.state.next"), &format!("{p}.o")],
        );
        self.b.write_state(s, outs[0]);
        // The gated norm: rms_norm(o) · silu(z), per value head.
        let wn = self.param(l, n::SSM_NORM, &[d.value_dim]);
        let o = self.b.op1(OpKind::RmsNorm { eps: self.spec.rms_eps }, &[outs[1], wn], &format!("{p}.o.normed"));
        let z = self.b.op1(OpKind::Reshape { shape: vec![d.value_heads, d.value_dim] }, &[z], &format!("{p}.z.heads"));
        let z = self.b.op1(OpKind::Act(Act::Silu), &[z], &format!("{p}.z.silu"));
        let o = self.b.op1(OpKind::Mul, &[z, o], &format!("{p}.o.gated"));
        let o = self.b.op1(OpKind::Reshape { shape: vec![vd] }, &[o], &format!("{p}.o.flat"));
        let wo = self.param(l, n::SSM_OUT, &[h, vd]);
        self.b.op1(OpKind::MatVec, &[wo, o], &format!("{p}.mix"))
    }

    /// An attention block (§5): queries (and their per-head output gate), keys and values; per-head
    /// q/k norms; RoPE; the caches; softmax attention; the sigmoid gate; the output projection.
    fn attention(&mut self, l: usize, x: TensorId, pos: TensorId) -> TensorId {
        let a = self.spec.attention.clone();
        let h = self.spec.hidden;
        let (qd, kvd) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        let p = format!("l{l}");
        let attn_q = names::blk(l, n::ATTN_Q);
        let (wq, wg) = if a.output_gate {
            let wq =
                self.b.constant(&format!("blk.{l}.attn_q.q"), &[qd, h], Binding::head_half(&attn_q, a.head_dim, 0));
            let wg =
                self.b.constant(&format!("blk.{l}.attn_q.gate"), &[qd, h], Binding::head_half(&attn_q, a.head_dim, 1));
            (wq, Some(wg))
        } else {
            (self.param(l, n::ATTN_Q, &[qd, h]), None)
        };
        let q = self.b.op1(OpKind::MatVec, &[wq, x], &format!("{p}.q.raw"));
        let gate = wg.map(|wg| self.b.op1(OpKind::MatVec, &[wg, x], &format!("{p}.gate")));
        let wk = self.param(l, n::ATTN_K, &[kvd, h]);
        let k = self.b.op1(OpKind::MatVec, &[wk, x], &format!("{p}.k.raw"));
        let wv = self.param(l, n::ATTN_V, &[kvd, h]);
        let v = self.b.op1(OpKind::MatVec, &[wv, x], &format!("{p}.v.raw"));
        let (q, k, v) = if self.spec.constructs.qkv_bias {
            (
                self.biased(l, n::ATTN_Q_BIAS, q, &format!("{p}.q.biased")),
                self.biased(l, n::ATTN_K_BIAS, k, &format!("{p}.k.biased")),
                self.biased(l, n::ATTN_V_BIAS, v, &format!("{p}.v.biased")),
            )
        } else {
            (q, k, v)
        };
        let mut q = self.b.op1(OpKind::Reshape { shape: vec![a.heads, a.head_dim] }, &[q], &format!("{p}.q"));
        let mut k = self.b.op1(OpKind::Reshape { shape: vec![a.kv_heads, a.head_dim] }, &[k], &format!("{p}.k"));
        let v = self.b.op1(OpKind::Reshape { shape: vec![a.kv_heads, a.head_dim] }, &[v], &format!("{p}.v"));
        if a.qk_norm {
            let wqn = self.param(l, n::ATTN_Q_NORM, &[a.head_dim]);
            q = self.b.op1(OpKind::RmsNorm { eps: self.spec.rms_eps }, &[q, wqn], &format!("{p}.q.normed"));
            let wkn = self.param(l, n::ATTN_K_NORM, &[a.head_dim]);
            k = self.b.op1(OpKind::RmsNorm { eps: self.spec.rms_eps }, &[k, wkn], &format!("{p}.k.normed"));
        }
        let rope = self.rope(l, a.rotary_dims);
        let q = self.b.op1(rope.clone(), &[q, pos], &format!("{p}.q.rope"));
        let k = self.b.op1(rope, &[k, pos], &format!("{p}.k.rope"));
        let cache = Ty::Cache { heads: a.kv_heads, dim: a.head_dim };
        let kc = self.b.state(StateKind::KeyCache, Some(l), &format!("{p}.kcache"), cache.clone());
        let vc = self.b.state(StateKind::ValueCache, Some(l), &format!("{p}.vcache"), cache);
        let kc1 = self.b.op1(OpKind::KvAppend, &[kc, k], &format!("{p}.kcache.next"));
        let vc1 = self.b.op1(OpKind::KvAppend, &[vc, v], &format!("{p}.vcache.next"));
        self.b.write_state(kc, kc1);
        self.b.write_state(vc, vc1);
        let scale = self.spec.constructs.attention_scale.unwrap_or(1.0 / (a.head_dim as f64).sqrt());
        let o = self.attend(l, scale, [q, kc1, vc1], a.heads);
        let mut o = self.b.op1(OpKind::Reshape { shape: vec![qd] }, &[o], &format!("{p}.attn.flat"));
        if let Some(gate) = gate {
            let g = self.b.op1(OpKind::Act(Act::Sigmoid), &[gate], &format!("{p}.gate.sigmoid"));
            o = self.b.op1(OpKind::Mul, &[g, o], &format!("{p}.attn.gated"));
        }
        self.output_projection(l, o, qd)
    }

    /// The attention op of layer `l` over its caches, with the layer's sliding window and the
    /// sinks when the spec has them: `[heads, dv]`.
    fn attend(&mut self, l: usize, scale: f64, [q, keys, values]: [TensorId; 3], heads: usize) -> TensorId {
        let window = self.spec.constructs.sliding_window.as_ref().filter(|w| w.layers.contains(&l)).map(|w| w.window);
        let kind = OpKind::Attention { scale, window, head_map: HeadMap::Grouped };
        let mut ins = vec![q, keys, values];
        if self.spec.constructs.attention_sinks {
            ins.push(self.param(l, n::ATTN_SINKS, &[heads]));
        }
        self.b.op1(kind, &ins, &format!("l{l}.attn"))
    }

    /// The attention's output projection of the flat `o` of `width` values, and its bias when the
    /// spec has one.
    fn output_projection(&mut self, l: usize, o: TensorId, width: usize) -> TensorId {
        let h = self.spec.hidden;
        let wo = self.param(l, n::ATTN_OUTPUT, &[h, width]);
        if !self.spec.constructs.output_bias {
            return self.b.op1(OpKind::MatVec, &[wo, o], &format!("l{l}.mix"));
        }
        let y = self.b.op1(OpKind::MatVec, &[wo, o], &format!("l{l}.mix.raw"));
        self.biased(l, n::ATTN_OUTPUT_BIAS, y, &format!("l{l}.mix"))
    }

    /// `x + b` with `b` layer `l`'s tensor `what`, of `x`'s length.
    fn biased(&mut self, l: usize, what: &str, x: TensorId, out: &str) -> TensorId {
        let len = self.b.ty(x).numel().unwrap_or(0);
        let b = self.param(l, what, &[len]);
        self.b.op1(OpKind::Add, &[x, b], out)
    }

    /// Layer `l`'s RoPE of the first `dims` dims of each head: the sliding-window layers' own RoPE
    /// when the spec gives one, else the attention's θ with the spec's scaling.
    fn rope(&self, l: usize, dims: usize) -> OpKind {
        let c = &self.spec.constructs;
        let style = self.spec.attention.rope_style;
        let sliding = c.sliding_window.as_ref().is_some_and(|w| w.layers.contains(&l));
        match (&c.sliding_rope, sliding) {
            (Some(r), true) => rope::rope_op(r.theta, dims, style, r.scaling.as_ref()),
            _ => rope::rope_op(self.spec.attention.rope_theta, dims, style, c.rope_scaling.as_ref()),
        }
    }

    /// The dense FFN: SwiGLU, or the spec's other kind.
    fn ffn(&mut self, l: usize, x: TensorId) -> TensorId {
        let (h, i) = (self.spec.hidden, self.spec.intermediate);
        let p = format!("l{l}.ffn");
        let wu = self.param(l, n::FFN_UP, &[i, h]);
        let gate = match self.spec.constructs.ffn.gated() {
            true => {
                let w = self.param(l, n::FFN_GATE, &[i, h]);
                Some(self.b.op1(OpKind::MatVec, &[w, x], &format!("{p}.gate")))
            }
            false => None,
        };
        let up = self.b.op1(OpKind::MatVec, &[wu, x], &format!("{p}.up"));
        let hidden = self.ffn_hidden(gate, up, &p);
        let wd = self.param(l, n::FFN_DOWN, &[h, i]);
        self.b.op1(OpKind::MatVec, &[wd, hidden], &p)
    }

    /// The FFN's activation, from its gate and up projections (`gate` absent for an ungated kind) to
    /// what its down projection reads; tensors are named after `p`.
    fn ffn_hidden(&mut self, gate: Option<TensorId>, up: TensorId, p: &str) -> TensorId {
        let act = |me: &mut Self, a: Act, t: TensorId| me.b.op1(OpKind::Act(a), &[t], &format!("{p}.act"));
        match (self.spec.constructs.ffn, gate) {
            (Ffn::SwiGlu | Ffn::GeGlu, Some(g)) => {
                let a = if self.spec.constructs.ffn == Ffn::SwiGlu { Act::Silu } else { Act::GeluTanh };
                let g = act(self, a, g);
                self.b.op1(OpKind::Mul, &[g, up], &format!("{p}.hidden"))
            }
            (Ffn::GeluMlp { tanh }, _) => act(self, if tanh { Act::GeluTanh } else { Act::Gelu }, up),
            (Ffn::Relu2Mlp, _) => {
                let r = act(self, Act::Relu, up);
                self.b.op1(OpKind::Mul, &[r, r], &format!("{p}.hidden"))
            }
            (Ffn::ClampedSwiGlu { alpha, limit }, Some(g)) => {
                let g = self.b.op1(
                    OpKind::Clamp { min: f64::NEG_INFINITY, max: limit },
                    &[g],
                    &format!("{p}.gate.clamped"),
                );
                let u = self.b.op1(OpKind::Clamp { min: -limit, max: limit }, &[up], &format!("{p}.up.clamped"));
                let ga = self.b.op1(OpKind::Scale { factor: alpha }, &[g], &format!("{p}.gate.scaled"));
                let s = self.b.op1(OpKind::Act(Act::Sigmoid), &[ga], &format!("{p}.gate.sigmoid"));
                let glu = self.b.op1(OpKind::Mul, &[g, s], &format!("{p}.glu"));
                let u = self.b.op1(OpKind::Offset { value: 1.0 }, &[u], &format!("{p}.up.plus1"));
                self.b.op1(OpKind::Mul, &[u, glu], &format!("{p}.hidden"))
            }
            // A gated kind always gets its gate (`Ffn::gated`).
            (Ffn::SwiGlu | Ffn::GeGlu | Ffn::ClampedSwiGlu { .. }, None) => up,
        }
    }
}
