//! Loading a Hugging Face Qwen3.5 folder: the checkpoint holds the HF weights through exactly the
//! transforms llama.cpp's converter applies, whatever the prefix, sharding and dtype; every folder
//! that does not hold the spec's model is refused with an error naming the file and tensor, never a
//! panic.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;
use stepcheck::formats::gguf::GgmlType;
use stepcheck::model::Checkpoint;
use stepcheck::model::hf::{LoadError, checkpoint_from_hf_folder, load_hf_folder, tensors_from_bytes};
use stepcheck::model::layout::layout;
use stepcheck::model::presets;
use stepcheck::model::spec::{DeltaNetSpec, Mixer, ModelSpec};

// ---------------------------------------------------------------------------------------------
// Boundary: the file system. A scratch folder, removed when dropped.

struct Folder(PathBuf);

impl Folder {
    fn new() -> Folder {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("stepcheck-hf-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create scratch folder");
        Folder(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// Boundary: the HF checkpoint. Its tensor names and shapes as transformers' `Qwen3_5` modules
// hold them, stated here independently of the loader's own name table.

#[derive(Clone, Debug)]
struct HfTensor {
    name: String,
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// The HF tensors of `spec`'s text model with the text model under `prefix` (`model.` or
/// `model.language_model.`), every value distinct within its tensor. Norm weights are zero-centred
/// (small, around 0) as HF stores them.
fn hf_model(spec: &ModelSpec, prefix: &str) -> Vec<HfTensor> {
    let (h, i, v) = (spec.hidden, spec.intermediate, spec.vocab);
    let (a, d) = (&spec.attention, &spec.delta_net);
    let (vd, c, k) = (d.value_heads * d.value_dim, spec.conv_channels(), d.conv_kernel);
    let mut names: Vec<(String, Vec<usize>)> =
        vec![(format!("{prefix}embed_tokens.weight"), vec![v, h]), (format!("{prefix}norm.weight"), vec![h])];
    if !spec.tied_embeddings {
        names.push(("lm_head.weight".into(), vec![v, h]));
    }
    for (l, mixer) in spec.layers.iter().enumerate() {
        let p = format!("{prefix}layers.{l}.");
        let mut put = |what: &str, shape: &[usize]| names.push((format!("{p}{what}"), shape.to_vec()));
        put("input_layernorm.weight", &[h]);
        put("post_attention_layernorm.weight", &[h]);
        put("mlp.gate_proj.weight", &[i, h]);
        put("mlp.up_proj.weight", &[i, h]);
        put("mlp.down_proj.weight", &[h, i]);
        match mixer {
            Mixer::DeltaNet => {
                put("linear_attn.in_proj_qkv.weight", &[c, h]);
                put("linear_attn.in_proj_z.weight", &[vd, h]);
                put("linear_attn.in_proj_b.weight", &[d.value_heads, h]);
                put("linear_attn.in_proj_a.weight", &[d.value_heads, h]);
                put("linear_attn.conv1d.weight", &[c, 1, k]);
                put("linear_attn.A_log", &[d.value_heads]);
                put("linear_attn.dt_bias", &[d.value_heads]);
                put("linear_attn.norm.weight", &[d.value_dim]);
                put("linear_attn.out_proj.weight", &[h, vd]);
            }
            Mixer::Attention => {
                put("self_attn.q_proj.weight", &[2 * a.heads * a.head_dim, h]);
                put("self_attn.k_proj.weight", &[a.kv_heads * a.head_dim, h]);
                put("self_attn.v_proj.weight", &[a.kv_heads * a.head_dim, h]);
                put("self_attn.o_proj.weight", &[h, a.heads * a.head_dim]);
                put("self_attn.q_norm.weight", &[a.head_dim]);
                put("self_attn.k_norm.weight", &[a.head_dim]);
            }
        }
    }
    names
        .into_iter()
        .enumerate()
        .map(|(t, (name, shape))| {
            let n: usize = shape.iter().product();
            let base = (t as f32 * 0.37).sin();
            let data = (0..n).map(|j| base + j as f32 / n as f32).collect();
            HfTensor { name, shape, data }
        })
        .collect()
}

fn rename(tensors: &[HfTensor], from: &str, to: &str) -> Vec<HfTensor> {
    tensors.iter().map(|t| HfTensor { name: t.name.replacen(from, to, 1), ..t.clone() }).collect()
}

/// The values of `data` stored as `dtype`, little-endian.
fn encode(data: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Dtype::F16 => data.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect(),
        Dtype::BF16 => data.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect(),
        Dtype::F64 => data.iter().flat_map(|x| f64::from(*x).to_le_bytes()).collect(),
        other => panic!("no encoder for {other:?}"),
    }
}

/// A safetensors file holding `tensors`, each stored as its dtype.
fn safetensors_bytes(tensors: &[(&HfTensor, Dtype)]) -> Vec<u8> {
    let bytes: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> =
        tensors.iter().map(|(t, d)| (t.name.clone(), *d, t.shape.clone(), encode(&t.data, *d))).collect();
    let views = bytes.iter().map(|(name, dtype, shape, data)| {
        (name.clone(), TensorView::new(*dtype, shape.clone(), data).expect("tensor view"))
    });
    safetensors::serialize(views, None).expect("serialize")
}

fn write_file(dir: &Folder, file: &str, tensors: &[HfTensor], dtype: Dtype) {
    let with_dtype: Vec<(&HfTensor, Dtype)> = tensors.iter().map(|t| (t, dtype)).collect();
    std::fs::write(dir.file(file), safetensors_bytes(&with_dtype)).expect("write");
}

/// A single-file checkpoint of `tensors`.
fn write_single(tensors: &[HfTensor], dtype: Dtype) -> Folder {
    let dir = Folder::new();
    write_file(&dir, "model.safetensors", tensors, dtype);
    dir
}

/// A checkpoint of `tensors` sharded round-robin over `shards` files, with its index.
fn write_sharded(tensors: &[HfTensor], shards: usize) -> Folder {
    let dir = Folder::new();
    let shard_name = |s: usize| format!("model-{:05}-of-{shards:05}.safetensors", s + 1);
    let mut weight_map = serde_json::Map::new();
    for s in 0..shards {
        let mine: Vec<HfTensor> = tensors.iter().skip(s).step_by(shards).cloned().collect();
        for t in &mine {
            weight_map.insert(t.name.clone(), shard_name(s).into());
        }
        write_file(&dir, &shard_name(s), &mine, Dtype::F32);
    }
    write_index(&dir, json!({"metadata": {"total_size": 0}, "weight_map": weight_map}));
    dir
}

fn write_index(dir: &Folder, index: serde_json::Value) {
    std::fs::write(dir.file("model.safetensors.index.json"), index.to_string()).expect("write index");
}

fn load(dir: &Folder, spec: &ModelSpec) -> Checkpoint {
    checkpoint_from_hf_folder(dir.path(), spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name))
}

fn hf<'a>(tensors: &'a [HfTensor], name: &str) -> &'a HfTensor {
    tensors.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no HF tensor {name}"))
}

