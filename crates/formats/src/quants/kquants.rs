//! ggml's k-quants: super-blocks of 256 values (ggml's `QK_K`) in sub-blocks of 16 or 32, each
//! sub-block with its own small integer scale (and, for Q2_K, Q4_K and Q5_K, its own minimum), all
//! multiplied by the super-block's f16 scale `d` (and minimum scale `dmin`).
//!
//! Value `v` of a super-block is always `(d · scale_s) · q_v`, minus `dmin · min_s` where the format
//! has minimums, for the sub-block `s` that holds `v`; the formats differ in how the quants and the
//! sub-block scales are packed, which each function's comment states.

use super::{QuantError, decode_blocks, f16_at};

/// Values per super-block (ggml's `QK_K`).
pub const BLOCK_VALUES: usize = 256;

/// Q2_K (`block_q2_K`, 84 bytes): 16 bytes of sub-block scales, 64 bytes of 2-bit quants, f16 `d`,
/// f16 `dmin`. Sub-block `s = v / 16` has scale `scales[s] & 15` and minimum `scales[s] >> 4`. In
/// each half `h = v / 128` of the block, value `w = v % 128` is the 2 bits at `2 · (w / 32)` of byte
/// `32h + w % 32`. Value `v` is `(d · scale) · q − dmin · min`.
pub(crate) fn dequantize_q2_k(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<84, BLOCK_VALUES>("Q2_K", data, |b, out| {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        for (v, y) in out.iter_mut().enumerate() {
            let sc = scales[v / 16];
            let scale = d * f32::from(sc & 0x0F);
            let min = dmin * f32::from(sc >> 4);
            let (h, w) = (v / 128, v % 128);
            let q = (qs[32 * h + w % 32] >> (2 * (w / 32))) & 3;
            *y = scale * f32::from(q) - min;
        }
    })
}

/// Q3_K (`block_q3_K`, 110 bytes): 32 bytes `hmask`, 64 bytes of 2-bit low quants, 12 bytes of
/// 6-bit sub-block scales, f16 `d`. The low 2 bits of value `v` are packed as Q2_K's; its third bit
/// is bit `v / 32` of `hmask[v % 32]`, and the quant is the low bits minus 4 where that bit is
/// clear. Sub-block `s = v / 16` has the scale whose low 4 bits are nibble `s / 8` of byte `s % 8`
/// and whose high 2 bits are the bits at `2 · (s / 4)` of byte `8 + s % 4`, minus 32. Value `v` is
/// `(d · scale) · q`.
pub(crate) fn dequantize_q3_k(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<110, BLOCK_VALUES>("Q3_K", data, |b, out| {
        let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
        let d = f16_at(b, 108);
        for (v, y) in out.iter_mut().enumerate() {
            let s = v / 16;
            let low = (scales[s % 8] >> (4 * (s / 8))) & 0x0F;
            let high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            let scale = d * f32::from(i16::from(low | (high << 4)) - 32);
            let (h, w) = (v / 128, v % 128);
            let low_bits = (qs[32 * h + w % 32] >> (2 * (w / 32))) & 3;
            let third_bit = (hmask[v % 32] >> (v / 32)) & 1;
            let q = i16::from(low_bits) - if third_bit == 0 { 4 } else { 0 };
            *y = scale * f32::from(q);
        }
    })
}

/// Q4_K (`block_q4_K`, 144 bytes): f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and minimums
/// (see [`scale_min`]), then 128 bytes of 4-bit quants. The values come in 4 chunks of 64, chunk
/// `c` from bytes `32c .. 32c + 32`: its first 32 values are their low nibbles, the next 32 their
/// high nibbles. Sub-block `s = v / 32`; value `v` is `(d · scale_s) · q − dmin · min_s`.
pub(crate) fn dequantize_q4_k(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<144, BLOCK_VALUES>("Q4_K", data, |b, out| {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (scales, qs) = (&b[4..16], &b[16..]);
        for (v, y) in out.iter_mut().enumerate() {
            let s = v / 32;
            let (sc, m) = scale_min(scales, s);
            let q = (qs[32 * (v / 64) + v % 32] >> (4 * (s % 2))) & 0x0F;
            *y = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
        }
    })
}

