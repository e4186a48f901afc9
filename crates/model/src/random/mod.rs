//! Seeded random checkpoints for any spec, in any stored type.
//!
//! [`random_checkpoint`] draws the f32 values of every tensor (see [`Init`]) and holds them in
//! memory. [`random_checkpoint_as`] stores the matrices in a chosen ggml type instead ([`Weights`]):
//! F32 draws the same values; F16 and BF16 round them to nearest; a quantized type draws random
//! blocks whose f16 scales are set so that the values have the scale the matrix would have in f32,
//! every field of a block (its f16 scales, its sub-block scales and minimums, its high bits)
//! differing from block to block (`blocks.rs`). Norms, biases, decays, and matrices whose rows are not whole blocks of the type
//! stay F32, as llama.cpp's converter and quantizer keep them. A checkpoint of more than
//! [`FILE_BYTES`] is written as a GGUF file into the temp dir and mapped (`file.rs`), so that it
//! takes no more memory than a real file of that type would.

mod blocks;
mod file;

use std::fmt;

use super::checkpoint::{Bytes, Checkpoint, Tensor};
use super::gguf::LoadError;
use super::layout::{Init, TensorInfo, layout};
use super::spec::ModelSpec;
use formats::gguf::GgmlType;

/// Values are drawn in chunks of this many, each chunk from its own stream, so that the values do
/// not depend on how many threads draw them. It is a whole number of blocks of every ggml type.
const CHUNK: usize = 1 << 16;

/// Below this many values a tensor is drawn on the calling thread.
const SMALL: usize = 1 << 18;

/// A random checkpoint of more stored bytes than this is written to a GGUF file and mapped.
pub(crate) const FILE_BYTES: u128 = 1 << 30;

/// The stored type of a random checkpoint's matrices, as `--weights` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weights(pub GgmlType);

impl Default for Weights {
    fn default() -> Weights {
        Weights(GgmlType::F32)
    }
}

impl Weights {
    /// The types a random checkpoint can be made in: every type the reader decodes.
    pub const TYPES: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];

    /// The type named `name` (ggml's name, in any case: `bf16`, `q8_0`, `Q4_K`).
    pub fn parse(name: &str) -> Option<Weights> {
        Weights::TYPES.into_iter().find(|t| t.name().is_some_and(|n| n.eq_ignore_ascii_case(name))).map(Weights)
    }

    /// The names `--weights` takes, lower case.
    pub fn names() -> Vec<String> {
        Weights::TYPES.iter().filter_map(|t| t.name()).map(str::to_ascii_lowercase).collect()
    }

    /// The type tensor `info` is stored in: the weights' type for a matrix whose rows are whole
    /// blocks of it, else F32.
    pub(crate) fn type_of(self, info: &TensorInfo) -> GgmlType {
        let whole = |block: u64| info.shape.last().is_some_and(|&c| (c as u64).is_multiple_of(block));
        match (info.init, info.shape.len(), self.0.block()) {
            (Init::Matrix { .. }, 2.., Some((block, _))) if whole(block) => self.0,
            _ => GgmlType::F32,
        }
    }

    /// The bytes tensor `info` is stored in (saturating; no overflow for any shape).
    pub(crate) fn bytes_of(self, info: &TensorInfo) -> u128 {
        let ty = self.type_of(info);
        let (block, block_bytes) = ty.block().unwrap_or((1, 4));
        let numel = info.shape.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128));
        (numel / u128::from(block)).saturating_mul(u128::from(block_bytes))
    }

    /// The bytes of `spec`'s whole checkpoint in these weights.
    pub fn checkpoint_bytes(self, spec: &ModelSpec) -> u128 {
        layout(spec).iter().map(|t| self.bytes_of(t)).fold(0, u128::saturating_add)
    }
}

impl fmt::Display for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.name().unwrap_or("?").to_ascii_lowercase())
    }
}

/// Why a random checkpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RandomError {
    #[error("ggml type {0} is not one a random checkpoint can be made in")]
    Type(GgmlType),
    #[error(
        "--weights {weights}: no matrix of {model} has rows of whole {ty} blocks ({block} values each; its matrices' \
         rows are {rows} values long), so every weight would stay F32; a type of smaller blocks fits"
    )]
    NoMatrixFits { weights: Weights, ty: GgmlType, block: u64, model: String, rows: String },
    #[error("the random checkpoint's file {path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("the random checkpoint's file does not read back: {0}")]
    Gguf(#[from] LoadError),
}

