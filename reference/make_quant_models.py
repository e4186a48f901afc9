#!/usr/bin/env python3
"""Write one tiny Qwen3.5 model as the GGUF files users download (Q4_K_M, Q8_0, BF16, F16), in llama.cpp's qwen35
layout, each with transformers' logits computed ON THAT FILE'S DEQUANTIZED WEIGHTS.

Output: reference/fixtures/quant-models/<q4_k_m|q8_0|bf16|f16>/{model.gguf, golden.json, gguf-notes.json}.

How each file is made
  1. One Qwen3_5ForCausalLM with random O(1) weights (make_fixtures.qwen35_randomize_), kept in f32.
  2. make_fixtures.write_qwen35_gguf writes it with the converter's transforms (norms 1+w, ssm_a = -exp(A_log),
     conv [C, K], value heads tiled) and this script's `encode`, which stores each tensor in the type the file's
     mix gives it (`tensor_type`):
       * Q4_K_M, as llama.cpp's llama-quant.cpp (llama_tensor_get_type_impl) picks it: Q4_K by default;
         output.weight Q6_K; the attn_v-like tensors (attn_v and attn_qkv, one counter over both, in tensor-name
         order) and ffn_down Q6_K where use_more_bits(i, n) holds, i.e. i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2;
         token_embd Q4_K (untied head); norms, 1-D tensors and ssm_conv1d stay F32 (tensor_allows_quantization).
       * Q8_0: every 2-D weight Q8_0 (gguf-py's quantizer, ggml's bit-exact reference); the rest F32.
       * BF16 / F16: every 2-D weight rounded to BF16 / F16 (the converter's --outtype); the rest F32.
     gguf-py cannot quantize k-quants, so Q4_K and Q6_K blocks come from the small quantizer below (nearest
     rounding, per-sub-block min/max scales). Its exactness does not matter: the golden is computed from the
     dequantized values, and its packing is checked by dequantizing with gguf-py (the error must stay within a
     fraction of the weights' range, which a misplaced bit or nibble would break).
  3. The file is read back with gguf.GGUFReader and every tensor dequantized with gguf.quants.dequantize; the
     transforms are inverted (tiled -> grouped value heads, norms w - 1, A_log = log(-ssm_a), conv [C, 1, K]) and
     the values loaded into a fresh Qwen3_5ForCausalLM, which decodes 10 tokens one at a time (DynamicCache).
     Those logits are golden.json. The inversion is checked first on the unquantized f32 transforms (exact, but
     for A_log, whose log(-(-exp(x))) may move by an ulp).

Shape: the row length of a k-quant must be a multiple of 256, so hidden 256, FFN 256, nH * head_dim = 256 and
Hv * dv = 256 (the inner dims ffn_down, attn_output and ssm_out read). Two layers [linear, full]
(full_attention_interval 2), so each file stays under ~2 MB and the Q4_K_M mix holds both Q4_K and Q6_K for
attn_qkv / attn_v and for ffn_down.

Deterministic (seeded, CPU, fp32, one thread); a re-run writes byte-identical files.

Usage:  /work/venv/bin/python reference/make_quant_models.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_fixtures as mf  # noqa: E402  (sets torch to one deterministic thread)

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from transformers import Qwen3_5ForCausalLM  # noqa: E402

OUT = HERE / "fixtures" / "quant-models"
QK_K = 256

FILES = {  # folder: (general.file_type, the type of a 2-D weight by its GGUF name, given the file's tensor names)
    "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
}


# ================================================================================================ k-quant encoders


def _f16(x: np.ndarray) -> np.ndarray:
    """x rounded to f16, as f32."""
    return x.astype(np.float16).astype(np.float32)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Rows of x (length a multiple of 256) as Q4_K blocks (block_q4_K: d, dmin, scales[12], qs[128]).
    Each 32-value sub-block spans [min(lo, 0), hi] in 15 steps: y = (d*sc)*q - dmin*m."""
    xb = x.reshape(-1, 8, 32).astype(np.float32)
    nb = xb.shape[0]
    lo = np.minimum(xb.min(-1), 0.0)
    step = (xb.max(-1) - lo) / 15.0
    d = _f16(step.max(-1) / 63.0)
    dmin = _f16((-lo).max(-1) / 63.0)
    sc = np.clip(np.rint(_safe_div(step, d[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_safe_div(-lo, dmin[:, None])), 0, 63).astype(np.uint8)
    eff_step = d[:, None] * sc
    eff_off = dmin[:, None] * m
    q = np.clip(np.rint(_safe_div(xb + eff_off[..., None], np.broadcast_to(eff_step[..., None], xb.shape))), 0, 15)
    q = q.astype(np.uint8).reshape(nb, 4, 2, 32)  # chunk c of 64: low nibbles the first 32 values, high the next
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(nb, 128)
    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    dd = np.stack([d, dmin], axis=1).astype(np.float16).view(np.uint8)
    return np.concatenate([dd, scales, qs], axis=1).reshape(x.shape[0], -1)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """Rows of x as Q6_K blocks (block_q6_K: ql[128], qh[64], scales[16] int8, d). Each 16-value sub-block is
    symmetric: y = (d*sc)*(q - 32), q - 32 in [-32, 31]."""
    xb = x.reshape(-1, 16, 16).astype(np.float32)
    nb = xb.shape[0]
    step = np.abs(xb).max(-1) / 31.0
    d = _f16(step.max(-1) / 127.0)
    sc = np.clip(np.rint(_safe_div(step, d[:, None])), -128, 127).astype(np.int8)
    eff = d[:, None] * sc.astype(np.float32)
    q = np.clip(np.rint(_safe_div(xb, np.broadcast_to(eff[..., None], xb.shape))), -32, 31) + 32
    q = q.astype(np.uint8).reshape(nb, 2, 128)  # two halves of 128
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, 0:64] | (low[:, :, 64:128] << 4)).reshape(nb, 128)
    h4 = high.reshape(nb, 2, 4, 32)  # value w of a half: 2 bits at 2*(w // 32) of qh[w % 32]
    qh = (h4[:, :, 0] | (h4[:, :, 1] << 2) | (h4[:, :, 2] << 4) | (h4[:, :, 3] << 6)).reshape(nb, 64)
    dd = d.astype(np.float16).view(np.uint8).reshape(nb, 2)
    return np.concatenate([ql, qh, sc.view(np.uint8), dd], axis=1).reshape(x.shape[0], -1)


