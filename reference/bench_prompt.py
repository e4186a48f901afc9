#!/usr/bin/env python3
"""Prompt processing (pp) and text generation (tg) of the Qwen3.5-0.8B shape, llama.cpp and stepcheck side by side,
in the manner of llama-bench, with the share of this machine's f32 peak that prompt processing reaches.

The model is `make_llama_big.py`'s: the 0.8B preset's sizes (hidden 1024, FFN 3584, 24 layers with full attention
every 4th, vocab 248320, tied head) with seeded random weights, written F32 (`--f32 --no-vocab`) into --dir and
quantized from there by llama.cpp's own quantizer (`llama_model_quantize`) to BF16, Q8_0 and Q4_K_M; files already
in --dir are reused. Then, per type, on --threads threads (default 2), --reps repetitions after one warm-up:

* llama.cpp (`llama-cpp-python`'s low-level API, the model loaded once per file, mmap as llama-bench), once with an
  F32 KV cache (`type_k = type_v = 0`) and once with llama.cpp's default F16 one (1), each in its own context
  (n_ctx = P + N, n_batch = max(P, 512), n_ubatch = 512, flash attention --fa, default off as llama-bench's):
  - ppP (default pp512): the memory cleared, one `llama_decode` of a batch of P tokens (pseudo-random ids below the
    vocabulary, fixed seed; positions 0..P-1; logits for the last token only), timed with `llama_synchronize`;
    t/s = P / time. The warm-up is one such decode, as llama-bench's.
  - tgN (default tg128): the memory cleared, N single-token decodes from an empty cache (no prompt first, as
    llama-bench's tg test), all N timed; t/s = N / time. The warm-up is one single-token decode, as llama-bench's.
  llama-bench reports the mean and sample standard deviation of the per-repetition t/s; so does this script.
  Unlike llama-bench it attaches no ggml threadpool: this llama.cpp is built with OpenMP, which runs the graph.
* stepcheck: `target/release/stepcheck bench FILE -p P -n N -r REPS --threads T --json` (one JSON object in
  llama-bench's fields: tests pp/tg with avg_ts, stddev_ts, samples_ts; its own warm-up, its default prefill
  `--chunk` and numerics); for Q4_K_M a second row with `--numerics f32/f32/f32/q8_k`. Rows say "not built" while
  the binary or its `bench` subcommand is missing (`--self-test` checks the parser on a hand-written sample).
* the peak: `peak_flops.c` compiled with `cc -O2 -mavx2 -mfma` into --dir (and with `-mavx512f` too when the CPU
  has it), run on 1 and on T threads: independent FMA chains, ~0.5 s a run, the best of 3 (GFLOP/s, 2 flops per
  FMA lane). The clock is /proc/cpuinfo's "cpu MHz" as read, not measured (under a hypervisor often the nominal
  one); flops per cycle at that clock are derived from it.
* the share of peak: flops per prompt token = 2 x the elements of every 2-D weight tensor in the file except
  `token_embd` and `output` (a token is multiplied by each once; the depthwise conv kernel is counted the same way,
  one multiply-add per element). The output head is left out: a prompt computes logits for its last token only, so
  the head is not per-token work (here 2 x 248320 x 1024 = 0.51 GFLOP once per prompt, ~1 MFLOP/token at P = 512).
  Attention scores (grow with the position) and the delta rule's state update are left out too; they are a few
  percent at P = 512. share = pp t/s x flops per token / peak at T threads (the higher ISA's).

It prints a table per type (pp and tg t/s as mean ± sd, pp's share of peak, each row's ratio to llama.cpp with the
F32 KV cache), the peak, and the load average before and after; --json FILE writes all of it. OMP_WAIT_POLICY is
not set (llama.cpp's default, spinning, wait policy is what is timed); if the environment sets it, a warning is
printed. Time on a quiet machine (load < 1): a spinning OpenMP thread that loses its core slows llama.cpp many times.
Kept out of CI: it needs llama-cpp-python 0.3.36 and gguf-py (the /work/venv-llama venv), ~9 GB of disk in --dir
(F32 3.0 GB, BF16 1.5, Q8_0 0.8, Q4_K_M 0.5), ~4 GB of memory, and a few minutes per type; quantizing takes a
minute or two per type, once.

Usage:  cargo build --release    # target/release/stepcheck, with its `bench` subcommand
        /work/venv-llama/bin/python reference/bench_prompt.py [--dir /tmp/stepcheck-bench-pp] [--types F32,BF16,Q8_0,Q4_K_M]
            [--threads 2] [--reps 5] [-p 512] [-n 128] [--fa off|on|auto] [--stepcheck PATH] [--json OUT.json]
        /work/venv-llama/bin/python reference/bench_prompt.py --self-test    # the stepcheck JSON parser only
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

# llama.cpp's file types (`enum llama_ftype`).
FTYPES = {"F32": 0, "BF16": 32, "Q8_0": 7, "Q4_K_M": 15}
# stepcheck rows per type: None = the engine's default numerics (no flag), else `--numerics VALUE`.
NUMERICS = {"Q4_K_M": [None, "f32/f32/f32/q8_k"]}
KV_TYPES = {"F32 KV": 0, "F16 KV": 1}  # enum ggml_type
FA_TYPES = {"auto": -1, "off": 0, "on": 1}  # enum llama_flash_attn_type
SEED = 1234


# ---- statistics as llama-bench computes them ---------------------------------------------------------------

def summary(samples: list[float]) -> dict:
    """Mean and sample standard deviation (0 for one sample) of per-repetition t/s, as llama-bench's avg_ts/stdev_ts."""
    return {"avg_ts": statistics.fmean(samples), "stddev_ts": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "samples_ts": samples}


