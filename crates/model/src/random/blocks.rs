//! Random blocks of ggml's quantized types, with bounded, finite scales that differ block by block.
//!
//! A random block is random bytes whose f16 scale fields (`d`, and `dmin` or `m` where the format
//! has one) are overwritten with finite values chosen for the tensor, each moved by a factor of its
//! own block. Every value of a block is linear in those fields, so they are chosen by measuring
//! random blocks once: the second field (when there is one) cancels the first one's mean, and both
//! are scaled so that the values' root mean square is the one the tensor's f32 draw has
//! (`1/√fan_in` for a matrix).
//!
//! **No field is the same in every block**, so that a kernel that reads another block's scale or
//! minimum computes something else. Each f16 field of a block is its tensor's value times a factor
//! in `[0.5, 1.5)` read from the 16 random bits the field held (each field its own factor, its sign
//! kept; the measurement above sees the same factors, so the root mean square and the cancelled
//! mean hold with them over the tensor, while a block's own mean moves with its two factors). Every other byte is random: the sub-block scales and minimums (Q2_K's 16
//! bytes, Q3_K's and Q4_K's and Q5_K's 12 packed bytes, Q6_K's 16 i8 scales, IQ4_XS's `scales_h` and
//! `scales_l`), the high bits (Q5_0's and Q5_1's `qh`, Q3_K's `hmask`, Q5_K's `qh`, Q6_K's `qh`) and
//! the quants. Every value of a block is finite: its fields are finite and small (they give the
//! values a root mean square of at most 1).

use half::f16;

use super::super::layout::Init;
use super::splitmix;
use formats::gguf::GgmlType;

/// Where each quantized type keeps its f16 scale fields: the byte offsets in its block (ggml's
/// `block_*` structs). The first is `d`; the second, where there is one, the minimum's scale.
const SCALE_FIELDS: [(GgmlType, &[usize]); 12] = [
    (GgmlType::Q4_0, &[0]),
    (GgmlType::Q4_1, &[0, 2]),
    (GgmlType::Q5_0, &[0]),
    (GgmlType::Q5_1, &[0, 2]),
    (GgmlType::Q8_0, &[0]),
    (GgmlType::Q2_K, &[80, 82]),
    (GgmlType::Q3_K, &[108]),
    (GgmlType::Q4_K, &[0, 2]),
    (GgmlType::Q5_K, &[0, 2]),
    (GgmlType::Q6_K, &[208]),
    (GgmlType::IQ4_NL, &[0]),
    (GgmlType::IQ4_XS, &[0]),
];

/// Blocks measured to choose a tensor's scales.
const SAMPLE_BLOCKS: usize = 64;

/// How a tensor's random blocks are made: its type's block size, where the scale fields are, and
/// the value each is drawn around.
#[derive(Clone, Debug)]
pub(crate) struct Scales {
    block_bytes: usize,
    fields: &'static [usize],
    values: Vec<f32>,
}

impl Scales {
    /// The scales of a tensor of quantized type `ty` drawn as `init` says, or `None` for a float
    /// type.
    pub fn of(ty: GgmlType, init: Init) -> Option<Scales> {
        let &(_, fields) = SCALE_FIELDS.iter().find(|(t, _)| *t == ty)?;
        let (_, block_bytes) = ty.block()?;
        let decode = ty.decoder()?;
        let block_bytes = block_bytes as usize;
        let sample = |values: &[f32]| {
            let s = Scales { block_bytes, fields, values: values.to_vec() };
            let mut bytes = vec![0u8; SAMPLE_BLOCKS * block_bytes];
            s.fill(&mut bytes, 0x5eed);
            let v = decode(&bytes).unwrap_or_default();
            let n = v.len().max(1) as f64;
            let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
            let rms = (v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / n).sqrt();
            (mean, rms)
        };
        // The minimum's scale that cancels `d`'s mean, where the format has a minimum.
        let factor = match fields.len() {
            2 => {
                let (mean_d, _) = sample(&[1.0, 0.0]);
                let (mean_m, _) = sample(&[0.0, 1.0]);
                if mean_m != 0.0 { -mean_d / mean_m } else { 0.0 }
            }
            _ => 0.0,
        };
        let (_, rms) = sample(&[1.0, factor as f32]);
        let target = match init {
            Init::Matrix { fan_in } => 1.0 / (fan_in.max(1) as f64).sqrt(),
            _ => 0.5,
        };
        let c = if rms > 0.0 { target / rms } else { 0.0 };
        let values = [c, c * factor];
        Some(Scales { block_bytes, fields, values: values[..fields.len()].iter().map(|&v| v as f32).collect() })
    }

