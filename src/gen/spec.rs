//! Generated specs: small specs of every shape the engine accepts, the constructs of other
//! families it refuses, and the outcome each must have under a shim and numerics.
//!
//! Sizes are small so that one case runs in about a millisecond: hidden 8–32, vocab 4–64, 1–4
//! layers, heads of 2–16 dims. Every layer pattern occurs (attention first, last, adjacent, absent,
//! all), value heads per key head 1–4, query heads per KV head 1–8 (MQA when there is one KV head),
//! rotary dims every even number from 0 to the head size, attention with and without its output
//! gate and its q/k norms, tied and untied heads, conv kernels 1–4.

use super::draw::Draw;
use super::outcome::{Outcome, Place};
use crate::engine::program::BlockKind;
use crate::engine::{Numerics, Storage};
use crate::fuse::Symbol;
use crate::ir::RopeStyle;
use crate::model::spec::{
    AttentionSpec, Constructs, DeltaNetSpec, Experts, Ffn, LatentAttention, LayerRope, Mixer, ModelSpec, PostNorm,
    RopeScaling, Routing, SlidingWindow,
};

/// A spec the engine accepts: the dense Qwen3.5 hybrid, at small sizes drawn from `d`.
pub fn spec(d: &mut Draw) -> ModelSpec {
    let n = d.range(1, 4);
    let layers = match d.below(6) {
        // Each layer's mixer from one bit: every pattern of up to four layers.
        0 => {
            let bits = d.byte();
            (0..n).map(|i| if bits >> i & 1 == 1 { Mixer::Attention } else { Mixer::DeltaNet }).collect()
        }
        1 => ModelSpec::every_nth_attention(n, d.range(1, 4)),
        2 => (0..n).map(|i| if i == 0 { Mixer::Attention } else { Mixer::DeltaNet }).collect(),
        3 => (0..n).map(|i| if i + 1 == n { Mixer::Attention } else { Mixer::DeltaNet }).collect(),
        4 => vec![Mixer::Attention; n],
        _ => vec![Mixer::DeltaNet; n],
    };
    let kv_heads = d.range(1, 4);
    let group = d.range(1, 8);
    let head_dim = 2 * d.range(1, 8);
    let attention = AttentionSpec {
        heads: kv_heads * group,
        kv_heads,
        head_dim,
        rotary_dims: 2 * d.range(0, head_dim / 2),
        rope_theta: *d.pick(&[10_000.0, 1e6, 1e7, 500.0]),
        rope_style: RopeStyle::Neox,
        output_gate: d.below(4) != 0,
        qk_norm: d.below(4) != 0,
    };
    let key_heads = d.range(1, 4);
    let delta_net = DeltaNetSpec {
        key_heads,
        value_heads: key_heads * d.range(1, 4),
        key_dim: 2 * d.range(1, 4),
        value_dim: 2 * d.range(1, 4),
        conv_kernel: d.range(1, 4),
    };
    ModelSpec {
        name: "gen".into(),
        hidden: d.range(8, 32),
        intermediate: d.range(4, 48),
        vocab: d.range(4, 64),
        layers,
        rms_eps: *d.pick(&[1e-6, 1e-5, 1e-3]),
        tied_embeddings: d.below(2) == 1,
        attention,
        delta_net,
        constructs: Constructs::default(),
    }
}

