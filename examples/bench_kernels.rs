//! The matvec kernels per stored type on the Qwen3.5-0.8B shapes:
//! `cargo run --release --example bench_kernels [-- TYPE..]` (types by ggml name; all by default).
//!
//! For each type, over random matrices of every shape a decode step reads (the 24 layers' matrices,
//! each its own, so that they come from memory as in a step; and the head `[248320, 1024]`), on 2
//! threads, medians of several passes:
//!
//! 1. `matvec` against streaming the same stored bytes once (`timing::par_sum_bytes`): GB/s of
//!    stored bytes and their ratio (1 is the memory bound);
//! 2. `matmat` for batches of 1, 2, 4 and 8 vectors, and each batch's time over a batch of 1's;
//! 3. the rows split over threads spawned per call (`std::thread::scope`) against persistent
//!    workers (rayon), per pass over the step's matrices, and on 1 thread.
//!
//! The figures go in docs/PERFORMANCE.md.

#[path = "common/timing.rs"]
mod timing;

use std::hint::black_box;

use stepcheck::engine::KquantInputs;
use stepcheck::engine::run::kernels::{Isa, Matrix, detected, matmat_with, threads::Strategy};
use stepcheck::formats::gguf::GgmlType;
use stepcheck::model::{presets, spec::Mixer};
use timing::{median_secs, par_sum_bytes};

/// Runs per median.
const RUNS: usize = 7;
/// Threads.
const THREADS: usize = 2;

/// The `[rows, cols]` of every matrix a 0.8B decode step reads, the head last.
fn step_shapes() -> Vec<(usize, usize)> {
    let s = presets::qwen35_08b();
    let (h, a, d) = (s.hidden, &s.attention, &s.delta_net);
    let mut shapes = vec![];
    for layer in &s.layers {
        match layer {
            Mixer::Attention => {
                let q = a.heads * a.head_dim * if a.output_gate { 2 } else { 1 };
                shapes.extend([(q, h), (a.kv_heads * a.head_dim, h), (a.kv_heads * a.head_dim, h)]);
                shapes.push((h, a.heads * a.head_dim));
            }
            Mixer::DeltaNet => {
                let (k, v) = (d.key_heads * d.key_dim, d.value_heads * d.value_dim);
                shapes.extend([(2 * k + v, h), (v, h), (d.value_heads, h), (d.value_heads, h), (h, v)]);
            }
        }
        shapes.extend([(s.intermediate, h), (s.intermediate, h), (h, s.intermediate)]);
    }
    shapes.push((s.vocab, h));
    shapes
}

/// Random stored bytes of a `[rows, cols]` matrix of `ty`: float values bounded in size, quantized
/// blocks with finite f16 scales.
fn random(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let (block, block_bytes) = ty.block().map(|(n, b)| (n as usize, b as usize)).expect("a ggml type");
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut bytes: Vec<u8> = (0..rows * cols / block * block_bytes)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect();
    let finite_f16 = |hi: &mut u8| *hi = (*hi & 0x83) | 0x1C; // |d| in [2⁻⁸, 2⁻⁷)
    match ty {
        GgmlType::F32 => bytes.chunks_exact_mut(4).for_each(|v| v[3] = (v[3] & 0x80) | 0x3E),
        GgmlType::F16 => bytes.chunks_exact_mut(2).for_each(|v| finite_f16(&mut v[1])),
        GgmlType::BF16 => bytes.chunks_exact_mut(2).for_each(|v| v[1] = (v[1] & 0x80) | 0x3E),
        GgmlType::Q6_K => bytes.chunks_exact_mut(block_bytes).for_each(|b| finite_f16(&mut b[209])),
        _ => bytes.chunks_exact_mut(block_bytes).for_each(|b| {
            finite_f16(&mut b[1]);
            if block_bytes > 20 && block == 256 {
                finite_f16(&mut b[3]);
            }
        }),
    }
    bytes
}

/// The step's matrices of one type, stored.
struct Step {
    ty: GgmlType,
    bytes: Vec<Vec<u8>>,
    shapes: Vec<(usize, usize)>,
}

impl Step {
    fn new(ty: GgmlType, shapes: &[(usize, usize)]) -> Step {
        let bytes = shapes.iter().enumerate().map(|(i, &(r, c))| random(ty, r, c, i as u64)).collect();
        Step { ty, bytes, shapes: shapes.to_vec() }
    }

    fn matrices(&self) -> Vec<Matrix<'_>> {
        self.bytes.iter().zip(&self.shapes).map(|(b, &(r, c))| Matrix::new(self.ty, b, r, c).expect("shape")).collect()
    }

    fn stored(&self) -> usize {
        self.bytes.iter().map(Vec::len).sum()
    }
}

/// The median seconds of a pass of `matmat` over `ms` with `batch` vectors.
fn pass(ms: &[Matrix], batch: usize, split: Strategy, threads: usize, isa: Isa) -> f64 {
    let widest = ms.iter().map(|m| m.cols().max(m.rows())).max().unwrap_or(0);
    let xs: Vec<f32> = (0..batch * widest).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    let mut outs = vec![0f32; batch * widest];
    median_secs(RUNS, || {
        for m in ms {
            matmat_with(isa, split, m, &xs[..batch * m.cols()], batch, &mut outs[..batch * m.rows()], threads);
        }
        black_box(outs[0])
    })
}

