//! Bad inputs, read by the library: each gets a typed error that names the file, the field or
//! tensor, the value and the limit, before anything is allocated from it; and the Python-JSON
//! configs transformers writes are read. docs/SOUNDNESS.md, "Bad inputs", is the table of these.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stepcheck::admission::admit_config_json;
use stepcheck::engine::Numerics;
use stepcheck::r#gen::file::CaseFile;
use stepcheck::limits::{MAX_CASE_VALUES, MAX_STEPS, check_spec};
use stepcheck::model::config::{MAX_LAYERS, MAX_SIZE, read_config_json};
use stepcheck::model::hf::{self, MAX_CONFIG_BYTES, tensors_from_bytes};
use stepcheck::model::presets;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

// ---- The boundary: a case file read. ----

/// The error `CaseFile::parse` gives `text`, as the user reads it.
fn case_error(text: &str) -> String {
    match CaseFile::parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// A case file of the `tiny` preset with each `(field, value)` of its spec set, then `tail`.
fn tiny_case(fields: &[(&str, serde_json::Value)], tail: &str) -> String {
    let mut spec = serde_json::to_value(presets::preset("tiny").expect("tiny")).expect("json");
    for (field, value) in fields {
        let mut at = &mut spec;
        for key in field.split('.') {
            at = at.get_mut(key).unwrap_or_else(|| panic!("no field {field}"));
        }
        *at = value.clone();
    }
    format!("; outcome: accepted\nspec {spec}\n{tail}")
}

#[test]
fn a_case_file_size_over_its_limit_is_refused_with_the_field_the_value_and_the_limit() {
    // (fields set, what the error says)
    let size = MAX_SIZE;
    let big = |n: u64| serde_json::Value::from(n);
    let cases: Vec<(Vec<(&str, serde_json::Value)>, String)> = vec![
        (vec![("vocab", big(1_000_000_000))], format!("field `vocab` is 1000000000, the limit is {size}")),
        (
            vec![("intermediate", big(10_000_000_000))],
            format!("field `intermediate` is 10000000000, the limit is {size}"),
        ),
        (vec![("hidden", big(1 << 40))], format!("field `hidden` is {}, the limit is {size}", 1u64 << 40)),
        (vec![("attention.head_dim", big(1 << 30))], format!("field `attention.head_dim` is {}", 1u64 << 30)),
        (vec![("delta_net.value_dim", big(1 << 25))], format!("field `delta_net.value_dim` is {}", 1u64 << 25)),
        // Each size under its limit, but a checkpoint of 2^20 · 2^20 values.
        (
            vec![("hidden", big(1 << 20)), ("vocab", big(1 << 20))],
            format!("the checkpoint (values, all tensors) is 2201700270888, the limit is {MAX_CASE_VALUES}"),
        ),
    ];
    for (fields, says) in cases {
        let e = case_error(&tiny_case(&fields, "seed 0\n"));
        assert!(e.contains(&says) && e.starts_with("line 2: the spec: "), "{fields:?}: {e}");
    }
    let e = case_error(&tiny_case(&[], "steps 1000000000000\n"));
    assert_eq!(e, format!("line 3: field `steps` is 1000000000000, the limit is {MAX_STEPS}"));
    assert!(
        case_error(&tiny_case(&[], "steps 99999999999999999999999999999999999999999\n"))
            .contains("is not a non-negative integer")
    );
}

#[test]
fn a_case_with_a_million_layers_is_refused_fast() {
    let layers = serde_json::Value::Array(vec!["DeltaNet".into(); 1_000_000]);
    let text = tiny_case(&[("layers", layers)], "seed 0\n");
    assert!(text.len() > 10_000_000);
    let t0 = Instant::now();
    let e = case_error(&text);
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
    assert!(e.contains(&format!("field `layers` (its length) is 1000000, the limit is {MAX_LAYERS}")), "{e}");
}

#[test]
fn every_preset_is_under_the_limits_of_a_spec() {
    for name in presets::PRESETS {
        let spec = presets::preset(name).expect("a preset");
        assert_eq!(check_spec(&spec, u128::MAX), Ok(()), "{name}");
    }
    assert_eq!(check_spec(&presets::preset("small").expect("small"), MAX_CASE_VALUES), Ok(()));
}

// ---- The boundary: a config.json read. ----

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(name)
}

/// The committed qwen35-c config (written by transformers) with `replace` applied to its text.
fn qwen35_config(replace: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string(fixture("qwen35-c/config.json")).expect("the fixture's config");
    for (from, to) in replace {
        assert!(text.contains(from), "no {from:?}");
        text = text.replacen(from, to, 1);
    }
    text
}