    /// Fills `bytes`, whole blocks, with random bytes from the stream `state`, each block's scale
    /// fields set: field `i` to `values[i]` times the block's own factor in `[0.5, 1.5)`, read from
    /// the random bits the field held.
    pub fn fill(&self, bytes: &mut [u8], mut state: u64) {
        for word in bytes.chunks_mut(8) {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let r = splitmix(state).to_le_bytes();
            word.copy_from_slice(&r[..word.len()]);
        }
        for block in bytes.chunks_exact_mut(self.block_bytes) {
            for (&at, &value) in self.fields.iter().zip(&self.values) {
                let bits = u16::from_le_bytes([block[at], block[at + 1]]);
                let factor = 0.5 + f32::from(bits) / 65536.0;
                block[at..at + 2].copy_from_slice(&f16::from_f32(value * factor).to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of each type's block that hold its sub-block scales and minimums and its high bits
    /// (ggml's `block_*` structs), as `(offset, length)`: each must differ between blocks as its f16
    /// fields must.
    const PACKED: [(GgmlType, &[(usize, usize)]); 12] = [
        (GgmlType::Q4_0, &[]),
        (GgmlType::Q4_1, &[]),
        (GgmlType::Q5_0, &[(2, 4)]),
        (GgmlType::Q5_1, &[(4, 4)]),
        (GgmlType::Q8_0, &[]),
        (GgmlType::Q2_K, &[(0, 16)]),
        (GgmlType::Q3_K, &[(0, 32), (96, 12)]),
        (GgmlType::Q4_K, &[(4, 12)]),
        (GgmlType::Q5_K, &[(4, 12), (16, 32)]),
        (GgmlType::Q6_K, &[(128, 64), (192, 16)]),
        (GgmlType::IQ4_NL, &[]),
        (GgmlType::IQ4_XS, &[(2, 6)]),
    ];

    /// Blocks of a test tensor.
    const BLOCKS: usize = 12;

    #[test]
    fn every_scale_field_and_packed_byte_differs_between_blocks() {
        for (ty, packed) in PACKED {
            let s = Scales::of(ty, Init::Matrix { fan_in: 1024 }).expect("a quantized type");
            let mut bytes = vec![0u8; BLOCKS * s.block_bytes];
            s.fill(&mut bytes, 0xb10c);
            let blocks: Vec<&[u8]> = bytes.chunks_exact(s.block_bytes).collect();
            let distinct = |at: usize, len: usize| {
                let mut seen: Vec<&[u8]> = blocks.iter().map(|b| &b[at..at + len]).collect();
                seen.sort();
                seen.dedup();
                seen.len()
            };
            for (&at, &value) in s.fields.iter().zip(&s.values) {
                assert!(distinct(at, 2) > BLOCKS / 2, "{ty}: the f16 field at {at} hardly varies");
                for b in &blocks {
                    let v = f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
                    let ratio = v / value;
                    assert!(v.is_finite() && (0.49..1.51).contains(&ratio), "{ty}: {v} for {value} at {at}");
                }
            }
            for &(at, len) in packed {
                for i in at..at + len {
                    assert!(distinct(i, 1) > 1, "{ty}: byte {i} is the same in every block");
                }
            }
            let values = ty.decoder().expect("decodes")(&bytes).expect("whole blocks");
            assert!(values.iter().all(|v| v.is_finite()), "{ty}: a value not finite");
        }
    }

    #[test]
    fn every_quantized_type_has_its_fields_and_packed_bytes_listed() {
        assert_eq!(PACKED.map(|(t, _)| t), SCALE_FIELDS.map(|(t, _)| t));
    }
}
