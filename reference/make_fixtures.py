#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face models and write golden decode fixtures for stepcheck.

Everything is CPU, fp32, single-threaded and seeded, so a re-run rewrites byte-identical files.
Output: reference/fixtures/<name>/{config.json, weights, golden.json[, model.gguf, gguf-notes.json]}
and reference/fixtures/refused/<name>/{config.json, model.safetensors, golden.json, NOTES.md}.

Every fixture is re-loaded with `from_pretrained` and must reproduce its goldens bit for bit; at the end the
independent numpy checks (check_numpy.py, check_refused.py) run on the files alone. Exit 0 iff all pass.

Usage:  python reference/make_fixtures.py            (all fixtures, then the numpy self-checks)
        python reference/make_fixtures.py qwen35-a    (only the named fixtures)
"""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import gguf  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import DynamicCache  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration  # noqa: E402
from transformers import Qwen3_5TextConfig  # noqa: E402

transformers.logging.set_verbosity_error()

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
N_TOKENS = 10


# ================================================================================================ common helpers


def fresh_dir(d: Path) -> Path:
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def make_tokens(vocab: int, n: int, seed: int) -> list[int]:
    """n deterministic token ids; always includes 0 and vocab-1 (embedding-row off-by-one catchers)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(1, vocab - 1, (n,), generator=g).tolist()
    t[2] = vocab - 1
    t[5] = 0
    return t


def round_param_(p: torch.Tensor, dtype: torch.dtype) -> None:
    """Make p exactly representable in dtype (p stays fp32)."""
    with torch.no_grad():
        p.copy_(p.to(dtype).to(torch.float32))


def quantize_grid_(p: torch.Tensor, bits: int = 16) -> None:
    """Round to a multiple of 2**-bits so that (1 + p) is exact in fp32 (GGUF stores 1+w for zero-centred norms)."""
    with torch.no_grad():
        p.copy_(torch.round(p * 2.0**bits) / 2.0**bits)


def cache_kwarg(model) -> str:
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.no_grad()
def hf_decode(model, tokens: list[int]) -> torch.Tensor:
    """One token per forward call, transformers' own DynamicCache fed back each step. Returns [T, V] fp32."""
    model.eval()
    kw = cache_kwarg(model)
    cache = DynamicCache(config=model.config.get_text_config())
    rows = []
    for t in tokens:
        out = model(input_ids=torch.tensor([[t]], dtype=torch.long), use_cache=True, **{kw: cache})
        cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
        rows.append(out.logits[0, -1].to(torch.float32).clone())
    return torch.stack(rows)


def write_golden(d: Path, name: str, tokens: list[int], logits: torch.Tensor, extra: dict | None = None) -> None:
    g = {
        "model": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokens": [int(t) for t in tokens],
        "logits": [[float(x) for x in row] for row in logits.tolist()],
    }
    if extra:
        g.update(extra)
    (d / "golden.json").write_text(json.dumps(g) + "\n")


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def set_eager(model):
    model.set_attn_implementation("eager")
    return model


# ================================================================================================ Qwen3.5 dense


