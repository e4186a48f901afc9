#!/usr/bin/env python3
"""GGUF fixtures made by llama.cpp's own converter (`convert_hf_to_gguf.py`), with transformers' goldens.

One tiny Qwen3.5 text model (4 layers, linear-linear-linear-full, `full_attention_interval` 4, which is the
only pattern key llama.cpp's qwen35 falls back on) is saved as two Hugging Face folders: one as published
Qwen3.5 checkpoints are (`mtp_num_hidden_layers: 1` in config.json and `mtp.*` tensors in the safetensors), one
without. Each is converted by the converter vendored in the llama-cpp-python sdist at F32, BF16 and Q8_0 (the
folder without MTP needs `--no-mtp`). llama.cpp is never compiled: only its Python converter runs.

Every golden is transformers run on the weights the GGUF file holds: the file is read back with gguf-py
(`gguf.quants.dequantize` for Q8_0), the converter's transforms are inverted (names, `1 + w` norms,
`ssm_a = -exp(A_log)`, the squeezed conv, the grouped->tiled value heads), the result is loaded into a fresh
`Qwen3_5ForCausalLM` with `strict=True`, and decoded one token at a time with transformers' DynamicCache. The
model's 2-D weights are pre-rounded to bf16, so the F32 and BF16 files hold exactly the HF weights, and their
goldens are checked to equal the HF model's own logits; the Q8_0 goldens differ (they are the dequantized model).

Output: reference/fixtures/converter-{f32,bf16,q8_0}[-mtp]/{model.gguf, golden.json, notes.json}, and
reference/fixtures/converter-moe/{model.gguf, notes.json}: the refused Qwen3.5-MoE fixture (refused/qwen3_5_moe_text)
converted at F32 (architecture `qwen35moe`), whose goldens are refused/qwen3_5_moe_text/golden.json.

Usage:  /work/venv/bin/python reference/make_converter_fixtures.py --llama-cpp DIR
        (DIR: the sdist's vendor/llama.cpp, e.g. /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp)
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
N_TOKENS = 10


def run_converter(llama_cpp: str, argv: list[str]) -> None:
    """Runs `convert_hf_to_gguf.py argv` in this process, with its own vendored gguf-py and conversion/.

    The converter hashes the tokenization of a fixed text to name the BPE pre-tokenizer
    (`TextModel.get_vocab_base_pre`) and refuses a tokenizer whose hash it does not list, which a tiny test
    tokenizer never is. It is answered here, and only here, with "qwen2" (the pre-tokenizer of Qwen3.5's own
    tokenizer): the answer lands in `tokenizer.ggml.pre` and changes no tensor and no model key.
    """
    import runpy

    sys.path.insert(0, llama_cpp)
    sys.path.insert(1, str(Path(llama_cpp) / "gguf-py"))
    import conversion.base  # the vendored converter's package

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    sys.argv = ["convert_hf_to_gguf.py", *argv]
    runpy.run_path(str(Path(llama_cpp) / "convert_hf_to_gguf.py"), run_name="__main__")


if len(sys.argv) > 2 and sys.argv[1] == "_convert":  # the subprocess of `convert` below
    run_converter(sys.argv[2], sys.argv[3:])
    sys.exit(0)

import torch  # noqa: E402

torch.set_num_threads(1)

import gguf  # noqa: E402  (PyPI gguf-py, only to read the files back)
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

sys.path.insert(0, str(HERE))
from make_fixtures import (  # noqa: E402
    HF_TO_GGUF,
    hf_decode,
    make_tokens,
    qwen35_randomize_,
    round_param_,
    set_eager,
    write_golden,
    write_json,
)

# ------------------------------------------------------------------------------------------------ the model

CONFIG = dict(
    vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
    linear_conv_kernel_dim=4, full_attention_interval=4,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    tie_word_embeddings=False, max_position_embeddings=4096,
)
SEED = 1313


def build_model() -> Qwen3_5ForCausalLM:
    """The tiny model: H=32 I=64 V=97, LLLF, Hk=2 Hv=4 (value heads reordered by the converter), dk=dv=8,
    nH=4 nKV=2, head_dim 16 (not H/nH), rotary on 4 of 16 dims, untied. Every weight O(1), 2-D ones bf16-exact."""
    cfg = Qwen3_5TextConfig(**CONFIG)
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"], cfg.layer_types
    model = set_eager(Qwen3_5ForCausalLM(cfg))
    qwen35_randomize_(model, seed=SEED)
    for _, p in model.named_parameters():
        if p.ndim >= 2:
            round_param_(p, torch.bfloat16)
    return model


def mtp_tensors(model: Qwen3_5ForCausalLM, seed: int) -> dict[str, torch.Tensor]:
    """An MTP block as published Qwen3.5 checkpoints hold it: `mtp.fc` [H, 2H], three norms, and one
    full-attention decoder layer under `mtp.layers.0.*` (shapes of the model's attention layer 3)."""
    g = torch.Generator().manual_seed(seed)
    h = model.config.hidden_size
    out: dict[str, torch.Tensor] = {"mtp.fc.weight": torch.randn(h, 2 * h, generator=g) / math.sqrt(2 * h)}
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{n}.weight"] = torch.rand(h, generator=g) - 0.5
    for name, p in model.state_dict().items():
        if name.startswith("model.layers.3."):
            rest = name.removeprefix("model.layers.3.")
            v = torch.rand(p.shape, generator=g) - 0.5 if p.ndim == 1 else torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
            out[f"mtp.layers.0.{rest}"] = v
    return {k: v.to(torch.bfloat16).to(torch.float32).contiguous() for k, v in out.items()}


def write_tokenizer(d: Path) -> None:
    """A tiny byte-level BPE (vocab.json + merges.txt) that transformers loads as Qwen2Tokenizer. The converter
    needs a tokenizer; this one has 62 tokens (ids below the model's vocab of 97; the rest are written as pads)."""
    # GPT-2's byte-to-unicode map sends the printable ASCII bytes to themselves: 'A'..'z' are 58 byte tokens.
    chars = [chr(c) for c in range(ord("A"), ord("z") + 1)]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = [("a", "b"), ("c", "d"), ("ab", "cd"), ("e", "f")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (d / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 4096,
        "bos_token": None, "eos_token": "z", "unk_token": None, "pad_token": None,
    }))