// ---------------------------------------------------------------------------------------------
// The transforms, stated independently of the loader: where each canonical value comes from.

/// The HF (grouped) value head a qwen35 GGUF's (tiled) head `tiled` holds: `h' = j·Hk + g` holds
/// `h = g·r + j`.
fn grouped(tiled: usize, d: &DeltaNetSpec) -> usize {
    let r = d.value_heads / d.key_heads;
    (tiled % d.key_heads) * r + tiled / d.key_heads
}

/// Where a canonical tensor's flat index `i` reads its HF tensor.
#[derive(Clone, Copy)]
enum Source {
    /// The same index.
    Same,
    /// From flat index `start` on, value heads of `block` values each, tiled.
    ValueBlocksFrom { start: usize, block: usize },
    /// Rows of `cols` values whose columns are value heads of `dv` each, tiled.
    ValueColumns { cols: usize, dv: usize },
}

impl Source {
    fn index(self, i: usize, d: &DeltaNetSpec) -> usize {
        match self {
            Source::Same => i,
            Source::ValueBlocksFrom { start, .. } if i < start => i,
            Source::ValueBlocksFrom { start, block } => {
                let v = i - start;
                start + grouped(v / block, d) * block + v % block
            }
            Source::ValueColumns { cols, dv } => {
                let (row, col) = (i / cols, i % cols);
                row * cols + grouped(col / dv, d) * dv + col % dv
            }
        }
    }
}

