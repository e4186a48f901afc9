#!/usr/bin/env python3
"""Independent numpy (float64) re-implementation of one Qwen3.5 decode step.

It reads ONLY the files on disk (config.json, *.safetensors [+ index], model.gguf, golden.json), never the torch
model, and reproduces golden.json's logits twice:

  * "hf"   : from the safetensors with Hugging Face conventions (zero-centred norms use 1+w, A = -exp(A_log),
             value head h uses key head h // r, names model.* or model.language_model.*, mtp.* / model.visual.* skipped)
  * "gguf" : from model.gguf with llama.cpp qwen35 conventions (norms already hold 1+w so use plain w, ssm_a = A,
             V heads in TILED order so value head h' uses key head h' % Hk, conv stored [C, K])

Its own safetensors parser (header + raw bytes, F32/F16/BF16) is deliberately independent of the safetensors
package, so it also checks the file format. Run: python reference/check_numpy.py [fixture names...]
Exit status 1 if any max |diff| exceeds TOL.
"""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
TOL = 1e-4

# ------------------------------------------------------------------------------------------------ file readers


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        buf = raw[base + s : base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path.name}: unsupported dtype {dt} for {name}")
        out[name] = a.reshape(info["shape"]).astype(np.float64)
    return out


def load_hf_dir(d: Path):
    """Returns (text_config dict, tie flag, weights with the `model.` / `model.language_model.` prefix stripped,
    list of skipped tensor names)."""
    cfg = json.loads((d / "config.json").read_text())
    tc = cfg.get("text_config", cfg)
    tie = bool(cfg.get("tie_word_embeddings", tc.get("tie_word_embeddings", False)))
    index = d / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    raw = {}
    for f in files:
        raw.update(read_safetensors(d / f))
    W, skipped = {}, []
    for k, v in raw.items():
        if k.startswith("mtp.") or k.startswith("model.visual."):
            skipped.append(k)
            continue
        if k.startswith("model.language_model."):
            k = k[len("model.language_model.") :]
        elif k.startswith("model."):
            k = k[len("model.") :]
        W[k] = v
    return tc, tie, W, sorted(skipped)