def save_hf(model: Qwen3_5ForCausalLM, d: Path, mtp: dict[str, torch.Tensor] | None) -> None:
    model.save_pretrained(d)
    for extra in ("generation_config.json",):
        if (d / extra).exists():
            (d / extra).unlink()
    if mtp is not None:
        tensors = load_file(d / "model.safetensors")
        tensors.update(mtp)
        save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
        c = json.loads((d / "config.json").read_text())
        c["mtp_num_hidden_layers"] = 1
        write_json(d / "config.json", dict(sorted(c.items())))
    write_tokenizer(d)


def convert(llama_cpp: str, hf_dir: Path, out: Path, outtype: str, mtp: bool) -> None:
    args = [str(hf_dir), "--outfile", str(out), "--outtype", outtype] + ([] if mtp else ["--no-mtp"])
    subprocess.run([sys.executable, __file__, "_convert", llama_cpp, *args], check=True)


# ------------------------------------------------------------------------------------------------ reading back


def untile_v_heads(t: torch.Tensor, dim: int, Hk: int, r: int, d: int) -> torch.Tensor:
    """The inverse of the converter's grouped->tiled reorder along `dim` (size Hk*r*d): tiled h' = j*Hk + g
    back to grouped h = g*r + j."""
    shape = list(t.shape)
    dim = dim % len(shape)
    t = t.reshape(*shape[:dim], r, Hk, d, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).contiguous().reshape(shape)


def gguf_to_hf_name(name: str) -> str | None:
    """The HF state-dict key of a decoder tensor; None for an MTP block's tensor."""
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    _, bid, rest = name.split(".", 2)
    if int(bid) >= CONFIG["num_hidden_layers"]:
        return None
    hf = {g: h for h, g in HF_TO_GGUF}[rest]
    return f"model.layers.{bid}.{hf}"


