//! Seeded random checkpoints for any spec.

use super::checkpoint::{Checkpoint, Tensor};
use super::layout::{Init, TensorInfo, layout};
use super::spec::ModelSpec;

/// Values are drawn in chunks of this many, each chunk from its own stream, so that the values do
/// not depend on how many threads draw them.
const CHUNK: usize = 1 << 16;

/// Below this many values a checkpoint is drawn on the calling thread.
const SMALL: usize = 1 << 18;

/// A checkpoint of seeded random weights for `spec`: deterministic in `(spec, seed)`, O(1) scales
/// (see [`Init`]). Chunks are drawn on all cores, or on the calling thread for a small checkpoint.
pub fn random_checkpoint(spec: &ModelSpec, seed: u64) -> Checkpoint {
    let infos = layout(spec);
    let mut tensors: Vec<(TensorInfo, Vec<f32>)> = infos
        .into_iter()
        .map(|i| {
            let n = i.shape.iter().product();
            (i, vec![0f32; n])
        })
        .collect();
    let mut jobs: Vec<(u64, Init, usize, &mut [f32])> = vec![];
    for (info, data) in tensors.iter_mut() {
        let stream = seed ^ fnv1a(info.name.as_bytes());
        for (c, chunk) in data.chunks_mut(CHUNK).enumerate() {
            jobs.push((stream, info.init, c, chunk));
        }
    }
    // A small checkpoint is filled on this thread: spawning costs more than filling it.
    let values: usize = jobs.iter().map(|j| j.3.len()).sum();
    let threads =
        if values < SMALL { 1 } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).max(1) };
    if threads == 1 {
        for (stream, init, c, chunk) in jobs.iter_mut() {
            fill(chunk, *init, splitmix(*stream ^ splitmix(*c as u64)));
        }
        return checkpoint(tensors);
    }
    let per = jobs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let mut rest = jobs.as_mut_slice();
        while !rest.is_empty() {
            let (mine, tail) = rest.split_at_mut(per.min(rest.len()));
            rest = tail;
            s.spawn(move || {
                for (stream, init, c, chunk) in mine.iter_mut() {
                    fill(chunk, *init, splitmix(*stream ^ splitmix(*c as u64)));
                }
            });
        }
    });
    checkpoint(tensors)
}

fn checkpoint(tensors: Vec<(TensorInfo, Vec<f32>)>) -> Checkpoint {
    let mut ckpt = Checkpoint::default();
    for (info, data) in tensors {
        ckpt.insert(info.name, Tensor { shape: info.shape, data });
    }
    ckpt
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
