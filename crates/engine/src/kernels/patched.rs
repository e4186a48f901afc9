//! The planted kernel bugs ([`planted`]), asked for once per matvec on the thread that calls
//! it ([`super::matmat_with`]) and carried into the work as a patched copy: the real kernels, on
//! every path and on whatever threads the rows go to, run on bytes (and, for a dropped tail, rows
//! and vectors) that make them compute exactly what the bug would. Nothing here is compiled into
//! a build without the `planted` feature, and nothing here touches the rows the check's own runs
//! read ([`super::Matrix::dequantize_row`]): only the engine's f32 matvecs carry the bug.

use super::Matrix;
use formats::gguf::GgmlType;
use planted::{Bug, is};

/// A matrix (and its vectors) as a planted bug makes the kernels read it.
pub(super) struct Patched {
    bytes: Vec<u8>,
    cols: usize,
    row_bytes: usize,
    /// The vectors, where the bug reads fewer of their values (a dropped tail).
    xs: Option<Vec<f32>>,
}

impl Patched {
    /// What the bug planted on this thread makes of `m` and its vectors `xs` (`m.cols()` values
    /// each), or `None` when no bug is planted that touches a matrix of `m`'s type and shape.
    pub(super) fn of(m: &Matrix, xs: &[f32]) -> Option<Patched> {
        use GgmlType as T;
        let ty = m.ty;
        if matches!(ty, T::F32 | T::F16 | T::BF16) {
            return (!m.cols.is_multiple_of(8) && is(Bug::EngineSimdTailDropped)).then(|| dropped_tail(m, xs));
        }
        // What the bug does to a row's blocks.
        let patch: fn(&mut [&mut [u8]]) = match ty {
            T::Q8_0 if is(Bug::EngineQ8_0NeighbourScale) => |b| previous_blocks(b, 0..2),
            T::Q4_K if is(Bug::EngineQ4KNeighbourScale) => |b| previous_blocks(b, 0..4),
            T::Q5_K if is(Bug::EngineQ5KNeighbourScale) => |b| previous_blocks(b, 0..4),
            T::Q6_K if is(Bug::EngineQ6KNeighbourScale) => |b| b.iter_mut().for_each(|b| neighbour_scales(b)),
            T::Q4_K | T::Q5_K if is(Bug::EngineKquantMinScaledByD) => {
                |b| b.iter_mut().for_each(|b| b.copy_within(0..2, 2))
            }
            _ => return None,
        };
        let block = ty.block().map_or(1, |(_, bytes)| bytes as usize);
        let mut bytes = m.bytes.to_vec();
        if m.row_bytes > 0 {
            for row in bytes.chunks_exact_mut(m.row_bytes) {
                patch(&mut row.chunks_exact_mut(block).collect::<Vec<_>>());
            }
        }
        Some(Patched { bytes, cols: m.cols, row_bytes: m.row_bytes, xs: None })
    }

    /// The patched matrix, of `m`'s type, rows and input rule.
    pub(super) fn matrix<'p>(&'p self, m: &Matrix) -> Matrix<'p> {
        Matrix { bytes: &self.bytes, cols: self.cols, row_bytes: self.row_bytes, ..*m }
    }

    /// The vectors the patched matrix reads (`xs` itself unless the bug shortened them).
    pub(super) fn xs<'a>(&'a self, xs: &'a [f32]) -> &'a [f32] {
        self.xs.as_deref().unwrap_or(xs)
    }
}

/// [`Bug::EngineSimdTailDropped`]: every row and vector without its last value, so that each dot
/// product is the correct kernel's without that one product. On a SIMD path the first
/// `cols − cols % 8` values go through the very same chains as the whole row's (`cols − 1` has the
/// same whole groups of 8), and the tail loop stops one value early; the scalar path's in-order
/// sum stops one product early too, so the plant shows on every machine.
fn dropped_tail(m: &Matrix, xs: &[f32]) -> Patched {
    let width = m.row_bytes / m.cols;
    let (cols, row_bytes) = (m.cols - 1, m.row_bytes - width);
    let bytes = m.bytes.chunks_exact(m.row_bytes).flat_map(|row| &row[..row_bytes]).copied().collect();
    let xs = xs.chunks_exact(m.cols).flat_map(|x| &x[..cols]).copied().collect();
    Patched { bytes, cols, row_bytes, xs: Some(xs) }
}

/// A row's blocks each given its previous block's bytes `field` (its `d`, or `d` and `dmin`);
/// block 0 takes the row's last block's.
fn previous_blocks(blocks: &mut [&mut [u8]], field: std::ops::Range<usize>) {
    let own: Vec<Vec<u8>> = blocks.iter().map(|b| b[field.clone()].to_vec()).collect();
    let n = own.len();
    for (k, b) in blocks.iter_mut().enumerate() {
        b[field.clone()].copy_from_slice(&own[(k + n - 1) % n]);
    }
}

/// A Q6_K block whose sub-block `s` reads its neighbour's scale, `scales[s ^ 1]` (its 16 i8 scales
/// at bytes 192–207, each pair swapped).
fn neighbour_scales(block: &mut [u8]) {
    for pair in block[192..208].chunks_exact_mut(2) {
        pair.swap(0, 1);
    }
}
