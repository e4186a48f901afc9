//! GGUF files made by llama.cpp's own converter (`reference/make_converter_fixtures.py`): read as
//! llama.cpp reads them, and refused by name when their metadata lies.
//!
//! The converter keeps a checkpoint's multi-token-prediction block by default, as `blk.4` of a
//! 4-layer model with `qwen35.block_count = 5` and `qwen35.nextn_predict_layers = 1`. The decoder is
//! the first 4 blocks; the MTP block is skipped and named as skipped. Every converter fixture, at
//! F32, BF16 and Q8_0, with and without the MTP block, runs within 1e-4 of transformers (run on the
//! weights the file holds) through both interpreters, and `check` finds them agreeing. A file whose
//! metadata and tensors disagree is refused, by the same error, by every reader path.

use std::path::PathBuf;
use std::process::{Command, Output};

use stepcheck::check::{Verdict, compare};
use stepcheck::engine::{EngineRunner, Numerics, lower::lower_graph, shim::EngineShim};
use stepcheck::formats::gguf::{Array, Gguf, Value};

#[allow(dead_code)]
#[path = "common/gguf_writer.rs"]
mod gguf_writer;
use gguf_writer::{GgufWriter, TensorEntry};
use stepcheck::interp::Runner;
use stepcheck::model::author::decode_step;
use stepcheck::model::gguf::{LoadError, MAX_SIZE, MtpBlocks, read_gguf};
use stepcheck::model::spec::Mixer;
use stepcheck::model::{Checkpoint, ModelSpec};

/// The tolerance the issue sets: absolute, per logit, at every step.
const TOLERANCE: f64 = 1e-4;

/// Every converter fixture: (folder, whether it holds an MTP block).
const FIXTURES: [(&str, bool); 6] = [
    ("converter-f32", false),
    ("converter-f32-mtp", true),
    ("converter-bf16", false),
    ("converter-bf16-mtp", true),
    ("converter-q8_0", false),
    ("converter-q8_0-mtp", true),
];

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(name)
}

fn gguf_path(name: &str) -> PathBuf {
    dir(name).join("model.gguf")
}

fn json(path: PathBuf) -> serde_json::Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("json")
}