/// One transform check: canonical tensor, HF tensor, where each value comes from, and what is
/// done to it.
struct Transform {
    gguf: String,
    hf: String,
    source: Source,
    value: fn(f32) -> f32,
}

/// The converter's transform of every kind of tensor, for the first layer of each mixer of `spec`.
fn transforms(spec: &ModelSpec) -> Vec<Transform> {
    let d = &spec.delta_net;
    let (h, k, dv) = (spec.hidden, d.conv_kernel, d.value_dim);
    let qk_rows = 2 * d.key_heads * d.key_dim;
    let same = |x: f32| x;
    let plus_one = |x: f32| x + 1.0;
    let decay = |a: f32| -a.exp();
    let mut out = vec![];
    let mut put = |gguf: String, hf: String, source: Source, value: fn(f32) -> f32| {
        out.push(Transform { gguf, hf, source, value });
    };
    put("token_embd.weight".into(), "model.embed_tokens.weight".into(), Source::Same, same);
    put("output_norm.weight".into(), "model.norm.weight".into(), Source::Same, plus_one);
    if !spec.tied_embeddings {
        put("output.weight".into(), "lm_head.weight".into(), Source::Same, same);
    }
    let first = |m: Mixer| spec.layers.iter().position(|&x| x == m).expect("a layer of each mixer");
    let (dn, at) = (first(Mixer::DeltaNet), first(Mixer::Attention));
    let blk = |l: usize, what: &str| format!("blk.{l}.{what}");
    let layer = |l: usize, what: &str| format!("model.layers.{l}.{what}");
    let rows = |block: usize| Source::ValueBlocksFrom { start: 0, block };
    for (l, gguf, hf_name, source, value) in [
        (at, "attn_norm.weight", "input_layernorm.weight", Source::Same, plus_one as fn(f32) -> f32),
        (dn, "post_attention_norm.weight", "post_attention_layernorm.weight", Source::Same, plus_one),
        (dn, "ffn_gate.weight", "mlp.gate_proj.weight", Source::Same, same),
        (dn, "ffn_up.weight", "mlp.up_proj.weight", Source::Same, same),
        (at, "ffn_down.weight", "mlp.down_proj.weight", Source::Same, same),
        (at, "attn_q.weight", "self_attn.q_proj.weight", Source::Same, same),
        (at, "attn_k.weight", "self_attn.k_proj.weight", Source::Same, same),
        (at, "attn_v.weight", "self_attn.v_proj.weight", Source::Same, same),
        (at, "attn_output.weight", "self_attn.o_proj.weight", Source::Same, same),
        (at, "attn_q_norm.weight", "self_attn.q_norm.weight", Source::Same, plus_one),
        (at, "attn_k_norm.weight", "self_attn.k_norm.weight", Source::Same, plus_one),
        (dn, "ssm_norm.weight", "linear_attn.norm.weight", Source::Same, same),
        (dn, "ssm_a", "linear_attn.A_log", rows(1), decay),
        (dn, "ssm_dt.bias", "linear_attn.dt_bias", rows(1), same),
        (dn, "ssm_beta.weight", "linear_attn.in_proj_b.weight", rows(h), same),
        (dn, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", rows(h), same),
        (dn, "attn_gate.weight", "linear_attn.in_proj_z.weight", rows(dv * h), same),
        (
            dn,
            "attn_qkv.weight",
            "linear_attn.in_proj_qkv.weight",
            Source::ValueBlocksFrom { start: qk_rows * h, block: dv * h },
            same,
        ),
        (
            dn,
            "ssm_conv1d.weight",
            "linear_attn.conv1d.weight",
            Source::ValueBlocksFrom { start: qk_rows * k, block: dv * k },
            same,
        ),
        (
            dn,
            "ssm_out.weight",
            "linear_attn.out_proj.weight",
            Source::ValueColumns { cols: d.value_heads * dv, dv },
            same,
        ),
    ] {
        put(blk(l, gguf), layer(l, hf_name), source, value);
    }
    out
}

#[test]
fn every_tensor_kind_gets_exactly_the_converters_transform() {
    for spec in [presets::tiny(), presets::tiny_tied()] {
        let tensors = hf_model(&spec, "model.");
        let ckpt = load(&write_single(&tensors, Dtype::F32), &spec);
        for t in transforms(&spec) {
            let got = ckpt.get(&t.gguf).unwrap_or_else(|| panic!("{}: no {}", spec.name, t.gguf));
            let src = hf(&tensors, &t.hf);
            let got = got.to_f32().expect("decodes");
            assert_eq!(got.len(), src.data.len(), "{}: {}", spec.name, t.gguf);
            for (i, &x) in got.iter().enumerate() {
                let want = (t.value)(src.data[t.source.index(i, &spec.delta_net)]);
                assert_eq!(x, want, "{}: {}[{i}] from {}", spec.name, t.gguf, t.hf);
            }
        }
    }
}

#[test]
fn the_conv_weight_is_squeezed_and_norm_weights_hold_their_multiplier() {
    let spec = presets::tiny();
    let ckpt = load(&write_single(&hf_model(&spec, "model."), Dtype::F32), &spec);
    let conv = ckpt.get("blk.1.ssm_conv1d.weight").expect("conv");
    assert_eq!(conv.shape, [spec.conv_channels(), spec.delta_net.conv_kernel]);
    let norm = ckpt.get("output_norm.weight").expect("norm");
    assert!(norm.to_f32().expect("f32").iter().all(|w| (0.0..3.0).contains(w)), "zero-centred weights +1");
}

#[test]
fn the_checkpoint_holds_exactly_the_layouts_tensors_and_shapes() {
    for spec in [presets::tiny(), presets::tiny_tied()] {
        let ckpt = load(&write_single(&hf_model(&spec, "model."), Dtype::F32), &spec);
        let got: Vec<(&String, &Vec<usize>)> = ckpt.tensors.iter().map(|(n, t)| (n, &t.shape)).collect();
        let mut want: Vec<(String, Vec<usize>)> = layout(&spec).into_iter().map(|t| (t.name, t.shape)).collect();
        want.sort();
        let want: Vec<(&String, &Vec<usize>)> = want.iter().map(|(n, s)| (n, s)).collect();
        assert_eq!(got, want, "{}", spec.name);
    }
}

#[test]
fn prefixes_and_sharding_load_the_same_checkpoint() {
    let spec = presets::tiny();
    let plain = hf_model(&spec, "model.");
    let wrapped = rename(&plain, "model.", "model.language_model.");
    let reference = load(&write_single(&plain, Dtype::F32), &spec);
    for (what, dir) in [
        ("model.language_model. prefix", write_single(&wrapped, Dtype::F32)),
        ("sharded, model. prefix", write_sharded(&plain, 3)),
        ("sharded, model.language_model. prefix", write_sharded(&wrapped, 4)),
        ("one shard", write_sharded(&plain, 1)),
    ] {
        assert_eq!(load(&dir, &spec), reference, "{what}");
    }
}

#[test]
fn a_single_file_is_read_before_an_index_as_transformers_does() {
    let spec = presets::tiny();
    let tensors = hf_model(&spec, "model.");
    let dir = write_single(&tensors, Dtype::F32);
    write_index(&dir, json!({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}));
    assert_eq!(load(&dir, &spec), load(&write_single(&tensors, Dtype::F32), &spec));
}

#[test]
fn tensors_outside_the_text_model_are_skipped_unread() {
    let spec = presets::tiny();
    let model = hf_model(&spec, "model.language_model.");
    let reference = load(&write_single(&model, Dtype::F32), &spec);
    let stranger = |name: &str| HfTensor { name: name.into(), shape: vec![3, 2], data: vec![0.0; 6] };
    let others = [
        stranger("mtp.layers.0.mlp.up_proj.weight"),
        stranger("mtp.fc.weight"),
        stranger("model.visual.blocks.0.attn.qkv.weight"),
        stranger("model.language_model.visual.x"),
        stranger("visual.merger.weight"),
    ];
    let dir = Folder::new();
    // The others are stored as F64, a dtype the loader refuses: skipping must not even read them.
    let mut all: Vec<(&HfTensor, Dtype)> = model.iter().map(|t| (t, Dtype::F32)).collect();
    all.extend(others.iter().map(|t| (t, Dtype::F64)));
    std::fs::write(dir.file("model.safetensors"), safetensors_bytes(&all)).expect("write");
    assert_eq!(load(&dir, &spec), reference);
}

#[test]
fn half_precision_weights_stay_in_their_type_and_decode_exactly() {
    let spec = presets::tiny();
    let tensors = hf_model(&spec, "model.");
    for (dtype, round) in [
        (Dtype::F16, (|x| half::f16::from_f32(x).to_f32()) as fn(f32) -> f32),
        (Dtype::BF16, |x| half::bf16::from_f32(x).to_f32()),
    ] {
        let rounded: Vec<HfTensor> = tensors
            .iter()
            .map(|t| HfTensor { data: t.data.iter().map(|&x| round(x)).collect(), ..t.clone() })
            .collect();
        let want = load(&write_single(&rounded, Dtype::F32), &spec);
        let got = load(&write_single(&tensors, dtype), &spec);
        assert_eq!(got.tensors.keys().collect::<Vec<_>>(), want.tensors.keys().collect::<Vec<_>>());
        let stored = if dtype == Dtype::F16 { GgmlType::F16 } else { GgmlType::BF16 };
        for (name, w) in &want.tensors {
            let g = &got.tensors[name];
            assert_eq!(
                (&g.shape, g.to_f32().expect("decodes")),
                (&w.shape, w.to_f32().expect("f32")),
                "{dtype:?} {name}"
            );
            // Only the vectors the converter computes (`1 + w`, `−exp(A_log)`) become F32.
            let computed = g.shape.len() == 1 && (name.ends_with("norm.weight") || name.ends_with("ssm_a"));
            let expect = if computed && !name.ends_with("ssm_norm.weight") { GgmlType::F32 } else { stored };
            assert_eq!(g.ty(), expect, "{dtype:?} {name}");
        }
    }
}

/// The `config.json` of `presets::tiny()` in the hub's wrapper form.
fn tiny_config_json() -> String {
    json!({
        "model_type": "qwen3_5",
        "tie_word_embeddings": false,
        "text_config": {
            "model_type": "qwen3_5_text",
            "hidden_size": 64, "intermediate_size": 96, "vocab_size": 97, "num_hidden_layers": 4,
            "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"],
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 8, "linear_value_head_dim": 12, "linear_conv_kernel_dim": 4,
            "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
        }
    })
    .to_string()
}