def qwen35_randomize_(model, seed: int, emb_std: float = 1.0) -> None:
    """Every parameter O(1)-scaled and != its init value. emb_std < 1 for tied heads, otherwise the
    logit of the input token dominates (e_t . norm(e_t + ...)) and argmax just echoes the input."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head is the same Parameter and appears once
            shape = p.shape
            if name.endswith("linear_attn.norm.weight"):  # RMSNormGated, used as-is (init 1)
                v = 0.5 + torch.rand(shape, generator=g)
            elif name.endswith("norm.weight"):  # zero-centred RMSNorm, scale 1+w (init 0)
                v = torch.rand(shape, generator=g) - 0.5
            elif name.endswith("A_log"):  # A in U(0.05, 1)
                v = torch.log(0.05 + 0.95 * torch.rand(shape, generator=g))
            elif name.endswith("dt_bias"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith("conv1d.weight"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith("embed_tokens.weight"):
                v = emb_std * torch.randn(shape, generator=g)
            elif p.ndim == 2:  # [out, in]
                v = torch.randn(shape, generator=g) / math.sqrt(shape[1])
            else:
                raise ValueError(f"unhandled parameter {name} {tuple(shape)}")
            p.copy_(v)
            if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
                quantize_grid_(p)


def qwen35_text_config(**kw) -> Qwen3_5TextConfig:
    return Qwen3_5TextConfig(**kw)


# ------------------------------------------------------------------------------------------------ GGUF writer


def reorder_v_heads(t: torch.Tensor, dim: int, Hk: int, r: int, d: int) -> torch.Tensor:
    """Grouped (HF: h = g*r + j) -> tiled (GGUF: h' = j*Hk + g) along `dim` of size Hk*r*d."""
    shape = list(t.shape)
    dim = dim % len(shape)
    t = t.reshape(*shape[:dim], Hk, r, d, *shape[dim + 1 :])
    t = t.transpose(dim, dim + 1).contiguous()
    return t.reshape(shape)


HF_TO_GGUF = [  # (HF suffix after model.layers.N., GGUF suffix after blk.N.)
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("linear_attn.in_proj_qkv.weight", "attn_qkv.weight"),
    ("linear_attn.in_proj_z.weight", "attn_gate.weight"),
    ("linear_attn.in_proj_b.weight", "ssm_beta.weight"),
    ("linear_attn.in_proj_a.weight", "ssm_alpha.weight"),
    ("linear_attn.conv1d.weight", "ssm_conv1d.weight"),
    ("linear_attn.A_log", "ssm_a"),
    ("linear_attn.dt_bias", "ssm_dt.bias"),
    ("linear_attn.norm.weight", "ssm_norm.weight"),
    ("linear_attn.out_proj.weight", "ssm_out.weight"),
]


def hf_name_to_gguf(name: str) -> str:
    """name is a Qwen3_5ForCausalLM state-dict key (model.* / lm_head.weight)."""
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")
    assert parts[0] == "model" and parts[1] == "layers", name
    bid, rest = parts[2], ".".join(parts[3:])
    for hf, gg in HF_TO_GGUF:
        if rest == hf:
            return f"blk.{bid}.{gg}"
    raise KeyError(name)


def gguf_transform(name: str, t: torch.Tensor, tc: dict) -> torch.Tensor:
    """llama.cpp convert_hf_to_gguf.py value transforms for arch qwen35:
    Qwen3NextModel.modify_tensors + _LinearAttentionVReorderBase.modify_tensors."""
    t = t.detach().clone().to(torch.float32)
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    r = Hv // Hk
    if Hk != Hv and ".linear_attn." in name:
        if ".in_proj_qkv." in name:
            q_k = t[: 2 * Hk * dk]
            v = reorder_v_heads(t[2 * Hk * dk :], 0, Hk, r, dv)
            t = torch.cat([q_k, v], 0)
        elif ".in_proj_z." in name:
            t = reorder_v_heads(t, 0, Hk, r, dv)
        elif ".in_proj_b." in name or ".in_proj_a." in name:
            t = reorder_v_heads(t, 0, Hk, r, 1)
        elif name.endswith(".A_log") or name.endswith(".dt_bias"):
            t = reorder_v_heads(t, 0, Hk, r, 1)
        elif ".conv1d." in name:
            t = t.squeeze()
            t = torch.cat([t[: 2 * Hk * dk], reorder_v_heads(t[2 * Hk * dk :], 0, Hk, r, dv)], 0)
        elif ".out_proj." in name:
            t = reorder_v_heads(t, 1, Hk, r, dv)
    if name.endswith(".A_log"):
        t = -torch.exp(t)
    elif "conv1d" in name:
        t = t.squeeze()  # [C, 1, K] -> [C, K]  (ggml ne = [K, C])
    elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        t = t + 1.0
    return t


def write_qwen35_gguf(path: Path, model, tc: dict, type_of, name: str, file_type: int, encode=None) -> dict:
    """tc: text-config dict (as the converter sees it after merging text_config to the root).
    type_of(hf_name) -> 'F32' | 'F16' | 'BF16' (or any ggml type name `encode` takes).
    encode(gguf_name, array, type_name) -> (data, GGMLQuantizationType) | None, if given, stores the tensors it
    takes (make_quant_models.py: quantized and rounded copies); the rest go through the branches below.
    Returns the notes dict."""
    arch = "qwen35"
    w = gguf.GGUFWriter(str(path), arch=arch)
    rp = tc["rope_parameters"]
    hd = tc["head_dim"]
    Hv, dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
    sections = list(rp.get("mrope_section", [11, 11, 10]))
    sections = (sections + [0, 0, 0, 0])[:4]
    fai = tc.get("full_attention_interval", 4)
    kv = []  # (key, value, gguf type) for the notes

    def put(key, value, kind):
        getattr(w, f"add_{kind}")(key, value)
        kv.append({"key": key, "value": value, "type": {"uint32": "UINT32", "float32": "FLOAT32",
                                                          "string": "STRING", "array": "ARRAY[INT32]"}[kind]})

    put("general.type", "model", "string")
    put("general.name", name, "string")
    put(f"{arch}.block_count", tc["num_hidden_layers"], "uint32")
    put(f"{arch}.context_length", tc["max_position_embeddings"], "uint32")
    put(f"{arch}.embedding_length", tc["hidden_size"], "uint32")
    put(f"{arch}.feed_forward_length", tc["intermediate_size"], "uint32")
    put(f"{arch}.attention.head_count", tc["num_attention_heads"], "uint32")
    put(f"{arch}.attention.head_count_kv", tc["num_key_value_heads"], "uint32")
    put(f"{arch}.rope.dimension_sections", sections, "array")
    put(f"{arch}.rope.freq_base", float(rp["rope_theta"]), "float32")
    put(f"{arch}.attention.layer_norm_rms_epsilon", float(tc["rms_norm_eps"]), "float32")
    put(f"{arch}.attention.key_length", hd, "uint32")
    put(f"{arch}.attention.value_length", hd, "uint32")
    put("general.file_type", int(file_type), "uint32")
    put(f"{arch}.ssm.conv_kernel", tc["linear_conv_kernel_dim"], "uint32")
    put(f"{arch}.ssm.state_size", tc["linear_key_head_dim"], "uint32")
    put(f"{arch}.ssm.group_count", tc["linear_num_key_heads"], "uint32")
    put(f"{arch}.ssm.time_step_rank", Hv, "uint32")
    put(f"{arch}.ssm.inner_size", Hv * dv, "uint32")
    put(f"{arch}.full_attention_interval", fai, "uint32")
    put(f"{arch}.rope.dimension_count", int(hd * rp["partial_rotary_factor"]), "uint32")
    put(f"{arch}.vocab_size", tc["vocab_size"], "uint32")
    put("general.quantization_version", gguf.GGML_QUANT_VERSION, "uint32")

    sd = model.state_dict()
    tied = tc.get("tie_word_embeddings", False)
    names = [n for n in sd if not (tied and n == "lm_head.weight")]
    # converter order is file order; we write embeddings, blocks in order, then output norm / head
    def order(n):
        if n == "model.embed_tokens.weight":
            return (-1, n)
        if n.startswith("model.layers."):
            return (int(n.split(".")[2]), n)
        return (10**6, n)

    tensors = []
    for n in sorted(names, key=order):
        gname = hf_name_to_gguf(n)
        t = gguf_transform(n, sd[n], tc).numpy()
        typ = type_of(n) if t.ndim >= 2 and not gname.endswith("ssm_conv1d.weight") else "F32"
        encoded = encode(gname, t, typ) if encode is not None else None
        if encoded is not None:
            w.add_tensor(gname, encoded[0], raw_dtype=encoded[1])
        elif typ == "F32":
            w.add_tensor(gname, t.astype(np.float32))
        elif typ == "F16":
            t16 = t.astype(np.float16)
            assert np.array_equal(t16.astype(np.float32), t), f"{n} not f16-exact"
            w.add_tensor(gname, t16)
        elif typ == "BF16":
            q = gguf.quants.quantize(t.astype(np.float32), gguf.GGMLQuantizationType.BF16)
            back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.BF16)
            assert np.array_equal(back, t), f"{n} not bf16-exact"
            w.add_tensor(gname, q, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            raise ValueError(typ)
        tensors.append({"gguf": gname, "hf": n, "type": typ, "ggml_ne": list(reversed(t.shape)),
                        "numpy_shape": list(t.shape)})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"metadata": kv, "tensors": tensors}