/// transformers' tokens and logits for a fixture.
fn golden(name: &str) -> (Vec<u32>, Vec<Vec<f64>>) {
    let v = json(dir(name).join("golden.json"));
    let tokens = v["tokens"].as_array().expect("tokens").iter().filter_map(|t| t.as_u64()).map(|t| t as u32).collect();
    let logits = v["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|r| r.as_array().expect("row").iter().filter_map(|x| x.as_f64()).collect())
        .collect();
    (tokens, logits)
}

/// The largest |difference| between `rows` and transformers' logits.
fn worst(rows: &[Vec<f64>], want: &[Vec<f64>]) -> f64 {
    assert_eq!(rows.len(), want.len(), "one row per step");
    rows.iter()
        .zip(want)
        .flat_map(|(r, w)| {
            assert_eq!(r.len(), w.len(), "one logit per vocab entry");
            r.iter().zip(w).map(|(a, b)| (a - b).abs())
        })
        .fold(0.0, f64::max)
}

/// The logits of the reference interpreter and of the engine, step by step.
fn both_interpreters(spec: &ModelSpec, ckpt: &Checkpoint, tokens: &[u32]) -> [Vec<Vec<f64>>; 2] {
    let graph = decode_step(spec).expect("author");
    let mut reference = Runner::new(&graph, ckpt).expect("reference");
    let program = lower_graph(&EngineShim::default().prepare(&graph), Numerics::F32).expect("lowers");
    let mut engine = EngineRunner::new(&program, ckpt, tokens.len()).expect("engine");
    let r = tokens.iter().map(|&t| reference.step(t).expect("reference step")).collect();
    let e = tokens.iter().map(|&t| engine.step(t).expect("engine step").into_iter().map(f64::from).collect()).collect();
    [r, e]
}

#[test]
fn every_converter_file_runs_within_the_tolerance_of_transformers_through_both_interpreters() {
    for (name, _) in FIXTURES {
        let (tokens, want) = golden(name);
        let (spec, ckpt) = stepcheck::model::gguf::load_gguf(gguf_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (interp, rows) in ["reference", "engine"].iter().zip(both_interpreters(&spec, &ckpt, &tokens)) {
            let d = worst(&rows, &want);
            eprintln!("{name} {interp}: max |diff| from transformers {d:.2e}");
            assert!(d <= TOLERANCE, "{name} through {interp}: max |diff| {d:e}");
        }
    }
}

#[test]
fn the_interpreters_agree_on_every_converter_file() {
    for (name, _) in FIXTURES {
        let (tokens, _) = golden(name);
        let (spec, ckpt) = stepcheck::model::gguf::load_gguf(gguf_path(name)).expect("loads");
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("author"));
        let program = lower_graph(&graph, Numerics::F32).expect("lowers");
        let v = compare(&graph, &program, &ckpt, &tokens).expect("compares");
        assert!(matches!(v, Verdict::Agree { .. }), "{name}: {v}");
    }
}

#[test]
fn the_mtp_block_is_present_skipped_and_not_a_decoder_layer() {
    let (d, a) = (Mixer::DeltaNet, Mixer::Attention);
    for (name, has_mtp) in FIXTURES {
        let bytes = std::fs::read(gguf_path(name)).expect("read");
        let model = read_gguf(Gguf::parse(&bytes).expect("parses").info()).expect("reads");
        assert_eq!(model.spec.layers, [d, d, d, a], "{name}: the decoder is 4 layers, LLLF");
        // What the converter wrote, as gguf-py read it back: the blk.4 tensors and their sizes.
        let notes = json(dir(name).join("notes.json"));
        let blk4: Vec<&serde_json::Value> = notes["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("blk.4.")))
            .collect();
        let values: usize = blk4
            .iter()
            .map(|t| {
                t["ne"].as_array().expect("ne").iter().map(|n| n.as_u64().expect("dim") as usize).product::<usize>()
            })
            .sum();
        let mtp = has_mtp.then_some(MtpBlocks { arch: "qwen35", first: 4, count: 1, tensors: blk4.len(), values });
        assert_eq!(model.mtp, mtp, "{name}");
        assert_eq!(has_mtp, !blk4.is_empty(), "{name}: the converter wrote blk.4 iff the checkpoint has an MTP block");
        let (_, ckpt) = stepcheck::model::gguf::load_gguf(gguf_path(name)).expect("loads");
        assert!(ckpt.tensors.keys().all(|t| !t.starts_with("blk.4.")), "{name}: no MTP tensor is read");
    }
}

// ---------------------------------------------------------------------------------------------
// The command line.

fn stepcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_prints_transformers_logits_through_both_interpreters_and_names_the_skipped_block() {
    for (name, has_mtp) in FIXTURES {
        let (tokens, want) = golden(name);
        let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
        let path = gguf_path(name);
        for interp in ["engine", "reference"] {
            let o = stepcheck(&[
                "run",
                path.to_str().expect("utf-8"),
                "--tokens",
                &list.join(","),
                "--json",
                "--interp",
                interp,
            ]);
            assert!(o.status.success(), "{name} {interp}: {}", text(&o.stderr));
            let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).expect("one JSON object");
            let rows: Vec<Vec<f64>> = v["logits"]
                .as_array()
                .expect("logits")
                .iter()
                .map(|r| r.as_array().expect("row").iter().filter_map(|x| x.as_f64()).collect())
                .collect();
            let d = worst(&rows, &want);
            assert!(d <= TOLERANCE, "{name} run --interp {interp}: max |diff| {d:e}");
            let stderr = text(&o.stderr);
            assert_eq!(stderr.contains("MTP head present and skipped: blk.4"), has_mtp, "{name}: {stderr}");
            assert!(stderr.contains("tensor types: "), "{name}: the type mix on stderr: {stderr}");
        }
    }
}

#[test]
fn check_finds_the_interpreters_agreeing_on_every_converter_file() {
    for (name, _) in FIXTURES {
        let path = gguf_path(name);
        let o = stepcheck(&["check", path.to_str().expect("utf-8"), "--steps", "10"]);
        assert!(o.status.success(), "{name}: {}{}", text(&o.stdout), text(&o.stderr));
        assert!(text(&o.stdout).contains("agree"), "{name}: {}", text(&o.stdout));
    }
}

#[test]
fn verdict_says_the_mtp_block_is_present_and_skipped_and_lists_the_type_mix() {
    // (fixture, the type mix gguf-py reads in the file, whether it has the MTP block)
    let cases = [
        ("converter-f32-mtp", "F32 ×71", true),
        ("converter-bf16", "BF16 ×33, F32 ×23", false),
        ("converter-q8_0-mtp", "Q8_0 ×41, F32 ×30", true),
    ];
    for (name, mix, has_mtp) in cases {
        let notes = json(dir(name).join("notes.json"));
        let count = |ty: &str| notes["tensors"].as_array().expect("tensors").iter().filter(|t| t["type"] == ty).count();
        let from_notes: Vec<String> = mix
            .split(", ")
            .map(|p| p.split(" ×").next().expect("type"))
            .map(|ty| format!("{ty} ×{}", count(ty)))
            .collect();
        assert_eq!(from_notes.join(", "), mix, "{name}: the expectation is what gguf-py counts");
        let path = gguf_path(name);
        let o = stepcheck(&["verdict", path.to_str().expect("utf-8")]);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}{}", text(&o.stderr));
        assert!(out.contains("decoder: 4 layers"), "{name}: {out}");
        assert!(out.contains(&format!("tensor types: {mix}")), "{name}: {out}");
        assert_eq!(
            out.contains("MTP head present and skipped: blk.4 (`qwen35.nextn_predict_layers` = 1)"),
            has_mtp,
            "{name}: {out}"
        );
        let o = stepcheck(&["verdict", path.to_str().expect("utf-8"), "--json"]);
        let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).expect("json");
        assert_eq!(v["gguf"]["decoder_layers"], 4, "{name}");
        assert_eq!(v["gguf"]["mtp"]["skipped"].as_bool(), has_mtp.then_some(true), "{name}: {v}");
    }
}