/// The constructs of other families that `decode_step` writes, one alone or several mixed (never
/// none), drawn for `spec`, which they may change where a construct needs it (q/k/v biases come
/// without an output gate, as in Qwen2). Attention constructs are drawn only on a spec with
/// attention layers; a sliding window's own RoPE only with a window.
pub fn constructs(d: &mut Draw, spec: &mut ModelSpec) -> Constructs {
    let attention: Vec<usize> =
        spec.layers.iter().enumerate().filter(|(_, m)| **m == Mixer::Attention).map(|(i, _)| i).collect();
    // Which constructs: one alone, or a mask of several.
    let mask: u16 = if d.below(2) == 0 { 1 << d.below(CONSTRUCTS) } else { (d.below(1 << CONSTRUCTS) as u16).max(1) };
    let on = |bit: usize| mask >> bit & 1 == 1;
    let mut c = Constructs::default();
    if on(0) {
        c.post_norm = *d.pick(&[PostNorm::Sandwich, PostNorm::PostOnly]);
    }
    if on(1) {
        c.ffn = *d.pick(&[
            Ffn::GeluMlp { tanh: false },
            Ffn::GeluMlp { tanh: true },
            Ffn::GeGlu,
            Ffn::Relu2Mlp,
            Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 },
        ]);
    }
    if on(2) {
        c.experts = Some(experts(d, spec.layers.len()));
    }
    if on(3) {
        c.embedding_scale = Some(*d.pick(&[(spec.hidden as f64).sqrt(), 2.0, 0.5]));
    }
    if !attention.is_empty() {
        if on(4) {
            c.attention_sinks = true;
        }
        if on(5) {
            let bits = d.byte() as usize;
            let mut layers: Vec<usize> =
                attention.iter().enumerate().filter(|(i, _)| bits >> i & 1 == 1).map(|(_, &l)| l).collect();
            if layers.is_empty() {
                layers.push(attention[bits % attention.len()]);
            }
            c.sliding_window = Some(SlidingWindow { window: d.range(1, 8), layers });
            if d.below(2) == 0 {
                let scaling = if d.below(2) == 0 { None } else { Some(RopeScaling::Linear { factor: 2.0 }) };
                c.sliding_rope = Some(LayerRope { theta: 1e3, scaling });
            }
        }
        if on(6) {
            // Never 1/√head_dim: half or twice it.
            c.attention_scale = Some(*d.pick(&[0.5, 2.0]) / (spec.attention.head_dim as f64).sqrt());
        }
        if on(7) {
            spec.attention.rope_style = RopeStyle::Interleaved;
        }
        if on(8) {
            c.rope_scaling = Some(if d.below(2) == 0 {
                RopeScaling::Linear { factor: *d.pick(&[2.0, 4.0]) }
            } else {
                RopeScaling::Yarn {
                    factor: 4.0,
                    original_context: 32,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    truncate: d.below(2) == 0,
                    attention_factor: 1.1,
                }
            });
        }
        if on(9) {
            c.latent_attention = Some(LatentAttention {
                q_rank: if d.below(2) == 0 { None } else { Some(d.range(2, 8)) },
                kv_rank: d.range(2, 8),
                nope_dim: 2 * d.range(1, 3),
                rope_dim: 2 * d.range(1, 2),
                value_dim: d.range(2, 6),
            });
        } else {
            if on(10) {
                c.qkv_bias = true;
                spec.attention.output_gate = false;
            }
            if on(11) {
                c.output_bias = true;
            }
        }
    }
    if c == Constructs::default() && spec.attention.rope_style == RopeStyle::Neox {
        c.embedding_scale = Some(*d.pick(&[(spec.hidden as f64).sqrt(), 2.0, 0.5]));
    }
    c
}

/// How many constructs [`constructs`] draws from.
const CONSTRUCTS: usize = 12;

/// A mixture of experts of every routing, with or without a shared expert, biases, a weight scale
/// and dense layers (all layers dense: no experts at all).
fn experts(d: &mut Draw, layers: usize) -> Experts {
    let count = 2 * d.range(1, 4);
    let mut e = Experts::new(count, d.range(1, count), d.range(2, 16));
    e.renormalize = d.below(2) == 0;
    e.shared_intermediate = if d.below(2) == 0 { None } else { Some(d.range(2, 16)) };
    e.shared_gate = d.below(2) == 0;
    e.router_bias = d.below(4) == 0;
    e.expert_bias = d.below(4) == 0;
    e.weight_scale = if d.below(4) == 0 { Some(2.5) } else { None };
    e.routing = match d.below(3) {
        0 => Routing::SoftmaxTopK,
        1 => Routing::TopKSoftmax,
        _ => {
            // Groups of at least two experts; the top k fit in the groups kept.
            let groups = if count >= 4 { *d.pick(&[1, 2]) } else { 1 };
            let keep_groups = d.range(1, groups);
            e.top_k = e.top_k.min(keep_groups * (count / groups));
            Routing::SigmoidGroupLimited { groups, keep_groups }
        }
    };
    let bits = d.byte() as usize;
    e.dense_layers = if d.below(4) == 0 { (0..layers).filter(|l| bits >> l & 1 == 1).collect() } else { vec![] };
    e
}

/// The name of each construct of `spec`, for coverage counts: `post_norm:Sandwich`, `ffn:GeGlu`, ….
pub fn construct_names(spec: &ModelSpec) -> Vec<String> {
    let c = &spec.constructs;
    let mut out = vec![];
    if c.post_norm != PostNorm::None {
        out.push(format!("post_norm:{:?}", c.post_norm));
    }
    match c.ffn {
        Ffn::SwiGlu => {}
        Ffn::GeluMlp { tanh } => out.push(format!("ffn:GeluMlp{}", if tanh { "Tanh" } else { "" })),
        Ffn::GeGlu => out.push("ffn:GeGlu".into()),
        Ffn::Relu2Mlp => out.push("ffn:Relu2Mlp".into()),
        Ffn::ClampedSwiGlu { .. } => out.push("ffn:ClampedSwiGlu".into()),
    }
    if let Some(e) = &c.experts {
        out.push(
            match e.routing {
                Routing::SoftmaxTopK => "experts:SoftmaxTopK",
                Routing::TopKSoftmax => "experts:TopKSoftmax",
                Routing::SigmoidGroupLimited { .. } => "experts:SigmoidGroupLimited",
            }
            .into(),
        );
        if e.shared_intermediate.is_some() {
            out.push("experts:shared".into());
        }
        if (0..spec.layers.len()).all(|l| !e.in_layer(l)) {
            out.push("experts:all dense".into());
        }
    }
    let flags = [
        (c.attention_sinks, "attention_sinks"),
        (c.sliding_window.is_some(), "sliding_window"),
        (c.sliding_rope.is_some(), "sliding_rope"),
        (c.embedding_scale.is_some(), "embedding_scale"),
        (c.attention_scale.is_some(), "attention_scale"),
        (c.rope_scaling.is_some(), "rope_scaling"),
        (c.latent_attention.is_some(), "latent_attention"),
        (c.qkv_bias, "qkv_bias"),
        (c.output_bias, "output_bias"),
        (spec.attention.rope_style == RopeStyle::Interleaved, "interleaved_rope"),
    ];
    out.extend(flags.into_iter().filter(|(on, _)| *on).map(|(_, n)| n.to_string()));
    out
}

