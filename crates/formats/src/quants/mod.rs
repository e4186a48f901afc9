//! ggml's quantized block formats, decoded to f32 exactly as ggml dequantizes them.
//!
//! A quantized tensor is a run of blocks of one format, each a fixed number of values packed into a
//! fixed number of bytes: small integers (2 to 8 bits) and one or more f16 scales that turn them
//! back into values. The layouts and the arithmetic are ggml's (`ggml-common.h`'s `block_*` structs,
//! `ggml-quants.c`'s `dequantize_row_*`), as gguf-py's `gguf.quants.dequantize` restates them; the
//! committed fixtures of `reference/make_quant_fixtures.py` hold gguf-py's values, and each decoder
//! here gives the same f32 bits.
//!
//! The rules every decoder keeps:
//!
//! - Each value is computed in f32 with one rounding per operation, in the order ggml and gguf-py
//!   compute it (a scale times a sub-block scale first, then times the quant, then the offset), and
//!   never with a fused multiply-add, which would round once where they round twice.
//! - Every bit pattern of a block is a block. ggml's decoders give each one a value, non-finite
//!   scales included (a NaN or infinite scale gives NaN or infinite values). ggml's
//!   `ggml_validate_row_data`, which llama.cpp runs after its own quantizer and on loading only under
//!   `--check-tensors`, refuses non-finite scales, and non-finite F16 and F32 values alike: that is a
//!   check on values, not part of the format, and this reader does not make it.
//! - So the one malformed input is a byte run that does not end on a block boundary, a
//!   [`QuantError::PartialBlock`]. (A tensor whose rows do not fill whole blocks is refused before
//!   any byte is read, by the GGUF reader's `PartialBlock`.)
//!
//! One file per family: [`legacy`] the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
//! [`kquants`] the 256-value k-quants (Q2_K to Q6_K), [`iq4`] the non-linear 4-bit formats (IQ4_NL,
//! IQ4_XS).

pub mod iq4;
pub mod kquants;
pub mod legacy;

use half::f16;

/// Why a byte run is not a whole number of blocks of a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("{format} blocks take {block_bytes} bytes each, but {len} bytes end {} bytes into a block", len % block_bytes)]
    PartialBlock { format: &'static str, len: usize, block_bytes: usize },
}

/// The values of `data` read as whole blocks of `B` bytes, each decoded by `block` into `N` values,
/// in block order. `format` names the format for the error.
pub(crate) fn decode_blocks<const B: usize, const N: usize>(
    format: &'static str,
    data: &[u8],
    block: fn(&[u8; B], &mut [f32; N]),
) -> Result<Vec<f32>, QuantError> {
    let (blocks, rest) = data.as_chunks::<B>();
    if !rest.is_empty() {
        return Err(QuantError::PartialBlock { format, len: data.len(), block_bytes: B });
    }
    let mut out = vec![0f32; blocks.len() * N];
    for (b, values) in blocks.iter().zip(out.as_chunks_mut::<N>().0) {
        block(b, values);
    }
    Ok(out)
}

/// The little-endian f16 at bytes `at` and `at + 1` of `bytes`, widened (exactly) to f32.
fn f16_at<const B: usize>(bytes: &[u8; B], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}
