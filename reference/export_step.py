#!/usr/bin/env python3
"""Export transformers' own Qwen3.5 decode step with torch.export, and write it as fixtures for stepcheck.

For each config in CONFIGS this script

1. loads the tiny random checkpoint (a committed fixture's folder, loaded with `from_pretrained`, or a new one
   built the way make_fixtures.py builds them and saved next to the graph),
2. wraps ONE decode step of `Qwen3_5ForCausalLM` (eager attention) as a module whose forward takes
   `input_ids[1,1], position_ids[1,1], *state` and returns `(logits[1,1,V], *new_state)`: per linear-attention
   layer its conv state `[1,C,K]` and recurrent state `[1,Hv,dk,dv]`, per full-attention layer its keys and values
   `[1,nKV,past,hd]` (the past length is a dynamic dim, `Dim("past", min=1)`), in layer order,
3. exports it with `torch.export.export` (non-strict, the default) on an example with past = 2,
4. checks that the exported program equals transformers' eager decode (its own DynamicCache fed back each step)
   EXACTLY (max |diff| 0.0) for logits and every state, on a 5-step rollout after a 1-token prefix, and again
   after rebuilding the program from the written JSON alone plus the checkpoint's safetensors,
5. writes reference/fixtures/exported/<name>/:
   step.pt2      torch.export.save of the program with its parameters replaced by fake tensors, so the archive
                 holds the graph and each parameter's metadata but no weight bytes (see README)
   model.json    the archive's models/model.json, byte for byte (torch's serialized graph)
   rollout.json  tokens, transformers' logits per step, the state before the first and after the last step
   config.json + model.safetensors   only for configs without a committed checkpoint

plus ONE graph at the shape of the qwen3.5-0.8b preset (24 layers), exported with fake weights that never exist:
only its model.json (gzipped when over 5 MB) and buffers.json, and summary.json (node and op counts of every graph).

CPU, fp32, one thread, seeded: a re-run writes byte-identical files (stack traces in the graph hold the absolute
paths of this script and of the venv's transformers, so the bytes depend on those paths).

Usage:  /work/venv/bin/python reference/export_step.py            (everything)
        /work/venv/bin/python reference/export_step.py qwen35-a   (only the named configs; summary.json is
                                                                    rewritten from whatever folders exist)
        /work/venv/bin/python reference/export_step.py --strict DIR [names]   (strict, dynamo-traced export
            into DIR instead: the same ATen targets and 0.0 checks, but each node's stack_trace reaches the line inside
            transformers' free functions; the JSON is ~2.3x larger and its `from_node` metadata holds Python id()s,
            so the bytes change from run to run: these are not the committed fixtures)
"""
from __future__ import annotations

import collections
import copy
import gzip
import io
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_fixtures as mf  # noqa: E402  (sets one thread and deterministic algorithms)
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torch._export.serde.serialize import SerializedArtifact, deserialize  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from transformers import DynamicCache, Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

transformers.utils.logging.disable_progress_bar()
REPO = HERE.parent
OUT = HERE / "fixtures" / "exported"
N_STEPS = 5  # exported steps in the rollout, after a 1-token prefix
EXAMPLE_PAST = 2  # the export example's past length (a size-1 dim would be specialised)
STRICT = False  # torch.export's default (non-strict); --strict DIR sets it
BIG = "qwen3.5-0.8b"


# ================================================================================================ the configs


def rope(theta: float, prf: float, **extra) -> dict:
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": prf, **extra}


