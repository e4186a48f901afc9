//! The value transforms llama.cpp's converter applies between a Hugging Face Qwen3.5 checkpoint and
//! a qwen35 GGUF, so that a checkpoint read from safetensors holds what the GGUF would: the rules of
//! `formats::convention` applied to values.

use crate::spec::DeltaNetSpec;

pub use formats::convention::Rule;

/// The GGUF values of an HF tensor under `rule`, whose GGUF shape is `shape`. The values must be of
/// [`Rule::source_shape`], and `d` a validated spec's Gated-DeltaNet sizes.
pub fn apply(rule: Rule, mut data: Vec<f32>, shape: &[usize], d: &DeltaNetSpec) -> Vec<f32> {
    match rule {
        Rule::Norm => data.iter_mut().for_each(|w| *w += 1.0),
        Rule::Decay => data.iter_mut().for_each(|a| *a = -a.exp()),
        _ => {}
    }
    permute(rule, data, shape, d)
}

/// The rule's moves alone (the value heads tiled), on values of any type: `apply` without its
/// arithmetic. The values must be of [`Rule::source_shape`].
pub fn permute<T: Copy>(rule: Rule, mut data: Vec<T>, shape: &[usize], d: &DeltaNetSpec) -> Vec<T> {
    let (hk, hv) = (d.key_heads, d.value_heads);
    let tile_from = |data: &mut [T], start: usize| {
        let tiled = tile_value_heads(&data[start..], hk, hv);
        data[start..].copy_from_slice(&tiled);
    };
    let cols = shape.get(1).copied().unwrap_or(1);
    match rule {
        Rule::Copy | Rule::Norm => {}
        Rule::Decay | Rule::ValueRows => tile_from(&mut data, 0),
        Rule::Conv | Rule::QkvValueRows => tile_from(&mut data, 2 * hk * d.key_dim * cols),
        Rule::ValueColumns => data.chunks_exact_mut(cols).for_each(|row| tile_from(row, 0)),
    }
    data
}

/// `blocks`, `value_heads` equal blocks in grouped order (HF: value head `h = g·r + j` uses key head
/// `g = h / r`), permuted to tiled order (qwen35 GGUF: head `h' = j·Hk + g` holds HF head
/// `g·r + j`, so value head `h'` uses key head `h' mod Hk`). `r = value_heads / key_heads`.
///
/// Precondition: `key_heads` divides `value_heads`, and `value_heads` divides `blocks.len()`.
pub fn tile_value_heads<T: Copy>(blocks: &[T], key_heads: usize, value_heads: usize) -> Vec<T> {
    debug_assert!(key_heads > 0 && value_heads.is_multiple_of(key_heads) && blocks.len().is_multiple_of(value_heads));
    let r = value_heads / key_heads;
    let size = blocks.len() / value_heads;
    (0..value_heads)
        .flat_map(|tiled| {
            let (j, g) = (tiled / key_heads, tiled % key_heads);
            let grouped = g * r + j;
            &blocks[grouped * size..(grouped + 1) * size]
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_key_heads_four_value_heads_swap_the_middle_heads() {
        // HF heads 0,1 use key head 0 and heads 2,3 key head 1; tiled, heads 0,2 use key head 0.
        assert_eq!(tile_value_heads(&['a', 'b', 'c', 'd'], 2, 4), ['a', 'c', 'b', 'd']);
        assert_eq!(tile_value_heads(&[0, 1, 2, 3, 4, 5, 6, 7], 2, 4), [0, 1, 4, 5, 2, 3, 6, 7]);
    }

    #[test]
    fn three_value_heads_per_key_head_interleave_the_groups() {
        assert_eq!(tile_value_heads(&[0, 1, 2, 3, 4, 5], 2, 6), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn tiled_head_uses_key_head_mod_hk() {
        let (hk, hv) = (3, 12);
        let key_of_grouped: Vec<usize> = (0..hv).map(|h| h / (hv / hk)).collect();
        let tiled = tile_value_heads(&key_of_grouped, hk, hv);
        assert!(tiled.iter().enumerate().all(|(h, &k)| k == h % hk));
    }

    #[test]
    fn one_value_head_per_key_head_or_one_key_head_is_the_identity() {
        assert_eq!(tile_value_heads(&[0, 1, 2, 3], 4, 4), [0, 1, 2, 3]);
        assert_eq!(tile_value_heads(&[0, 1, 2, 3], 1, 4), [0, 1, 2, 3]);
    }

    #[test]
    fn out_proj_columns_are_tiled_within_each_row() {
        let d = DeltaNetSpec { key_heads: 2, value_heads: 4, key_dim: 1, value_dim: 1, conv_kernel: 1 };
        let data: Vec<f32> = (0..8).map(|x| x as f32).collect();
        let out = apply(Rule::ValueColumns, data, &[2, 4], &d);
        assert_eq!(out, [0., 2., 1., 3., 4., 6., 5., 7.]);
    }
}
