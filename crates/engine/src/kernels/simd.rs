//! The AVX2 pieces every type family's SIMD path is made of: a pass's accumulators, one weight
//! register multiplied into each of them, their sum at the end of a row, and the passes a batch is
//! split into.
//!
//! The rule they keep: **a vector's products are summed in one order whatever the batch.** A row's
//! dot product with a vector keeps [`CHAINS`] accumulators of 8 f32 lanes; the `i`-th weight
//! register of the row goes into chain `i % CHAINS` (4, so that one vector alone has enough fused
//! multiply-adds in flight: an FMA takes 4 cycles and two issue per cycle), and [`finish`] adds the
//! chains and then the lanes in a fixed order. A batch is served in passes over the row, each of as
//! many vectors as a path's registers hold (`super::Kernel`'s table), each weight register loaded
//! (dequantized) once per pass and multiplied into every vector's chains. So a vector's value does
//! not depend on how many others share its pass, or on which path runs it: a row of a batched step is bit for bit the row of the
//! single step, which the batched check relies on (docs/SOUNDNESS.md, "Batched decode").
//!
//! The two SIMD paths are the same operations compiled twice ([`both_paths!`]): for AVX2 (16 vector
//! registers) and with AVX-512F and VL also enabled, whose 32 registers hold the chains of more
//! vectors per pass; no AVX-512 instruction is asked for, and none changes a value. (One kernel is
//! written apart for AVX-512, the float types' two rows at a time: `float512.rs` keeps these chains
//! two to a 512-bit register.)
//!
//! Every function here is `unsafe`: each runs AVX2 and FMA instructions, which the caller has
//! checked the machine has ([`super::detected`]), and [`fma`] also reads through raw pointers,
//! whose bounds its caller states.

use std::arch::x86_64::*;

/// The accumulators of one vector's dot product with a row.
pub(super) const CHAINS: usize = 4;

/// The accumulators of a row against the `B` vectors of a pass, [`CHAINS`] per vector.
pub(super) type Acc<const B: usize> = [[__m256; CHAINS]; B];

/// `B × CHAINS` accumulators at zero.
///
/// # Safety
/// AVX is available.
#[inline(always)]
pub(super) unsafe fn zero<const B: usize>() -> Acc<B> {
    // SAFETY: the caller has AVX.
    unsafe { [[_mm256_setzero_ps(); CHAINS]; B] }
}

/// `acc[b][chain % CHAINS] += w · xs[b][at .. at + 8]` for each of the `B` vectors.
///
/// # Safety
/// AVX2 and FMA are available, and `xs[b] + at .. xs[b] + at + 8` are readable f32 values for
/// every `b`.
#[inline(always)]
pub(super) unsafe fn fma<const B: usize>(acc: &mut Acc<B>, w: __m256, xs: &[*const f32; B], at: usize, chain: usize) {
    for b in 0..B {
        // SAFETY: the caller's bounds on `xs[b] + at .. + 8`, and its FMA.
        unsafe {
            let x = _mm256_loadu_ps(xs[b].add(at));
            acc[b][chain % CHAINS] = _mm256_fmadd_ps(w, x, acc[b][chain % CHAINS]);
        }
    }
}

/// [`fma`] for two rows at once: `acc[r][b][chain % CHAINS] += w[r] · xs[b][at .. at + 8]`, each
/// vector's 8 values loaded once for both rows.
///
/// # Safety
/// As [`fma`].
#[inline(always)]
pub(super) unsafe fn fma2<const B: usize>(
    acc: &mut [Acc<B>; 2],
    w: [__m256; 2],
    xs: &[*const f32; B],
    at: usize,
    chain: usize,
) {
    for b in 0..B {
        // SAFETY: the caller's bounds on `xs[b] + at .. + 8`, and its FMA.
        unsafe {
            let x = _mm256_loadu_ps(xs[b].add(at));
            for r in 0..2 {
                acc[r][b][chain % CHAINS] = _mm256_fmadd_ps(w[r], x, acc[r][b][chain % CHAINS]);
            }
        }
    }
}

/// Calls `f(i, i % CHAINS)` for `i` in `0..n`, in order, each call site with its chain a constant
/// (groups of [`CHAINS`] calls unrolled, the last group's calls guarded), so that the accumulators
/// a chain indexes stay in registers: indexed by a variable, they would live in memory.
#[inline(always)]
pub(super) fn chained(n: usize, mut f: impl FnMut(usize, usize)) {
    let whole = n / CHAINS * CHAINS;
    for base in (0..whole).step_by(CHAINS) {
        for chain in 0..CHAINS {
            f(base + chain, chain);
        }
    }
    for chain in 0..CHAINS {
        if whole + chain < n {
            f(whole + chain, chain);
        }
    }
}