def check_rounded(model, type_of) -> None:
    for n, p in model.named_parameters():
        typ = type_of(n)
        if typ == "F16":
            assert torch.equal(p, p.to(torch.float16).float()), n
        elif typ == "BF16":
            assert torch.equal(p, p.to(torch.bfloat16).float()), n


# ------------------------------------------------------------------------------------------------ qwen35-a


def gguf_type_a(n: str) -> str:
    """GGUF storage type of each HF tensor of qwen35-a (1-D tensors and the conv are always F32)."""
    if n.endswith("norm.weight") or "conv1d" in n or n.endswith(("A_log", "dt_bias")):
        return "F32"
    if n == "model.embed_tokens.weight":
        return "F32"
    if n == "lm_head.weight" or ".self_attn." in n or ".mlp." in n:
        return "F16"
    if ".linear_attn." in n:
        return "BF16"  # in_proj_qkv / in_proj_z / in_proj_b / in_proj_a / out_proj
    raise KeyError(n)


def build_qwen35_a() -> None:
    name = "qwen35-a"
    d = fresh_dir(FIXTURES / name)
    torch.manual_seed(1)
    cfg = qwen35_text_config(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
        linear_conv_kernel_dim=4,
        layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        tie_word_embeddings=False,
    )
    model = set_eager(Qwen3_5ForCausalLM(cfg))
    qwen35_randomize_(model, seed=101)
    for n, p in model.named_parameters():  # make the GGUF F16/BF16 copies exact
        t = gguf_type_a(n)
        if t != "F32":
            round_param_(p, torch.float16 if t == "F16" else torch.bfloat16)
    check_rounded(model, gguf_type_a)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=1001)
    logits = hf_decode(model, tokens)
    model.save_pretrained(d)  # config.json (transformers-5 form) + model.safetensors (F32, keys model.* / lm_head)
    for extra in ("generation_config.json",):
        if (d / extra).exists():
            (d / extra).unlink()
    write_golden(d, name, tokens, logits)
    tc = json.loads((d / "config.json").read_text())
    notes = write_qwen35_gguf(d / "model.gguf", model, tc, gguf_type_a, name,
                              gguf.LlamaFileType.MOSTLY_F16)  # mixed F32/F16/BF16; display only
    notes["layer_kind_note"] = (
        "qwen35.full_attention_interval is written as the converter would (config.json has no "
        "full_attention_interval -> default 4), but the layer pattern [full, linear, linear, full] is NOT "
        "expressible by an interval: llama.cpp itself (recurrent iff (i+1) % interval != 0) would take layer 0 "
        "for a linear-attention layer. Derive the layer kind from tensor presence: blk.N.attn_qkv.weight => linear_attention, "
        "blk.N.attn_q.weight => full_attention."
    )
    _finish_notes(notes, tc)
    write_json(d / "gguf-notes.json", notes)
    reload_check(d, Qwen3_5ForCausalLM, tokens, logits)


def _finish_notes(notes: dict, tc: dict) -> None:
    notes["conventions"] = {
        "norms": "every *norm.weight except ssm_norm stores 1+w (HF zero-centred weight + 1): use y = x*rsqrt(mean(x^2)+eps)*w",
        "ssm_norm": "stored as-is (RMSNormGated weight)",
        "ssm_a": "= -exp(A_log); g = ssm_a * softplus(alpha + ssm_dt.bias)",
        "v_heads": "TILED order: GGUF value head h' = j*Hk + g holds HF head h = g*r + j; value head h' uses key head h' % Hk",
        "reordered": "attn_qkv (V rows only), attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt.bias, "
                     "ssm_conv1d (V channels only), ssm_out (input columns) -- only when Hk != Hv",
        "ssm_conv1d": "numpy shape [C, K] (ggml ne [K, C]); tap K-1 multiplies the current token",
        "attn_q": "per head [q(hd) | gate(hd)] interleave kept from HF",
        "tied": "no output.weight when tie_word_embeddings: output = token_embd",
        "rope.dimension_count": "written as int(head_dim * rope_parameters.partial_rotary_factor). NB the real "
                                "converter reads hparams['partial_rotary_factor'] (top level, default 0.25) and "
                                "would write head_dim*0.25 for a transformers-5 config whose factor is only inside "
                                "rope_parameters",
        "vocab_size": "qwen35.vocab_size is written because there is no tokenizer; the real converter writes "
                      "tokenizer.ggml.* instead (llama.cpp takes n_vocab from vocab_size or the token list)",
    }
    notes["hyperparameters"] = {k: tc[k] for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "vocab_size", "rms_norm_eps", "rope_parameters",
        "layer_types", "tie_word_embeddings") if k in tc}


