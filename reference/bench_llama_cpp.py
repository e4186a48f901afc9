#!/usr/bin/env python3
"""The decode step of the full Qwen3.5-0.8B shape, side by side: llama.cpp, stepcheck's engine, transformers.

One random model of the 0.8B preset's sizes (hidden 1024, FFN 3584, 24 layers with full attention every 4th,
vocab 248320, tied head; `stepcheck::model::presets::qwen35_08b`) is built in transformers (f32), written as a
GGUF file in llama.cpp's qwen35 layout at F32 (`make_fixtures.write_qwen35_gguf`, the converter's transforms),
and quantized from it by llama.cpp's own quantizer (`llama_cpp.llama_model_quantize`) to BF16, Q8_0 and
Q4_K_M. Then, for each file, in one run, each engine on 2 threads, one token per step, after a warm-up:

* llama.cpp through `llama-cpp-python` (`Llama.eval([token])`, `n_batch` 1, an F32 KV cache), with its
  default OpenMP wait policy unless the environment sets `OMP_WAIT_POLICY` (`PASSIVE` slows it 1.7-2.9x
  here, so a ratio against it flatters the engine; time it on a quiet machine, load < 1, instead);
* stepcheck's engine: `target/release/examples/bench_engine FILE STEPS NUMERICS` (weights in place in their
  stored types, f32 numerics; for Q4_K_M a second row with `f32/f32/f32/q8_k`, its k-quant matvecs reading
  their inputs quantized to Q8_K as llama.cpp's do: docs/PROGRAM.md, "Numerics and storage");
* transformers f32 eager (F32 only): the model itself, `torch.set_num_threads(2)`, DynamicCache.

It prints the median ms per step of each, the load average before and after, and the table of issue 10 with
the targets (within 1.1x of llama.cpp for every type; under 0.3x transformers at Q8_0). Kept out of CI: it needs
torch, transformers and llama-cpp-python (`pip install llama-cpp-python==0.3.36`, ~12 min to compile), ~6 GB
of memory and ~6 GB of disk.

Usage:  cargo build --release --example bench_engine
        /work/venv/bin/python reference/bench_llama_cpp.py [--dir /tmp/stepcheck-bench] [--steps 16] [--types F32,BF16,Q8_0,Q4_K_M]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import make_fixtures as mf  # noqa: E402
from transformers import DynamicCache, Qwen3_5ForCausalLM  # noqa: E402

THREADS = 2
# llama.cpp's file types (`enum llama_ftype`).
FTYPES = {"F32": 0, "BF16": 32, "Q8_0": 7, "Q4_K_M": 15}
# The numerics stepcheck's engine is timed at, per type: f32, and for k-quants also Q8_K inputs.
NUMERICS = {"Q4_K_M": ["f32", "f32/f32/f32/q8_k"]}


class NoVocabWriter(mf.gguf.GGUFWriter):
    """gguf-py's writer with the one key llama.cpp needs to load a file without a tokenizer
    (`tokenizer.ggml.model = "no_vocab"`, with `qwen35.vocab_size`, which write_qwen35_gguf writes)."""

    def write_header_to_file(self, *args, **kw):
        self.add_string("tokenizer.ggml.model", "no_vocab")
        return super().write_header_to_file(*args, **kw)


def write_f32_gguf(path: Path, cfg, model) -> None:
    tc = cfg.to_dict()
    tc["layer_types"] = cfg.layer_types
    tc["full_attention_interval"] = 4
    plain = mf.gguf.GGUFWriter
    mf.gguf.GGUFWriter = NoVocabWriter
    try:
        mf.write_qwen35_gguf(path, model, tc, lambda n: "F32", "qwen35-0.8b-random", 0)
    finally:
        mf.gguf.GGUFWriter = plain


def build_model():
    """The 0.8B preset's sizes, random weights as the fixtures draw them (make_fixtures.qwen35_randomize_)."""
    cfg = mf.qwen35_text_config(
        vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = mf.set_eager(Qwen3_5ForCausalLM(cfg))
    mf.qwen35_randomize_(model, seed=8, emb_std=0.05)
    model.eval()
    return cfg, model


def tokens(n: int) -> list[int]:
    return [(7 + 31 * i) % 1000 for i in range(n + 1)]


def time_transformers(model, steps: int) -> float:
    torch.set_num_threads(THREADS)
    cache = DynamicCache(config=model.config.get_text_config())
    kw = mf.cache_kwarg(model)
    times = []
    with torch.no_grad():
        for i, t in enumerate(tokens(steps)):
            start = time.perf_counter()
            out = model(input_ids=torch.tensor([[t]], dtype=torch.long), use_cache=True, **{kw: cache})
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            if i > 0:  # the first step is the warm-up
                times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def time_llama_cpp(path: Path, steps: int) -> float:
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=steps + 8, n_batch=1, n_threads=THREADS, n_threads_batch=THREADS,
                type_k=0, type_v=0, verbose=False)
    times = []
    for i, t in enumerate(tokens(steps)):
        start = time.perf_counter()
        llm.eval([t])
        if i > 0:
            times.append(time.perf_counter() - start)
    del llm
    return 1e3 * statistics.median(times)