#[test]
fn a_folder_loads_as_its_configs_spec_and_checkpoint() {
    let spec = presets::tiny();
    let tensors = hf_model(&spec, "model.language_model.");
    let dir = write_sharded(&tensors, 2);
    std::fs::write(dir.file("config.json"), tiny_config_json()).expect("write config");
    let (got_spec, got) = load_hf_folder(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let folder_name = dir.path().file_name().expect("name").to_string_lossy().into_owned();
    assert_eq!(got_spec, ModelSpec { name: folder_name, ..spec.clone() });
    assert_eq!(got, load(&write_single(&tensors, Dtype::F32), &spec));
}

// ---------------------------------------------------------------------------------------------
// Refusals: each a folder made from a good one, and the error it must give.

fn without(tensors: &[HfTensor], name: &str) -> Vec<HfTensor> {
    tensors.iter().filter(|t| t.name != name).cloned().collect()
}

/// `tensors` with `name` given `shape` (its values cut or padded to fit).
fn reshaped(tensors: &[HfTensor], name: &str, shape: &[usize]) -> Vec<HfTensor> {
    let mut out = tensors.to_vec();
    let t = out.iter_mut().find(|t| t.name == name).unwrap_or_else(|| panic!("no HF tensor {name}"));
    t.shape = shape.to_vec();
    t.data.resize(shape.iter().product(), 0.5);
    out
}

fn with_extra(tensors: &[HfTensor], name: &str, shape: &[usize]) -> Vec<HfTensor> {
    let n = shape.iter().product();
    let mut out = tensors.to_vec();
    out.push(HfTensor { name: name.into(), shape: shape.to_vec(), data: vec![0.5; n] });
    out
}

/// A good single file's bytes with `edit` applied.
fn edited_single(tensors: &[HfTensor], edit: impl FnOnce(&mut Vec<u8>)) -> Folder {
    let dir = Folder::new();
    let with_dtype: Vec<(&HfTensor, Dtype)> = tensors.iter().map(|t| (t, Dtype::F32)).collect();
    let mut bytes = safetensors_bytes(&with_dtype);
    edit(&mut bytes);
    std::fs::write(dir.file("model.safetensors"), bytes).expect("write");
    dir
}

/// A file whose header is `header`, followed by `data` bytes.
fn raw_file(header: &str, data: usize) -> Folder {
    let dir = Folder::new();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + data, 0);
    std::fs::write(dir.file("model.safetensors"), bytes).expect("write");
    dir
}