# "fixture": a committed checkpoint under reference/fixtures/ (its golden.json's first 6 tokens are reused and
# the rollout must equal its goldens). "config": a new checkpoint built here (seeded), saved in the folder.
CONFIGS: dict[str, dict] = {
    "qwen35-a": dict(
        fixture="qwen35-a",
        exercises="attention FIRST ([full, linear, linear, full]), GQA 4/2, Hk=2 Hv=4 (r=2), dk=8 != dv=12, "
                  "head_dim 32 != H/nH, partial rotary 0.25 (rd=8), theta 1e4, untied"),
    "qwen35-b": dict(
        fixture="qwen35-b",
        exercises="hub-form checkpoint (model.language_model.*, 2 BF16 shards), [linear, full, linear, linear, full], "
                  "MQA 6/1, Hk=2 Hv=6 (r=3), dk=16 > dv=8, partial rotary 0.5, theta 1e6, mrope_section [2,1,1], TIED"),
    "qwen35-c": dict(
        fixture="qwen35-c",
        exercises="full_attention_interval 2 ([linear, full] x2), Hk=Hv=4 (r=1), nH=nKV=4 (no GQA), "
                  "full rotary (1.0), theta 1e4, untied: the control case"),
    "gva4-int4-tied-1e7": dict(
        config=dict(vocab_size=83, hidden_size=32, intermediate_size=112, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                    linear_num_key_heads=1, linear_num_value_heads=4, linear_key_head_dim=8,
                    linear_value_head_dim=6, linear_conv_kernel_dim=4, full_attention_interval=4,
                    rope_parameters=rope(1e7, 0.25, mrope_section=[11, 11, 10], mrope_interleaved=True),
                    tie_word_embeddings=True),
        seed=401, emb_std=0.15,
        exercises="interval 4 ([linear x3, full], the 0.8B pattern), ONE key head and 4 value heads (r=4), MQA 4/1, "
                  "dk=8 != dv=6, partial rotary 0.25 (rd=4), theta 1e7, TIED, the 0.8B's mrope_section [11,11,10]"),
    "gva2-mqa-int3-1e6": dict(
        config=dict(vocab_size=79, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=12,
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                    linear_value_head_dim=8, linear_conv_kernel_dim=4, full_attention_interval=3,
                    rope_parameters=rope(1e6, 0.5), tie_word_embeddings=False),
        seed=402,
        exercises="interval 3 ([linear, linear, full]), MQA 4/1, Hk=2 Hv=4 (r=2), head_dim 12 (rd=6, rd/2 odd), "
                  "partial rotary 0.5, theta 1e6, untied"),
    "attn-first-tied-gqa3": dict(
        config=dict(vocab_size=89, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                    linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=12,
                    linear_value_head_dim=8, linear_conv_kernel_dim=4,
                    layer_types=["full_attention", "linear_attention", "linear_attention"],
                    rope_parameters=rope(1e4, 0.5), tie_word_embeddings=True),
        seed=403, emb_std=0.15,
        exercises="attention FIRST and only there ([full, linear, linear]), GQA 6/2 (G=3), Hk=Hv=2 (r=1), "
                  "dk=12 > dv=8, partial rotary 0.5 (rd=4), theta 1e4, TIED"),
    "int2-two-layers": dict(
        config=dict(vocab_size=67, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=4,
                    linear_value_head_dim=8, linear_conv_kernel_dim=4, full_attention_interval=2,
                    rope_parameters=rope(1e7, 1.0), tie_word_embeddings=False),
        seed=404,
        exercises="the smallest graph: 2 layers [linear, full], Hk=2 Hv=4 (r=2), dk=4 < dv=8, GQA 4/2, "
                  "full rotary, theta 1e7, untied"),
    "gva2-int2-quarter-1e6": dict(
        config=dict(vocab_size=71, hidden_size=32, intermediate_size=40, num_hidden_layers=4,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=4,
                    linear_value_head_dim=4, linear_conv_kernel_dim=3, full_attention_interval=2,
                    rope_parameters=rope(1e6, 0.25), tie_word_embeddings=False),
        seed=405,
        exercises="interval 2 with partial rotary 0.25 (rd=8 of 32), Hk=4 Hv=8 (r=2), conv kernel 3 (not 4), "
                  "nH=nKV=2, head_dim 32 = 2*H/nH, theta 1e6, untied"),
}