/// A checkpoint of seeded random weights for `spec`, all F32 and held in memory: deterministic in
/// `(spec, seed)`, O(1) scales (see [`Init`]).
pub fn random_checkpoint(spec: &ModelSpec, seed: u64) -> Checkpoint {
    let mut ckpt = Checkpoint::default();
    for info in layout(spec) {
        let bytes = draw(&info, GgmlType::F32, seed);
        ckpt.insert(info.name, Tensor::stored(info.shape, GgmlType::F32, Bytes::owned(bytes)));
    }
    ckpt
}

/// A checkpoint of seeded random weights for `spec` with its matrices stored as `weights` (see
/// the module doc), deterministic in `(spec, seed, weights)`; at F32 it holds the values of
/// [`random_checkpoint`]. One of more than [`FILE_BYTES`] is written to a GGUF file in the temp dir
/// and read in place from its map (the file is removed once mapped). A type that no matrix's rows
/// are whole blocks of is refused: it would change nothing.
pub fn random_checkpoint_as(spec: &ModelSpec, seed: u64, weights: Weights) -> Result<Checkpoint, RandomError> {
    if !Weights::TYPES.contains(&weights.0) {
        return Err(RandomError::Type(weights.0));
    }
    let infos = layout(spec);
    let matrices = || infos.iter().filter(|i| matches!(i.init, Init::Matrix { .. }));
    if weights.0 != GgmlType::F32 && !matrices().any(|i| weights.type_of(i) == weights.0) {
        let mut rows: Vec<usize> = matrices().filter_map(|i| i.shape.last().copied()).collect();
        rows.sort_unstable();
        rows.dedup();
        let rows = rows.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
        let (ty, block) = (weights.0, weights.0.block().map_or(1, |b| b.0));
        return Err(RandomError::NoMatrixFits { weights, ty, block, model: spec.name.clone(), rows });
    }
    if weights.checkpoint_bytes(spec) > FILE_BYTES {
        return file::mapped_checkpoint(&infos, weights, seed);
    }
    let mut ckpt = Checkpoint::default();
    for info in infos {
        let ty = weights.type_of(&info);
        let bytes = draw(&info, ty, seed);
        ckpt.insert(info.name, Tensor::stored(info.shape, ty, Bytes::owned(bytes)));
    }
    Ok(ckpt)
}

/// The stored bytes of a random `rows × cols` matrix in `ty`, drawn as a checkpoint's matrix of
/// that shape is (fan-in `cols`, seeded by `seed`): for a quantized type, blocks whose every field
/// differs from block to block (`blocks.rs`). `None` for a type a random checkpoint cannot be made
/// in, or rows that are not whole blocks of it. (The kernels' tests read such matrices.)
pub fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Option<Vec<u8>> {
    let (block, _) = ty.block()?;
    if !Weights::TYPES.contains(&ty) || !cols.is_multiple_of(block as usize) {
        return None;
    }
    let info =
        TensorInfo { name: "random matrix".into(), shape: vec![rows, cols], init: Init::Matrix { fan_in: cols } };
    Some(draw(&info, ty, seed))
}

/// The bytes of tensor `info` stored as `ty` (a type [`Weights::type_of`] chose for it).
fn draw(info: &TensorInfo, ty: GgmlType, seed: u64) -> Vec<u8> {
    let numel: usize = info.shape.iter().product();
    let mut bytes = vec![0u8; stored_len(ty, numel)];
    fill_bytes(info, ty, seed, 0, &mut bytes);
    bytes
}

/// The bytes `numel` values of `ty` take.
fn stored_len(ty: GgmlType, numel: usize) -> usize {
    let (block, block_bytes) = ty.block().unwrap_or((1, 4));
    numel / block as usize * block_bytes as usize
}

