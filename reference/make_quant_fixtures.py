#!/usr/bin/env python3
"""Write bit-exact fixtures for stepcheck's decoders of ggml's quantized block formats.

For every format, reference/fixtures/quants/<TYPE>.json holds a run of blocks (their raw bytes, hex) and the
f32 values gguf-py's `gguf.quants.dequantize` gives them (as u32 bit patterns, so that the Rust test compares
bits, not decimal renderings). gguf-py restates ggml's `dequantize_row_*` in numpy, one rounding per f32
operation, and is the reference here; tests/quants.rs requires stepcheck's decoders to give the same bits.

The blocks are of two kinds:
  * random VALID blocks, for every format: random bytes, with every f16 scale field (d, and dmin / m where the
    format has one) overwritten by a finite scale. The first blocks take the edge scales 0, the smallest f16
    subnormal, a negative scale and the largest f16 (65504); the rest are random with magnitudes 1e-4 .. 1.
    Every other bit pattern of a block is a block (ggml gives each one a value), so random bytes are valid;
    non-finite scales are left out only because NaN payloads are not comparable bit for bit across numpy and
    Rust (tests/quants.rs checks them separately).
  * for the formats gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), also blocks `gguf.quants.quantize`
    made from random f32 values, as real files hold them.

Deterministic: seeded numpy Generators; a re-run writes byte-identical files.

Usage:  /work/venv/bin/python reference/make_quant_fixtures.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "quants"

# Byte offsets of every f16 scale field in a block (ggml-common.h's block_* structs).
SCALE_FIELDS = {
    T.Q4_0: [0],  # d, qs[16]
    T.Q4_1: [0, 2],  # d, m, qs[16]
    T.Q5_0: [0],  # d, qh[4], qs[16]
    T.Q5_1: [0, 2],  # d, m, qh[4], qs[16]
    T.Q8_0: [0],  # d, qs[32]
    T.Q2_K: [80, 82],  # scales[16], qs[64], d, dmin
    T.Q3_K: [108],  # hmask[32], qs[64], scales[12], d
    T.Q4_K: [0, 2],  # d, dmin, scales[12], qs[128]
    T.Q5_K: [0, 2],  # d, dmin, scales[12], qh[32], qs[128]
    T.Q6_K: [208],  # ql[128], qh[64], scales[16], d
    T.IQ4_NL: [0],  # d, qs[16]
    T.IQ4_XS: [0],  # d, scales_h (u16), scales_l[4], qs[128]
}
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}
EDGE_SCALES = [0.0, float(np.float16(2.0**-24)), -0.0123, 65504.0]


def random_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    mag = 10.0 ** rng.uniform(-4, 0, n)
    sign = np.where(rng.random(n) < 0.3, -1.0, 1.0)
    return (sign * mag).astype(np.float16)


def random_valid_blocks(qtype: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    for k, at in enumerate(SCALE_FIELDS[qtype]):
        scales = random_scales(rng, n_blocks)
        if k == 0:  # the main scale d takes the edge values in the first blocks
            scales[: len(EDGE_SCALES)] = np.array(EDGE_SCALES, dtype=np.float16)
        blocks[:, at : at + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def quantized_blocks(qtype: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    x = (rng.standard_normal((n_blocks, block_size)) * 10.0 ** rng.uniform(-3, 1, (n_blocks, 1))).astype(np.float32)
    q = gguf.quants.quantize(x.reshape(-1), qtype)
    back = gguf.quants.dequantize(q, qtype).reshape(n_blocks, block_size)
    scale = np.abs(x).max(axis=1, keepdims=True)
    assert np.all(np.abs(back - x) <= scale / 4), f"{qtype.name}: gguf-py's quantizer is not what this script expects"
    return q.reshape(n_blocks, type_size)


def fixture(qtype: T, seed: int) -> dict:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    n_random = 16 if block_size == 32 else 8
    parts = [random_valid_blocks(qtype, n_random, rng)]
    if qtype in QUANTIZABLE:
        parts.append(quantized_blocks(qtype, 8, rng))
    blocks = np.concatenate(parts, axis=0)
    raw = blocks.reshape(-1)
    values = gguf.quants.dequantize(raw, qtype)
    assert values.dtype == np.float32 and values.shape == (blocks.shape[0] * block_size,)
    assert np.all(np.isfinite(values)), qtype.name
    return {
        "type": qtype.name,
        "type_id": int(qtype.value),
        "block_values": block_size,
        "block_bytes": type_size,
        "n_blocks": int(blocks.shape[0]),
        "n_random_blocks": n_random,
        "gguf": getattr(gguf, "__version__", None) or _gguf_version(),
        "numpy": np.__version__,
        "blocks_hex": raw.tobytes().hex(),
        "f32_bits": [int(b) for b in values.view(np.uint32)],
    }


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, qtype in enumerate(SCALE_FIELDS):
        f = fixture(qtype, seed=1000 + i)
        path = OUT / f"{qtype.name}.json"
        path.write_text(json.dumps(f) + "\n")
        print(f"{qtype.name:7} {f['n_blocks']:3} blocks of {f['block_bytes']:3} bytes -> {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