# ---- files ------------------------------------------------------------------------------------------------

def quantize(src: Path, dst: Path, ftype: int, threads: int) -> None:
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, ftype {ftype}) returned {rc}")


def prepare_files(d: Path, types: list[str], threads: int) -> dict[str, Path]:
    """The F32 file (make_llama_big) and the others quantized from it, reusing what is in `d` already. Each is
    written under a temporary name and renamed, so an interrupted run leaves no half file to be reused."""
    import make_llama_big
    d.mkdir(parents=True, exist_ok=True)
    files = {t: d / f"qwen35-0.8b-{t.lower()}.gguf" for t in types}
    f32 = d / "qwen35-0.8b-f32.gguf"
    if not f32.exists():
        print(f"writing {f32} (make_llama_big --f32 --no-vocab) ...", flush=True)
        tmp = f32.with_suffix(".partial")
        make_llama_big.write(tmp, f32=True, no_vocab=True)
        tmp.rename(f32)
    for t in types:
        if not files[t].exists():
            print(f"quantizing {f32.name} -> {files[t].name} (llama_model_quantize, ftype {FTYPES[t]}) ...", flush=True)
            start = time.perf_counter()
            tmp = files[t].with_suffix(".partial")
            quantize(f32, tmp, FTYPES[t], threads)
            tmp.rename(files[t])
            print(f"  {time.perf_counter() - start:.0f} s", flush=True)
    return files


def flops_per_token(path: Path) -> tuple[float, dict]:
    """2 x the elements of every 2-D weight tensor except the token embedding and the output head."""
    from gguf import GGUFReader
    r = GGUFReader(str(path))
    counted, left_out = 0, {}
    for t in r.tensors:
        if len(t.shape) != 2:
            continue
        if t.name in ("token_embd.weight", "output.weight"):
            left_out[t.name] = int(t.n_elements)
        else:
            counted += int(t.n_elements)
    return 2.0 * counted, {"matrix_elements_per_token": counted, "left_out": left_out}


# ---- llama.cpp --------------------------------------------------------------------------------------------

_LOG_CB = None  # kept alive: llama.cpp calls it later


def silence_llama_log() -> None:
    """Route llama.cpp's log (the loader's and the quantizer's too) to nowhere, as llama-bench does without -v."""
    global _LOG_CB
    import llama_cpp.llama_cpp as L
    if _LOG_CB is None:
        _LOG_CB = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(_LOG_CB, None)