def reload_check(d: Path, cls, tokens, logits) -> None:
    """Load the fixture back from disk with transformers and require bit-identical logits."""
    m = use_eager_experts(set_eager(cls.from_pretrained(d, dtype=torch.float32)))
    # from_pretrained leaves tensors at the (unaligned) offsets of the mmapped file, which makes CPU BLAS pick a
    # different kernel (diffs ~1e-7 per matmul); copy them to fresh, aligned storage so the comparison is exact.
    with torch.no_grad():
        for p in m.parameters():
            p.data = p.data.clone()
    again = hf_decode(m, tokens)
    diff = (again - logits).abs().max().item()
    assert diff == 0.0, f"{d.name}: reload via {cls.__name__} differs by {diff}"
    print(f"  reload {d.name} with {cls.__name__}.from_pretrained: bit-identical")


# ------------------------------------------------------------------------------------------------ qwen35-b


def build_qwen35_b() -> None:
    name = "qwen35-b"
    d = fresh_dir(FIXTURES / name)
    torch.manual_seed(2)
    layer_types = ["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"]
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    text = dict(
        vocab_size=101, hidden_size=48, intermediate_size=80, num_hidden_layers=5,
        num_attention_heads=6, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, layer_types=layer_types, rope_parameters=rope, tie_word_embeddings=True,
        max_position_embeddings=4096, rms_norm_eps=1e-6,
    )
    cfg = qwen35_text_config(**text)
    model = set_eager(Qwen3_5ForCausalLM(cfg))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    qwen35_randomize_(model, seed=202, emb_std=0.15)
    for n, p in model.named_parameters():  # every >=2-D tensor is stored BF16
        if p.ndim >= 2:
            round_param_(p, torch.bfloat16)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=2002)
    logits = hf_decode(model, tokens)

    # ---- config.json in the hub wrapper form (Qwen3_5ForConditionalGeneration, model_type qwen3_5)
    vision = {  # small but self-consistent with model.visual.patch_embed.proj.weight below
        "deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 16,
        "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 32, "model_type": "qwen3_5",
        "num_heads": 2, "num_position_embeddings": 16, "out_hidden_size": 48, "patch_size": 2,
        "spatial_merge_size": 2, "temporal_patch_size": 2,
    }
    text_config = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "bfloat16",
        "eos_token_id": 100, "head_dim": 16, "hidden_act": "silu", "hidden_size": 48, "initializer_range": 0.02,
        "intermediate_size": 80, "layer_types": layer_types, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 6,
        "linear_value_head_dim": 8, "mamba_ssm_dtype": "float32", "max_position_embeddings": 4096,
        "model_type": "qwen3_5_text", "num_attention_heads": 6, "num_hidden_layers": 5,
        "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_parameters": rope,
        "tie_word_embeddings": True, "use_cache": True, "vocab_size": 101,
    }
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "image_token_id": 248056,
        "model_type": "qwen3_5",
        "text_config": text_config,
        "tie_word_embeddings": True,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": 248057,
        "vision_config": vision,
        "vision_end_token_id": 248054,
        "vision_start_token_id": 248053,
    }
    write_json(d / "config.json", config)

    # ---- weights: model.language_model.* prefix, >=2-D as BF16, 1-D as F32, two shards + index
    sd = model.state_dict()
    out = {}
    for n, t in sd.items():
        if n == "lm_head.weight":
            continue  # tied: hub checkpoints of tied models carry only the embedding
        key = "model.language_model." + n[len("model."):]
        out[key] = t.to(torch.bfloat16 if t.ndim >= 2 else torch.float32).contiguous()
    g = torch.Generator().manual_seed(2222)
    out["mtp.fc.weight"] = (torch.randn(48, 96, generator=g) * 0.1).to(torch.bfloat16)
    out["model.visual.patch_embed.proj.weight"] = (torch.randn(16, 3, 2, 2, 2, generator=g) * 0.1).to(torch.bfloat16)
    names = sorted(out)
    shard1 = [n for n in names if n.startswith("model.visual.") or n.endswith("embed_tokens.weight")
              or any(n.startswith(f"model.language_model.layers.{i}.") for i in (0, 1))]
    shard2 = [n for n in names if n not in shard1]
    files = {"model-00001-of-00002.safetensors": shard1, "model-00002-of-00002.safetensors": shard2}
    weight_map = {}
    for fname, keys in files.items():
        save_file({k: out[k] for k in keys}, str(d / fname), metadata={"format": "pt"})
        for k in keys:
            weight_map[k] = fname
    total_size = sum(t.numel() * t.element_size() for t in out.values())
    total_params = sum(t.numel() for t in out.values())
    write_json(d / "model.safetensors.index.json",
               {"metadata": {"total_parameters": total_params, "total_size": total_size},
                "weight_map": dict(sorted(weight_map.items()))})
    write_golden(d, name, tokens, logits)

    # ---- GGUF (cheap): every >=2-D tensor BF16 (as in the safetensors), 1-D and conv F32, no output.weight
    tc = dict(text_config)
    notes = write_qwen35_gguf(d / "model.gguf", model, tc, lambda n: "BF16", name, gguf.LlamaFileType.MOSTLY_BF16)
    notes["layer_kind_note"] = (
        "qwen35.full_attention_interval = 4 (converter default; text_config has no full_attention_interval) does "
        "NOT describe [linear, full, linear, linear, full]; derive the layer kind from tensor presence."
    )
    _finish_notes(notes, tc)
    write_json(d / "gguf-notes.json", notes)

    # transformers must load the hub form back and reproduce the goldens exactly
    reload_check(d, Qwen3_5ForCausalLM, tokens, logits)
    reload_check(d, Qwen3_5ForConditionalGeneration, tokens, logits)