fn ends_with(path: &Path, file: &str) -> bool {
    path.file_name().is_some_and(|n| n == file)
}

type Refusal = fn(&LoadError) -> bool;

#[test]
fn folders_that_do_not_hold_the_specs_model_are_refused_by_name() {
    use LoadError::*;
    let spec = presets::tiny();
    let good = hf_model(&spec, "model.");
    // Tiny's conv weight: C = 2·2·8 + 4·12 = 80 channels of K = 4 taps.
    let (c, k) = (spec.conv_channels(), spec.delta_net.conv_kernel);
    assert_eq!((c, k), (80, 4));
    let huge = (1u64 << 61) - 1;
    let offsets_past_usize = {
        let entries: Vec<String> = (0..8u64)
            .map(|i| {
                format!(r#""t{i}":{{"dtype":"U8","shape":[{huge}],"data_offsets":[{},{}]}}"#, i * huge, (i + 1) * huge)
            })
            .collect();
        format!("{{{}}}", entries.join(","))
    };
    let sharded_index = |map: serde_json::Value| {
        let dir = write_sharded(&good, 2);
        write_index(&dir, json!({ "weight_map": map }));
        dir
    };
    let all_in = |file: &str| serde_json::Value::Object(good.iter().map(|t| (t.name.clone(), json!(file))).collect());
    let cases: Vec<(&str, Folder, Refusal)> = vec![
        ("an empty folder", Folder::new(), |e| matches!(e, NoWeights { .. })),
        (
            "a truncated file",
            edited_single(&good, |b| b.truncate(b.len() - 10)),
            |e| matches!(e, BadHeader { path, .. } if ends_with(path, "model.safetensors")),
        ),
        (
            "a header longer than the file",
            edited_single(&good, |b| {
                let n = b.len() as u64 + 100;
                b[..8].copy_from_slice(&n.to_le_bytes());
            }),
            |e| matches!(e, BadHeader { .. }),
        ),
        (
            "a header shorter than it says (JSON cut)",
            edited_single(&good, |b| {
                let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) - 5;
                b[..8].copy_from_slice(&n.to_le_bytes());
            }),
            |e| matches!(e, BadHeader { .. }),
        ),
        ("fewer than 8 bytes", edited_single(&good, |b| b.truncate(5)), |e| matches!(e, BadHeader { .. })),
        (
            "tensor offsets adding up past usize",
            raw_file(&offsets_past_usize, 0),
            |e| matches!(e, BadHeader { why, .. } if why.contains("past")),
        ),
        (
            "an index pointing at a missing shard",
            sharded_index(all_in("model-00009-of-00009.safetensors")),
            |e| matches!(e, Io { path, .. } if ends_with(path, "model-00009-of-00009.safetensors")),
        ),
        (
            "an index pointing outside the folder",
            sharded_index(all_in("../model-00001-of-00002.safetensors")),
            |e| matches!(e, BadIndex { why, .. } if why.contains("..")),
        ),
        ("an index pointing at an absolute path", sharded_index(all_in("/etc/passwd")), |e| {
            matches!(e, BadIndex { .. })
        }),
        (
            "an index naming a shard that lacks the tensor",
            sharded_index(all_in("model-00001-of-00002.safetensors")),
            |e| matches!(e, BadIndex { why, .. } if why.contains("does not hold")),
        ),
        (
            "an index that is not JSON",
            {
                let dir = write_sharded(&good, 2);
                std::fs::write(dir.file("model.safetensors.index.json"), "{weight_map").expect("write");
                dir
            },
            |e| matches!(e, BadIndex { .. }),
        ),
        ("an index without weight_map", sharded_index(json!(null)), |e| matches!(e, BadIndex { .. })),
        (
            "a missing tensor",
            write_single(&without(&good, "model.layers.1.linear_attn.A_log"), Dtype::F32),
            |e| matches!(e, MissingTensor { tensor, hf, .. } if tensor == "blk.1.ssm_a" && hf == "model.layers.1.linear_attn.A_log"),
        ),
        (
            "a missing head",
            write_single(&without(&good, "lm_head.weight"), Dtype::F32),
            |e| matches!(e, MissingTensor { tensor, .. } if tensor == "output.weight"),
        ),
        (
            "a conv weight without its middle axis",
            write_single(&reshaped(&good, "model.layers.1.linear_attn.conv1d.weight", &[c, k]), Dtype::F32),
            |e| {
                matches!(e, ShapeMismatch { tensor, expected, found, .. }
                if tensor == "blk.1.ssm_conv1d.weight" && *expected == [80, 1, 4] && *found == [80, 4])
            },
        ),
        (
            "q_proj without its output gate",
            write_single(&reshaped(&good, "model.layers.0.self_attn.q_proj.weight", &[4 * 32, 64]), Dtype::F32),
            |e| matches!(e, ShapeMismatch { hf, .. } if hf == "model.layers.0.self_attn.q_proj.weight"),
        ),
        (
            "an attention bias",
            write_single(&with_extra(&good, "model.layers.0.self_attn.q_proj.bias", &[256]), Dtype::F32),
            |e| matches!(e, UnexpectedTensor { hf, .. } if hf == "model.layers.0.self_attn.q_proj.bias"),
        ),
        (
            "a layer the spec does not have",
            write_single(&with_extra(&good, "model.layers.4.input_layernorm.weight", &[64]), Dtype::F32),
            |e| matches!(e, UnexpectedTensor { hf, why, .. } if hf == "model.layers.4.input_layernorm.weight" && why.contains("blk.4")),
        ),
        (
            "Gated-DeltaNet weights on a layer the spec says is attention",
            write_single(&with_extra(&good, "model.layers.0.linear_attn.A_log", &[4]), Dtype::F32),
            |e| matches!(e, UnexpectedTensor { hf, .. } if hf == "model.layers.0.linear_attn.A_log"),
        ),
        (
            "a tensor under both prefixes",
            write_single(&with_extra(&good, "model.language_model.norm.weight", &[64]), Dtype::F32),
            |e| matches!(e, DuplicateTensor { tensor, .. } if tensor == "output_norm.weight"),
        ),
        (
            "F64 weights",
            write_single(&good, Dtype::F64),
            |e| matches!(e, UnsupportedDtype { dtype, .. } if dtype == "F64"),
        ),
    ];
    for (what, dir, refusal) in cases {
        match checkpoint_from_hf_folder(dir.path(), &spec) {
            Ok(_) => panic!("{what}: loaded"),
            Err(e) => assert!(refusal(&e), "{what}: refused with the wrong error: {e:?}"),
        }
    }
}