// ---------------------------------------------------------------------------------------------
// Lying files: a converter fixture with its metadata or tensors edited.

/// An edit of a GGUF file.
#[derive(Clone, Debug)]
enum Edit {
    /// Set (or add) a metadata key.
    Set(&'static str, Value),
    /// Remove a metadata key.
    Unset(&'static str),
    /// Add a tensor holding a copy of another's data (same shape and type).
    CopyTensor { from: &'static str, to: &'static str },
    /// Remove a tensor.
    Drop(&'static str),
}

/// The bytes of the fixture `name` with `edits` applied: the metadata and tensors it holds, in its
/// order, written again as GGUF v3 with the file's alignment. Tensor data is copied byte for byte.
fn edited(name: &str, edits: &[Edit]) -> Vec<u8> {
    let bytes = std::fs::read(gguf_path(name)).expect("read");
    let g = Gguf::parse(&bytes).expect("parses");
    let info = g.info();
    let mut kvs: Vec<(String, Value)> = info.metadata_entries().to_vec();
    let data_of = |t: &stepcheck::formats::gguf::TensorInfo| {
        let start = (info.data_offset + t.offset) as usize;
        bytes[start..start + t.n_bytes.expect("known type") as usize].to_vec()
    };
    let mut tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)> =
        info.tensors().iter().map(|t| (t.name.clone(), t.ne.clone(), t.ggml_type.0, data_of(t))).collect();
    for e in edits {
        match e {
            Edit::Set(k, v) => match kvs.iter_mut().find(|(key, _)| key == k) {
                Some(kv) => kv.1 = v.clone(),
                None => kvs.push(((*k).into(), v.clone())),
            },
            Edit::Unset(k) => kvs.retain(|(key, _)| key != k),
            Edit::CopyTensor { from, to } => {
                let t = tensors.iter().find(|t| t.0 == *from).cloned().expect("tensor to copy");
                tensors.push(((*to).into(), t.1, t.2, t.3));
            }
            Edit::Drop(t) => tensors.retain(|x| x.0 != *t),
        }
    }
    write_gguf(&kvs, &tensors, info.alignment)
}

/// A GGUF v3 file of `kvs` and `tensors` (name, `ne`, type id, data), each tensor's data at an
/// offset aligned to `alignment` (the tests' shared writer).
fn write_gguf(kvs: &[(String, Value)], tensors: &[(String, Vec<u64>, u32, Vec<u8>)], alignment: u64) -> Vec<u8> {
    let entries = tensors
        .iter()
        .map(|(name, ne, ggml_type, data)| TensorEntry {
            name: name.clone(),
            ne: ne.clone(),
            ggml_type: *ggml_type,
            data: data.clone(),
        })
        .collect();
    GgufWriter { version: 3, kvs: kvs.to_vec(), tensors: entries, alignment }.to_bytes()
}

/// Why an edited file is refused: the error it must be, and the words its message must hold (the
/// key, the tensor, the value or the limit).
type Refusal = (fn(&LoadError) -> bool, Vec<&'static str>);

/// A lying file: what it is, the fixture it edits, the edits, the refusal.
type Lie = (&'static str, &'static str, Vec<Edit>, Refusal);

fn lies() -> Vec<Lie> {
    use Edit::{CopyTensor, Drop, Set, Unset};
    let u = Value::U32;
    let (mtp, plain) = ("converter-f32-mtp", "converter-f32");
    let limit: &'static str = Box::leak(MAX_SIZE.to_string().into_boxed_str());
    let bools = |b: &[bool]| Value::Array(Array::Bool(b.to_vec()));
    let disagrees = |e: &LoadError| matches!(e, LoadError::TensorDisagrees { .. });
    let bad_value = |e: &LoadError| matches!(e, LoadError::BadValue { .. });
    vec![
        (
            "nextn_predict_layers larger than block_count",
            mtp,
            vec![Set("qwen35.nextn_predict_layers", u(6))],
            (
                |e| matches!(e, LoadError::NextnExceedsBlocks { nextn: 6, blocks: 5, .. }),
                vec!["nextn_predict_layers", "6", "5 blocks"],
            ),
        ),
        (
            "an MTP block the metadata does not declare: blk.4 read as a decoder layer",
            mtp,
            vec![Unset("qwen35.nextn_predict_layers")],
            (
                |e| matches!(e, LoadError::MtpTensorInDecoderLayer { block: 4, decoder_layers: 5, .. }),
                vec!["blk.4.nextn.", "decoder layer 4"],
            ),
        ),
        (
            "an MTP-only tensor in a decoder layer",
            mtp,
            vec![CopyTensor { from: "blk.4.nextn.enorm.weight", to: "blk.2.nextn.enorm.weight" }],
            (
                |e| matches!(e, LoadError::MtpTensorInDecoderLayer { block: 2, decoder_layers: 4, .. }),
                vec!["blk.2.nextn.enorm.weight"],
            ),
        ),
        (
            "an MTP block without its eh_proj",
            mtp,
            vec![Drop("blk.4.nextn.eh_proj.weight")],
            (|e| matches!(e, LoadError::MtpBlockIncomplete { block: 4, .. }), vec!["blk.4.nextn.eh_proj.weight"]),
        ),
        (
            "a Gated-DeltaNet tensor in the MTP block",
            mtp,
            vec![CopyTensor { from: "blk.0.ssm_a", to: "blk.4.ssm_a" }],
            (|e| matches!(e, LoadError::NotAnMtpTensor { block: 4, .. }), vec!["blk.4.ssm_a"]),
        ),
        (
            "blocks beyond block_count",
            plain,
            vec![Set("qwen35.block_count", u(3)), Unset("qwen35.attention.recurrent_layers")],
            (|e| matches!(e, LoadError::BlockBeyondCount { block: 3, blocks: 3, .. }), vec!["blk.3.", "block_count"]),
        ),
        (
            "a block_count above the blocks present",
            plain,
            vec![Set("qwen35.block_count", u(5)), Unset("qwen35.attention.recurrent_layers")],
            (|e| matches!(e, LoadError::LayerKind { layer: 4, .. }), vec!["layer 4", "neither"]),
        ),
        (
            "recurrent_layers calling the attention layer recurrent",
            mtp,
            vec![Set("qwen35.attention.recurrent_layers", bools(&[true, true, true, true, false]))],
            (bad_value, vec!["qwen35.attention.recurrent_layers", "layer 3"]),
        ),
        (
            "recurrent_layers calling the MTP block recurrent",
            mtp,
            vec![Set("qwen35.attention.recurrent_layers", bools(&[true, true, true, false, true]))],
            (bad_value, vec!["qwen35.attention.recurrent_layers", "MTP block 4"]),
        ),
        (
            "feed_forward_length 1",
            plain,
            vec![Set("qwen35.feed_forward_length", u(1))],
            (disagrees, vec!["qwen35.feed_forward_length", "= 1", "blk.0.ffn_down.weight", "[32, 64]"]),
        ),
        (
            "feed_forward_length 95",
            plain,
            vec![Set("qwen35.feed_forward_length", u(95))],
            (disagrees, vec!["qwen35.feed_forward_length", "= 95"]),
        ),
        (
            "feed_forward_length 128",
            mtp,
            vec![Set("qwen35.feed_forward_length", u(128))],
            (disagrees, vec!["qwen35.feed_forward_length", "= 128"]),
        ),
        (
            "feed_forward_length 4e9",
            plain,
            vec![Set("qwen35.feed_forward_length", u(4_000_000_000))],
            (bad_value, vec!["qwen35.feed_forward_length", "4000000000", limit]),
        ),
        (
            "embedding_length 33",
            plain,
            vec![Set("qwen35.embedding_length", u(33))],
            (disagrees, vec!["qwen35.embedding_length", "= 33"]),
        ),
        (
            "embedding_length 4e9",
            plain,
            vec![Set("qwen35.embedding_length", u(4_000_000_000))],
            (bad_value, vec!["qwen35.embedding_length", "4000000000", limit]),
        ),
        (
            "vocab_size 4e9",
            plain,
            vec![Set("qwen35.vocab_size", u(4_000_000_000))],
            (bad_value, vec!["qwen35.vocab_size", "4000000000", limit]),
        ),
        (
            "vocab_size 96, the tokenizer's 97 tokens",
            plain,
            vec![Set("qwen35.vocab_size", u(96))],
            (bad_value, vec!["tokenizer.ggml.tokens", "97 tokens", "96"]),
        ),
        (
            "vocab_size 96 and no tokenizer: the embedding's rows say 97",
            plain,
            vec![Set("qwen35.vocab_size", u(96)), Unset("tokenizer.ggml.tokens")],
            (disagrees, vec!["token_embd.weight", "qwen35.vocab_size", "= 96"]),
        ),
        (
            "head_count 8",
            plain,
            vec![Set("qwen35.attention.head_count", u(8))],
            (disagrees, vec!["blk.3.attn_output.weight", "qwen35.attention.head_count"]),
        ),
        (
            "head_count_kv 1",
            plain,
            vec![Set("qwen35.attention.head_count_kv", u(1))],
            (disagrees, vec!["qwen35.attention.head_count_kv"]),
        ),
        (
            "key_length and value_length 8",
            plain,
            vec![Set("qwen35.attention.key_length", u(8)), Set("qwen35.attention.value_length", u(8))],
            (disagrees, vec!["qwen35.attention.key_length"]),
        ),
        (
            "ssm.state_size 4",
            plain,
            vec![Set("qwen35.ssm.state_size", u(4))],
            (disagrees, vec!["blk.0.ssm_conv1d.weight", "qwen35.ssm.state_size"]),
        ),
        (
            "ssm.inner_size 64",
            plain,
            vec![Set("qwen35.ssm.inner_size", u(64))],
            (disagrees, vec!["qwen35.ssm.inner_size"]),
        ),
        (
            "an unknown tensor in a decoder layer",
            plain,
            vec![CopyTensor { from: "blk.0.ssm_a", to: "blk.0.ffn_gate.bias" }],
            (
                |e| matches!(e, LoadError::UnexpectedTensor { tensor, .. } if tensor == "blk.0.ffn_gate.bias"),
                vec!["blk.0.ffn_gate.bias"],
            ),
        ),
        (
            "an unknown tensor outside the blocks",
            plain,
            vec![CopyTensor { from: "output_norm.weight", to: "rope_freqs.weight" }],
            (
                |e| matches!(e, LoadError::UnexpectedTensor { tensor, .. } if tensor == "rope_freqs.weight"),
                vec!["rope_freqs.weight"],
            ),
        ),
        (
            "an attention tensor in a Gated-DeltaNet layer",
            plain,
            vec![CopyTensor { from: "blk.3.attn_q_norm.weight", to: "blk.1.attn_q_norm.weight" }],
            (|e| matches!(e, LoadError::UnexpectedTensor { .. }), vec!["blk.1.attn_q_norm.weight", "Gated-DeltaNet"]),
        ),
        (
            "a missing tensor",
            plain,
            vec![Drop("blk.2.ssm_norm.weight")],
            (|e| matches!(e, LoadError::MissingTensor { .. }), vec!["blk.2.ssm_norm.weight"]),
        ),
        (
            "a key of the architecture the reader does not know",
            plain,
            vec![Set("qwen35.expert_count", u(8))],
            (
                |e| matches!(e, LoadError::UnknownKey { key } if key == "qwen35.expert_count"),
                vec!["qwen35.expert_count"],
            ),
        ),
        (
            "scaled RoPE",
            plain,
            vec![Set("qwen35.rope.scaling.type", Value::String("yarn".into()))],
            (bad_value, vec!["qwen35.rope.scaling.type", "yarn"]),
        ),
        (
            "a non-causal model",
            plain,
            vec![Set("qwen35.attention.causal", Value::Bool(false))],
            (bad_value, vec!["qwen35.attention.causal"]),
        ),
        (
            "another architecture",
            plain,
            vec![Set("general.architecture", Value::String("qwen3next".into()))],
            (|e| matches!(e, LoadError::UnsupportedArchitecture { found } if found == "qwen3next"), vec!["qwen3next"]),
        ),
        (
            "a dense file labelled qwen35moe",
            plain,
            vec![Set("general.architecture", Value::String("qwen35moe".into()))],
            (
                |e| matches!(e, LoadError::MissingKey { key } if key == "qwen35moe.block_count"),
                vec!["qwen35moe.block_count"],
            ),
        ),
        (
            "an MoE file whose expert width lies",
            "converter-moe",
            vec![Set("qwen35moe.expert_feed_forward_length", u(17))],
            (disagrees, vec!["qwen35moe.expert_feed_forward_length", "= 17", "_exps.weight"]),
        ),
    ]
}

/// Writes `bytes` to a temporary `.gguf` file named after `tag`, for the paths that read files.
fn temp_gguf(tag: &str, bytes: &[u8]) -> PathBuf {
    let safe: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let path = std::env::temp_dir().join(format!("stepcheck-lie-{}-{safe}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("write temp file");
    path
}

#[test]
fn the_unedited_fixtures_written_again_are_read_as_before() {
    // The editor itself changes nothing: with no edit, every fixture reads to the same model.
    for (name, _) in FIXTURES {
        let bytes = edited(name, &[]);
        let original = std::fs::read(gguf_path(name)).expect("read");
        let info = |b: &[u8]| read_gguf(Gguf::parse(b).expect("parses").info()).expect("reads");
        assert_eq!(info(&bytes), info(&original), "{name}");
    }
}

#[test]
fn every_lying_file_is_refused_by_name_the_same_way_by_every_reader() {
    for (what, name, edits, (expected, words)) in lies() {
        let bytes = edited(name, &edits);
        let e = read_gguf(Gguf::parse(&bytes).expect("parses").info()).expect_err(what);
        assert!(expected(&e), "{what}: refused with the wrong error: {e:?}");
        let message = e.to_string();
        for w in &words {
            assert!(message.contains(w), "{what}: the message does not say `{w}`: {message}");
        }
        // The loader that run, check, graph and lower use refuses it with the same error.
        let path = temp_gguf(what, &bytes);
        let loaded = stepcheck::model::gguf::load_gguf(&path);
        std::fs::remove_file(&path).ok();
        assert_eq!(loaded.expect_err(what).to_string(), message, "{what}: the loader and verdict disagree");
    }
}

#[test]
fn every_command_refuses_a_lying_file_with_the_same_error_line() {
    let (what, name, edits, _) = lies().into_iter().find(|l| l.0 == "feed_forward_length 95").expect("case");
    let path = temp_gguf(what, &edited(name, &edits));
    let p = path.to_str().expect("utf-8");
    let commands: [&[&str]; 6] = [
        &["verdict", p],
        &["run", p, "--tokens", "1"],
        &["run", p, "--tokens", "1", "--interp", "reference"],
        &["check", p],
        &["lower", p],
        &["graph", p],
    ];
    let outputs: Vec<(String, Output)> = commands.iter().map(|c| (c.join(" "), stepcheck(c))).collect();
    std::fs::remove_file(&path).ok();
    let error_line = |o: &Output| {
        let all = format!("{}\n{}", text(&o.stderr), text(&o.stdout));
        all.lines().find(|l| l.contains("qwen35.feed_forward_length")).map(str::to_owned)
    };
    for (command, o) in &outputs {
        assert_ne!(o.status.code(), Some(0), "`{command}` accepted a lying file");
        let line = error_line(o)
            .unwrap_or_else(|| panic!("`{command}` does not name the key: {}{}", text(&o.stdout), text(&o.stderr)));
        assert!(line.contains("blk.0.ffn_down.weight") && line.contains("= 95"), "`{command}`: {line}");
    }
}

// ---------------------------------------------------------------------------------------------
// Qwen3.5-MoE as the converter writes it (architecture `qwen35moe`): a refused family, judged.

#[test]
fn a_converter_made_moe_file_is_judged_refused_for_its_experts_and_its_step_matches_transformers() {
    let path = gguf_path("converter-moe");
    let model = read_gguf(Gguf::parse(&std::fs::read(&path).expect("read")).expect("parses").info()).expect("reads");
    let experts = model.spec.constructs.experts.as_ref().expect("experts");
    assert_eq!((experts.count, experts.top_k, experts.intermediate, experts.shared_intermediate), (4, 2, 16, Some(24)));
    // verdict: refused (exit 1) by the construct, as for the family's config.json.
    let o = stepcheck(&["verdict", path.to_str().expect("utf-8"), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).expect("json");
    let config = stepcheck(&["verdict", "reference/fixtures/refused/qwen3_5_moe_text/config.json", "--json"]);
    let c: serde_json::Value = serde_json::from_str(text(&config.stdout).trim()).expect("json");
    assert_eq!(
        (&v["error"], &v["reasons"]),
        (&c["error"], &c["reasons"]),
        "the GGUF and the config.json get one verdict"
    );
    // The engine refuses it by name; the reference interpreter runs it, and matches transformers
    // (the goldens of the safetensors the file was converted from).
    let o = stepcheck(&["run", path.to_str().expect("utf-8"), "--tokens", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("expert"), "{}", text(&o.stderr));
    let (spec, ckpt) = stepcheck::model::gguf::load_gguf(&path).expect("loads");
    let v = json(dir("refused/qwen3_5_moe_text").join("golden.json"));
    let tokens: Vec<u32> =
        v["tokens"].as_array().expect("tokens").iter().filter_map(|t| t.as_u64()).map(|t| t as u32).collect();
    let want: Vec<Vec<f64>> = v["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|r| r.as_array().expect("row").iter().filter_map(|x| x.as_f64()).collect())
        .collect();
    let graph = decode_step(&spec).expect("author");
    let mut reference = Runner::new(&graph, &ckpt).expect("reference");
    let rows: Vec<Vec<f64>> = tokens.iter().map(|&t| reference.step(t).expect("step")).collect();
    let d = worst(&rows, &want);
    eprintln!("converter-moe reference: max |diff| from transformers {d:.2e}");
    assert!(d <= TOLERANCE, "max |diff| {d:e}");
}