class LlamaCpp:
    """One model loaded through llama-cpp-python's low-level API; a context per KV cache type."""

    def __init__(self, path: Path, threads: int, fa: str):
        import llama_cpp.llama_cpp as L
        self.L = L
        L.llama_backend_init()
        mparams = L.llama_model_default_params()  # mmap on, as llama-bench's default
        self.model = L.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path} (--verbose shows its log)")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.threads, self.fa = threads, fa

    def close(self) -> None:
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None

    def context(self, n_ctx: int, n_batch: int, kv_type: int):
        L = self.L
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = 512
        cparams.n_seq_max = 1
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        cparams.type_k = kv_type
        cparams.type_v = kv_type
        cparams.flash_attn_type = FA_TYPES[self.fa]
        ctx = L.llama_init_from_model(self.model, cparams)
        if not ctx:
            raise RuntimeError("llama_init_from_model failed")
        return ctx

    def _decode(self, ctx, batch) -> float:
        L = self.L
        start = time.perf_counter()
        rc = L.llama_decode(ctx, batch)
        L.llama_synchronize(ctx)
        elapsed = time.perf_counter() - start
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return elapsed

    def pp(self, ctx, n_prompt: int, reps: int, rng) -> list[float]:
        """One warm-up, then `reps` timed decodes of an n_prompt-token batch from an empty memory; t/s each."""
        L = self.L
        batch = L.llama_batch_init(n_prompt, 0, 1)
        try:
            samples = []
            for rep in range(reps + 1):
                L.llama_memory_clear(L.llama_get_memory(ctx), False)
                tokens = rng.integers(0, self.n_vocab, size=n_prompt)
                for i in range(n_prompt):
                    batch.token[i] = int(tokens[i])
                    batch.pos[i] = i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = i == n_prompt - 1
                batch.n_tokens = n_prompt
                elapsed = self._decode(ctx, batch)
                if rep > 0:  # rep 0 is the warm-up
                    samples.append(n_prompt / elapsed)
            return samples
        finally:
            L.llama_batch_free(batch)

    def tg(self, ctx, n_gen: int, reps: int, rng) -> list[float]:
        """A one-token warm-up, then `reps` runs of n_gen single-token decodes from an empty memory; t/s each."""
        L = self.L
        batch = L.llama_batch_init(1, 0, 1)
        try:
            batch.n_tokens = 1
            batch.n_seq_id[0] = 1
            batch.seq_id[0][0] = 0
            batch.logits[0] = True

            def run(n: int) -> float:
                L.llama_memory_clear(L.llama_get_memory(ctx), False)
                tokens = rng.integers(0, self.n_vocab, size=n)
                start = time.perf_counter()
                for i in range(n):
                    batch.token[0] = int(tokens[i])
                    batch.pos[0] = i
                    if L.llama_decode(ctx, batch) != 0:
                        raise RuntimeError(f"llama_decode failed at generated token {i}")
                    L.llama_synchronize(ctx)
                return time.perf_counter() - start

            run(1)  # the warm-up, as llama-bench's
            return [n_gen / run(n_gen) for _ in range(reps)]
        finally:
            L.llama_batch_free(batch)


def bench_llama_cpp(path: Path, a) -> dict[str, dict]:
    import numpy as np
    llm = LlamaCpp(path, a.threads, a.fa)
    out = {}
    try:
        for name, kv in KV_TYPES.items():
            ctx = llm.context(a.n_prompt + a.n_gen, max(a.n_prompt, 512), kv)
            try:
                pp = llm.pp(ctx, a.n_prompt, a.reps, np.random.default_rng(SEED))
                tg = llm.tg(ctx, a.n_gen, a.reps, np.random.default_rng(SEED + 1))
            finally:
                llm.L.llama_free(ctx)
            out[name] = {"pp": summary(pp), "tg": summary(tg)}
            print(f"  llama.cpp {name}: pp{a.n_prompt} {fmt_ts(out[name]['pp'])} t/s, "
                  f"tg{a.n_gen} {fmt_ts(out[name]['tg'])} t/s", flush=True)
    finally:
        llm.close()
    return out


# ---- stepcheck --------------------------------------------------------------------------------------------

def parse_stepcheck_json(text: str) -> dict:
    """{"model", "numerics", "threads", "pp": summary, "tg": summary} from `stepcheck bench --json`'s output: one
    JSON object (on one line or pretty-printed), possibly after other lines. A test is pp when n_gen is 0, tg when
    n_prompt is 0."""
    text = text.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")
        if start < 0:
            raise ValueError("no JSON object in stepcheck's output")
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    out = {"model": obj.get("model"), "numerics": obj.get("numerics"), "threads": obj.get("threads"),
           "pp": None, "tg": None}
    for t in obj["tests"]:
        kind = "pp" if t["n_gen"] == 0 and t["n_prompt"] > 0 else "tg" if t["n_prompt"] == 0 and t["n_gen"] > 0 else None
        if kind is None:
            continue
        samples = [float(x) for x in t.get("samples_ts", [])]
        out[kind] = {"avg_ts": float(t["avg_ts"]), "stddev_ts": float(t["stddev_ts"]), "samples_ts": samples,
                     "test": t.get("test")}
    return out