#[test]
fn pythons_non_finite_numbers_are_read_as_transformers_reads_them() {
    // A field no rule reads holds Infinity (hybrid Mamba configs' `time_step_limit`): judged as usual.
    let text =
        qwen35_config(&[("\"use_cache\": true", "\"use_cache\": true,\n  \"time_step_limit\": [0.0, Infinity]")]);
    let a = admit_config_json(&text, "qwen35-c", Numerics::F32).expect("judged");
    assert!(a.accepted(), "{:?}", a.names());
    let text = qwen35_config(&[("\"use_cache\": true", "\"use_cache\": true,\n  \"x\": [NaN, -Infinity, \"NaN\"]")]);
    assert!(admit_config_json(&text, "qwen35-c", Numerics::F32).expect("judged").accepted());
    // A hybrid Mamba family's config gets its constructs.
    let mamba2 = r#"{"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 64,
        "state_size": 16, "num_heads": 8, "head_dim": 64, "n_groups": 1, "expand": 2, "conv_kernel": 4,
        "layer_norm_epsilon": 1e-5, "time_step_limit": [0.0, Infinity], "time_step_floor": 1e-4}"#;
    let a = admit_config_json(mamba2, "mamba2", Numerics::F32).expect("judged");
    assert!(!a.accepted() && a.names().contains(&"Mamba2Mixer"), "{:?}", a.names());
    // A non-finite number where a size or a finite number belongs is named, as the number it is.
    let text = qwen35_config(&[("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": NaN")]);
    let e = admit_config_json(&text, "qwen35-c", Numerics::F32).expect_err("NaN eps").to_string();
    assert!(e.contains("NaN"), "{e}");
    let text = qwen35_config(&[("\"hidden_size\": 32", "\"hidden_size\": Infinity")]);
    let e = read_config_json(&text, "qwen35-c").expect_err("an infinite size").to_string();
    assert!(e.contains("`hidden_size`") && e.contains("the number Infinity"), "{e}");
    // Not valid even as Python's JSON: the error shows the line.
    let e = read_config_json("{\n  \"model_type\": Infinite\n}", "x").expect_err("bad").to_string();
    assert!(e.contains("line 2") && e.contains("Infinite"), "{e}");
}

#[test]
fn a_config_without_a_layer_or_with_a_zero_head_size_is_refused_by_its_field() {
    // (replacements, the field named, what the error must not say)
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 0")],
            "config field `num_hidden_layers`: expected at least 1 layer, found 0",
        ),
        (
            &[("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 0, \"layer_types\": []")],
            "config field `num_hidden_layers`: expected at least 1 layer, found 0",
        ),
        (
            &[("\"head_dim\": 8", "\"head_dim\": 0")],
            "config field `head_dim`: expected a head size of at least 1, found 0",
        ),
    ];
    for (replace, says) in cases {
        let e = read_config_json(&qwen35_config(replace), "qwen35-c").expect_err("refused").to_string();
        assert_eq!(&e, says);
        let e = admit_config_json(&qwen35_config(replace), "qwen35-c", Numerics::F32).expect_err("not judged");
        assert!(!e.to_string().contains("cannot share"), "{e}");
    }
}

#[test]
fn a_config_json_over_its_size_limit_is_refused_unread() {
    let dir = scratch("bad-big-config");
    let file = std::fs::File::create(dir.join("config.json")).expect("create");
    // A sparse file: its size is read, not its bytes.
    file.set_len(200 << 20).expect("set_len");
    let t0 = Instant::now();
    let e = hf::spec_of_hf_folder(&dir).expect_err("too large").to_string();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(
        e.contains("config.json: 209715200 bytes; the limit for it is") && e.contains(&MAX_CONFIG_BYTES.to_string()),
        "{e}"
    );
}

// ---- The boundary: safetensors read. ----

/// A safetensors header entry: name, dtype, shape and byte count.
type Entry<'a> = (&'a str, &'a str, &'a [usize], usize);

/// A safetensors file of `entries`, zero-filled.
fn safetensors(entries: &[Entry]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut at = 0;
    for (name, dtype, shape, bytes) in entries {
        header.insert(
            name.to_string(),
            serde_json::json!({ "dtype": dtype, "shape": shape, "data_offsets": [at, at + bytes] }),
        );
        at += bytes;
    }
    let h = serde_json::Value::Object(header).to_string().into_bytes();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.resize(out.len() + at, 0);
    out
}