# The qwen3.5-0.8b preset (crates/model/src/presets.rs): hidden 1024, 24 layers (every 4th attention), FFN 3584,
# 8 query / 2 KV heads of 256, 16 key and 16 value heads of 128, conv 4, tied, theta 1e7 on 25 % of each head,
# vocab 248320. mrope_section [11,11,10] interleaved and 262144 positions as the published config has them.
BIG_CONFIG = dict(
    vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
    num_attention_heads=8, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, full_attention_interval=4, max_position_embeddings=262144, rms_norm_eps=1e-6,
    rope_parameters=rope(1e7, 0.25, mrope_section=[11, 11, 10], mrope_interleaved=True),
    tie_word_embeddings=True,
)


# ================================================================================================ the step module


class DecodeStep(torch.nn.Module):
    """One decode step of a Qwen3_5ForCausalLM with the cache state as explicit tensors.

    The model's `model` and `lm_head` are registered here under their own names, so the exported parameters are
    named exactly as in the checkpoint's state dict (`model.layers.0.linear_attn.A_log`, `lm_head.weight`)."""

    def __init__(self, hf: Qwen3_5ForCausalLM):
        super().__init__()
        self.model = hf.model
        self.lm_head = hf.lm_head
        object.__setattr__(self, "hf", hf)  # not a submodule: its parameters are the two above
        self.kinds = list(hf.config.layer_types)
        self.kernel = hf.config.linear_conv_kernel_dim

    def forward(self, input_ids, position_ids, *state):
        cache = DynamicCache(config=self.hf.config)
        it = iter(state)
        for i, kind in enumerate(self.kinds):
            layer, a, b = cache.layers[i], next(it), next(it)
            if kind == "linear_attention":
                # the cache updates these in place (copy_): clone so the inputs are never written
                layer.conv_states[0], layer.recurrent_states[0] = a.clone(), b.clone()
                layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
                layer.has_previous_state[0] = True  # else the model takes its prefill (chunked) path
                layer.conv_kernel_size[0] = self.kernel
                layer.device, layer.dtype = a.device, a.dtype
            else:
                layer.keys, layer.values = a, b  # update() concatenates into new tensors
                layer.is_initialized, layer.device = True, a.device
        out = self.hf(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True)
        return (out.logits, *cache_state(cache, self.kinds))


def cache_state(cache, kinds) -> list[torch.Tensor]:
    """The state tensors in the step's order: per layer (conv, recurrent) or (keys, values)."""
    out = []
    for i, kind in enumerate(kinds):
        layer = cache.layers[i]
        if kind == "linear_attention":
            out += [layer.conv_states[0], layer.recurrent_states[0]]
        else:
            out += [layer.keys, layer.values]
    return out


def state_names(kinds) -> list[dict]:
    rows = []
    for i, kind in enumerate(kinds):
        pair = ("conv", "recurrent") if kind == "linear_attention" else ("keys", "values")
        for k in pair:
            rows.append({"input": f"state_{len(rows)}", "output_index": len(rows) + 1, "layer": i, "kind": k})
    return rows


def dynamic_shapes(kinds, max_positions: int):
    past = torch.export.Dim("past", min=1, max=max_positions - 1)
    per_state = tuple({2: past} if kind == "full_attention" else None for kind in kinds for _ in range(2))
    return (None, None, per_state)  # *state is one positional group


def export(step: DecodeStep, args: tuple):
    kinds = step.kinds
    return torch.export.export(step, args, dynamic_shapes=dynamic_shapes(kinds, step.hf.config.max_position_embeddings),
                               strict=STRICT)


# ================================================================================================ checkpoints


def load_model(folder: Path) -> Qwen3_5ForCausalLM:
    m = mf.set_eager(Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32)).eval()
    with torch.no_grad():  # fresh aligned storage, as make_fixtures.reload_check does (BLAS kernel choice)
        for p in m.parameters():
            p.data = p.data.clone()
    return m