#[test]
fn a_head_with_tied_embeddings_is_refused() {
    let untied = presets::tiny();
    let tied = ModelSpec { tied_embeddings: true, ..untied.clone() };
    let dir = write_single(&hf_model(&untied, "model."), Dtype::F32);
    let e = checkpoint_from_hf_folder(dir.path(), &tied).expect_err("a head the spec does not have");
    assert!(matches!(&e, LoadError::UnexpectedTensor { hf, .. } if hf == "lm_head.weight"), "{e:?}");
}

#[test]
fn folder_errors_name_config_json() {
    let spec = presets::tiny();
    let no_config = write_single(&hf_model(&spec, "model."), Dtype::F32);
    let e = load_hf_folder(no_config.path()).expect_err("no config.json");
    assert!(matches!(&e, LoadError::Io { path, .. } if ends_with(path, "config.json")), "{e:?}");
    std::fs::write(no_config.file("config.json"), r#"{"model_type": "bloom"}"#).expect("write");
    let e = load_hf_folder(no_config.path()).expect_err("bloom");
    assert!(matches!(&e, LoadError::Config { path, .. } if ends_with(path, "config.json")), "{e:?}");
    assert!(e.to_string().contains("bloom"), "{e}");
    // A family the config reader knows but whose checkpoints have other conventions.
    std::fs::write(no_config.file("config.json"), r#"{"model_type": "llama"}"#).expect("write");
    let e = load_hf_folder(no_config.path()).expect_err("llama");
    assert!(matches!(&e, LoadError::NoLoader { path, family: "llama" } if ends_with(path, "config.json")), "{e:?}");
}

#[test]
fn error_messages_name_the_file_and_tensor() {
    let spec = presets::tiny();
    let good = hf_model(&spec, "model.");
    let dir = write_single(&good, Dtype::F64);
    let message = checkpoint_from_hf_folder(dir.path(), &spec).expect_err("F64").to_string();
    assert!(message.contains("model.safetensors") && message.contains("F64"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// No input panics.

/// A model small enough that a proptest can write it hundreds of times.
fn micro() -> ModelSpec {
    let mut s = presets::tiny();
    s.name = "micro".into();
    (s.hidden, s.intermediate, s.vocab) = (4, 4, 3);
    s.layers = vec![Mixer::DeltaNet, Mixer::Attention];
    (s.attention.heads, s.attention.kv_heads, s.attention.head_dim, s.attention.rotary_dims) = (2, 1, 4, 2);
    s.delta_net = DeltaNetSpec { key_heads: 1, value_heads: 2, key_dim: 2, value_dim: 2, conv_kernel: 2 };
    s
}

fn micro_bytes() -> Vec<u8> {
    let tensors = hf_model(&micro(), "model.");
    let with_dtype: Vec<(&HfTensor, Dtype)> = tensors.iter().map(|t| (t, Dtype::F32)).collect();
    safetensors_bytes(&with_dtype)
}

#[test]
fn the_micro_model_loads() {
    let dir = Folder::new();
    std::fs::write(dir.file("model.safetensors"), micro_bytes()).expect("write");
    load(&dir, &micro());
}

#[test]
fn a_weight_file_held_in_memory_reads_as_the_loader_reads_it_from_a_folder() {
    let bytes = micro_bytes();
    let mut want = hf_model(&micro(), "model.");
    want.sort_by(|a, b| a.name.cmp(&b.name));
    let got = tensors_from_bytes(Path::new("micro.safetensors"), &bytes).expect("a valid file");
    assert_eq!(got.len(), want.len());
    for ((name, t), w) in got.iter().zip(&want) {
        assert_eq!((name, &t.shape, &t.to_f32().expect("decodes")), (&w.name, &w.shape, &w.data));
    }
    let cut = &bytes[..bytes.len() - 10];
    let refused = tensors_from_bytes(Path::new("cut.safetensors"), cut).expect_err("a truncated file");
    assert!(matches!(&refused, LoadError::BadHeader { path, .. } if ends_with(path, "cut.safetensors")), "{refused}");
    assert!(matches!(load_bytes(cut), Err(LoadError::BadHeader { .. })));
}

fn load_bytes(bytes: &[u8]) -> Result<Checkpoint, LoadError> {
    let dir = Folder::new();
    std::fs::write(dir.file("model.safetensors"), bytes).expect("write");
    checkpoint_from_hf_folder(dir.path(), &micro())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = load_bytes(&bytes);
    }

    #[test]
    fn random_headers_never_panic(header in r#"\{("[a-z.]{1,6}":\{"dtype":"(F32|U8|BF16)","shape":\[[0-9]{1,20}(,[0-9]{1,3})?\],"data_offsets":\[[0-9]{1,20},[0-9]{1,20}\]\},?){0,3}\}"#, data in 0usize..64) {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.resize(bytes.len() + data, 0);
        let _ = load_bytes(&bytes);
    }

    #[test]
    fn edited_good_files_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = micro_bytes();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let _ = load_bytes(&bytes);
    }
}