#[test]
fn a_safetensors_error_names_the_tensor_and_the_file() {
    let path = Path::new("w.safetensors");
    // (entries, what the error says)
    let cases: &[(&[Entry], &str)] = &[
        (&[("a", "F32", &[2], 8), ("embed", "F64", &[2, 2], 32)], "w.safetensors: tensor embed has dtype F64"),
        (
            &[("a", "F32", &[2], 8), ("embed", "F32", &[2, 3], 16)],
            "w.safetensors: bad safetensors header: tensor embed: shape [2, 3] of F32 takes 24 bytes, but its offsets [8, 24] give 16",
        ),
    ];
    for (entries, says) in cases {
        let e = tensors_from_bytes(path, &safetensors(entries)).expect_err("refused").to_string();
        assert!(e.starts_with(says), "{e}");
    }
    // Headers as written, over `data` bytes: (header, data, what the error says). An overlap or a
    // gap was reported against a neighbour of the tensor at fault, and a key given twice was read
    // as its last value without a word.
    let f32x2 = |at: u64| format!(r#"{{"dtype": "F32", "shape": [2], "data_offsets": [{at}, {}]}}"#, at + 8);
    let cases: &[(String, usize, &str)] = &[
        (
            format!(r#"{{"a": {}, "b": {}, "c": {}}}"#, f32x2(0), f32x2(8), f32x2(12)),
            20,
            "tensor c starts at byte 12, inside tensor b (bytes 8..16)",
        ),
        (
            format!(r#"{{"a": {}, "b": {}, "c": {}}}"#, f32x2(0), f32x2(12), f32x2(20)),
            28,
            "bytes 8..12 between tensor a and tensor b belong to no tensor",
        ),
        (format!(r#"{{"a": {}, "b": {}}}"#, f32x2(0), f32x2(8)), 20, "bytes 16..20 after tensor b belong to no tensor"),
        (
            format!(r#"{{"a": {}, "b": {}, "a": {}}}"#, f32x2(0), f32x2(8), f32x2(16)),
            24,
            "tensor a is given twice in the header",
        ),
    ];
    for (header, data, says) in cases {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.resize(bytes.len() + data, 0);
        let e = tensors_from_bytes(path, &bytes).expect_err("refused").to_string();
        assert_eq!(e, format!("w.safetensors: bad safetensors header: {says}"), "{header}");
    }

    // A folder: a missing tensor names the folder; an empty weight_map names the index.
    let dir = scratch("bad-missing-tensor");
    std::fs::copy(fixture("qwen35-c/config.json"), dir.join("config.json")).expect("copy");
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors(&[("model.language_model.norm.weight", "F32", &[32], 128)]),
    )
    .expect("write");
    let e = hf::load_hf_folder(&dir).expect_err("missing").to_string();
    assert!(e.starts_with(&format!("{}: missing tensor ", dir.display())), "{e}");
    std::fs::remove_file(dir.join("model.safetensors")).expect("rm");
    std::fs::write(dir.join("model.safetensors.index.json"), r#"{"weight_map": {}}"#).expect("write");
    let e = hf::load_hf_folder(&dir).expect_err("empty").to_string();
    assert!(e.contains("model.safetensors.index.json: bad index: its `weight_map` is empty"), "{e}");
}

#[test]
fn a_graph_in_a_case_file_is_refused_when_a_tensor_type_is_over_the_limit() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/latent-key-path.case");
    let text = std::fs::read_to_string(corpus).expect("a corpus case");
    assert!(CaseFile::parse(&text).is_ok());
    let huge = text.replacen("[80, 4] -> %l1.conv.next", "[80000, 40000] -> %l1.conv.next", 1);
    assert_ne!(huge, text);
    let e = case_error(&huge);
    assert!(e.ends_with(&format!("tensor `%l1.conv` (values) is 3200000000, the limit is {MAX_CASE_VALUES}")), "{e}");
}

#[test]
fn an_ill_formed_graph_or_an_attribute_a_config_could_not_give_is_an_error_of_the_case_file() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/latent-key-path.case");
    let text = std::fs::read_to_string(corpus).expect("a corpus case");
    // (the edit, what the error says). Each was read, then refused by the engine with exit 1 as if
    // it were a construct the engine has no unit for.
    let cases: &[((&str, &str), &str)] = &[
        (
            ("%l0.q: [4, 32] = reshape(shape=[4, 32])", "%l0.q: [4, 30] = reshape(shape=[4, 30])"),
            "line 8: the graph is not well formed: op 8 (reshape): reshape of [128] to [4, 30]",
        ),
        (
            ("%l0.x: [64] = rms_norm(eps=1e-6) %h0,", "%l0.x: [64] = rms_norm(eps=1e-6) %l0.x,"),
            "the graph is not well formed: op 1 (rms_norm) reads %l0.x before it is written",
        ),
        (
            ("%l0.x: [64] = rms_norm(eps=1e-6)", "%l0.x: [32] = rms_norm(eps=1e-6)"),
            "the graph is not well formed: op 1 (rms_norm) declares %l0.x as [32]",
        ),
        (
            ("%l0.x: [64] = rms_norm(eps=1e-6)", "%l0.x: [64] = rms_norm(eps=NaN)"),
            "the graph is not well formed: op 1 (rms_norm): eps is NaN; expected a finite number above 0",
        ),
        (
            ("%l0.x: [64] = rms_norm(eps=1e-6)", "%l0.x: [64] = rms_norm(eps=-1)"),
            "op 1 (rms_norm): eps is -1; expected a finite number above 0",
        ),
        (
            (
                "rope(theta=10000.0, rotary_dims=8, style=neox) %l0.q.normed",
                "rope(theta=inf, rotary_dims=8, style=neox) %l0.q.normed",
            ),
            "(rope): theta is inf; expected a finite number above 0",
        ),
    ];
    for ((from, to), says) in cases {
        let edited = text.replacen(from, to, 1);
        assert_ne!(edited, text, "{from}");
        let e = case_error(&edited);
        assert!(e.contains(says), "{to}: {e}");
    }
}