K_ENCODERS = {T.Q4_K: (quantize_q4_k, 0.08), T.Q6_K: (quantize_q6_k, 0.02)}  # and the largest error / max|x|


def encode_array(t: np.ndarray, qtype: T) -> np.ndarray:
    """t (2-D, f32) stored as `qtype`: raw uint8 blocks for the quantized types, the rounded array otherwise."""
    t = np.ascontiguousarray(t, dtype=np.float32)
    if qtype == T.F16:
        return t.astype(np.float16)
    if qtype in K_ENCODERS:
        fn, tol = K_ENCODERS[qtype]
        data = fn(t)
        back = gguf.quants.dequantize(data, qtype).reshape(t.shape)
        err = np.abs(back - t).max() / np.abs(t).max()
        assert err <= tol, f"{qtype.name} packing is wrong: error {err:.3g} of max|x|"
        return data
    return gguf.quants.quantize(t, qtype)  # BF16 and Q8_0: gguf-py's (ggml's) own rounding


# ================================================================================================ llama.cpp's Q4_K_M mix


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's use_more_bits (C integer division)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_types(names: list[str], n_layer: int) -> dict[str, T]:
    """The type llama.cpp's Q4_K_M gives each quantizable 2-D weight (GGUF names), counters in name order."""
    types = {}
    attn_v_like = sorted(n for n in names if "attn_v.weight" in n or "attn_qkv.weight" in n)
    ffn_down = sorted(n for n in names if "ffn_down" in n)
    for n in names:
        if n == "output.weight":
            types[n] = T.Q6_K
        elif n in attn_v_like:
            types[n] = T.Q6_K if use_more_bits(attn_v_like.index(n), len(attn_v_like)) else T.Q4_K
        elif n in ffn_down:
            types[n] = T.Q6_K if use_more_bits(ffn_down.index(n), n_layer) else T.Q4_K
        else:
            types[n] = T.Q4_K
    return types


def tensor_types(folder: str, model) -> dict[str, T]:
    """GGUF name -> stored type of every 2-D weight the file quantizes or rounds (ssm_conv1d stays F32)."""
    names = [mf.hf_name_to_gguf(n) for n, p in model.state_dict().items() if p.ndim >= 2]
    names = [n for n in names if not n.endswith("ssm_conv1d.weight")]
    if folder == "q4_k_m":
        return q4_k_m_types(names, model.config.num_hidden_layers)
    one = {"q8_0": T.Q8_0, "bf16": T.BF16, "f16": T.F16}[folder]
    return {n: one for n in names}


# ================================================================================================ GGUF -> HF


def hf_from_gguf(hf_name: str, t: torch.Tensor, tc: dict) -> torch.Tensor:
    """The inverse of make_fixtures.gguf_transform: a GGUF tensor's values as the HF parameter `hf_name`."""
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    r = Hv // Hk
    t = t.clone().to(torch.float32)
    if hf_name.endswith(".A_log"):
        t = torch.log(-t)
    elif hf_name.endswith("norm.weight") and not hf_name.endswith("linear_attn.norm.weight"):
        t = t - 1.0

    def untile(x, dim, d):  # tiled (h' = j*Hk + g) -> grouped (h = g*r + j): the reorder with Hk and r swapped
        return mf.reorder_v_heads(x, dim, r, Hk, d)

    if Hk != Hv and ".linear_attn." in hf_name:
        if ".in_proj_qkv." in hf_name:
            t = torch.cat([t[: 2 * Hk * dk], untile(t[2 * Hk * dk :], 0, dv)], 0)
        elif ".in_proj_z." in hf_name:
            t = untile(t, 0, dv)
        elif ".in_proj_b." in hf_name or ".in_proj_a." in hf_name:
            t = untile(t, 0, 1)
        elif hf_name.endswith(".A_log") or hf_name.endswith(".dt_bias"):
            t = untile(t, 0, 1)
        elif ".conv1d." in hf_name:
            t = torch.cat([t[: 2 * Hk * dk], untile(t[2 * Hk * dk :], 0, dv)], 0)
        elif ".out_proj." in hf_name:
            t = untile(t, 1, dv)
    if ".conv1d." in hf_name:
        t = t.unsqueeze(1)  # [C, K] -> [C, 1, K]
    return t