/// Q5_K (`block_q5_K`, 176 bytes): f16 `d`, f16 `dmin`, 12 bytes of scales and minimums (as
/// Q4_K's), 32 bytes `qh`, then 128 bytes of low nibbles packed as Q4_K's quants. The fifth bit of
/// value `v` is bit `v / 32` of `qh[v % 32]`. Value `v` is `(d · scale_s) · q − dmin · min_s`,
/// `s = v / 32`.
pub(crate) fn dequantize_q5_k(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<176, BLOCK_VALUES>("Q5_K", data, |b, out| {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..]);
        for (v, y) in out.iter_mut().enumerate() {
            let s = v / 32;
            let (sc, m) = scale_min(scales, s);
            let low = (qs[32 * (v / 64) + v % 32] >> (4 * (s % 2))) & 0x0F;
            let fifth = (qh[v % 32] >> s) & 1;
            let q = low | (fifth << 4);
            *y = d * f32::from(sc) * f32::from(q) - dmin * f32::from(m);
        }
    })
}

/// Q6_K (`block_q6_K`, 210 bytes): 128 bytes `ql` of low nibbles, 64 bytes `qh` of high 2-bit
/// pairs, 16 i8 sub-block scales, f16 `d`. In each half `h = v / 128`, value `w = v % 128` takes
/// nibble `w / 64` of `ql[64h + w % 64]` and, as bits 4 and 5, the 2 bits at `2 · (w / 32)` of
/// `qh[32h + w % 32]`; the quant is that minus 32. Value `v` is `(d · scales[v / 16]) · q`.
pub(crate) fn dequantize_q6_k(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<210, BLOCK_VALUES>("Q6_K", data, |b, out| {
        let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for (v, y) in out.iter_mut().enumerate() {
            let (h, w) = (v / 128, v % 128);
            let low = (ql[64 * h + w % 64] >> (4 * (w / 64))) & 0x0F;
            let high = (qh[32 * h + w % 32] >> (2 * (w / 32))) & 3;
            let q = i16::from(low | (high << 4)) - 32;
            *y = d * f32::from(scales[v / 16] as i8) * f32::from(q);
        }
    })
}

/// Each value's subtracted term `dmin · min_s` of Q4_K blocks (144 bytes) or Q5_K blocks (176
/// bytes; the same fields at the same place), as the decoders compute it in f32. A value is the
/// difference of two products, so a reader that sums the products apart (llama.cpp's integer dot
/// products against Q8_K inputs) handles terms as large as `|value| + 2·|dmin · min_s|`: the check
/// bounds that reader's rounding on them.
pub fn q45_k_minimums(data: &[u8], q5: bool) -> Result<Vec<f32>, QuantError> {
    fn each<const B: usize>(b: &[u8; B], out: &mut [f32; BLOCK_VALUES]) {
        let dmin = f16_at(b, 2);
        for (v, y) in out.iter_mut().enumerate() {
            *y = dmin * f32::from(scale_min(&b[4..16], v / 32).1);
        }
    }
    if q5 {
        decode_blocks::<176, BLOCK_VALUES>("Q5_K", data, each)
    } else {
        decode_blocks::<144, BLOCK_VALUES>("Q4_K", data, each)
    }
}

/// The 6-bit scale and minimum of sub-block `s` (of 8) from Q4_K's and Q5_K's 12 bytes (ggml's
/// `get_scale_min_k4`). Sub-blocks 0–3 keep theirs in the low 6 bits of bytes `s` (scale) and
/// `4 + s` (minimum); sub-blocks 4–7 keep their low 4 bits in the low (scale) and high (minimum)
/// nibble of byte `8 + s − 4`, and their high 2 bits in the top 2 bits of bytes `s − 4` and `s`.
fn scale_min(scales: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (scales[s] & 0x3F, scales[4 + s] & 0x3F)
    } else {
        let packed = scales[4 + s];
        let scale = (packed & 0x0F) | ((scales[s - 4] >> 6) << 4);
        let min = (packed >> 4) | ((scales[s] >> 6) << 4);
        (scale, min)
    }
}