def build_random(name: str, spec: dict, d: Path) -> None:
    torch.manual_seed(spec["seed"])
    cfg = Qwen3_5TextConfig(**spec["config"])
    model = mf.set_eager(Qwen3_5ForCausalLM(cfg))
    mf.qwen35_randomize_(model, seed=spec["seed"] * 10 + 1, emb_std=spec.get("emb_std", 1.0))
    model.save_pretrained(d)
    for extra in ("generation_config.json",):
        if (d / extra).exists():
            (d / extra).unlink()


def read_checkpoint(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors (shards too), as f32."""
    sd = {}
    for f in sorted(folder.glob("*.safetensors")):
        sd.update({k: v.to(torch.float32) for k, v in load_file(str(f)).items()})
    return sd


def checkpoint_tensor(sd: dict, target: str) -> torch.Tensor:
    """The tensor a graph parameter (named by transformers' Qwen3_5ForCausalLM state dict) reads: hub-form
    checkpoints prefix `model.language_model.`; a tied head reads the embedding (no lm_head.weight in the file)."""
    for key in (target, target.replace("model.", "model.language_model.", 1)):
        if key in sd:
            return sd[key]
    if target == "lm_head.weight":
        return checkpoint_tensor(sd, "model.embed_tokens.weight")
    raise KeyError(target)


# ================================================================================================ rollout


@torch.no_grad()
def eager_decode(model, tokens: list[int]):
    """transformers' own decode, one token per call with its DynamicCache: per step (logits [V], state after)."""
    cache = DynamicCache(config=model.config)
    rows = []
    for t in tokens:
        out = model(input_ids=torch.tensor([[t]], dtype=torch.long), cache=cache, use_cache=True)
        cache = out.cache
        rows.append((out.logits[0, -1].clone(), [s.clone() for s in cache_state(cache, model.config.layer_types)]))
    return rows


def max_diff(xs, ys) -> float:
    assert len(xs) == len(ys)
    worst = 0.0
    for x, y in zip(xs, ys):
        assert x.shape == y.shape, (x.shape, y.shape)
        worst = max(worst, (x - y).abs().max().item() if x.numel() else 0.0)
    return worst


@torch.no_grad()
def check_program(run, rows, tokens) -> float:
    """Feed the eager states back through `run` (an exported program's module) for steps 1..N: max |diff|."""
    worst = 0.0
    for i in range(1, len(tokens)):
        out = run(torch.tensor([[tokens[i]]]), torch.tensor([[i]]), *rows[i - 1][1])
        want = [rows[i][0].view(1, 1, -1), *rows[i][1]]
        worst = max(worst, max_diff(list(out), want))
    return worst


def floats(t: torch.Tensor) -> list[float]:
    return [float(x) for x in t.reshape(-1).tolist()]


def state_json(states, kinds) -> list[dict]:
    return [{**meta, "shape": list(s.shape), "values": floats(s)} for meta, s in zip(state_names(kinds), states)]


# ================================================================================================ archive


def strip_weights(ep):
    """A copy of `ep` whose parameters are fake tensors: torch.export.save then writes no weight bytes (one empty
    payload, weight_0) but keeps each parameter's name and tensor metadata. Constants (the rotary inv_freq
    buffers, not in any checkpoint) stay real."""
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    sd = {}
    for k, v in ep.state_dict.items():
        f = fake.from_tensor(v)
        sd[k] = torch.nn.Parameter(f, requires_grad=v.requires_grad) if isinstance(v, torch.nn.Parameter) else f
    out = copy.copy(ep)
    out._state_dict = sd
    return out


def save_archive(ep, path: Path) -> bytes:
    """torch.export.save to `path`; returns the archive's models/model.json bytes."""
    torch.export.save(ep, str(path))
    with zipfile.ZipFile(path) as z:
        (name,) = [n for n in z.namelist() if n.endswith("/models/model.json")]
        return z.read(name)


def archive_constants(path: Path) -> dict[str, torch.Tensor]:
    """The archive's constants (here the rotary inv_freq buffers), read from its raw payloads (f32 only)."""
    with zipfile.ZipFile(path) as z:
        names = {n.split("/", 1)[1]: n for n in z.namelist()}
        config = json.loads(z.read(names["data/constants/model_constants_config.json"]))["config"]
        out = {}
        for fqn, meta in config.items():
            tm = meta["tensor_meta"]
            assert not meta["use_pickle"] and tm["dtype"] == 7, meta  # 7 = torch.float32 in the export schema
            flat = torch.frombuffer(bytearray(z.read(names["data/constants/" + meta["path_name"]])), dtype=torch.float32)
            out[fqn] = torch.as_strided(flat, [s["as_int"] for s in tm["sizes"]], [s["as_int"] for s in tm["strides"]],
                                        tm["storage_offset"]["as_int"])
    return out


def graph_of_json(raw: bytes, sd: dict, constants: dict):
    """Rebuild the ExportedProgram from model.json alone, with the weights from a checkpoint."""
    j = json.loads(raw)
    params = {}
    for spec in j["graph_module"]["signature"]["input_specs"]:
        if "parameter" in spec:
            target = spec["parameter"]["parameter_name"]
            params[target] = torch.nn.Parameter(checkpoint_tensor(sd, target).clone(), requires_grad=False)
    return deserialize(SerializedArtifact(exported_program=raw, state_dict=params, constants=constants,
                                          example_inputs=None))


# ================================================================================================ one config


def export_tiny(name: str, spec: dict) -> dict:
    t0 = time.time()
    d = OUT / name
    own = "config" in spec
    keep = {"config.json", "model.safetensors"} if own else set()
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if own:
        build_random(name, spec, d)
        ckpt = d
    else:
        ckpt = HERE / "fixtures" / spec["fixture"]
    model = load_model(ckpt)
    kinds = list(model.config.layer_types)
    V = model.config.vocab_size

    if own:
        tokens = mf.make_tokens(V, 1 + N_STEPS, seed=spec["seed"] * 10 + 2)
    else:
        golden = json.loads((ckpt / "golden.json").read_text())
        tokens = golden["tokens"][: 1 + N_STEPS]
    rows = eager_decode(model, tokens)
    if not own:  # the rollout must reproduce the committed goldens bit for bit
        g = torch.tensor(golden["logits"][: 1 + N_STEPS], dtype=torch.float32)
        diff = (torch.stack([r[0] for r in rows]) - g).abs().max().item()
        assert diff == 0.0, f"{name}: eager rollout differs from {spec['fixture']}/golden.json by {diff}"

    step = DecodeStep(model).eval()
    i = EXAMPLE_PAST
    example = (torch.tensor([[tokens[i]]]), torch.tensor([[i]]), *rows[i - 1][1])
    ep = export(step, example)
    d_export = check_program(ep.module(), rows, tokens)
    assert d_export == 0.0, f"{name}: exported program differs from transformers by {d_export}"

    raw = save_archive(strip_weights(ep), d / "step.pt2")
    (d / "model.json").write_bytes(raw)
    rebuilt = graph_of_json(raw, read_checkpoint(ckpt), archive_constants(d / "step.pt2"))
    d_json = check_program(rebuilt.module(), rows, tokens)
    assert d_json == 0.0, f"{name}: program rebuilt from model.json + safetensors differs by {d_json}"

    rollout = {
        "model": name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "checkpoint": os.path.relpath(ckpt, REPO),
        "layer_types": kinds,
        "state": state_names(kinds),
        "prefix_tokens": tokens[:1],
        "tokens": tokens[1:],
        "positions": list(range(1, len(tokens))),
        "logits": [floats(r[0]) for r in rows[1:]],
        "initial_state": state_json(rows[0][1], kinds),
        "final_state": state_json(rows[-1][1], kinds),
        "max_abs_diff": {"exported_vs_transformers": d_export, "model_json_plus_safetensors_vs_transformers": d_json},
    }
    (d / "rollout.json").write_text(json.dumps(rollout) + "\n")
    for f in d.iterdir():
        assert f.name in keep | {"step.pt2", "model.json", "rollout.json"}, f
    secs = time.time() - t0
    print(f"  {name}: {len(kinds)} layers, exported == transformers (0.0), model.json + safetensors == "
          f"transformers (0.0), {secs:.1f} s")
    return {"seconds": secs}


def example_inputs(cfg) -> tuple:
    """A decode step's example inputs for `cfg`: a token, the position EXAMPLE_PAST, and zero states (per layer a conv
    window and a delta state, or keys and values of EXAMPLE_PAST positions)."""
    state = []
    for kind in cfg.layer_types:
        if kind == "linear_attention":
            C = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim \
                + cfg.linear_num_value_heads * cfg.linear_value_head_dim
            state += [torch.zeros(1, C, cfg.linear_conv_kernel_dim),
                      torch.zeros(1, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                  cfg.linear_value_head_dim)]
        else:
            kv = (1, cfg.num_key_value_heads, EXAMPLE_PAST, cfg.head_dim)
            state += [torch.zeros(kv), torch.zeros(kv)]
    return (torch.zeros(1, 1, dtype=torch.long), torch.full((1, 1), EXAMPLE_PAST, dtype=torch.long), *state)


def fake_export(cfg_kwargs: dict):
    """Export a model whose weights never exist: built and traced under FakeTensorMode."""
    cfg = Qwen3_5TextConfig(**cfg_kwargs)
    with FakeTensorMode(allow_non_fake_inputs=False):
        torch.manual_seed(0)
        model = mf.set_eager(Qwen3_5ForCausalLM(cfg)).eval()
        step = DecodeStep(model).eval()
        example = example_inputs(cfg)
    ep = export(step, example)
    assert all(isinstance(v, torch._subclasses.FakeTensor) for v in ep.state_dict.values())
    return ep


def export_big() -> None:
    t0 = time.time()
    d = OUT / BIG
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    ep = fake_export(BIG_CONFIG)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    with zipfile.ZipFile(buf) as z:
        (name,) = [n for n in z.namelist() if n.endswith("/models/model.json")]
        raw = z.read(name)
    # The fake export's constant buffers are fake too, so the rotary buffers it names are written beside the graph
    # as transformers' own rotary module makes them for this config (real tensors; f32 values, exact in JSON).
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    rotary = Qwen3_5TextRotaryEmbedding(Qwen3_5TextConfig(**BIG_CONFIG))
    buffers = {f"model.rotary_emb.{k}": floats(v) for k, v in rotary.named_buffers()}
    specs = json.loads(raw)["graph_module"]["signature"]["input_specs"]
    names = {s["buffer"]["buffer_name"] for s in specs if "buffer" in s}
    assert names == set(buffers), (names, set(buffers))
    (d / "buffers.json").write_text(json.dumps(buffers, indent=1) + "\n")
    if len(raw) > 5_000_000:
        (d / "model.json.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    else:
        (d / "model.json").write_bytes(raw)
    print(f"  {BIG}: 24 layers, fake weights, model.json {len(raw)} bytes, {time.time() - t0:.1f} s")


# A config the engine refuses, exported through the same path: Qwen3.5-MoE (experts) at a tiny size. Only its
# model.json and config.json are kept (the importer refuses it at its router's first node; no weights are read).
REFUSED = "refused-qwen35-moe"
REFUSED_CONFIG = dict(
    vocab_size=67, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=4, linear_value_head_dim=8,
    linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"], num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
    rope_parameters=rope(1e7, 1.0), rms_norm_eps=1e-6,
)


def export_refused() -> None:
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    d = OUT / REFUSED
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    cfg = Qwen3_5MoeTextConfig(**REFUSED_CONFIG)
    torch.manual_seed(0)
    model = mf.set_eager(Qwen3_5MoeForCausalLM(cfg)).eval()
    step = DecodeStep(model).eval()
    example = example_inputs(cfg)
    ep = strip_weights(export(step, example))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    with zipfile.ZipFile(buf) as z:
        (name,) = [n for n in z.namelist() if n.endswith("/models/model.json")]
        (d / "model.json").write_bytes(z.read(name))
    model.config.save_pretrained(d)
    print(f"  {REFUSED}: experts, model.json and config.json only")


def check_fake_path() -> None:
    """The 0.8B graph is exported with fake weights; the same path on a tiny config must write the very model.json
    that the real-weight export wrote (so the big graph is the one a real checkpoint would give)."""
    name = "gva4-int4-tied-1e7"
    ep = fake_export(CONFIGS[name]["config"])
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    with zipfile.ZipFile(buf) as z:
        (n,) = [n for n in z.namelist() if n.endswith("/models/model.json")]
        raw = z.read(n)
    ok = raw == (OUT / name / "model.json").read_bytes()
    assert ok, f"fake-weight export of {name} differs from its real-weight model.json"
    print(f"  fake-weight export of {name}: model.json byte-identical to the real-weight one")


# ================================================================================================ summary


def graph_json(d: Path) -> dict:
    if (d / "model.json").exists():
        return json.loads((d / "model.json").read_bytes())
    return json.loads(gzip.decompress((d / "model.json.gz").read_bytes()))


def summarize() -> dict:
    per, total = {}, collections.Counter()
    for d in sorted(p for p in OUT.iterdir() if p.is_dir()):
        g = graph_json(d)["graph_module"]
        ops = collections.Counter(n["target"] for n in g["graph"]["nodes"])
        kinds = collections.Counter(next(iter(s)) for s in g["signature"]["input_specs"])
        per[d.name] = {
            "nodes": len(g["graph"]["nodes"]),
            "inputs": len(g["graph"]["inputs"]),
            "input_kinds": dict(sorted(kinds.items())),
            "outputs": len(g["graph"]["outputs"]),
            "distinct_targets": len(ops),
            "targets": dict(sorted(ops.items())),
        }
        if d.name in CONFIGS:
            per[d.name]["exercises"] = CONFIGS[d.name]["exercises"]
        total.update(ops)
    s = {"torch": torch.__version__, "transformers": transformers.__version__, "strict": STRICT, "graphs": per,
         "all_targets": dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))}
    (OUT / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    return s


# ================================================================================================ main


def main(argv: list[str]) -> int:
    global OUT, STRICT
    if argv[:1] == ["--strict"]:
        if len(argv) < 2:
            raise SystemExit("--strict needs an output folder")
        OUT, STRICT, argv = Path(argv[1]).resolve(), True, argv[2:]
        if OUT == (HERE / "fixtures" / "exported").resolve():
            raise SystemExit("--strict writes elsewhere: the committed fixtures are the non-strict export")
    names = argv or [*CONFIGS, BIG, REFUSED]
    for n in names:
        if n not in (BIG, REFUSED) and n not in CONFIGS:
            raise SystemExit(f"unknown config {n}; known: {', '.join([*CONFIGS, BIG, REFUSED])}")
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for n in names:
        print(f"exporting {n}")
        if n == BIG:
            export_big()
        elif n == REFUSED:
            export_refused()
        else:
            export_tiny(n, CONFIGS[n])
    if "gva4-int4-tied-1e7" in names and BIG in names and not STRICT:  # strict metadata holds id()s: no byte compare
        check_fake_path()
    for f in OUT.rglob("*"):  # safetensors writes 0600; make the tree uniform
        f.chmod(0o755 if f.is_dir() else 0o644)
    s = summarize()
    print(f"{len(s['graphs'])} graphs, {len(s['all_targets'])} distinct targets; total {time.time() - t0:.1f} s")
    print("ALL CHECKS PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