# ------------------------------------------------------------------------------------------------ qwen35-c


def build_qwen35_c() -> None:
    name = "qwen35-c"
    d = fresh_dir(FIXTURES / name)
    torch.manual_seed(3)
    cfg = qwen35_text_config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8,
        linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, full_attention_interval=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        tie_word_embeddings=False,
    )
    assert cfg.layer_types == ["linear_attention", "full_attention"] * 2, cfg.layer_types
    model = set_eager(Qwen3_5ForCausalLM(cfg))
    qwen35_randomize_(model, seed=303)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=3003)
    logits = hf_decode(model, tokens)
    model.save_pretrained(d)
    if (d / "generation_config.json").exists():
        (d / "generation_config.json").unlink()
    # transformers writes layer_types explicitly and drops full_attention_interval; this fixture tests the
    # default-pattern rule, so rewrite config.json without layer_types and with the interval.
    c = json.loads((d / "config.json").read_text())
    del c["layer_types"]
    c["full_attention_interval"] = 2
    write_json(d / "config.json", dict(sorted(c.items())))
    assert Qwen3_5TextConfig.from_pretrained(d).layer_types == cfg.layer_types
    write_golden(d, name, tokens, logits)
    tc = json.loads((d / "config.json").read_text())
    tc["layer_types"] = cfg.layer_types
    notes = write_qwen35_gguf(d / "model.gguf", model, tc, lambda n: "F32", name, gguf.LlamaFileType.ALL_F32)
    notes["layer_kind_note"] = "full_attention_interval = 2 matches the tensors (layers 1 and 3 are full attention)."
    _finish_notes(notes, tc)
    write_json(d / "gguf-notes.json", notes)
    reload_check(d, Qwen3_5ForCausalLM, tokens, logits)



# ================================================================================================ refused families
# Tiny random-weight models of families stepcheck must refuse (goldens for a later interpreter issue).

REFUSED = FIXTURES / "refused"


def refused_randomize_(model, seed: int, *, zero_centred_norms: bool, emb_std: float = 1.0,
                       special=None) -> None:
    """O(1)-scaled random values for every parameter (and the DeepSeek e_score_correction_bias buffer).
    special(name, shape, g) may return a tensor to override the generic rule."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        items = list(model.named_parameters()) + [
            (n, b) for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
        for name, p in items:
            shape = p.shape
            v = special(name, shape, g) if special else None
            if v is not None:
                pass
            elif name.endswith("linear_attn.norm.weight"):
                v = 0.5 + torch.rand(shape, generator=g)
            elif "norm" in name and p.ndim == 1:
                v = (torch.rand(shape, generator=g) - 0.5) if zero_centred_norms else 0.5 + torch.rand(shape, generator=g)
            elif name.endswith("A_log"):
                v = torch.log(0.05 + 0.95 * torch.rand(shape, generator=g))
            elif name.endswith("dt_bias"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith("conv1d.weight"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith("embed_tokens.weight"):
                v = emb_std * torch.randn(shape, generator=g)
            elif name.endswith("e_score_correction_bias"):
                v = 0.4 * torch.rand(shape, generator=g) - 0.2
            elif p.ndim == 1:  # biases, sinks
                v = 0.2 * torch.randn(shape, generator=g)
            elif p.ndim == 2:  # [out, in]
                v = torch.randn(shape, generator=g) / math.sqrt(shape[1])
            elif p.ndim == 3:  # [E, out, in] (Qwen / DeepSeek experts)
                v = torch.randn(shape, generator=g) / math.sqrt(shape[2])
            else:
                raise ValueError(f"unhandled {name} {tuple(shape)}")
            p.copy_(v.to(p.dtype))


def save_refused(name: str, model, tokens, logits, notes: str) -> Path:
    d = fresh_dir(REFUSED / name)
    model.save_pretrained(d)
    if (d / "generation_config.json").exists():
        (d / "generation_config.json").unlink()
    write_golden(d, name, tokens, logits)
    (d / "NOTES.md").write_text(notes)
    reload_check(d, type(model), tokens, logits)
    return d


def use_eager_experts(model):
    try:
        model.set_experts_implementation("eager")
    except Exception:  # noqa: BLE001 - class without an experts interface
        pass
    return model


def build_gemma3() -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    name = "gemma3_text"
    torch.manual_seed(11)
    cfg = Gemma3TextConfig(
        vocab_size=103, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
        max_position_embeddings=512, tie_word_embeddings=True,
    )
    model = set_eager(Gemma3ForCausalLM(cfg))
    refused_randomize_(model, 111, zero_centred_norms=True, emb_std=1 / math.sqrt(cfg.hidden_size))
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=1111)
    logits = hf_decode(model, tokens)
    save_refused(name, model, tokens, logits, GEMMA3_NOTES)


def build_gpt_oss() -> None:
    from transformers import GptOssConfig, GptOssForCausalLM

    name = "gpt_oss"
    torch.manual_seed(12)
    cfg = GptOssConfig(
        vocab_size=113, hidden_size=32, intermediate_size=16, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        tie_word_embeddings=False,
    )

    def special(n, shape, g):
        if n.endswith("experts.gate_up_proj"):  # [E, H, 2I]: scaled so the swiglu clamp (limit 7) is hit
            return 4.0 * torch.randn(shape, generator=g) / math.sqrt(shape[1])
        if n.endswith("experts.down_proj"):  # [E, I, H]
            return 0.25 * torch.randn(shape, generator=g) / math.sqrt(shape[1])
        if n.endswith("experts.gate_up_proj_bias") or n.endswith("experts.down_proj_bias"):
            return 0.2 * torch.randn(shape, generator=g)
        if n.endswith("self_attn.sinks"):
            return torch.randn(shape, generator=g)
        return None

    model = use_eager_experts(set_eager(GptOssForCausalLM(cfg)))
    refused_randomize_(model, 121, zero_centred_norms=False, special=special)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=1212)
    logits = hf_decode(model, tokens)
    save_refused(name, model, tokens, logits, GPT_OSS_NOTES)


def build_qwen3_5_moe() -> None:
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    name = "qwen3_5_moe_text"
    torch.manual_seed(13)
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=109, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, shared_expert_intermediate_size=24,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        tie_word_embeddings=False,
    )
    model = use_eager_experts(set_eager(Qwen3_5MoeForCausalLM(cfg)))
    refused_randomize_(model, 131, zero_centred_norms=True)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=1313)
    logits = hf_decode(model, tokens)
    save_refused(name, model, tokens, logits, QWEN35_MOE_NOTES)


def build_deepseek_v3() -> None:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    name = "deepseek_v3"
    torch.manual_seed(14)
    cfg = DeepseekV3Config(
        vocab_size=127, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=12, v_head_dim=10, n_routed_experts=8, n_group=2, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rope_interleave=True,
        max_position_embeddings=512, tie_word_embeddings=False,
    )
    model = use_eager_experts(set_eager(DeepseekV3ForCausalLM(cfg)))
    refused_randomize_(model, 141, zero_centred_norms=False)
    tokens = make_tokens(cfg.vocab_size, N_TOKENS, seed=1414)
    logits = hf_decode(model, tokens)
    save_refused(name, model, tokens, logits, DEEPSEEK_V3_NOTES)


GEMMA3_NOTES = """\
# gemma3_text (Gemma3ForCausalLM) -- what transformers 5.24.0 computes