def hf_weights_of_gguf(path: Path, decoder: bool = True) -> tuple[dict[str, torch.Tensor], dict]:
    """The HF state dict the GGUF's decoder tensors hold (dequantized, the converter's transforms undone; only
    with `decoder`), and what the file says (metadata and every tensor's type, shape and name)."""
    r = gguf.GGUFReader(str(path))
    Hk, Hv = CONFIG["linear_num_key_heads"], CONFIG["linear_num_value_heads"]
    dk, dv = CONFIG["linear_key_head_dim"], CONFIG["linear_value_head_dim"]
    rr = Hv // Hk
    sd: dict[str, torch.Tensor] = {}
    tensors = []
    for t in r.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        x = torch.from_numpy(values.astype("float32").reshape([int(n) for n in reversed(t.shape)]).copy())
        tensors.append({"name": t.name, "type": t.tensor_type.name, "ne": [int(n) for n in t.shape]})
        hf = gguf_to_hf_name(t.name) if decoder else None
        if hf is None:
            continue
        if hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
            x = x - 1.0
        if hf.endswith(".A_log"):
            x = torch.log(-x)
        if Hk != Hv and ".linear_attn." in hf:
            if ".in_proj_qkv." in hf or ".conv1d." in hf:
                x = torch.cat([x[: 2 * Hk * dk], untile_v_heads(x[2 * Hk * dk:], 0, Hk, rr, dv)], 0)
            elif ".in_proj_z." in hf:
                x = untile_v_heads(x, 0, Hk, rr, dv)
            elif ".in_proj_b." in hf or ".in_proj_a." in hf or hf.endswith((".A_log", ".dt_bias")):
                x = untile_v_heads(x, 0, Hk, rr, 1)
            elif ".out_proj." in hf:
                x = untile_v_heads(x, 1, Hk, rr, dv)
        if ".conv1d." in hf:
            x = x.unsqueeze(1)  # [C, K] -> [C, 1, K]
        sd[hf] = x
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("tokenizer.ggml.") and f.name not in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            meta[f.name] = f"<{len(f.data)} values>"
            continue
        if not f.types or f.name.startswith("GGUF."):
            continue
        v = f.contents()
        meta[f.name] = v
    return sd, {"metadata": meta, "tensors": tensors}


def golden_of_gguf(path: Path, tokens: list[int]) -> tuple[torch.Tensor, dict]:
    sd, notes = hf_weights_of_gguf(path)
    model = set_eager(Qwen3_5ForCausalLM(Qwen3_5TextConfig(**CONFIG)))
    model.load_state_dict(sd, strict=True)
    return hf_decode(model, tokens), notes


# ------------------------------------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True, help="the llama-cpp-python sdist's vendor/llama.cpp")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = build_model()
    tokens = make_tokens(CONFIG["vocab_size"], N_TOKENS, seed=13013)
    hf_logits = hf_decode(model, tokens)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for mtp in (False, True):
            d = Path(tmp) / ("hf-mtp" if mtp else "hf")
            d.mkdir()
            save_hf(model, d, mtp_tensors(model, seed=SEED + 1) if mtp else None)
            folders[mtp] = d
        for outtype in ("f32", "bf16", "q8_0"):
            for mtp in (False, True):
                name = f"converter-{outtype}" + ("-mtp" if mtp else "")
                out = FIXTURES / name
                if out.exists():
                    shutil.rmtree(out)
                out.mkdir(parents=True)
                convert(a.llama_cpp, folders[mtp], out / "model.gguf", outtype, mtp)
                logits, notes = golden_of_gguf(out / "model.gguf", tokens)
                diff = (logits - hf_logits).abs().max().item()
                exact = outtype in ("f32", "bf16")
                verdict = "ok" if (diff == 0.0 if exact else diff > 0.0) else "UNEXPECTED"
                ok &= verdict == "ok"
                print(f"{name}: {(out / 'model.gguf').stat().st_size} bytes; max|golden - HF model| = {diff:.3e} "
                      f"({'must be 0: the file holds the HF weights' if exact else 'dequantized weights'}) {verdict}")
                notes["max_abs_vs_hf_model"] = diff
                notes["converter"] = "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/convert_hf_to_gguf.py"
                write_golden(out, name, tokens, logits)
                write_json(out / "notes.json", notes)
    # The Qwen3.5-MoE fixture (a refused family) as the converter writes it: architecture qwen35moe.
    with tempfile.TemporaryDirectory() as tmp:
        src = FIXTURES / "refused" / "qwen3_5_moe_text"
        d = Path(tmp) / "moe"
        shutil.copytree(src, d)
        write_tokenizer(d)
        out = FIXTURES / "converter-moe"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        convert(a.llama_cpp, d, out / "model.gguf", "f32", mtp=False)
        _, notes = hf_weights_of_gguf(out / "model.gguf", decoder=False)
        notes["converter"] = "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/convert_hf_to_gguf.py"
        notes["source"] = "reference/fixtures/refused/qwen3_5_moe_text (its golden.json is this file's)"
        write_json(out / "notes.json", notes)
        print(f"converter-moe: {(out / 'model.gguf').stat().st_size} bytes")
    for f in FIXTURES.glob("converter-*/*"):
        f.chmod(0o644)
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
