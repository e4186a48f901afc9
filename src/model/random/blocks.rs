//! Random blocks of ggml's quantized types, with bounded, finite scales.
//!
//! A random block is random bytes whose f16 scale fields (`d`, and `dmin` or `m` where the format
//! has one) are overwritten with finite values chosen for the tensor. Every value of a block is
//! linear in those fields, so they are chosen by measuring random blocks once: the second field
//! (when there is one) cancels the first one's mean, and both are scaled so that the values' root
//! mean square is the one the tensor's f32 draw has (`1/√fan_in` for a matrix).

use half::f16;

use super::super::layout::Init;
use super::splitmix;
use crate::formats::gguf::GgmlType;

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
/// the f16 bits each is set to.
#[derive(Clone, Debug)]
pub struct Scales {
    block_bytes: usize,
    fields: &'static [usize],
    bits: Vec<[u8; 2]>,
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
            let s =
                Scales { block_bytes, fields, bits: values.iter().map(|&v| f16::from_f32(v).to_le_bytes()).collect() };
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
        Some(Scales {
            block_bytes,
            fields,
            bits: values[..fields.len()].iter().map(|&v| f16::from_f64(v).to_le_bytes()).collect(),
        })
    }

    /// Fills `bytes`, whole blocks, with random bytes from the stream `state`, each block's scale
    /// fields set.
    pub fn fill(&self, bytes: &mut [u8], mut state: u64) {
        for word in bytes.chunks_mut(8) {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let r = splitmix(state).to_le_bytes();
            word.copy_from_slice(&r[..word.len()]);
        }
        for block in bytes.chunks_exact_mut(self.block_bytes) {
            for (&at, bits) in self.fields.iter().zip(&self.bits) {
                block[at..at + 2].copy_from_slice(bits);
            }
        }
    }
}