Line refs: `models/gemma3/modeling_gemma3.py` unless named. Verified by `reference/check_refused.py` (numpy, max|diff| ~2e-6).

1. Embedding: `h = E[t] * embed_scale`, `embed_scale = torch.tensor(hidden_size**0.5)` (fp32 buffer, :97/:468) cast to the weight dtype before the multiply (:100) -- in bf16 sqrt(H) is rounded (sqrt(3072) 55.43 -> 55.5). Tied head: no `lm_head.weight` in the file, logits = E @ hN. No logit softcap here (`final_logit_softcapping`/`attn_logit_softcapping` null, :617).
2. Every RMSNorm is zero-centred, fp32: `y = x*rsqrt(mean(x^2)+eps)*(1+w)` (:132) -- input/post_attention/pre_feedforward/post_feedforward layernorms, q_norm, k_norm (per head over head_dim, :310), final norm.
3. Block (:382-401) is a SANDWICH: `h += post_attention_layernorm(o_proj(attn(input_layernorm(h))))`; `h += post_feedforward_layernorm(down(gelu_tanh(gate(x)) * up(x)))` with `x = pre_feedforward_layernorm(h)`; activation is `hidden_activation` = gelu_pytorch_tanh `0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))` (:112).
4. Attention: no biases; q/k RMSNorm'd per head BEFORE RoPE; RoPE = NeoX rotate_half over the full head_dim (:200); score scale `query_pre_attn_scalar**-0.5` (:290; 24 here, deliberately != head_dim 16); GQA query head h uses kv head h // (nH/nKV); softmax fp32.
5. RoPE per layer type (`rope_parameters` is keyed by layer type): sliding_attention theta 1e4 default; full_attention theta 1e6 with rope_type linear factor 8, i.e. `inv_freq_i = theta^(-2i/hd) / 8` (`modeling_rope_utils.py:190`).
6. Sliding window W (sliding layers only): the query at absolute position p sees keys j with `p - W < j <= p` -- exactly W positions including itself (`masking_utils.py:97` `kv_idx > q_idx - sliding_window` AND `:78` `kv_idx <= q_idx`); the cache keeps the last W-1 tokens (`cache_utils.py:244-247`). Full layers see 0..p. Here W=4 with 10 decoded tokens.
7. Layer types: written explicitly `[sliding, sliding, full, sliding]`; when absent, sliding iff `(i+1) % sliding_window_pattern != 0` (default 6, `configuration_gemma3.py:105-109`). The saved config.json also carries a stray `"_sliding_window_pattern": 6`.
8. Tensors (F32): `model.embed_tokens.weight [V,H]`; `model.layers.N.{input_layernorm,post_attention_layernorm,pre_feedforward_layernorm,post_feedforward_layernorm}.weight [H]`; `self_attn.q_proj [nH*hd,H]`, `k_proj/v_proj [nKV*hd,H]`, `o_proj [H,nH*hd]`, `q_norm/k_norm [hd]`; `mlp.gate_proj/up_proj [I,H]`, `mlp.down_proj [H,I]`; `model.norm.weight [H]`.
"""

GPT_OSS_NOTES = """\
# gpt_oss (GptOssForCausalLM) -- what transformers 5.24.0 computes

Line refs: `models/gpt_oss/modeling_gpt_oss.py` unless named. Verified by `reference/check_refused.py` (numpy, max|diff| ~2e-6).

