//! ggml's non-linear 4-bit formats: each 4-bit quant indexes a fixed table of 16 levels
//! ([`KVALUES`], ggml's `kvalues_iq4nl`) instead of standing for itself.
//!
//! IQ4_NL blocks are 32 values under one f16 scale, its nibbles packed as Q4_0's; IQ4_XS
//! super-blocks are 256 values in 8 sub-blocks of 32, each with a 6-bit scale.

use super::{QuantError, decode_blocks, f16_at};

/// The 16 levels a 4-bit quant of IQ4_NL and IQ4_XS stands for (ggml's `kvalues_iq4nl`).
pub(crate) const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// IQ4_NL (`block_iq4_nl`, 18 bytes, 32 values): f16 `d`, then 16 bytes of nibbles, value `j` the
/// low nibble of byte `j` for `j < 16` and the high nibble of byte `j − 16` after. Value `j` is
/// `d · KVALUES[q_j]`.
pub(crate) fn dequantize_iq4_nl(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<18, 32>("IQ4_NL", data, |b, out| {
        let d = f16_at(b, 0);
        for (j, y) in out.iter_mut().enumerate() {
            *y = d * level(b[2 + j % 16] >> (4 * (j / 16)));
        }
    })
}

/// IQ4_XS (`block_iq4_xs`, 136 bytes, 256 values): f16 `d`, a little-endian u16 `scales_h`, 4 bytes
/// `scales_l`, then 128 bytes of nibbles. Sub-block `s = v / 32` has the scale whose low 4 bits are
/// nibble `s % 2` of `scales_l[s / 2]` and whose high 2 bits are the bits at `2s` of `scales_h`,
/// minus 32; its 32 values are the nibbles of bytes `16s .. 16s + 16`, low nibbles first. Value `v`
/// is `(d · scale_s) · KVALUES[q_v]`.
pub(crate) fn dequantize_iq4_xs(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<136, 256>("IQ4_XS", data, |b, out| {
        let d = f16_at(b, 0);
        let scales_h = u16::from_le_bytes([b[2], b[3]]);
        let (scales_l, qs) = (&b[4..8], &b[8..]);
        for (v, y) in out.iter_mut().enumerate() {
            let (s, w) = (v / 32, v % 32);
            let low = (scales_l[s / 2] >> (4 * (s % 2))) & 0x0F;
            let high = ((scales_h >> (2 * s)) & 3) as u8;
            let scale = d * f32::from(i16::from(low | (high << 4)) - 32);
            *y = scale * level(qs[16 * s + w % 16] >> (4 * (w / 16)));
        }
    })
}

/// The level the low 4 bits of `q` stand for.
fn level(q: u8) -> f32 {
    f32::from(KVALUES[usize::from(q & 0x0F)])
}
