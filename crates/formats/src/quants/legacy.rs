//! ggml's first quantized formats: blocks of 32 values with one f16 scale (Q4_0, Q5_0, Q8_0) or a
//! scale and a minimum (Q4_1, Q5_1).
//!
//! The 4-bit quants of a block are packed two to a byte in 16 bytes: value `j < 16` is the low
//! nibble of byte `j`, value `16 + j` its high nibble. The 5-bit formats add a little-endian u32
//! whose bit `j` is the fifth bit of value `j`. The symmetric formats subtract the middle of the
//! range (8, 16) and multiply by the scale `d`; the asymmetric ones multiply the unsigned quant by
//! `d` and then add the minimum `m`.

use super::{QuantError, decode_blocks, f16_at};

/// Values per block of every format here (ggml's `QK4_0`, `QK4_1`, `QK5_0`, `QK5_1`, `QK8_0`).
pub const BLOCK_VALUES: usize = 32;

/// Q4_0 (`block_q4_0`, 18 bytes): f16 `d`, then 16 bytes of 4-bit quants; value `j` is `d · (q_j − 8)`.
pub(crate) fn dequantize_q4_0(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<18, BLOCK_VALUES>("Q4_0", data, |b, out| {
        let d = f16_at(b, 0);
        for (j, y) in out.iter_mut().enumerate() {
            *y = d * (f32::from(nibble(&b[2..], j)) - 8.0);
        }
    })
}

/// Q4_1 (`block_q4_1`, 20 bytes): f16 `d`, f16 `m`, then 16 bytes of 4-bit quants; value `j` is
/// `d · q_j + m`.
pub(crate) fn dequantize_q4_1(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<20, BLOCK_VALUES>("Q4_1", data, |b, out| {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for (j, y) in out.iter_mut().enumerate() {
            *y = d * f32::from(nibble(&b[4..], j)) + m;
        }
    })
}

/// Q5_0 (`block_q5_0`, 22 bytes): f16 `d`, a u32 of fifth bits, then 16 bytes of low nibbles;
/// value `j` is `d · (q_j − 16)`.
pub(crate) fn dequantize_q5_0(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<22, BLOCK_VALUES>("Q5_0", data, |b, out| {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for (j, y) in out.iter_mut().enumerate() {
            *y = d * (f32::from(five_bits(qh, &b[6..], j)) - 16.0);
        }
    })
}

/// Q5_1 (`block_q5_1`, 24 bytes): f16 `d`, f16 `m`, a u32 of fifth bits, then 16 bytes of low
/// nibbles; value `j` is `d · q_j + m`.
pub(crate) fn dequantize_q5_1(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<24, BLOCK_VALUES>("Q5_1", data, |b, out| {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for (j, y) in out.iter_mut().enumerate() {
            *y = d * f32::from(five_bits(qh, &b[8..], j)) + m;
        }
    })
}

/// Q8_0 (`block_q8_0`, 34 bytes): f16 `d`, then 32 i8 quants; value `j` is `d · q_j`.
pub(crate) fn dequantize_q8_0(data: &[u8]) -> Result<Vec<f32>, QuantError> {
    decode_blocks::<34, BLOCK_VALUES>("Q8_0", data, |b, out| {
        let d = f16_at(b, 0);
        for (y, &q) in out.iter_mut().zip(&b[2..]) {
            *y = d * f32::from(q as i8);
        }
    })
}

/// The 4-bit quant of value `j` of a block whose 16 bytes of nibbles are `qs`: the low nibble of
/// byte `j` for `j < 16`, the high nibble of byte `j − 16` after.
fn nibble(qs: &[u8], j: usize) -> u8 {
    (qs[j % 16] >> (4 * (j / 16))) & 0x0F
}

/// The 5-bit quant of value `j`: its nibble from `qs`, with bit `j` of `qh` as its fifth bit.
fn five_bits(qh: u32, qs: &[u8], j: usize) -> u8 {
    nibble(qs, j) | ((((qh >> j) & 1) as u8) << 4)
}