1. No embedding scale. RMSNorm is plain-w, fp32: `y = w * (x*rsqrt(mean(x^2)+eps))` (:61-62), eps 1e-5; norms kept fp32 (`_keep_in_fp32_modules`, :390). Pre-norm block (:351-369): `h += attn(input_layernorm(h))`; `h += moe(post_attention_layernorm(h))`. q/k/v/o_proj all have biases (`attention_bias=true`). Untied lm_head.
2. RoPE: NeoX halves over the full head_dim (`torch.chunk(x, 2)`, :212: dim i pairs with i+hd/2), rope_type yarn (class default, `configuration_gpt_oss.py:91`): `modeling_rope_utils.py:430-483` -- `pos_freqs_i = theta^(2i/d)`, `extrap = 1/pos_freqs`, `interp = 1/(factor*pos_freqs)`; `low/high = d*ln(orig/(beta*2*pi)) / (2 ln theta)` for beta_fast/beta_slow, NOT floored/ceiled because `truncate=false` (:457/:475), clamped to [0, d-1]; `ramp_i = clip((i-low)/(high-low), 0, 1)`; `inv = interp*ramp + extrap*(1-ramp)`. BOTH cos and sin are multiplied by `attention_factor = 0.1*ln(factor)+1` (:440, :189), so q.k carries that factor squared. Here theta 150000, factor 32, orig 4096, beta 32/1.
3. Attention: scale `head_dim**-0.5` (:269); GQA query head h -> kv head h // (nH/nKV). Sinks (:243-251): per-head learned logit `self_attn.sinks[h]` is appended as one extra column to the masked scores, softmax over [scores..., sink] (after max subtraction), the sink column is dropped and the rest is NOT renormalised: `o = sum_j p_j v_j` with `sum_j p_j < 1`.
4. Sliding window (layer_types alternate, sliding iff `(i+1) % 2 != 0`, `configuration_gpt_oss.py:86`, so layers 0,2 here): query at p sees keys j with `p - W < j <= p` (`masking_utils.py:97` + `:78`), W=4 with 10 tokens; full layers see 0..p.
5. Router (:127-129): `logits = router.weight @ x + router.bias` [E]; top-k on the LOGITS; weights = softmax over the k selected logits only (topk THEN softmax).
6. Expert e (:83-87, :108-111): `gu = x @ gate_up_proj[e] + gate_up_proj_bias[e]` (gate_up_proj is [E, H, 2I], input-major: x @ W, no transpose); `gate = gu[0::2]`, `up = gu[1::2]` (INTERLEAVED columns); `gate = min(gate, 7)`, `up = clamp(up, -7, 7)` (swiglu_limit); `y = ((up + 1) * gate*sigmoid(1.702*gate)) @ down_proj[e] + down_proj_bias[e]` (down_proj [E, I, H]); `moe = sum_e w_e y_e`. The fixture's gate_up scale makes the +-7 clamp bite.
7. Tensors (F32): `model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias}`, `self_attn.sinks [nH]`; `mlp.router.weight [E,H]`, `mlp.router.bias [E]`; `mlp.experts.gate_up_proj [E,H,2I]`, `mlp.experts.gate_up_proj_bias [E,2I]`, `mlp.experts.down_proj [E,I,H]`, `mlp.experts.down_proj_bias [E,H]` (expert tensors have NO `.weight` suffix); `model.{embed_tokens,norm}.weight`, `lm_head.weight`.
"""

QWEN35_MOE_NOTES = """\
# qwen3_5_moe_text (Qwen3_5MoeForCausalLM) -- what transformers 5.24.0 computes

Line refs: `models/qwen3_5_moe/modeling_qwen3_5_moe.py` unless named. Verified by `reference/check_refused.py` (numpy, max|diff| ~2e-6).

