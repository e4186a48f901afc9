//! Generated specs: small Qwen3.5-family specs of every shape the engine accepts, the constructs of
//! other families it refuses, and the outcome each must have under a shim and numerics.
//!
//! Sizes are small so that one case runs well under a millisecond: hidden 8–32, vocab 4–64, 1–4
//! layers, heads of 2–16 dims. Every layer pattern occurs (attention first, last, adjacent, absent,
//! all), value heads per key head 1–4, query heads per KV head 1–8 (MQA when there is one KV head),
//! rotary dims every even number from 0 to the head size, tied and untied heads, conv kernels 1–4.
//!
//! TODO(experts, latent attention): `Constructs::experts` and `Constructs::latent_attention` are
//! not generated because `decode_step` does not author them yet (it returns a `SpecError`). When
//! it does, add them to [`constructs`] and their refusals (`Experts` at the FFN, `LatentAttention`
//! at the attention block, before sinks and windows) to [`spec_outcome`].

use super::draw::Draw;
use super::outcome::{Outcome, Place};
use crate::engine::program::BlockKind;
use crate::engine::{Numerics, Storage};
use crate::fuse::Symbol;
use crate::ir::RopeStyle;
use crate::model::spec::{AttentionSpec, Constructs, DeltaNetSpec, Ffn, Mixer, ModelSpec, PostNorm, SlidingWindow};

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
        output_gate: true,
        qk_norm: true,
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

/// The constructs the engine has no unit for that `decode_step` writes, one alone or several mixed
/// (never none), drawn for `spec`. A sliding window is drawn only on a spec with attention layers.
pub fn constructs(d: &mut Draw, spec: &ModelSpec) -> Constructs {
    let attention: Vec<usize> =
        spec.layers.iter().enumerate().filter(|(_, m)| **m == Mixer::Attention).map(|(i, _)| i).collect();
    // Which constructs: one alone (the first byte), or a mask of several.
    let mask = if d.below(2) == 0 { 1u8 << d.below(5) } else { d.byte() % 31 + 1 };
    let mut c = Constructs::default();
    if mask & 1 != 0 {
        c.post_norm = *d.pick(&[PostNorm::Sandwich, PostNorm::PostOnly]);
    }
    if mask & 2 != 0 {
        c.ffn = *d.pick(&[
            Ffn::GeluMlp { tanh: false },
            Ffn::GeluMlp { tanh: true },
            Ffn::GeGlu,
            Ffn::Relu2Mlp,
            Ffn::ClampedSwiGlu { alpha: 1.702, limit: 7.0 },
        ]);
    }
    if mask & 4 != 0 {
        c.attention_sinks = true;
    }
    if mask & 8 != 0 && !attention.is_empty() {
        let bits = d.byte() as usize;
        let mut layers: Vec<usize> =
            attention.iter().enumerate().filter(|(i, _)| bits >> i & 1 == 1).map(|(_, &l)| l).collect();
        if layers.is_empty() {
            layers.push(attention[bits % attention.len()]);
        }
        c.sliding_window = Some(SlidingWindow { window: d.range(1, 8), layers });
    }
    if mask & 16 != 0 || c == Constructs::default() {
        c.embedding_scale = Some(*d.pick(&[(spec.hidden as f64).sqrt(), 2.0, 0.5]));
    }
    c
}

/// The name of each construct `c` holds, for coverage counts: `post_norm:Sandwich`, `ffn:GeGlu`, ….
pub fn construct_names(c: &Constructs) -> Vec<String> {
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
    if c.attention_sinks {
        out.push("attention_sinks".into());
    }
    if c.sliding_window.is_some() {
        out.push("sliding_window".into());
    }
    if c.embedding_scale.is_some() {
        out.push("embedding_scale".into());
    }
    out
}

/// The outcome `spec`'s authored step must have under the engine's shim without `without`, at
/// `numerics`: the first refusal in the engine's reading order, or accepted.
///
/// A recurrent state below f32 is refused before any block is read. Then the embedding (a scale);
/// then per layer: its norm (a post-norm-only layer has none: `NormAfterMixer` at the mixer norm);
/// its mixer (an attention block's sinks, then its window, both recognised before the block is
/// matched; then a fused symbol the block needs and the shim does not take: `Unfused`); its add (a
/// sandwich norm after the mixer: `NormAfterMixer`); its FFN (not SwiGLU: `NotSwiGlu`). Both mixers
/// read `merged_qkv` and `glu_act_mul` (the output gate; the gated norm), a Gated-DeltaNet block
/// also `conv_bias_silu` and `gdn_gating`; so a shim without a symbol is refused at the first layer
/// whose mixer reads it, and never at an FFN, which a mixer always precedes.
pub fn spec_outcome(spec: &ModelSpec, without: Option<Symbol>, numerics: Numerics) -> Outcome {
    if numerics.recurrent_state != Storage::F32 {
        return Outcome::nowhere("RecurrentStateBelowF32");
    }
    let c = &spec.constructs;
    if c.embedding_scale.is_some() {
        return Outcome::at("ScaledEmbedding", Place::step(BlockKind::Embedding));
    }
    for (l, &mixer) in spec.layers.iter().enumerate() {
        if c.post_norm == PostNorm::PostOnly {
            return Outcome::at("NormAfterMixer", Place::layer(BlockKind::MixerNorm, l));
        }
        let block = match mixer {
            Mixer::DeltaNet => BlockKind::DeltaNet,
            Mixer::Attention => BlockKind::Attention,
        };
        if mixer == Mixer::Attention {
            if c.attention_sinks {
                return Outcome::at("AttentionSinks", Place::layer(block, l));
            }
            if c.sliding_window.as_ref().is_some_and(|w| w.layers.contains(&l)) {
                return Outcome::at("SlidingWindow", Place::layer(block, l));
            }
        }
        let reads = |s: Symbol| match mixer {
            Mixer::Attention => matches!(s, Symbol::MergedQkv | Symbol::GluActMul),
            Mixer::DeltaNet => true,
        };
        if without.is_some_and(reads) {
            return Outcome::at("Unfused", Place::layer(block, l));
        }
        if c.post_norm == PostNorm::Sandwich {
            return Outcome::at("NormAfterMixer", Place::layer(BlockKind::MixerAdd, l));
        }
        if c.ffn != Ffn::SwiGlu {
            return Outcome::at("NotSwiGlu", Place::layer(BlockKind::Ffn, l));
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
            s.constructs = constructs(&mut d, &s);
            s.validate().unwrap_or_else(|e| panic!("{e}: {s:?}"));
            assert!((8..=32).contains(&s.hidden) && s.vocab <= 64 && s.layers.len() <= 4);
            assert!(!construct_names(&s.constructs).is_empty());
        }
    }
}