fn stream(ms: &[Matrix], threads: usize) -> f64 {
    median_secs(RUNS, || ms.iter().map(|m| par_sum_bytes(m.bytes(), threads)).fold(0u64, u64::wrapping_add))
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let types =
        [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q4_K];
    let types: Vec<GgmlType> = types
        .into_iter()
        .filter(|t| wanted.is_empty() || wanted.iter().any(|w| Some(w.as_str()) == t.name()))
        .collect();
    let shapes = step_shapes();
    let (layers, head) = shapes.split_at(shapes.len() - 1);
    let isa = detected();
    println!(
        "{} matrices per step ({} in layers, the head [{}, {}]); path {isa:?}; {THREADS} threads; medians of {RUNS}",
        shapes.len(),
        layers.len(),
        head[0].0,
        head[0].1
    );

    // The compute rate alone: one [3584, 1024] matrix, small enough to stay in cache between runs,
    // on one thread.
    println!("\n| type | cached [3584, 1024], 1 thread, batch 1 | values per ns | batch 8, per vector |");
    println!("|---|---|---|---|");
    for &ty in &types {
        let bytes = random(ty, 3584, 1024, 99);
        for inputs in KquantInputs::ALL {
            let m = Matrix::new(ty, &bytes, 3584, 1024).expect("shape").with_inputs(inputs);
            if inputs != KquantInputs::F32 && !m.quantizes_inputs() {
                continue;
            }
            let t1 = pass(std::slice::from_ref(&m), 1, Strategy::Pool, 1, isa);
            let t8 = pass(std::slice::from_ref(&m), 8, Strategy::Pool, 1, isa);
            let values = (3584 * 1024) as f64;
            let name = if m.quantizes_inputs() { format!("{ty}, Q8_K inputs") } else { ty.to_string() };
            println!("| {name} | {:.3} ms | {:.2} | {:.2} |", t1 * 1e3, values / t1 / 1e9, 8.0 * values / t8 / 1e9);
        }
    }
    if std::env::var_os("CACHED_ONLY").is_some() {
        return;
    }

    let mut batches = vec![];
    let mut splits = vec![];
    println!("\n| type | matrices | stored | matvec | stream | matvec / stream |");
    println!("|---|---|---|---|---|---|");
    for &ty in &types {
        let step = Step::new(ty, &shapes);
        let all = step.matrices();
        let (l, h) = all.split_at(all.len() - 1);
        for (name, ms) in [("24 layers", l), ("head", h)] {
            let bytes: usize = ms.iter().map(|m| m.bytes().len()).sum();
            let (t, s) = (pass(ms, 1, Strategy::Pool, THREADS, isa), stream(ms, THREADS));
            let gbs = |secs: f64| bytes as f64 / secs / 1e9;
            println!(
                "| {ty} | {name} | {:.0} MB | {:.2} ms ({:.1} GB/s) | {:.2} ms ({:.1} GB/s) | {:.2} |",
                bytes as f64 / 1e6,
                t * 1e3,
                gbs(t),
                s * 1e3,
                gbs(s),
                t / s
            );
        }
        let per_batch: Vec<f64> = [1, 2, 4, 8].iter().map(|&b| pass(&all, b, Strategy::Pool, THREADS, isa)).collect();
        batches.push((ty, step.stored(), per_batch));
        if matches!(ty, GgmlType::F32 | GgmlType::Q8_0 | GgmlType::Q4_K) {
            let one = pass(l, 1, Strategy::Pool, 1, isa);
            let scoped = pass(l, 1, Strategy::Scoped, THREADS, isa);
            let pool = pass(l, 1, Strategy::Pool, THREADS, isa);
            splits.push((ty, l.len(), one, scoped, pool));
        }
    }

    println!("\n| type | step's matrices, stored | batch 1 | batch 2 | batch 4 | batch 8 | 8 / 1 |");
    println!("|---|---|---|---|---|---|---|");
    for (ty, stored, t) in &batches {
        let cells: Vec<String> = t.iter().map(|s| format!("{:.1} ms ({:.2}×)", s * 1e3, s / t[0])).collect();
        println!("| {ty} | {:.2} GB | {} | {:.2} |", *stored as f64 / 1e9, cells.join(" | "), t[3] / t[0]);
    }

    println!(
        "\n| type | layers' matvecs per pass | 1 thread | 2, spawned per call (scope) | 2, persistent (rayon) | scope − rayon, per matvec |"
    );
    println!("|---|---|---|---|---|---|");
    for (ty, n, one, scoped, pool) in &splits {
        println!(
            "| {ty} | {n} | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} µs |",
            one * 1e3,
            scoped * 1e3,
            pool * 1e3,
            (scoped - pool) / *n as f64 * 1e6
        );
    }
}