def check_inverse(model, tc: dict) -> None:
    """hf_from_gguf undoes gguf_transform: exactly, but for A_log (within 2 ulp)."""
    for n, p in model.state_dict().items():
        back = hf_from_gguf(n, mf.gguf_transform(n, p, tc), tc)
        assert back.shape == p.shape, n
        if n.endswith(".A_log"):
            assert torch.allclose(back, p, rtol=3e-7, atol=0), n
        else:
            assert torch.equal(back, p), n


def dequantized_state_dict(path: Path, model, tc: dict) -> tuple[dict, dict]:
    """The HF state dict the GGUF file at `path` holds (read and dequantized by gguf-py), and each tensor's type."""
    reader = gguf.GGUFReader(str(path))
    by_gguf = {}
    types = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        by_gguf[t.name] = torch.from_numpy(np.array(values, dtype=np.float32).reshape(shape))
        types[t.name] = t.tensor_type.name
    sd = {}
    for n, p in model.state_dict().items():
        g = mf.hf_name_to_gguf(n)
        sd[n] = hf_from_gguf(n, by_gguf.pop(g), tc)
        assert sd[n].shape == p.shape, (n, sd[n].shape, p.shape)
    assert not by_gguf, f"tensors the model does not hold: {sorted(by_gguf)}"
    return sd, types


# ================================================================================================ main


def build_model():
    cfg = mf.qwen35_text_config(
        vocab_size=97, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, full_attention_interval=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
    )
    assert cfg.layer_types == ["linear_attention", "full_attention"], cfg.layer_types
    torch.manual_seed(5)
    model = mf.set_eager(Qwen3_5ForCausalLM(cfg))
    mf.qwen35_randomize_(model, seed=505)
    return cfg, model


def build(folder: str, cfg, model, tokens: list[int]) -> None:
    d = mf.fresh_dir(OUT / folder)
    tc = cfg.to_dict()
    tc["layer_types"] = cfg.layer_types
    tc["full_attention_interval"] = 2  # transformers keeps layer_types only; the converter writes the interval
    types = tensor_types(folder, model)

    def encode(gname, t, typ):
        if gname not in types:
            return None
        qtype = types[gname]
        return encode_array(t, qtype), qtype

    notes = mf.write_qwen35_gguf(d / "model.gguf", model, tc, lambda n: types.get(mf.hf_name_to_gguf(n), T.F32).name,
                                 f"qwen35-quant-{folder}", FILES[folder], encode=encode)
    sd, stored = dequantized_state_dict(d / "model.gguf", model, tc)
    for entry in notes["tensors"]:
        assert entry["type"] == stored[entry["gguf"]], entry
    golden_model = mf.set_eager(Qwen3_5ForCausalLM(cfg))
    golden_model.load_state_dict(sd, strict=True)
    logits = mf.hf_decode(golden_model, tokens)
    drift = max((sd[n] - p).abs().max().item() / max(p.abs().max().item(), 1e-30) for n, p in model.state_dict().items())
    mf.write_golden(d, f"qwen35-quant-{folder}", tokens, logits, extra={
        "weights": "transformers on the file's weights as gguf-py dequantizes them (transforms inverted)",
        "file_type": FILES[folder].name,
    })
    notes["layer_kind_note"] = "full_attention_interval = 2 matches the tensors (layer 1 is full attention)."
    notes["quantization"] = {
        "mix": "llama.cpp Q4_K_M (llama-quant.cpp llama_tensor_get_type_impl)" if folder == "q4_k_m" else
               f"every 2-D weight but ssm_conv1d {folder.upper()}",
        "types": {k: sum(1 for v in stored.values() if v == k) for k in sorted(set(stored.values()))},
        "k_quant_encoder": "reference/make_quant_models.py quantize_q4_k / quantize_q6_k (nearest rounding); "
                           "values are what gguf-py dequantizes",
        "max_relative_change_of_a_weight": drift,
    }
    mf._finish_notes(notes, tc)
    mf.write_json(d / "gguf-notes.json", notes)
    size = (d / "model.gguf").stat().st_size
    print(f"  {folder:7} {size / 1e6:5.2f} MB  {notes['quantization']['types']}  max |logit| "
          f"{logits.abs().max().item():.2f}  weight drift {drift:.3g}")


def main() -> int:
    cfg, model = build_model()
    tc = cfg.to_dict()
    check_inverse(model, tc)
    tokens = mf.make_tokens(cfg.vocab_size, mf.N_TOKENS, seed=5005)
    for folder in FILES:
        build(folder, cfg, model, tokens)
    for f in OUT.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main())
