#!/usr/bin/env python3
"""Write a GGUF of the qwen3.5-0.8b preset's shape (crates/model/src/presets.rs) with seeded random F16 weights, for
llama.cpp to record its decode graph at the real size (`record_llama_graph.py`). The file (≈ 1.5 GB) is never
committed: only the graph it yields is (`fixtures/llama-graph-0.8b/`).

The metadata are the converter fixture's (`fixtures/converter-f32/model.gguf`, written by llama.cpp's own
`convert_hf_to_gguf.py`), every key kept and the sizes set to the preset's: hidden 1024, 24 layers (every 4th
attention), FFN 3584, 8 query and 2 KV heads of 256, 16 key and 16 value heads of 128, conv kernel 4, RoPE θ 1e7 on 64
of each head's 256 dims, tied embeddings (no `output.weight`), vocab 248320, no tokenizer (the recorder marks it `no_vocab`). Norm weights are drawn around one, `ssm_a`
below zero, everything else N(0, 0.02²); the values only have to keep llama.cpp's logits finite.

`--f32` writes the matrices F32 instead (the same draws, not rounded to f16; `general.file_type` 0), a ≈ 3 GB
source for llama.cpp's quantizer (`bench_prompt.py`). `--no-vocab` adds `tokenizer.ggml.model = "no_vocab"`, so
llama.cpp loads the file as it is. Without either flag the file is written as before.

Usage:  /work/venv-llama/bin/python reference/make_llama_big.py [OUT.gguf] [--f32] [--no-vocab]
            # default OUT /tmp/qwen3.5-0.8b-f16.gguf (with --f32: /tmp/qwen3.5-0.8b-f32.gguf)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

HERE = Path(__file__).resolve().parent
H, FFN, LAYERS, INTERVAL = 1024, 3584, 24, 4
HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS = 8, 2, 256, 64
HK, HV, DK, DV, KERNEL = 16, 16, 128, 128, 4
VOCAB = 248320

OVERRIDES = {
    "general.name": "qwen3.5-0.8b-shape",
    "qwen35.block_count": LAYERS,
    "qwen35.embedding_length": H,
    "qwen35.feed_forward_length": FFN,
    "qwen35.attention.head_count": HEADS,
    "qwen35.attention.head_count_kv": KV_HEADS,
    "qwen35.rope.freq_base": 1e7,
    "qwen35.attention.key_length": HEAD_DIM,
    "qwen35.attention.value_length": HEAD_DIM,
    "qwen35.ssm.conv_kernel": KERNEL,
    "qwen35.ssm.state_size": DK,
    "qwen35.ssm.group_count": HK,
    "qwen35.ssm.time_step_rank": HV,
    "qwen35.ssm.inner_size": HV * DV,
    "qwen35.attention.recurrent_layers": [(i + 1) % INTERVAL != 0 for i in range(LAYERS)],
    "qwen35.full_attention_interval": INTERVAL,
    "qwen35.rope.dimension_count": ROPE_DIMS,
    "general.file_type": 1,  # MOSTLY_F16
}


def tensors() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape = ggml ne reversed, kind) of every tensor."""
    conv = 2 * HK * DK + HV * DV
    out = [("token_embd.weight", (VOCAB, H), "w")]
    for i in range(LAYERS):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (H,), "norm")]
        if (i + 1) % INTERVAL != 0:
            out += [
                (b + "ssm_a", (HV,), "a"),
                (b + "ssm_conv1d.weight", (conv, KERNEL), "conv"),
                (b + "ssm_dt.bias", (HV,), "w"),
                (b + "ssm_alpha.weight", (HV, H), "w"),
                (b + "ssm_beta.weight", (HV, H), "w"),
                (b + "attn_qkv.weight", (conv, H), "w"),
                (b + "attn_gate.weight", (HV * DV, H), "w"),
                (b + "ssm_norm.weight", (DV,), "norm"),
                (b + "ssm_out.weight", (H, HV * DV), "w"),
            ]
        else:
            out += [
                (b + "attn_q.weight", (2 * HEADS * HEAD_DIM, H), "w"),
                (b + "attn_k.weight", (KV_HEADS * HEAD_DIM, H), "w"),
                (b + "attn_v.weight", (KV_HEADS * HEAD_DIM, H), "w"),
                (b + "attn_output.weight", (H, HEADS * HEAD_DIM), "w"),
                (b + "attn_q_norm.weight", (HEAD_DIM,), "norm"),
                (b + "attn_k_norm.weight", (HEAD_DIM,), "norm"),
            ]
        out += [
            (b + "ffn_down.weight", (H, FFN), "w"),
            (b + "ffn_gate.weight", (FFN, H), "w"),
            (b + "ffn_up.weight", (FFN, H), "w"),
            (b + "post_attention_norm.weight", (H,), "norm"),
        ]
    out += [("output_norm.weight", (H,), "norm")]
    return out


def write(out: Path, f32: bool = False, no_vocab: bool = False) -> None:
    """Write the file: matrices F16 (or F32 with `f32`), `tokenizer.ggml.model = "no_vocab"` with `no_vocab`."""
    template = GGUFReader(HERE / "fixtures/converter-f32/model.gguf")
    w = GGUFWriter(str(out), "qwen35")
    overrides = dict(OVERRIDES, **({"general.file_type": 0} if f32 else {}))  # 0 = ALL_F32
    for key, field in template.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")) or key in ("general.architecture", "general.size_label"):
            continue
        value = overrides.get(key, field.contents())
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.add_uint32("qwen35.vocab_size", VOCAB)  # with no tokenizer, llama.cpp takes the vocabulary's size from here
    if no_vocab:
        w.add_string("tokenizer.ggml.model", "no_vocab")  # llama.cpp refuses a file with no tokenizer otherwise
    rng = np.random.default_rng(0)
    for name, shape, kind in tensors():
        if kind == "norm":
            x = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif kind == "a":
            x = -np.exp(0.5 * rng.standard_normal(shape, dtype=np.float32))
        else:
            x = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        # Vectors and the conv kernel stay F32, as the converter writes them (ggml's SSM_CONV reads an F32 kernel
        # only); matrices F16 (F32 with `f32`).
        matrix = kind == "w" and len(shape) == 2
        w.add_tensor(name, x.astype(np.float16) if matrix and not f32 else x.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="default /tmp/qwen3.5-0.8b-f16.gguf (-f32.gguf with --f32)")
    ap.add_argument("--f32", action="store_true", help="matrices F32 instead of F16")
    ap.add_argument("--no-vocab", action="store_true", help='add tokenizer.ggml.model = "no_vocab"')
    a = ap.parse_args()
    out = a.out or Path("/tmp/qwen3.5-0.8b-f32.gguf" if a.f32 else "/tmp/qwen3.5-0.8b-f16.gguf")
    write(out, f32=a.f32, no_vocab=a.no_vocab)
    print(f"{out}: {len(tensors())} tensors, {out.stat().st_size / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