/// Fills `out`, the stored bytes of tensor `info` (as `ty`) from chunk `first` on, chunk by
/// chunk, each from its own stream; on all cores when there are many values.
fn fill_bytes(info: &TensorInfo, ty: GgmlType, seed: u64, first: usize, out: &mut [u8]) {
    let stream = seed ^ fnv1a(info.name.as_bytes());
    let chunk_bytes = stored_len(ty, CHUNK);
    let scales = blocks::Scales::of(ty, info.init);
    let job = |c: usize, bytes: &mut [u8]| {
        let state = splitmix(stream ^ splitmix(c as u64));
        match &scales {
            Some(s) => s.fill(bytes, state),
            None => fill_floats(bytes, ty, info.init, state),
        }
    };
    let chunks = out.len().div_ceil(chunk_bytes.max(1));
    let values = chunks * CHUNK;
    let threads = if values < SMALL { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()) };
    if threads <= 1 {
        for (i, bytes) in out.chunks_mut(chunk_bytes).enumerate() {
            job(first + i, bytes);
        }
        return;
    }
    let per = chunks.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, part) in out.chunks_mut(per * chunk_bytes).enumerate() {
            let job = &job;
            s.spawn(move || {
                for (i, bytes) in part.chunks_mut(chunk_bytes).enumerate() {
                    job(first + t * per + i, bytes);
                }
            });
        }
    });
}

/// The values of one chunk (as many as `bytes` holds) drawn as [`Init`] says and stored as the
/// float type `ty`: F32 as drawn, F16 and BF16 rounded to nearest.
fn fill_floats(bytes: &mut [u8], ty: GgmlType, init: Init, state: u64) {
    let width = if ty == GgmlType::F32 { 4 } else { 2 };
    let mut values = vec![0f32; bytes.len() / width];
    fill(&mut values, init, state);
    for (b, &v) in bytes.chunks_exact_mut(width).zip(&values) {
        match ty {
            GgmlType::F16 => b.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            GgmlType::BF16 => b.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            _ => b.copy_from_slice(&v.to_le_bytes()),
        }
    }
}