1. Everything except the MLP is dense Qwen3.5 (modeling_qwen3_5.py): zero-centred RMSNorm `(1+w)` (:949), Gated DeltaNet linear-attention layers, gated full attention, partial NeoX RoPE (factor 0.25 -> rd=4 of hd=16), no embedding scale. EVERY layer's MLP is `Qwen3_5MoeSparseMoeBlock` (:965); there is no dense MLP.
2. Router (:902-911): `probs = softmax_fp32(mlp.gate.weight @ x)` over ALL experts; top-k on probs; renormalise the k picked: `w = p / sum(p)` -- unconditional (no norm_topk_prob flag).
3. Expert e (:884): in memory `gate_up_proj [E, 2I, H]`, `gate, up = linear(x, gate_up_proj[e]).chunk(2)` -- first I rows are gate, next I rows up (concatenated, NOT interleaved); `y_e = down_proj[e] @ (silu(gate) * up)`.
4. Shared expert (:918, :926-930): `s = shared_expert.down(silu(shared_expert.gate(x)) * shared_expert.up(x))` (intermediate `shared_expert_intermediate_size`); `mlp(x) = sum_e w_e y_e + sigmoid(shared_expert_gate.weight [1,H] . x) * s`.
5. Tensor names AS SAVED by transformers 5.24 `save_pretrained` (the load-time fusion `conversion_mapping.py:1386-1399` is reversed; `:2382` gives qwen3_5_moe_text the qwen2_moe rule): `model.layers.N.mlp.experts.{e}.gate_proj.weight [I,H]`, `.up_proj.weight [I,H]`, `.down_proj.weight [H,I]`; `mlp.gate.weight [E,H]`; `mlp.shared_expert.{gate_proj,up_proj} [Is,H]`, `mlp.shared_expert.down_proj [H,Is]`; `mlp.shared_expert_gate.weight [1,H]`. Loading fuses `gate_up_proj[e] = cat(gate_proj, up_proj, dim=0)`.
6. Attention / GDN tensors are named exactly as in dense Qwen3.5 (`linear_attn.in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, `conv1d`, `A_log`, `dt_bias`, `norm`, `out_proj`; `self_attn.q_proj [2*nH*hd,H]` with per-head [q|gate], `k_proj`, `v_proj`, `o_proj`, `q_norm`, `k_norm`).
7. Fixture: E=4, top-2, moe_intermediate 16, shared 24, layer_types [linear, full, linear, full], Hk=2 Hv=4 dk=dv=8, nH=4 nKV=2 hd=16, untied, F32.
"""

DEEPSEEK_V3_NOTES = """\
# deepseek_v3 (DeepseekV3ForCausalLM) -- what transformers 5.24.0 computes

Line refs: `models/deepseek_v3/modeling_deepseek_v3.py` unless named. Verified by `reference/check_refused.py` (numpy, max|diff| ~2e-6).

1. No embedding scale; RMSNorm plain-w (`w * normed`, :52); pre-norm blocks (:512-530). Layer i < `first_k_dense_replace` (1 here) has a dense SwiGLU `mlp.{gate,up,down}_proj` (intermediate_size); the others the MoE (:493).
2. MLA queries (:438-443): `q = q_b_proj(RMSNorm(q_a_proj(x), q_a_layernorm))` -> [nH, nope+rope] (q_lora_rank set; `q_proj` if null); `q_nope = q[:, :nope]`, `q_rot = q[:, nope:]`.
3. MLA keys/values (:445-447, :413-423): `ckv = kv_a_proj_with_mqa(x)` -> [kv_lora_rank | rope]; latent `c = RMSNorm(ckv[:r], kv_a_layernorm)`; `k_rot = ckv[r:]` is ONE head shared by all heads. The cache stores `c` (post-norm) and the roped `k_rot` (:460). For each cached j: `[k_nope | v] = (kv_b_proj @ c_j).reshape(nH, nope+v_head_dim)`, `k_jh = [k_nope_h | k_rot_j]`.
4. RoPE only on q_rot / k_rot, `inv_freq_i = theta^(-2i/qk_rope_head_dim)` (config sets `head_dim = qk_rope_head_dim`, `configuration_deepseek_v3.py:123`). `rope_interleave=true` (:341-345): pairs (x_{2i}, x_{2i+1}) rotate by angle p*inv_i and the result is written DE-INTERLEAVED: `[x_{2i}cos - x_{2i+1}sin for all i] ++ [x_{2i+1}cos + x_{2i}sin for all i]` (same permutation for q and k, so q.k equals true interleaved RoPE). NOT NeoX rotate_half.
5. Scores `q_h . k_jh * (nope+rope)^-0.5` (:405; multiplied by mscale^2 only for yarn with mscale_all_dim, :268-273 -- not used here), causal, softmax fp32; `o = o_proj(concat_h sum_j a_j v_jh)` with o_proj [H, nH*v_head_dim].
6. Router (:133-158): `s = sigmoid(gate.weight @ x)` (fp32); choice scores `sc = s + e_score_correction_bias`; experts form n_group contiguous groups of E/n_group; group score = sum of its top-2 sc; keep the best topk_group groups (others -inf); top-k experts by sc; weights = the UNbiased s of those experts; if norm_topk_prob `w /= (sum w + 1e-20)`; then `w *= routed_scaling_factor` (2.5). Here E=8, n_group 2, topk_group 1, top-2.
7. MoE output = `sum_e w_e * down_e(silu(gate_e x) * up_e x) + shared_experts(x)` (shared SwiGLU of width moe_intermediate_size*n_shared_experts, :212, :221).
8. Tensors (F32): `self_attn.q_a_proj [q_lora,H]`, `q_a_layernorm [q_lora]`, `q_b_proj [nH*(nope+rope), q_lora]`, `kv_a_proj_with_mqa [kv_lora+rope, H]`, `kv_a_layernorm [kv_lora]`, `kv_b_proj [nH*(nope+v), kv_lora]`, `o_proj [H, nH*v]`; MoE: `mlp.gate.weight [E,H]`, `mlp.gate.e_score_correction_bias [E]` (a buffer, but saved), per-expert `mlp.experts.{e}.{gate_proj,up_proj}.weight [Im,H]`, `.down_proj.weight [H,Im]` (save_pretrained reverses the fusion, `conversion_mapping.py:56` -> qwen2_moe rule), `mlp.shared_experts.{gate,up,down}_proj.weight`. Saved config.json has `head_dim: 8` (= qk_rope_head_dim), `qk_head_dim: 20`, `num_nextn_predict_layers: 1` (alias of num_mtp_layers; no MTP weights here).
"""

# ================================================================================================ main

BUILDERS = {
    "qwen35-a": build_qwen35_a,
    "qwen35-b": build_qwen35_b,
    "qwen35-c": build_qwen35_c,
    "gemma3_text": build_gemma3,
    "gpt_oss": build_gpt_oss,
    "qwen3_5_moe_text": build_qwen3_5_moe,
    "deepseek_v3": build_deepseek_v3,
}


def main(argv: list[str]) -> int:
    names = argv or list(BUILDERS)
    for n in names:
        print(f"building {n}")
        BUILDERS[n]()
    for f in FIXTURES.rglob("*"):  # safetensors writes 0600; make the tree uniform
        f.chmod(0o755 if f.is_dir() else 0o644)
    sys.path.insert(0, str(HERE))
    import check_numpy
    import check_refused

    ok = True
    qwen = [n for n in names if n.startswith("qwen35-")]
    refused = [n for n in names if n in check_refused.CHECKS]
    if qwen:
        ok &= check_numpy.main(qwen)[0]
    if refused:
        ok &= check_refused.main(refused)[0]
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
