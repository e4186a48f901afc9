//! Finite weights: the scan that finds the first value of a tensor that is not a number or is
//! infinite, so that a checkpoint holding one is refused by name before anything reads it.
//!
//! Every bit pattern of a block decodes (`crate::quants`), so a NaN or infinite block scale, a NaN
//! BF16 value or an infinite F16 one is no malformed input: it is a value, and a step that reads it
//! computes NaN wherever it reaches. A value no token happens to read would let two runs agree on a
//! checkpoint no engine should run. The scan decodes every value exactly as a reader would (a
//! scale's NaN shows as the NaN of the values of its block), a bounded number of rows at a time.

use crate::checkpoint::{Tensor, TensorError};

/// The first value of a tensor that is not finite: its row, its index in the row, the block of
/// the stored type that holds it, and the value as decoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFinite {
    pub row: usize,
    pub column: usize,
    /// The index of the value's block in its row, for a block type (`None` for F32, F16, BF16).
    pub block: Option<usize>,
    pub value: f32,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "row {}, value {}", self.row, self.column)?;
        if let Some(b) = self.block {
            write!(f, " (block {b} of the row)")?;
        }
        write!(f, " is {}", self.value)
    }
}

/// The values decoded at once: a bound on the scan's memory, whatever the tensor's size.
const VALUES_AT_ONCE: usize = 1 << 20;

/// The first value of `tensor` that is not finite, in row-major order, or `None` when every value
/// is finite.
pub fn first_non_finite(tensor: &Tensor) -> Result<Option<NonFinite>, TensorError> {
    let rows = tensor.rows()?;
    let per_block = tensor.ty().block().map_or(1, |(n, _)| n as usize);
    let rows_at_once = (VALUES_AT_ONCE / rows.cols.max(1)).max(1);
    let mut start = 0;
    while start < rows.rows {
        let end = rows.rows.min(start + rows_at_once);
        let values = tensor.decode_rows(start..end)?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            let (row, column) = (start + i / rows.cols, i % rows.cols);
            let block = (per_block > 1).then_some(column / per_block);
            return Ok(Some(NonFinite { row, column, block, value: values[i] }));
        }
        start = end;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Bytes;
    use crate::gguf::GgmlType;
    use half::f16;

    #[test]
    fn an_f32_tensor_of_finite_values_has_none() {
        let t = Tensor::f32(vec![2, 3], &[1.0, -2.0, 0.0, 3e38, -3e38, 1e-45]);
        assert_eq!(first_non_finite(&t), Ok(None));
    }

    #[test]
    fn the_first_nan_or_infinity_is_found_by_row_and_column() {
        let t = Tensor::f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, f32::INFINITY, f32::NAN]);
        let found = first_non_finite(&t).expect("reads").expect("finds");
        assert_eq!((found.row, found.column, found.block), (1, 1, None));
        assert_eq!(found.value, f32::INFINITY);
        assert_eq!(found.to_string(), "row 1, value 1 is inf");
    }

    #[test]
    fn a_q8_0_block_with_a_nan_scale_is_found_in_its_block() {
        // Two rows of two Q8_0 blocks; the second block of the second row has a NaN scale.
        let mut bytes = vec![0u8; 4 * 34];
        for b in 0..4 {
            bytes[b * 34..b * 34 + 2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
            bytes[b * 34 + 2..b * 34 + 34].fill(1);
        }
        bytes[3 * 34..3 * 34 + 2].copy_from_slice(&f16::NAN.to_le_bytes());
        let t = Tensor::stored(vec![2, 64], GgmlType::Q8_0, Bytes::owned(bytes));
        let found = first_non_finite(&t).expect("reads").expect("finds");
        assert_eq!((found.row, found.column, found.block), (1, 32, Some(1)));
        assert!(found.value.is_nan());
        assert_eq!(found.to_string(), "row 1, value 32 (block 1 of the row) is NaN");
    }

    #[test]
    fn a_tensor_larger_than_one_read_is_scanned_to_its_last_value() {
        let rows = 3 * VALUES_AT_ONCE / 1024 + 1;
        let mut values = vec![0.25f32; rows * 1024];
        let last = values.len() - 1;
        values[last] = f32::NEG_INFINITY;
        let t = Tensor::f32(vec![rows, 1024], &values);
        let found = first_non_finite(&t).expect("reads").expect("finds");
        assert_eq!((found.row, found.column), (rows - 1, 1023));
    }
}
