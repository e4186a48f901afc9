//! A safe-SIMD crate against the engine's `std::arch` kernel, on the one type both can write the
//! same way: `cargo run --release --example bench_safe_simd`.
//!
//! The F32 matvec of a `[3584, 1024]` matrix (the 0.8B FFN's shape, small enough to stay in cache
//! between runs), one thread, batch 1, median of 25 runs: the engine's kernel
//! (`kernels::matmat_on` on the detected path and on its AVX2 path: AVX2+FMA, 4 chains of 8
//! lanes) against the same
//! loop written with `pulp` (runtime dispatch to its widest path, safe code: 4 chains of its
//! `f32s`, fused multiply-add, its lane sum). Both values per row are printed side by side for the
//! first rows, so the two are seen to compute the same dot products. The figure decides whether
//! the kernels may be safe code (docs/PERFORMANCE.md).

#[path = "common/timing.rs"]
mod timing;

use std::hint::black_box;

use pulp::{Arch, Simd, WithSimd};
use stepcheck::engine::run::kernels::{Isa, Matrix, detected, matmat_on};
use stepcheck::formats::gguf::GgmlType;
use timing::median_secs;

const ROWS: usize = 3584;
const COLS: usize = 1024;
const RUNS: usize = 25;

/// `out[r] = w[r] · x` with 4 chains of pulp's widest f32 register.
struct MatVec<'a> {
    w: &'a [f32],
    x: &'a [f32],
    out: &'a mut [f32],
}

impl WithSimd for MatVec<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let (x, _) = S::as_simd_f32s(self.x);
        for (row, o) in self.w.chunks_exact(self.x.len()).zip(self.out.iter_mut()) {
            let (w, _) = S::as_simd_f32s(row);
            // Each chain a variable of its own (an array indexed by `i % 4` keeps them in memory).
            let (mut a, mut b, mut c, mut d) =
                (simd.splat_f32s(0.0), simd.splat_f32s(0.0), simd.splat_f32s(0.0), simd.splat_f32s(0.0));
            for (w, x) in w.chunks_exact(4).zip(x.chunks_exact(4)) {
                a = simd.mul_add_f32s(w[0], x[0], a);
                b = simd.mul_add_f32s(w[1], x[1], b);
                c = simd.mul_add_f32s(w[2], x[2], c);
                d = simd.mul_add_f32s(w[3], x[3], d);
            }
            let sum = simd.add_f32s(simd.add_f32s(a, b), simd.add_f32s(c, d));
            *o = simd.reduce_sum_f32s(sum);
        }
    }
}

fn main() {
    let w: Vec<f32> = (0..ROWS * COLS).map(|i| ((i * 7919 % 251) as f32 - 125.0) / 128.0).collect();
    let x: Vec<f32> = (0..COLS).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = Matrix::new(GgmlType::F32, &bytes, ROWS, COLS).expect("an F32 matrix of whole rows");
    let (mut ours, mut safe) = (vec![0f32; ROWS], vec![0f32; ROWS]);
    let arch = Arch::new();
    let mut time = |isa: Isa| {
        median_secs(RUNS, || {
            matmat_on(isa, &m, &x, 1, &mut ours, 1);
            black_box(ours[0])
        })
    };
    let (t_ours, t_avx2) = (time(detected()), time(Isa::Avx2));
    let t_safe = median_secs(RUNS, || {
        arch.dispatch(MatVec { w: &w, x: &x, out: &mut safe });
        black_box(safe[0])
    });
    let rate = |t: f64| (ROWS * COLS) as f64 / t / 1e9;
    println!("F32 [{ROWS}, {COLS}], 1 thread, in cache, median of {RUNS}:");
    println!("| kernel | ms | values per ns |");
    println!("|---|---|---|");
    println!("| engine, std::arch, {:?} | {:.3} | {:.2} |", detected(), t_ours * 1e3, rate(t_ours));
    println!("| engine, std::arch, Avx2 | {:.3} | {:.2} |", t_avx2 * 1e3, rate(t_avx2));
    let path = format!("{arch:?}");
    println!("| pulp, {} | {:.3} | {:.2} |", path.split('(').next().unwrap_or(&path), t_safe * 1e3, rate(t_safe));
    println!("ratio pulp / engine: {:.2} (to its Avx2 path: {:.2})", t_safe / t_ours, t_safe / t_avx2);
    println!("first rows (engine, pulp): {:?}", ours.iter().zip(&safe).take(3).collect::<Vec<_>>());
}