/// Each vector's sum of its chains (in order) and then of their 8 lanes (halves, then pairs), into
/// `out[b]`.
///
/// # Safety
/// AVX is available.
#[inline(always)]
pub(super) unsafe fn finish<const B: usize>(acc: &Acc<B>, out: &mut [f32]) {
    for (b, o) in out.iter_mut().enumerate().take(B) {
        // SAFETY: the caller has AVX; the lanes are read from a register.
        unsafe {
            let v = acc[b][1..].iter().fold(acc[b][0], |v, a| _mm256_add_ps(v, *a));
            let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
            let one = _mm_add_ss(two, _mm_shuffle_ps::<0b01>(two, two));
            *o = _mm_cvtss_f32(one);
        }
    }
}

/// The raw pointers of a batch's vectors, each checked to hold at least `cols` values: the bound
/// every [`fma`] of a row kernel relies on.
#[inline(always)]
pub(super) fn pointers<const B: usize>(xs: &[&[f32]], cols: usize) -> [*const f32; B] {
    assert_eq!(xs.len(), B, "a kernel of batch {B} was given {} vectors", xs.len());
    std::array::from_fn(|b| {
        assert!(xs[b].len() >= cols, "a vector of {} values against a row of {cols}", xs[b].len());
        xs[b].as_ptr()
    })
}

/// Calls `$f::<G.., B>(args..)` for the pass of `B = $n` vectors (1 to 8). `G..` are the function's
/// other generic arguments, if any (`by_batch!(avx2::pass[E], xs.len(), (row, xs, out))`).
macro_rules! by_batch {
    ($($f:ident)::+ $([$($g:ty),*])?, $n:expr, ($($arg:expr),*)) => {
        match $n {
            1 => $($f)::+::<$($($g,)*)? 1>($($arg),*),
            2 => $($f)::+::<$($($g,)*)? 2>($($arg),*),
            3 => $($f)::+::<$($($g,)*)? 3>($($arg),*),
            4 => $($f)::+::<$($($g,)*)? 4>($($arg),*),
            5 => $($f)::+::<$($($g,)*)? 5>($($arg),*),
            6 => $($f)::+::<$($($g,)*)? 6>($($arg),*),
            7 => $($f)::+::<$($($g,)*)? 7>($($arg),*),
            8 => $($f)::+::<$($($g,)*)? 8>($($arg),*),
            n => panic!("a pass of {n} vectors (at most {})", super::MAX_BATCH),
        }
    };
}
pub(super) use by_batch;

/// A type family's two entry points over its pass function `$pass` (written once, in
/// [`both_paths!`]): `$avx2`, with the docs given, and `$avx512`, the same operations on 32
/// registers; each serves a pass of `xs.len()` vectors ([`by_batch!`]). `G: Bound` are the pass's
/// other generic arguments, if any.
macro_rules! entry_points {
    ($(#[$doc:meta])* $avx2:ident, $avx512:ident, $pass:ident $([$g:ident: $bound:path])?) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// AVX2, FMA and F16C are available.
        #[cfg(target_arch = "x86_64")]
        pub(super) unsafe fn $avx2 $(<$g: $bound>)? (row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
            // SAFETY: the caller's instruction sets, which are those `avx2`'s pass is compiled for.
            unsafe { by_batch!(avx2::$pass $([$g])?, xs.len(), (row, xs, out)) }
        }

        #[doc = concat!("[`", stringify!($avx2), "`] compiled with 32 registers (a pass may hold more vectors).")]
        ///
        /// # Safety
        /// AVX2, FMA, F16C, AVX-512F and AVX-512VL are available.
        #[cfg(target_arch = "x86_64")]
        pub(super) unsafe fn $avx512 $(<$g: $bound>)? (row: &[u8], xs: &[&[f32]], out: &mut [f32]) {
            // SAFETY: the caller's instruction sets, which are those `avx512`'s pass is compiled for.
            unsafe { by_batch!(avx512::$pass $([$g])?, xs.len(), (row, xs, out)) }
        }
    };
}
pub(super) use entry_points;

/// The items given (a type family's pass functions), compiled twice: in `mod avx2` for AVX2, FMA
/// and F16C, and in `mod avx512` with AVX-512F and VL enabled too (32 vector registers). Each item
/// is written once, so the two paths are the same operations in the same order.
macro_rules! both_paths {
    ($($item:item)*) => {
        mod avx2 {
            #[allow(unused_imports)]
            use super::*;
            $(#[target_feature(enable = "avx2,fma,f16c")] $item)*
        }
        mod avx512 {
            #[allow(unused_imports)]
            use super::*;
            $(#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")] $item)*
        }
    };
}
pub(super) use both_paths;

/// The little-endian f16 at `b[at..at + 2]`, widened (exactly) by F16C, in registers: the scalar
/// widening of the `half` crate is a call, which would spill every accumulator once per block.
///
/// # Safety
/// F16C is available.
#[inline(always)]
pub(super) unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    // SAFETY: the caller's F16C; the value is in a register.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) }
}