/// The outcome `spec`'s authored step must have under the engine's shim without `without`, at
/// `numerics`: the first refusal in the engine's reading order, or accepted.
///
/// A recurrent state below f32 is refused before any block is read. Then the embedding (a scale);
/// then per layer: its norm (a post-norm-only layer has none: `NormAfterMixer` at the mixer norm);
/// its mixer; its add (a sandwich norm after the mixer: `NormAfterMixer`); its FFN. An attention
/// block is first searched for the constructs the attention refusal names, in its order: latent
/// attention, sinks, the layer's window, another score scale, interleaved RoPE, scaled RoPE, a bias
/// (on q/k/v or the output projection). Then it is matched: a gated block (the output gate in
/// `attn_q`) reads `merged_qkv` and `glu_act_mul`, so a shim without either is `Unfused`; an
/// ungated block reads no fused symbol. A Gated-DeltaNet block reads all four. The FFN: experts in
/// the layer (`Experts`), then a shape other than SwiGLU (`NotSwiGlu`), then `glu_act_mul` for the
/// SwiGLU product (`Unfused`).
pub(crate) fn spec_outcome(spec: &ModelSpec, without: Option<Symbol>, numerics: Numerics) -> Outcome {
    if numerics.recurrent_state != Storage::F32 {
        return Outcome::nowhere("RecurrentStateBelowF32");
    }
    let c = &spec.constructs;
    let a = &spec.attention;
    if c.embedding_scale.is_some() {
        return Outcome::at("ScaledEmbedding", Place::step(BlockKind::Embedding));
    }
    for (l, &mixer) in spec.layers.iter().enumerate() {
        if c.post_norm == PostNorm::PostOnly {
            return Outcome::at("NormAfterMixer", Place::layer(BlockKind::MixerNorm, l));
        }
        let attention = mixer == Mixer::Attention;
        let at = Place::layer(super::roles::mixer_block(mixer), l);
        let refused = |v: &str| Outcome::at(v, at);
        if attention {
            let window = c.sliding_window.as_ref().is_some_and(|w| w.layers.contains(&l));
            let named = [
                (c.latent_attention.is_some(), "LatentAttention"),
                (c.attention_sinks, "AttentionSinks"),
                (window, "SlidingWindow"),
                (c.attention_scale.is_some(), "AttentionScale"),
                (a.rope_style == RopeStyle::Interleaved, "InterleavedRope"),
                (c.rope_scaling.is_some(), "ScaledRope"),
                (c.qkv_bias || c.output_bias, "AttentionBias"),
                (
                    a.output_gate && without.is_some_and(|s| matches!(s, Symbol::MergedQkv | Symbol::GluActMul)),
                    "Unfused",
                ),
            ];
            if let Some((_, v)) = named.iter().find(|(on, _)| *on) {
                return refused(v);
            }
        } else if without.is_some() {
            return refused("Unfused");
        }
        if c.post_norm == PostNorm::Sandwich {
            return Outcome::at("NormAfterMixer", Place::layer(BlockKind::MixerAdd, l));
        }
        let ffn = Place::layer(BlockKind::Ffn, l);
        if c.experts.as_ref().is_some_and(|e| e.in_layer(l)) {
            return Outcome::at("Experts", ffn);
        }
        if c.ffn != Ffn::SwiGlu {
            return Outcome::at("NotSwiGlu", ffn);
        }
        if without == Some(Symbol::GluActMul) {
            return Outcome::at("Unfused", ffn);
        }
    }
    Outcome::Accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drawn_spec_is_valid_and_small() {
        for seed in 0..2000u32 {
            let bytes: Vec<u8> = (0..64).map(|i| (seed.wrapping_mul(2654435761).rotate_left(i) >> 3) as u8).collect();
            let mut d = Draw::new(&bytes);
            let mut s = spec(&mut d);
            s.validate().unwrap_or_else(|e| panic!("{e}: {s:?}"));
            s.constructs = constructs(&mut d, &mut s);
            s.validate().unwrap_or_else(|e| panic!("{e}: {s:?}"));
            assert!((8..=32).contains(&s.hidden) && s.vocab <= 64 && s.layers.len() <= 4);
            assert!(!construct_names(&s).is_empty(), "{s:?}");
        }
    }
}
