#!/usr/bin/env python3
"""Independent numpy (float64) decoders for the refused-family fixtures (reference/fixtures/refused/*).

They read only config.json + model.safetensors + golden.json and implement exactly the math written in each
fixture's NOTES.md, so a PASS here means the NOTES are a complete, correct description of what transformers did.
Run: python reference/check_refused.py [names...]   (exit 1 on any max |diff| > TOL)
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_numpy import (  # noqa: E402
    decode as qwen35_decode,
    l2norm,  # noqa: F401  (re-exported for readers)
    model_from_hf,
    read_safetensors,
    sigmoid,
    silu,
)

REFUSED = HERE / "fixtures" / "refused"
TOL = 1e-4


def load(d: Path):
    cfg = json.loads((d / "config.json").read_text())
    W = read_safetensors(d / "model.safetensors")
    g = json.loads((d / "golden.json").read_text())
    return cfg, W, g["tokens"], np.array(g["logits"], dtype=np.float64)


def rms(x, w, eps, offset=0.0):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (offset + w)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def rope_neox(u, pos, inv_freq, scale=1.0):
    """rotate_half pairing (i, i + d/2) over the whole last axis of u [n, d]; cos/sin multiplied by `scale`."""
    ang = pos * inv_freq
    cos = np.concatenate([np.cos(ang), np.cos(ang)]) * scale
    sin = np.concatenate([np.sin(ang), np.sin(ang)]) * scale
    h = u.shape[-1] // 2
    return u * cos + np.concatenate([-u[..., h:], u[..., :h]], axis=-1) * sin


def rope_interleaved_deinterleave(u, pos, inv_freq):
    """DeepSeek: pairs (2i, 2i+1) rotated by inv_freq[i]; OUTPUT is [all rotated evens | all rotated odds]."""
    ang = pos * inv_freq
    c, s = np.cos(ang), np.sin(ang)
    a, b = u[..., 0::2], u[..., 1::2]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


# ------------------------------------------------------------------------------------------------ gemma3_text


def gemma3(d: Path, bug: str = ""):
    c, W, toks, ref = load(d)
    H, nH, nKV, hd, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    G = nH // nKV
    win = c["sliding_window"]
    scale = c["query_pre_attn_scalar"] ** -0.5
    inv = {}
    for lt, rp in c["rope_parameters"].items():
        f = 1.0 / rp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
        if rp["rope_type"] == "linear":
            f = f / rp["factor"]
        inv[lt] = f
    emb = W["model.embed_tokens.weight"]
    head = W.get("lm_head.weight", emb)
    escale = float(np.float32(H**0.5))  # torch.tensor(H**0.5) is fp32, then cast to the weight dtype
    if bug == "no-embed-scale":
        escale = 1.0
    caches = [([], []) for _ in range(c["num_hidden_layers"])]
    out = []
    for pos, t in enumerate(toks):
        h = emb[t] * escale
        for i, lt in enumerate(c["layer_types"]):
            p = f"model.layers.{i}."
            w = lambda n: W[p + n]  # noqa: E731
            x = rms(h, w("input_layernorm.weight"), eps, 1.0)
            q = (w("self_attn.q_proj.weight") @ x).reshape(nH, hd)
            k = (w("self_attn.k_proj.weight") @ x).reshape(nKV, hd)
            v = (w("self_attn.v_proj.weight") @ x).reshape(nKV, hd)
            q = rope_neox(rms(q, w("self_attn.q_norm.weight"), eps, 1.0), pos, inv[lt])
            k = rope_neox(rms(k, w("self_attn.k_norm.weight"), eps, 1.0), pos, inv[lt])
            caches[i][0].append(k)
            caches[i][1].append(v)
            K, V = np.stack(caches[i][0], 1), np.stack(caches[i][1], 1)  # [nKV, T, hd]
            lo = max(0, pos - win + 1) if lt == "sliding_attention" else 0  # visible: pos-W < j <= pos
            if bug == "window+1" and lt == "sliding_attention":
                lo = max(0, pos - win)
            if bug == "no-window":
                lo = 0
            o = np.zeros((nH, hd))
            for qh in range(nH):
                s = K[qh // G, lo:] @ q[qh] * scale
                o[qh] = softmax(s) @ V[qh // G, lo:]
            a = w("self_attn.o_proj.weight") @ o.reshape(-1)
            h = h + rms(a, w("post_attention_layernorm.weight"), eps, 1.0)
            x = rms(h, w("pre_feedforward_layernorm.weight"), eps, 1.0)
            m = w("mlp.down_proj.weight") @ (gelu_tanh(w("mlp.gate_proj.weight") @ x) * (w("mlp.up_proj.weight") @ x))
            h = h + rms(m, w("post_feedforward_layernorm.weight"), eps, 1.0)
        out.append(head @ rms(h, W["model.norm.weight"], eps, 1.0))
    return np.array(out), ref


# ------------------------------------------------------------------------------------------------ gpt_oss


def yarn_inv_freq(rp, dim):
    base, factor = rp["rope_theta"], rp["factor"]
    orig = rp["original_max_position_embeddings"]
    beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    ef = 1 - ramp
    inv = inter * (1 - ef) + extra * ef
    att = rp.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    return inv, att


def gpt_oss(d: Path, bug: str = ""):
    c, W, toks, ref = load(d)
    nH, nKV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    G = nH // nKV
    win, k_top = c["sliding_window"], c["num_experts_per_tok"]
    alpha, limit = c["swiglu_alpha"], c["swiglu_limit"]
    inv, att = yarn_inv_freq(c["rope_parameters"], hd)
    if bug == "no-yarn-attention-factor":
        att = 1.0
    emb, head = W["model.embed_tokens.weight"], W["lm_head.weight"]
    caches = [([], []) for _ in range(c["num_hidden_layers"])]
    out = []
    for pos, t in enumerate(toks):
        h = emb[t].copy()
        for i, lt in enumerate(c["layer_types"]):
            p = f"model.layers.{i}."
            w = lambda n: W[p + n]  # noqa: E731
            x = rms(h, w("input_layernorm.weight"), eps)
            q = (w("self_attn.q_proj.weight") @ x + w("self_attn.q_proj.bias")).reshape(nH, hd)
            k = (w("self_attn.k_proj.weight") @ x + w("self_attn.k_proj.bias")).reshape(nKV, hd)
            v = (w("self_attn.v_proj.weight") @ x + w("self_attn.v_proj.bias")).reshape(nKV, hd)
            q, k = rope_neox(q, pos, inv, att), rope_neox(k, pos, inv, att)
            caches[i][0].append(k)
            caches[i][1].append(v)
            K, V = np.stack(caches[i][0], 1), np.stack(caches[i][1], 1)
            lo = max(0, pos - win + 1) if lt == "sliding_attention" else 0
            if bug == "window+1" and lt == "sliding_attention":
                lo = max(0, pos - win)
            sinks = w("self_attn.sinks")
            o = np.zeros((nH, hd))
            for qh in range(nH):
                s = K[qh // G, lo:] @ q[qh] * hd**-0.5
                pr = softmax(np.append(s, sinks[qh]))[:-1]  # sink joins the softmax, then is dropped
                if bug == "no-sinks":
                    pr = softmax(s)
                o[qh] = pr @ V[qh // G, lo:]
            h = h + w("self_attn.o_proj.weight") @ o.reshape(-1) + w("self_attn.o_proj.bias")
            x = rms(h, w("post_attention_layernorm.weight"), eps)
            logits = w("mlp.router.weight") @ x + w("mlp.router.bias")
            top = np.argsort(-logits)[:k_top]
            wts = softmax(logits[top])  # softmax over the k selected logits only
            if bug == "softmax-all-then-topk":
                wts = softmax(logits)[top]
            m = np.zeros_like(h)
            for e, we in zip(top, wts):
                gu = x @ w("mlp.experts.gate_up_proj")[e] + w("mlp.experts.gate_up_proj_bias")[e]  # [2I]
                gate, up = np.minimum(gu[0::2], limit), np.clip(gu[1::2], -limit, limit)
                if bug == "no-clamp":
                    gate, up = gu[0::2], gu[1::2]
                if bug == "gate-up-halves":
                    half = gu.shape[0] // 2
                    gate, up = np.minimum(gu[:half], limit), np.clip(gu[half:], -limit, limit)
                glu = gate * sigmoid(gate * alpha)
                m += we * (((up + 1) * glu) @ w("mlp.experts.down_proj")[e] + w("mlp.experts.down_proj_bias")[e])
            h = h + m
        out.append(head @ rms(h, W["model.norm.weight"], eps))
    return np.array(out), ref


# ------------------------------------------------------------------------------------------------ qwen3_5_moe_text


def qwen3_5_moe(d: Path, bug: str = ""):
    c, _, toks, ref = load(d)
    m = model_from_hf(d)
    W = m["W"]
    E, k_top = c["num_experts"], c["num_experts_per_tok"]
    for i, ly in enumerate(m["layers"]):
        p = f"layers.{i}.mlp."

        def moe(x, p=p):
            probs = softmax(W[p + "gate.weight"] @ x)  # softmax over ALL experts first
            top = np.argsort(-probs)[:k_top]
            wts = probs[top] / probs[top].sum()  # then renormalise the top-k (always)
            if bug == "no-renorm":
                wts = probs[top]
            y = np.zeros_like(x)
            for e, we in zip(top, wts):
                q = f"{p}experts.{e}."
                y += we * (W[q + "down_proj.weight"] @ (silu(W[q + "gate_proj.weight"] @ x) * (W[q + "up_proj.weight"] @ x)))
            s = p + "shared_expert."
            shared = W[s + "down_proj.weight"] @ (silu(W[s + "gate_proj.weight"] @ x) * (W[s + "up_proj.weight"] @ x))
            if bug == "no-shared-gate":
                return y + shared
            return y + sigmoid(W[p + "shared_expert_gate.weight"] @ x)[0] * shared

        assert all(f"{p}experts.{e}.gate_proj.weight" in W for e in range(E))
        ly["mlp"] = moe
    return qwen35_decode(m, toks), ref


# ------------------------------------------------------------------------------------------------ deepseek_v3


def deepseek_v3(d: Path, bug: str = ""):
    c, W, toks, ref = load(d)
    nH, eps = c["num_attention_heads"], c["rms_norm_eps"]
    nope, rope_d, vd, kvr = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    E, G, TG, k_top = c["n_routed_experts"], c["n_group"], c["topk_group"], c["num_experts_per_tok"]
    rp = c["rope_parameters"]
    assert rp["rope_type"] == "default"
    inv = 1.0 / rp["rope_theta"] ** (np.arange(0, rope_d, 2, dtype=np.float64) / rope_d)
    scale = (nope + rope_d) ** -0.5
    emb, head = W["model.embed_tokens.weight"], W["lm_head.weight"]
    caches = [([], []) for _ in range(c["num_hidden_layers"])]  # latent (post kv_a_layernorm), k_rot (post rope)
    out = []

    def swiglu(x, p):
        return W[p + "down_proj.weight"] @ (silu(W[p + "gate_proj.weight"] @ x) * (W[p + "up_proj.weight"] @ x))

    for pos, t in enumerate(toks):
        h = emb[t].copy()
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            w = lambda n: W[p + n]  # noqa: E731
            x = rms(h, w("input_layernorm.weight"), eps)
            q = w("self_attn.q_b_proj.weight") @ rms(w("self_attn.q_a_proj.weight") @ x, w("self_attn.q_a_layernorm.weight"), eps)
            q = q.reshape(nH, nope + rope_d)
            ckv = w("self_attn.kv_a_proj_with_mqa.weight") @ x
            lat = rms(ckv[:kvr], w("self_attn.kv_a_layernorm.weight"), eps)
            rot = rope_neox if bug == "neox-rope" else rope_interleaved_deinterleave
            k_rot = rot(ckv[kvr:], pos, inv)
            q = np.concatenate([q[:, :nope], rot(q[:, nope:], pos, inv)], axis=1)
            caches[i][0].append(lat)
            caches[i][1].append(k_rot)
            kvb = np.stack(caches[i][0]) @ w("self_attn.kv_b_proj.weight").T  # [T, nH*(nope+vd)]
            kvb = kvb.reshape(len(caches[i][0]), nH, nope + vd)
            KR = np.stack(caches[i][1])  # [T, rope_d], shared by all heads
            o = np.zeros((nH, vd))
            for hh in range(nH):
                K = np.concatenate([kvb[:, hh, :nope], KR], axis=1)
                o[hh] = softmax(K @ q[hh] * scale) @ kvb[:, hh, nope:]
            h = h + w("self_attn.o_proj.weight") @ o.reshape(-1)
            x = rms(h, w("post_attention_layernorm.weight"), eps)
            if i < c["first_k_dense_replace"]:
                h = h + swiglu(x, p + "mlp.")
                continue
            s = sigmoid(w("mlp.gate.weight") @ x)
            sc = s + w("mlp.gate.e_score_correction_bias")
            per = E // G
            gscore = np.array([np.sort(sc[g * per:(g + 1) * per])[-2:].sum() for g in range(G)])
            keep = np.argsort(-gscore)[:TG]
            if bug == "no-group-limit":
                keep = range(G)
            masked = np.full(E, -np.inf)
            for g in keep:
                masked[g * per:(g + 1) * per] = sc[g * per:(g + 1) * per]
            top = np.argsort(-masked)[:k_top]
            wts = s[top]  # weights from the UNbiased sigmoid scores
            if bug == "biased-weights":
                wts = sc[top]
            if c["norm_topk_prob"]:
                wts = wts / (wts.sum() + 1e-20)
            wts = wts * c["routed_scaling_factor"]
            y = sum(we * swiglu(x, f"{p}mlp.experts.{e}.") for e, we in zip(top, wts))
            h = h + y + swiglu(x, p + "mlp.shared_experts.")
        out.append(head @ rms(h, W["model.norm.weight"], eps))
    return np.array(out), ref


CHECKS = {"gemma3_text": gemma3, "gpt_oss": gpt_oss, "qwen3_5_moe_text": qwen3_5_moe, "deepseek_v3": deepseek_v3}
# Sensitivity: each deliberate deviation from the NOTES must break the match (diff > 1e-3), which proves the fixture
# actually exercises that feature (window smaller than the decoded length, clamp reached, group limit biting, ...).
BUGS = {
    "gemma3_text": ["window+1", "no-window", "no-embed-scale"],
    "gpt_oss": ["window+1", "no-sinks", "softmax-all-then-topk", "no-clamp", "gate-up-halves", "no-yarn-attention-factor"],
    "qwen3_5_moe_text": ["no-renorm", "no-shared-gate"],
    "deepseek_v3": ["biased-weights", "no-group-limit", "neox-rope"],
}


def main(argv):
    names = argv or [n for n in CHECKS if (REFUSED / n).exists()]
    ok, res = True, []
    for n in names:
        got, ref = CHECKS[n](REFUSED / n)
        diff = float(np.abs(got - ref).max())
        good = diff <= TOL
        ok &= good
        res.append((n, diff, good))
        print(f"{'PASS' if good else 'FAIL'}  max|diff| = {diff:.3e}  refused/{n} (numpy from NOTES.md math)")
        for bug in BUGS[n]:
            bad, _ = CHECKS[n](REFUSED / n, bug)
            bdiff = float(np.abs(bad - ref).max())
            bgood = bdiff > 1e-3
            ok &= bgood
            res.append((f"{n} with deliberate bug '{bug}' (must be > 1e-3)", bdiff, bgood))
            print(f"{'PASS' if bgood else 'FAIL'}  max|diff| = {bdiff:.3e}  refused/{n} with deliberate bug '{bug}' (must be > 1e-3)")
    return ok, res


if __name__ == "__main__":
    ok, _ = main(sys.argv[1:])
    sys.exit(0 if ok else 1)