def stepcheck_missing(binary: Path) -> str | None:
    """Why stepcheck's `bench` cannot be run, or None when it can."""
    if not binary.exists():
        return f"not built ({binary} missing)"
    try:
        r = subprocess.run([str(binary), "bench", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not built ({e})"
    if r.returncode != 0:
        return "not built (no `bench` subcommand)"
    return None


def bench_stepcheck(binary: Path, path: Path, numerics: str | None, a) -> dict:
    cmd = [str(binary), "bench", str(path), "-p", str(a.n_prompt), "-n", str(a.n_gen), "-r", str(a.reps),
           "--threads", str(a.threads), "--json"]
    if numerics is not None:
        cmd += ["--numerics", numerics]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr.strip()[-400:]}", "command": cmd}
    try:
        out = parse_stepcheck_json(r.stdout)
    except (ValueError, KeyError, TypeError) as e:
        return {"error": f"unreadable output ({e}): {r.stdout.strip()[-400:]}", "command": cmd}
    out["command"] = cmd
    return out


SAMPLE = """stepcheck bench: model loaded
{"model": "/tmp/stepcheck-bench-pp/qwen35-0.8b-q4_k_m.gguf", "numerics": "f32/f32/f32/q8_k", "threads": 2,
 "tests": [{"test": "pp512", "n_prompt": 512, "n_gen": 0, "avg_ts": 101.5, "stddev_ts": 1.25,
            "samples_ts": [100.0, 101.0, 102.0, 103.0, 101.5]},
           {"test": "tg128", "n_prompt": 0, "n_gen": 128, "avg_ts": 40.0, "stddev_ts": 0.0, "samples_ts": [40]}]}
"""


def self_test() -> int:
    one_line = json.dumps(json.loads(SAMPLE[SAMPLE.index("{"):]))
    for text in (SAMPLE, one_line, one_line + "\n"):
        got = parse_stepcheck_json(text)
        assert got["numerics"] == "f32/f32/f32/q8_k" and got["threads"] == 2, got
        assert got["pp"]["avg_ts"] == 101.5 and got["pp"]["stddev_ts"] == 1.25 and len(got["pp"]["samples_ts"]) == 5
        assert got["pp"]["test"] == "pp512" and got["tg"]["test"] == "tg128" and got["tg"]["samples_ts"] == [40.0]
    for bad in ("", "error: no such file", '{"tests": [{"test": "pp512"}]}'):
        try:
            parse_stepcheck_json(bad)
        except (ValueError, KeyError):
            pass
        else:
            raise AssertionError(f"accepted {bad!r}")
    assert summary([100.0]) == {"avg_ts": 100.0, "stddev_ts": 0.0, "samples_ts": [100.0]}
    s = summary([1.0, 2.0, 3.0])
    assert s["avg_ts"] == 2.0 and abs(s["stddev_ts"] - 1.0) < 1e-12
    print("self-test: stepcheck JSON parsing and statistics OK")
    return 0


# ---- the peak ---------------------------------------------------------------------------------------------

def cpu_info() -> dict:
    info = {"model": platform.processor() or None, "mhz_read": None, "flags": set(), "logical_cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    if m := re.search(r"^model name\s*:\s*(.*)$", text, re.M):
        info["model"] = m.group(1).strip()
    if m := re.search(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M):
        info["mhz_read"] = float(m.group(1))
    if m := re.search(r"^flags\s*:\s*(.*)$", text, re.M):
        info["flags"] = set(m.group(1).split())
    return info


def measure_peak(d: Path, threads_list: list[int], flags: set[str]) -> dict:
    """GFLOP/s of peak_flops.c per ISA and thread count; {"error": ...} without a C compiler."""
    cc = shutil.which("cc")
    if cc is None:
        return {"error": "no `cc` on PATH: peak not measured"}
    variants = [("avx2", ["-mavx2", "-mfma"])]
    if "avx512f" in flags:
        variants.append(("avx512", ["-mavx512f", "-mfma"]))
    out = {"compiler": cc, "runs": []}
    for isa, isa_flags in variants:
        exe = d / f"peak_flops_{isa}"
        cmd = [cc, "-O2", *isa_flags, "-pthread", str(HERE / "peak_flops.c"), "-o", str(exe)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            out["runs"].append({"isa": isa, "error": f"{' '.join(cmd)}: {r.stderr.strip()[-300:]}"})
            continue
        for t in threads_list:
            r = subprocess.run([str(exe), str(t), "0.5", "3"], capture_output=True, text=True)
            if r.returncode != 0:
                out["runs"].append({"isa": isa, "threads": t, "error": r.stderr.strip()})
                continue
            res = json.loads(r.stdout)
            res["build"] = " ".join(["cc", "-O2", *isa_flags])
            out["runs"].append(res)
            print(f"  peak {isa}, {t} thread(s): {res['gflops']:.1f} GFLOP/s", flush=True)
    return out


def peak_at(peak: dict, threads: int) -> dict | None:
    """The highest-GFLOP/s run at `threads` threads."""
    runs = [r for r in peak.get("runs", []) if r.get("threads") == threads and "gflops" in r]
    return max(runs, key=lambda r: r["gflops"]) if runs else None


# ---- output -----------------------------------------------------------------------------------------------

def fmt_ts(s: dict | None) -> str:
    return "–" if s is None else f"{s['avg_ts']:.2f} ± {s['stddev_ts']:.2f}"


def print_table(t: str, size_gb: float, rows: list[dict], a) -> None:
    print(f"\n{t} ({size_gb:.2f} GB), {a.threads} threads, {a.reps} repetitions after a warm-up")
    print(f"| engine | pp{a.n_prompt} t/s | tg{a.n_gen} t/s | pp share of peak | pp / llama.cpp F32 KV "
          f"| tg / llama.cpp F32 KV |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r.get("status"):
            print(f"| {r['name']} | {r['status']} | | | | |")
            continue
        share = "–" if r.get("share") is None else f"{100 * r['share']:.1f} %"
        rp = "–" if r.get("ratio_pp") is None else f"{r['ratio_pp']:.2f}"
        rt = "–" if r.get("ratio_tg") is None else f"{r['ratio_tg']:.2f}"
        print(f"| {r['name']} | {fmt_ts(r['pp'])} | {fmt_ts(r['tg'])} | {share} | {rp} | {rt} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=Path("/tmp/stepcheck-bench-pp"), type=Path)
    ap.add_argument("--types", default="F32,BF16,Q8_0,Q4_K_M")
    ap.add_argument("--threads", default=2, type=int)
    ap.add_argument("--reps", default=5, type=int)
    ap.add_argument("-p", "--n-prompt", default=512, type=int)
    ap.add_argument("-n", "--n-gen", default=128, type=int)
    ap.add_argument("--fa", default="off", choices=sorted(FA_TYPES),
                    help="llama.cpp's flash attention (default off, llama-bench's default)")
    ap.add_argument("--stepcheck", default=ROOT / "target/release/stepcheck", type=Path)
    ap.add_argument("--quant-threads", type=int, help="llama_model_quantize's threads (default --threads)")
    ap.add_argument("--no-peak", action="store_true", help="skip the peak measurement (no share column)")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's log")
    ap.add_argument("--self-test", action="store_true", help="test the stepcheck JSON parser and exit")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    types = a.types.split(",")
    unknown = [t for t in types if t not in FTYPES]
    if unknown or a.reps < 1 or a.n_prompt < 1 or a.n_gen < 1 or a.threads < 1:
        ap.error(f"bad arguments (unknown types {unknown})" if unknown else "reps, -p, -n, --threads must be >= 1")
    a.stepcheck = a.stepcheck if a.stepcheck.is_absolute() else ROOT / a.stepcheck

    omp = os.environ.get("OMP_WAIT_POLICY")
    if omp is not None:
        print(f"WARNING: OMP_WAIT_POLICY={omp} is set in the environment: llama.cpp is timed with it, not with its "
              "default wait policy (PASSIVE slows it 1.7-2.9x here). Unset it for comparable figures.", flush=True)
    load_before = os.getloadavg()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}", flush=True)
    if load_before[0] >= 1:
        print("WARNING: load average >= 1: llama.cpp's spinning threads are slowed badly when a core is taken",
              flush=True)

    if not a.verbose:
        silence_llama_log()
    files = prepare_files(a.dir, types, a.quant_threads or a.threads)
    cpu = cpu_info()
    peak = {"error": "skipped (--no-peak)"} if a.no_peak else measure_peak(
        a.dir, sorted({1, 2, a.threads}), cpu["flags"])
    peak_t = peak_at(peak, a.threads)
    flops_tok, flops_detail = flops_per_token(files[types[0]])
    print(f"flops per prompt token: {flops_tok / 1e9:.4f} GFLOP ({flops_detail['matrix_elements_per_token']:,} "
          f"matrix elements; left out: {flops_detail['left_out']})", flush=True)

    missing = stepcheck_missing(a.stepcheck)
    if missing:
        print(f"stepcheck: {missing}", flush=True)

    results = {}
    for t in types:
        path = files[t]
        size_gb = path.stat().st_size / 1e9
        print(f"{t}: {path}", flush=True)
        rows = []
        llama = bench_llama_cpp(path, a)
        for name, fig in llama.items():
            rows.append({"name": f"llama.cpp {name}", **fig})
        for numerics in NUMERICS.get(t, [None]):
            label = "stepcheck" + ("" if numerics is None else f" {numerics}")
            if missing:
                rows.append({"name": label, "status": missing})
                continue
            res = bench_stepcheck(a.stepcheck, path, numerics, a)
            if "error" in res:
                print(f"  {label}: {res['error']}", flush=True)
                rows.append({"name": label, "status": "failed", **res})
                continue
            if numerics is None and res.get("numerics"):
                label = f"stepcheck ({res['numerics']})"
            rows.append({"name": label, **res})
            print(f"  {label}: pp{a.n_prompt} {fmt_ts(res['pp'])} t/s, tg{a.n_gen} {fmt_ts(res['tg'])} t/s",
                  flush=True)
        base = llama["F32 KV"]
        for r in rows:
            if r.get("status"):
                continue
            if r.get("pp") and peak_t:
                r["share"] = r["pp"]["avg_ts"] * flops_tok / (peak_t["gflops"] * 1e9)
            if r.get("pp"):
                r["ratio_pp"] = r["pp"]["avg_ts"] / base["pp"]["avg_ts"]
            if r.get("tg"):
                r["ratio_tg"] = r["tg"]["avg_ts"] / base["tg"]["avg_ts"]
        results[t] = {"file": str(path), "size_gb": size_gb, "rows": rows}
    load_after = os.getloadavg()

    print(f"\nllama.cpp through llama-cpp-python (flash attention {a.fa}); OMP_WAIT_POLICY="
          f"{omp if omp is not None else '(unset: the default)'}; load average before "
          f"{' '.join(f'{x:.2f}' for x in load_before)}, after {' '.join(f'{x:.2f}' for x in load_after)}")
    for t in types:
        print_table(t, results[t]["size_gb"], results[t]["rows"], a)

    print(f"\nCPU: {cpu['model']}, {cpu['logical_cpus']} logical CPUs; cpu MHz as read from /proc/cpuinfo: "
          f"{cpu['mhz_read']} (read, not measured)")
    if "error" in peak:
        print(f"peak: {peak['error']}")
    for r in peak.get("runs", []):
        if "error" in r:
            print(f"peak {r.get('isa')}: {r['error']}")
            continue
        per_cycle = ("" if not cpu["mhz_read"] else
                     f"; {r['gflops_per_thread'] * 1e3 / cpu['mhz_read']:.1f} flops/cycle per thread at the read clock")
        if r["isa"] == "avx2":  # two 256-bit FMA pipes (Haswell+, Zen 2+): 2 x 8 lanes x 2 flops a cycle
            per_cycle += f"; at 32 flops/cycle (two 256-bit FMA pipes, assumed) a clock of {r['gflops_per_thread'] / 32:.2f} GHz"
        print(f"peak f32 ({r['build']}, {r['accumulators']} x {r['lanes']}-lane FMA chains per thread), "
              f"{r['threads']} thread(s): {r['gflops']:.1f} GFLOP/s ({r['gflops_per_thread']:.1f} per thread{per_cycle})")
    if peak_t:
        print(f"share of peak = pp t/s x {flops_tok / 1e9:.4f} GFLOP/token / {peak_t['gflops']:.1f} GFLOP/s "
              f"({peak_t['isa']}, {a.threads} threads); the head, attention scores and the delta-rule state are "
              "not counted")

    if a.json:
        out = {
            "settings": {"types": types, "threads": a.threads, "reps": a.reps, "n_prompt": a.n_prompt,
                         "n_gen": a.n_gen, "flash_attn": a.fa, "seed": SEED, "dir": str(a.dir),
                         "stepcheck": str(a.stepcheck), "omp_wait_policy": omp},
            "load_before": load_before, "load_after": load_after,
            "cpu": {k: v for k, v in cpu.items() if k != "flags"},
            "peak": peak, "peak_used": peak_t,
            "flops_per_token": flops_tok, "flops_detail": flops_detail,
            "results": results,
        }
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
