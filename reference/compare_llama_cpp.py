#!/usr/bin/env python3
"""llama.cpp's, transformers' and stepcheck's logits side by side, for every converter fixture.

For each `reference/fixtures/converter-*/model.gguf` (made by llama.cpp's own converter, see README.md):
* llama.cpp through `llama-cpp-python` (where it is installed): the golden's tokens fed one `eval` call per
  token, with an F32 KV cache (`type_k = type_v = 0`; llama.cpp's default F16 cache is ~1e-4 of the logit scale
  off transformers) and `logits_all=True`;
* transformers: the fixture's `golden.json` (transformers run on the weights the file holds);
* stepcheck: `stepcheck run FILE --tokens … --json`, through the engine and through the reference.

It prints the first logits of the first step from each, then the max |diff| of every pair over every step.
Exit 0 iff every pair is within 1e-4. Without llama-cpp-python, the llama.cpp column is left out (exit 0 if the
other pairs agree); installing it compiles llama.cpp (~12 min on 2 cores): `pip install llama-cpp-python==0.3.36`.

Usage:  python reference/compare_llama_cpp.py [--stepcheck target/release/stepcheck] [fixture ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOLERANCE = 1e-4


def llama_cpp_logits(path: Path, tokens: list[int]) -> np.ndarray | None:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(path), n_ctx=64, n_batch=1, n_threads=2, logits_all=True,
                type_k=0, type_v=0, verbose=False)
    for t in tokens:
        llm.eval([t])
    return np.array(llm.scores[: len(tokens)], dtype=np.float64)


def stepcheck_logits(binary: str, path: Path, tokens: list[int], interp: str) -> np.ndarray:
    out = subprocess.run(
        [binary, "run", str(path), "--tokens", ",".join(map(str, tokens)), "--json", "--interp", interp],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    return np.array(json.loads(out.stdout)["logits"], dtype=np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stepcheck", default=str(ROOT / "target/release/stepcheck"))
    ap.add_argument("fixtures", nargs="*")
    a = ap.parse_args()
    names = a.fixtures or sorted(p.name for p in (HERE / "fixtures").glob("converter-*"))
    ok = True
    for name in names:
        d = HERE / "fixtures" / name
        golden = json.loads((d / "golden.json").read_text())
        tokens = golden["tokens"]
        rows = {"transformers": np.array(golden["logits"], dtype=np.float64)}
        llama = llama_cpp_logits(d / "model.gguf", tokens)
        if llama is not None:
            rows["llama.cpp"] = llama
        for interp in ("engine", "reference"):
            rows[f"stepcheck {interp}"] = stepcheck_logits(a.stepcheck, d / "model.gguf", tokens, interp)
        print(f"== {name} ({len(tokens)} steps{'' if llama is not None else '; llama-cpp-python not installed'})")
        for who, r in rows.items():
            print(f"  {who:>18}: step 0 logits[:6] = {np.array2string(r[0, :6], precision=6)}")
        names_ = list(rows)
        for i, x in enumerate(names_):
            for y in names_[i + 1:]:
                diff = float(np.abs(rows[x] - rows[y]).max())
                good = diff <= TOLERANCE
                ok &= good
                print(f"  max |{x} − {y}| = {diff:.3e} {'ok' if good else 'OVER 1e-4'}")
    print("ALL AGREE" if ok else "SOME DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