def time_stepcheck(binary: Path, path: Path, steps: int, numerics: str) -> float:
    out = subprocess.run([str(binary), str(path), str(steps), numerics], check=True, capture_output=True, text=True,
                         cwd=ROOT)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_ms"])


def quantize(src: Path, dst: Path, ftype: int) -> None:
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = THREADS
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, ftype {ftype}) returned {rc}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/stepcheck-bench", type=Path)
    ap.add_argument("--steps", default=16, type=int)
    ap.add_argument("--types", default="F32,BF16,Q8_0,Q4_K_M")
    ap.add_argument("--engine", default=str(ROOT / "target/release/examples/bench_engine"), type=Path)
    a = ap.parse_args()
    types = a.types.split(",")
    try:
        import llama_cpp  # noqa: F401
        have_llama = True
    except ImportError:
        have_llama = False
        print("llama-cpp-python is not installed: no llama.cpp column, and only the F32 file (llama.cpp quantizes)")
        types = [t for t in types if t == "F32"]
    a.dir.mkdir(parents=True, exist_ok=True)

    load_before = os.getloadavg()
    cfg, model = build_model()
    files = {t: a.dir / f"qwen35-0.8b-{t.lower()}.gguf" for t in types}
    f32 = a.dir / "qwen35-0.8b-f32.gguf"
    if not f32.exists():
        write_f32_gguf(f32, cfg, model)
    for t in types:
        if not files[t].exists():
            quantize(f32, files[t], FTYPES[t])

    rows = []
    for t in types:
        size = files[t].stat().st_size / 1e9
        llama = time_llama_cpp(files[t], a.steps) if have_llama else None
        hf = time_transformers(model, a.steps) if t == "F32" else None
        for numerics in NUMERICS.get(t, ["f32"]):
            ours = time_stepcheck(a.engine, files[t], a.steps, numerics)
            name = t if numerics == "f32" else f"{t}, numerics {numerics}"
            rows.append((name, size, llama, ours, hf))
            print(f"{name}: llama.cpp {llama} ms, stepcheck {ours:.1f} ms, transformers {hf} ms", flush=True)
    load_after = os.getloadavg()

    hf_f32 = next((r[4] for r in rows if r[4] is not None), None)
    fmt = lambda v: "–" if v is None else f"{v:.0f}"  # noqa: E731
    print(f"\nmedian ms per decode step, {a.steps} steps after a warm-up, {THREADS} threads; "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}\n")
    print("| weights | llama.cpp | stepcheck engine | transformers (f32 eager) | engine / llama.cpp | target met |")
    print("|---|---|---|---|---|---|")
    for t, size, llama, ours, hf in rows:
        ratio = None if llama is None else ours / llama
        met = "–" if ratio is None else ("yes" if ratio <= 1.1 else "no") + " (≤ 1.1×)"
        if t == "Q8_0" and hf_f32 is not None:
            met += f"; {ours / hf_f32:.2f}× transformers: " + ("yes" if ours / hf_f32 < 0.3 else "no") + " (< 0.3×)"
        print(f"| {t} ({size:.2f} GB) | {fmt(llama)} | {fmt(ours)} | {fmt(hf)} | "
              f"{'–' if ratio is None else f'{ratio:.2f}'} | {met} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