fn fill(out: &mut [f32], init: Init, mut state: u64) {
    let mut uniform = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        // Top 24 bits: a uniform in [−1, 1).
        ((splitmix(state) >> 40) as f32) * (2.0 / (1u64 << 24) as f32) - 1.0
    };
    match init {
        Init::Matrix { fan_in } => {
            let scale = (3.0 / fan_in.max(1) as f32).sqrt();
            out.iter_mut().for_each(|x| *x = uniform() * scale);
        }
        Init::NormWeight => out.iter_mut().for_each(|x| *x = 1.0 + 0.5 * uniform()),
        Init::Decay => out.iter_mut().for_each(|x| *x = -(0.525 + 0.475 * uniform())),
        Init::Bias => out.iter_mut().for_each(|x| *x = 0.87 * uniform()),
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;

    #[test]
    fn f32_weights_hold_the_values_of_the_f32_checkpoint() {
        let spec = preset("tiny").expect("tiny");
        let as_f32 = random_checkpoint_as(&spec, 3, Weights::default()).expect("made");
        assert_eq!(as_f32, random_checkpoint(&spec, 3));
    }

    #[test]
    fn matrices_take_the_type_and_everything_else_stays_f32() {
        for (preset_name, name) in [("tiny", "bf16"), ("tiny", "q8_0"), ("small", "q4_k")] {
            let spec = preset(preset_name).expect("a preset");
            let w = Weights::parse(name).expect("a type");
            let ckpt = random_checkpoint_as(&spec, 0, w).expect("made");
            for info in layout(&spec) {
                let t = ckpt.get(&info.name).expect("there");
                assert_eq!(t.ty(), w.type_of(&info), "{name} {}", info.name);
                let values = t.to_f32().expect("decodes");
                assert!(values.iter().all(|v| v.is_finite()), "{name} {}", info.name);
            }
            assert_eq!(ckpt.bytes() as u128, w.checkpoint_bytes(&spec), "{name}");
        }
    }

    #[test]
    fn a_type_no_matrix_has_whole_blocks_of_is_refused_since_it_would_change_nothing() {
        let spec = preset("tiny").expect("tiny");
        for name in ["q4_k", "q6_k", "iq4_xs"] {
            let w = Weights::parse(name).expect("a type");
            let e = random_checkpoint_as(&spec, 0, w).expect_err("no matrix of tiny fits 256-value blocks");
            assert!(matches!(e, RandomError::NoMatrixFits { block: 256, .. }), "{name}: {e}");
        }
    }

    #[test]
    fn quantized_matrices_have_the_scale_of_their_f32_draw() {
        let spec = preset("small").expect("small");
        let reference = random_checkpoint(&spec, 1);
        let name = formats::names::TOKEN_EMBD;
        let rms = |v: &[f32]| (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        let mean = |v: &[f32]| v.iter().map(|x| f64::from(*x)).sum::<f64>() / v.len() as f64;
        let want = rms(&reference.get(name).expect("embd").to_f32().expect("f32"));
        for w in Weights::TYPES {
            let ckpt = random_checkpoint_as(&spec, 1, Weights(w)).expect("made");
            let got = ckpt.get(name).expect("embd").to_f32().expect("decodes");
            let ratio = rms(&got) / want;
            assert!((0.8..1.25).contains(&ratio), "{w}: rms {ratio} of the f32 draw's");
            // Formats with a minimum have it cancel the mean; those with one scale keep their
            // quants' own offset (Q4_0's is half a step: a mean of about a tenth of the rms).
            assert!(mean(&got).abs() < 0.15 * want, "{w}: mean {} for rms {want}", mean(&got));
        }
    }

    #[test]
    fn a_checkpoint_written_to_a_file_reads_back_in_place_as_the_one_held_in_memory() {
        let spec = preset("small").expect("small");
        let prefix = format!("stepcheck-random-{}-", std::process::id());
        let made = || {
            let files = std::fs::read_dir(std::env::temp_dir()).expect("the temp dir");
            files.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).count()
        };
        for w in ["f32", "bf16", "q8_0", "q6_k"] {
            let w = Weights::parse(w).expect("a type");
            let owned = random_checkpoint_as(&spec, 7, w).expect("made");
            let mapped = file::mapped_checkpoint(&layout(&spec), w, 7).expect("written and mapped");
            assert_eq!(mapped, owned, "{w}");
            assert_eq!((mapped.owned_bytes(), owned.owned_bytes()), (0, owned.bytes()), "{w}");
        }
        assert_eq!(made(), 0, "the files are removed once mapped");
    }

    #[test]
    fn a_presets_quantized_matrices_vary_their_scales_block_by_block() {
        // (type, block bytes, an f16 field's offset, a packed scale byte's offset)
        let cases = [
            (GgmlType::Q8_0, 34, 0, None),
            (GgmlType::Q4_K, 144, 0, Some(4)),
            (GgmlType::Q4_K, 144, 2, Some(15)),
            (GgmlType::Q5_K, 176, 2, Some(10)),
            (GgmlType::Q6_K, 210, 208, Some(200)),
        ];
        let spec = preset("small").expect("small");
        for (ty, block_bytes, field, packed) in cases {
            let w = Weights(ty);
            let ckpt = random_checkpoint_as(&spec, 5, w).expect("made");
            let mut matrices = 0;
            for info in layout(&spec).into_iter().filter(|i| w.type_of(i) == ty) {
                let bytes = ckpt.get(&info.name).expect("there").bytes();
                let distinct = |at: usize, len: usize| {
                    let mut seen: Vec<&[u8]> = bytes.chunks_exact(block_bytes).map(|b| &b[at..at + len]).collect();
                    seen.sort();
                    seen.dedup();
                    seen.len()
                };
                let blocks = bytes.len() / block_bytes;
                assert!(distinct(field, 2) > blocks.min(64) / 2, "{ty} {}: its f16 field {field}", info.name);
                if let Some(at) = packed {
                    assert!(distinct(at, 1) > 1, "{ty} {}: its byte {at}", info.name);
                }
                matrices += 1;
            }
            assert!(matrices > 0, "{ty}: no matrix of the type");
        }
    }

    #[test]
    fn a_random_matrix_is_whole_blocks_of_its_type() {
        let bytes = random_matrix(GgmlType::Q4_K, 3, 512, 1).expect("whole blocks");
        assert_eq!(bytes.len(), 3 * 2 * 144);
        assert_eq!(random_matrix(GgmlType::Q4_K, 3, 100, 1), None);
        assert_eq!(random_matrix(GgmlType::F32, 2, 3, 1).map(|b| b.len()), Some(24));
    }

    #[test]
    fn type_names_parse_in_any_case() {
        assert_eq!(Weights::parse("BF16"), Some(Weights(GgmlType::BF16)));
        assert_eq!(Weights::parse("q4_k"), Some(Weights(GgmlType::Q4_K)));
        assert_eq!(Weights::parse("q8_1"), None);
        assert_eq!(Weights(GgmlType::Q6_K).to_string(), "q6_k");
    }
}
