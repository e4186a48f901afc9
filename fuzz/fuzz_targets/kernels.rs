//! Matvec kernel inputs: a stored type, a shape, a batch, whether k-quant inputs are quantized to
//! Q8_K, then the weights' bytes and the vectors' values, all from the fuzzer's bytes. On every
//! path (scalar, AVX2, AVX2 with AVX-512 registers) the kernels run within their bounds (under
//! AddressSanitizer: the `unsafe` loads of the SIMD paths, on shapes and bytes no test chose), and
//! keep the rules `engine::run::kernels` states: a batch is its vectors one at a time and the two
//! SIMD compilations agree, bit for bit; with Q8_K inputs the SIMD path is the scalar path, bit for
//! bit. The vectors' values also go through the engine's sigmoid and SiLU (`kernels::activation`)
//! on every path, each the same as one value at a time. (NaN is NaN: its payload is not compared.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::engine::KquantInputs;
use stepcheck::engine::run::kernels::{Isa, Matrix, activation, matmat_on};
use stepcheck::formats::gguf::GgmlType;

/// Every type with kernels of its own, and two read through their decoder.
const TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q2_K,
];

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fuzz_target!(|data: &[u8]| {
    let [t, rows, blocks, batch, q8k, rest @ ..] = data else { return };
    let ty = TYPES[*t as usize % TYPES.len()];
    let Some((block, block_bytes)) = ty.block().map(|(n, b)| (n as usize, b as usize)) else { return };
    let (rows, batch) = (1 + *rows as usize % 6, 1 + *batch as usize % 10);
    // Float types: up to 80 values a row, odd lengths included; quantized ones up to 4 blocks.
    let cols = if block == 1 { *blocks as usize % 81 } else { block * (1 + *blocks as usize % 4) };
    let weight_bytes = rows * cols / block * block_bytes;
    if rest.is_empty() {
        return;
    }
    let byte = |i: usize| rest[i % rest.len()];
    let weights: Vec<u8> = (0..weight_bytes).map(byte).collect();
    let xs: Vec<f32> = (0..batch * cols)
        .map(|i| {
            let at = weight_bytes + 4 * i;
            f32::from_le_bytes([byte(at), byte(at + 1), byte(at + 2), byte(at + 3)])
        })
        .collect();
    let inputs = if q8k % 2 == 1 { KquantInputs::Q8K } else { KquantInputs::F32 };
    let m = Matrix::new(ty, &weights, rows, cols).expect("whole blocks of the type, as many bytes as the rows take");
    let m = m.with_inputs(inputs);
    let run = |isa: Isa, xs: &[f32], batch: usize| {
        let mut out = vec![f32::NAN; batch * rows];
        matmat_on(isa, &m, xs, batch, &mut out, 1);
        out
    };
    let mut by_isa = vec![];
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        let together = run(isa, &xs, batch);
        let apart: Vec<f32> = (0..batch).flat_map(|b| run(isa, &xs[b * cols..(b + 1) * cols], 1)).collect();
        assert!(same(&together, &apart), "{ty} [{rows}, {cols}] × {batch} on {isa:?}: a batch is not its vectors");
        by_isa.push(together);
    }
    assert!(same(&by_isa[1], &by_isa[2]), "{ty} [{rows}, {cols}] × {batch}: the two SIMD compilations differ");
    if m.quantizes_inputs() {
        assert!(same(&by_isa[0], &by_isa[1]), "{ty} [{rows}, {cols}] × {batch}: Q8_K inputs, SIMD is not scalar");
    }
    type Activation = (&'static str, fn(Isa, &mut [f32]), fn(f32) -> f32);
    let activations: [Activation; 2] = [
        ("silu", activation::silu_all_on, activation::silu),
        ("sigmoid", activation::sigmoid_all_on, activation::sigmoid),
    ];
    for (name, all_on, one) in activations {
        let alone: Vec<f32> = xs.iter().map(|&x| one(x)).collect();
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            let mut slice = xs.clone();
            all_on(isa, &mut slice);
            assert!(same(&slice, &alone), "{name} of {} values on {isa:?}: not each value alone", xs.len());
        }
    }
});