def hf_hparams(tc: dict) -> dict:
    L = tc["num_hidden_layers"]
    lt = tc.get("layer_types")
    if lt is None:
        n = tc.get("full_attention_interval", 4)
        lt = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(L)]
    rp = tc.get("rope_parameters") or {}
    theta = rp.get("rope_theta", tc.get("rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25))
    hd = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    return dict(
        L=L, layer_types=lt, H=tc["hidden_size"], nH=tc["num_attention_heads"], nKV=tc["num_key_value_heads"],
        hd=hd, rd=int(hd * prf), theta=float(theta), eps=tc["rms_norm_eps"],
        Hk=tc["linear_num_key_heads"], Hv=tc["linear_num_value_heads"], dk=tc["linear_key_head_dim"],
        dv=tc["linear_value_head_dim"], K=tc["linear_conv_kernel_dim"],
    )


def model_from_hf(d: Path):
    tc, tie, W, skipped = load_hf_dir(d)
    hp = hf_hparams(tc)
    layers = []
    for i in range(hp["L"]):
        p = f"layers.{i}."
        ly = dict(
            kind="linear" if hp["layer_types"][i] == "linear_attention" else "full",
            attn_norm=W[p + "input_layernorm.weight"], post_norm=W[p + "post_attention_layernorm.weight"],
        )
        if p + "mlp.gate_proj.weight" in W:
            ly.update(ffn_gate=W[p + "mlp.gate_proj.weight"], ffn_up=W[p + "mlp.up_proj.weight"],
                      ffn_down=W[p + "mlp.down_proj.weight"])
        if ly["kind"] == "linear":
            a = p + "linear_attn."
            ly.update(
                wqkv=W[a + "in_proj_qkv.weight"], wz=W[a + "in_proj_z.weight"], wb=W[a + "in_proj_b.weight"],
                wa=W[a + "in_proj_a.weight"], conv=W[a + "conv1d.weight"][:, 0, :],
                A=-np.exp(W[a + "A_log"]), dt_bias=W[a + "dt_bias"], ssm_norm=W[a + "norm.weight"],
                wout=W[a + "out_proj.weight"],
            )
        else:
            a = p + "self_attn."
            ly.update(
                wq=W[a + "q_proj.weight"], wk=W[a + "k_proj.weight"], wv=W[a + "v_proj.weight"],
                wo=W[a + "o_proj.weight"], q_norm=W[a + "q_norm.weight"], k_norm=W[a + "k_norm.weight"],
            )
        layers.append(ly)
    emb = W["embed_tokens.weight"]
    head = emb if tie else W["lm_head.weight"]
    unused = set(W) - {k for k in W if k.startswith("layers.")} - {"embed_tokens.weight", "norm.weight", "lm_head.weight"}
    assert not unused, unused
    return dict(hp=hp, norm_offset=1.0, vhead_map="grouped", layers=layers, emb=emb, out_norm=W["norm.weight"],
                head=head, skipped=skipped, W=W)


def read_gguf(path: Path):
    import gguf  # gguf's reader is only used to parse the container; all math below is ours

    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    T = {}
    types = {}
    for t in r.tensors:
        T[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        types[t.name] = t.tensor_type.name
    return meta, T, types


def model_from_gguf(path: Path):
    meta, T, types = read_gguf(path)
    arch = meta["general.architecture"]
    assert arch == "qwen35", arch
    g = lambda k: meta[f"{arch}.{k}"]  # noqa: E731
    L = g("block_count")
    Hv = g("ssm.time_step_rank")
    hp = dict(
        L=L, H=g("embedding_length"), nH=g("attention.head_count"), nKV=g("attention.head_count_kv"),
        hd=g("attention.key_length"), rd=g("rope.dimension_count"), theta=float(g("rope.freq_base")),
        eps=float(g("attention.layer_norm_rms_epsilon")), Hk=g("ssm.group_count"), Hv=Hv,
        dk=g("ssm.state_size"), dv=g("ssm.inner_size") // Hv, K=g("ssm.conv_kernel"),
    )
    layers = []
    for i in range(L):
        p = f"blk.{i}."
        # layer kind from tensor presence (see gguf-notes.json: full_attention_interval cannot express
        # every layer pattern)
        kind = "linear" if p + "attn_qkv.weight" in T else "full"
        ly = dict(
            kind=kind, attn_norm=T[p + "attn_norm.weight"], post_norm=T[p + "post_attention_norm.weight"],
            ffn_gate=T[p + "ffn_gate.weight"], ffn_up=T[p + "ffn_up.weight"], ffn_down=T[p + "ffn_down.weight"],
        )
        if kind == "linear":
            ly.update(
                wqkv=T[p + "attn_qkv.weight"], wz=T[p + "attn_gate.weight"], wb=T[p + "ssm_beta.weight"],
                wa=T[p + "ssm_alpha.weight"], conv=T[p + "ssm_conv1d.weight"], A=T[p + "ssm_a"],
                dt_bias=T[p + "ssm_dt.bias"], ssm_norm=T[p + "ssm_norm.weight"], wout=T[p + "ssm_out.weight"],
            )
        else:
            ly.update(
                wq=T[p + "attn_q.weight"], wk=T[p + "attn_k.weight"], wv=T[p + "attn_v.weight"],
                wo=T[p + "attn_output.weight"], q_norm=T[p + "attn_q_norm.weight"],
                k_norm=T[p + "attn_k_norm.weight"],
            )
        layers.append(ly)
    emb = T["token_embd.weight"]
    head = T.get("output.weight", emb)  # llama.cpp: no output.weight => tied to token_embd
    hp["layer_types"] = [ly["kind"] for ly in layers]
    return dict(hp=hp, norm_offset=0.0, vhead_map="tiled", layers=layers, emb=emb, out_norm=T["output_norm.weight"],
                head=head, meta=meta, types=types)


# ------------------------------------------------------------------------------------------------ the math


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rmsnorm(x, w, eps, offset):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (offset + w)


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def rope(u, pos, rd, theta):
    """NeoX rotate_half on the first rd dims of each row of u [n, hd]."""
    inv = 1.0 / theta ** (np.arange(0, rd, 2, dtype=np.float64) / rd)
    ang = pos * inv
    cos = np.concatenate([np.cos(ang), np.cos(ang)])
    sin = np.concatenate([np.sin(ang), np.sin(ang)])
    r = u[:, :rd]
    half = rd // 2
    rot = np.concatenate([-r[:, half:], r[:, :half]], axis=1)
    out = u.copy()
    out[:, :rd] = r * cos + rot * sin
    return out


def decode(model, tokens, vhead_map=None):
    hp = model["hp"]
    off = model["norm_offset"]
    vmap = vhead_map or model["vhead_map"]
    Hk, Hv, dk, dv, K = hp["Hk"], hp["Hv"], hp["dk"], hp["dv"], hp["K"]
    r = Hv // Hk
    nH, nKV, hd, eps = hp["nH"], hp["nKV"], hp["hd"], hp["eps"]
    G = nH // nKV
    C = 2 * Hk * dk + Hv * dv
    state = []
    for ly in model["layers"]:
        if ly["kind"] == "linear":
            state.append(dict(X=np.zeros((C, K)), S=np.zeros((Hv, dk, dv))))
        else:
            state.append(dict(K=np.zeros((nKV, 0, hd)), V=np.zeros((nKV, 0, hd))))
    out = []
    for pos, tok in enumerate(tokens):
        h = model["emb"][tok].copy()
        for ly, st in zip(model["layers"], state):
            x = rmsnorm(h, ly["attn_norm"], eps, off)
            if ly["kind"] == "linear":
                qkv = ly["wqkv"] @ x
                z = (ly["wz"] @ x).reshape(Hv, dv)
                b = ly["wb"] @ x
                a = ly["wa"] @ x
                st["X"] = np.concatenate([st["X"][:, 1:], qkv[:, None]], axis=1)
                c = silu(np.sum(ly["conv"] * st["X"], axis=1))
                q = c[: Hk * dk].reshape(Hk, dk)
                k = c[Hk * dk : 2 * Hk * dk].reshape(Hk, dk)
                v = c[2 * Hk * dk :].reshape(Hv, dv)
                beta = sigmoid(b)
                g = ly["A"] * softplus(a + ly["dt_bias"])
                o = np.zeros((Hv, dv))
                for hv in range(Hv):
                    kh = hv // r if vmap == "grouped" else hv % Hk
                    qh = l2norm(q[kh]) / np.sqrt(dk)
                    kk = l2norm(k[kh])
                    S = st["S"][hv] * np.exp(g[hv])
                    mem = S.T @ kk
                    delta = (v[hv] - mem) * beta[hv]
                    S = S + np.outer(kk, delta)
                    st["S"][hv] = S
                    oh = S.T @ qh
                    oh = oh / np.sqrt(np.mean(oh * oh) + eps) * ly["ssm_norm"] * silu(z[hv])
                    o[hv] = oh
                y = ly["wout"] @ o.reshape(-1)
            else:
                qg = (ly["wq"] @ x).reshape(nH, 2 * hd)
                q = qg[:, :hd]
                gate = qg[:, hd:].reshape(-1)
                q = rmsnorm(q, ly["q_norm"], eps, off)
                k = rmsnorm((ly["wk"] @ x).reshape(nKV, hd), ly["k_norm"], eps, off)
                v = (ly["wv"] @ x).reshape(nKV, hd)
                q = rope(q, pos, hp["rd"], hp["theta"])
                k = rope(k, pos, hp["rd"], hp["theta"])
                st["K"] = np.concatenate([st["K"], k[:, None, :]], axis=1)
                st["V"] = np.concatenate([st["V"], v[:, None, :]], axis=1)
                o = np.zeros((nH, hd))
                for qh in range(nH):
                    kv = qh // G
                    s = st["K"][kv] @ q[qh] * hd**-0.5
                    s = np.exp(s - s.max())
                    s /= s.sum()
                    o[qh] = s @ st["V"][kv]
                y = ly["wo"] @ (o.reshape(-1) * sigmoid(gate))
            h = h + y
            x = rmsnorm(h, ly["post_norm"], eps, off)
            if "mlp" in ly:  # e.g. the Qwen3.5-MoE block (check_refused.py)
                h = h + ly["mlp"](x)
            else:
                h = h + ly["ffn_down"] @ (silu(ly["ffn_gate"] @ x) * (ly["ffn_up"] @ x))
        hn = rmsnorm(h, model["out_norm"], eps, off)
        out.append(model["head"] @ hn)
    return np.array(out)


# ------------------------------------------------------------------------------------------------ driver


def check_fixture(name: str) -> list[tuple[str, float]]:
    d = FIXTURES / name
    golden = json.loads((d / "golden.json").read_text())
    ref = np.array(golden["logits"], dtype=np.float64)
    toks = golden["tokens"]
    results = []
    m = model_from_hf(d)
    diff = float(np.abs(decode(m, toks) - ref).max())
    results.append((f"{name} safetensors (HF conventions)", diff))
    if (d / "model.gguf").exists():
        mg = model_from_gguf(d / "model.gguf")
        diff = float(np.abs(decode(mg, toks) - ref).max())
        results.append((f"{name} model.gguf (llama.cpp conventions)", diff))
        if mg["hp"]["Hk"] != mg["hp"]["Hv"]:
            # sensitivity: the GGUF read with HF's grouped head map must FAIL (proves the tiled reorder is real)
            bad = float(np.abs(decode(mg, toks, vhead_map="grouped") - ref).max())
            results.append((f"{name} model.gguf with WRONG grouped v-head map (must be > 1e-2)", bad))
    return results


def main(argv):
    names = argv or sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name.startswith("qwen35-"))
    ok = True
    allres = []
    for n in names:
        for label, diff in check_fixture(n):
            wrong = "WRONG" in label
            good = diff > 1e-2 if wrong else diff <= TOL
            ok &= good
            allres.append((label, diff, good))
            print(f"{'PASS' if good else 'FAIL'}  max|diff| = {diff:.3e}  {label}")
    return ok, allres


if __name__ == "__main__":
    ok, _ = main(sys.argv[1:])
    sys.exit(0 if ok else 1)
