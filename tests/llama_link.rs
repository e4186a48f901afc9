//! llama.cpp's own decode step, imported: every committed recording of llama.cpp's compute graph
//! (`reference/record_llama_graph.py`) is translated into the IR by `ggml::import`, or refused
//! naming the node no row reads yet; an imported graph run by the reference interpreter on the
//! GGUF it was recorded from gives llama.cpp's own logits at every step of the recorded rollout,
//! within the bound its numerics allow.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stepcheck::prove::engine::prove_engine;
use stepcheck::prove::{Link, ProofVerdict};
use stepcheck::source::ModelSource;
use stepcheck_interp::{Rounding, Runner};

/// The bound on the logits' difference from llama.cpp's, relative to their largest: the 1e-4 the
/// transformers link holds its f32 graphs to (docs/SOUNDNESS.md). The reference interpreter
/// (f64) rounds where the importer placed llama.cpp's roundings (`Runner::round_input`: its
/// product columns to their weights' dot type, its F16 cache's rows, the queries for an F16
/// cache), so what is left is f32's own rounding and the two the interpreter does not make: an
/// F16 cache's softmax weights rounded to f16 before the values' product, and flash attention's
/// f16 sum (measured: 8.0e-5 at most, docs/IMPORT.md).
const BOUND: f64 = 1e-4;

/// An F16 cache: the keys and values rounded as they are stored, the queries to f16 for the
/// scores, and the softmax weights to f16 for the values (or, in flash attention, the weighted
/// values summed in f16).
const F16_CACHE: &[&str] = &["kv=f16", "kv=f16", "act=f16", "attn=f16"];

/// The graphs and the roundings each makes, in the order the importer meets them.
const GRAPHS: &[(&str, &[&str])] = &[
    ("converter-f32-f16kv-fused", F16_CACHE),
    ("converter-f32-f16kv-fused-faauto", F16_CACHE),
    ("converter-f32-f16kv-primitive", F16_CACHE),
    ("converter-f32-f32kv-fused", &[]),
    ("converter-f32-f32kv-primitive", &[]),
    ("converter-f32-mtp-f32kv-fused", &[]),
    ("converter-f32-mtp-f32kv-primitive", &[]),
    ("converter-q8_0-f32kv-fused", &["act=q8_0"; 32]),
    ("converter-q8_0-f32kv-primitive", &["act=q8_0"; 32]),
    ("quant-models-q4_k_m-f32kv-fused", &["act=q8_K"; 16]),
    ("quant-models-q4_k_m-f32kv-primitive", &["act=q8_K"; 16]),
    ("qwen35-c-f32kv-fused", &[]),
    ("qwen35-c-f32kv-primitive", &[]),
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/llama-graphs")
}

/// A runner of `imported` on `ckpt` that rounds where llama.cpp does (its product columns, its
/// F16 cache's rows), as the importer placed the roundings.
fn at_llamas_numerics<'c>(
    imported: &'c stepcheck_ggml::Imported,
    ckpt: &'c stepcheck::model::Checkpoint,
) -> Runner<'c> {
    let mut runner = Runner::new(&imported.graph, ckpt).expect("a runner");
    for p in &imported.places {
        let r = match p.to.as_str() {
            "f16" => Rounding::F16,
            "q8_0" => Rounding::Q8_0,
            "q8_K" => Rounding::Q8K,
            other => panic!("a rounding to {other}"),
        };
        runner.round_input(p.op, p.input, r).expect("the op's input");
    }
    runner
}

/// The largest difference over the largest magnitude of `want`.
fn relative(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| match x.as_str() {
            Some("-inf") => f64::NEG_INFINITY,
            _ => x.as_f64().expect("a number"),
        })
        .collect()
}

#[test]
fn every_committed_llama_graph_is_listed_here() {
    let mut on_disk: Vec<String> = std::fs::read_dir(dir())
        .expect("the graphs")
        .map(|e| e.expect("an entry").path().file_stem().expect("a name").to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<String> = GRAPHS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(on_disk, listed);
}

#[test]
fn every_recorded_step_reads_its_inputs_by_the_conventions_the_importer_states() {
    for (name, _) in GRAPHS {
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir().join(format!("{name}.json"))).expect("read")).expect("json");
        let tokens = json["tokens"].as_array().expect("tokens");
        for (p, step) in json["inputs"].as_array().expect("every step's inputs").iter().enumerate() {
            let at = p as f64;
            assert_eq!(numbers(&step["inp_tokens"]), [tokens[p].as_f64().expect("a token")], "{name} step {p}");
            assert_eq!(numbers(&step["inp_pos"]), [at, at, at, 0.0], "{name} step {p}: every section the position");
            assert_eq!(numbers(&step["attn_inp_k_idxs"]), [at], "{name} step {p}: the key at cell p");
            assert_eq!(numbers(&step["rs_s_copy"])[0], 0.0, "{name} step {p}: slot 0");
            let mask = numbers(&step["attn_inp_kq_mask"]);
            let causal = mask.iter().enumerate().all(|(c, &m)| m == if c <= p { 0.0 } else { f64::NEG_INFINITY });
            assert!(causal, "{name} step {p}: the mask shows cells 0..={p}");
        }
    }
}

#[test]
fn every_imported_llama_graph_run_by_the_reference_interpreter_gives_llama_cpps_logits() {
    for (name, expect) in GRAPHS {
        let path = dir().join(format!("{name}.json"));
        let json: Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        let rec = stepcheck_ggml::read_recording(&path).expect("the recording");
        let imported = stepcheck_ggml::import(&rec, "llama").unwrap_or_else(|e| panic!("{name}: {e}"));
        let numerics = expect;
        let kinds: Vec<&str> = imported.numerics.iter().map(|n| n.split(' ').next().unwrap_or("")).collect();
        assert_eq!(&kinds, numerics, "{name}: the numerics");
        let model =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("reference").join(json["model"].as_str().expect("model"));
        let (_, ckpt) = ModelSource::Gguf(model).load().expect("the checkpoint");
        let mut runner = at_llamas_numerics(&imported, &ckpt);
        for (step, token) in json["tokens"].as_array().expect("tokens").iter().enumerate() {
            let logits = runner.step(token.as_u64().expect("a token") as u32).expect("a step");
            let err = relative(&logits, &numbers(&json["logits"][step]));
            eprintln!("{name} step {step}: {err:.2e} from llama.cpp's logits");
            assert!(err < BOUND, "{name} step {step}: {err:.2e} from llama.cpp's logits, bound {BOUND:.0e}");
        }
    }
}

/// The authored graph of the GGUF a recording was made from.
fn authored_of(json: &Value) -> stepcheck::ir::Graph {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference").join(json["model"].as_str().expect("model"));
    let spec = ModelSource::Gguf(model).spec().expect("the spec");
    stepcheck::model::author::decode_step(&spec).expect("the authored graph")
}

/// The llama.cpp link's verdict on recording `json`, or the importer's refusal.
fn verdict(json: &Value) -> Result<ProofVerdict, String> {
    let rec = stepcheck_ggml::Recording::from_json(json.to_string().as_bytes()).map_err(|e| e.to_string())?;
    let imported = stepcheck_ggml::import(&rec, "llama").map_err(|e| e.to_string())?;
    Ok(prove_engine(&imported.graph, &imported.origin, &authored_of(json), &imported.numerics))
}

fn read(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir().join(format!("{name}.json"))).expect("read")).expect("json")
}

#[test]
fn every_imported_llama_graph_is_proved_equal_to_the_authored_step_at_the_numerics_it_runs() {
    let mut proved = 0;
    for (name, expect) in GRAPHS {
        let numerics = *expect;
        let v = verdict(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ProofVerdict::Proved(p) = &v else { panic!("{name}: {v}") };
        let of = |key: &str| numerics.iter().find_map(|n| n.strip_prefix(key));
        let attn = of("attn=").map(|t| format!(" attn={t}")).unwrap_or_default();
        let want = format!("act={} kv={}{attn} state=f32", of("act=").unwrap_or("f32"), of("kv=").unwrap_or("f32"));
        assert_eq!(p.numerics, want, "{name}");
        assert!(p.outputs.iter().all(|o| o.stage == Link::EngineAuthored), "{name}");
        proved += 1;
    }
    assert_eq!(proved, GRAPHS.len());
}

/// The first node named `name` of recording `json`.
fn node<'a>(json: &'a mut Value, name: &str) -> &'a mut Value {
    let nodes = json["nodes"].as_array_mut().expect("nodes");
    nodes.iter_mut().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no node {name}"))
}

#[test]
fn a_reshape_of_a_non_contiguous_view_is_refused_at_its_node() {
    // llama.cpp #18761's class: a view that skips values (the attention's gate, every other head
    // of the query projection) reshaped where a `cont` is needed reads the wrong values.
    let mut json = read("qwen35-c-f32kv-fused");
    let src = node(&mut json, "gate_reshaped-3")["src"][0].clone();
    let view_src =
        json["nodes"].as_array().expect("nodes").iter().find(|m| m["id"] == src["id"]).expect("the view")["view_src"]
            .clone();
    let n = node(&mut json, "gate_reshaped-3");
    n["op"] = "RESHAPE".into();
    n["view_src"] = view_src;
    let e = verdict(&json).expect_err("refused");
    assert!(e.contains("`gate_reshaped-3` (RESHAPE)") && e.contains("contiguous false"), "{e}");
}

#[test]
fn at_one_token_the_permuted_attention_output_is_contiguous_and_its_reshape_is_proved() {
    // The same edit on the attention output itself is no bug in a decode step: `kqv` permuted
    // from `[hd, 1, heads]` to `[hd, heads, 1]` moves a dim of one, so its values are in order,
    // and the proof says so. (#18761 bit the multi-token graph.)
    let mut json = read("qwen35-c-f32kv-fused");
    let src = node(&mut json, "attn_pregate-3")["src"][0].clone();
    let view_src = json["nodes"].as_array().expect("nodes").iter().find(|m| m["id"] == src["id"]).expect("the permute")
        ["view_src"]
        .clone();
    let n = node(&mut json, "attn_pregate-3");
    n["op"] = "RESHAPE".into();
    n["view_src"] = view_src;
    let v = verdict(&json).expect("imported");
    assert!(v.is_proved(), "{v}");
}

#[test]
fn an_imrope_section_changed_is_refused_at_the_rope_node() {
    // sections [2, 1, 1, 0] → [1, 1, 1, 0]: pair 3 turns by the fourth section, 0 for text.
    let mut json = read("qwen35-c-f32kv-fused");
    node(&mut json, "Qcur-3")["op_params"][11] = 1.into();
    let e = verdict(&json).expect_err("refused");
    assert!(e.contains("`Qcur-3` (ROPE)") && e.contains("rotated pair 3 turns by position section 3"), "{e}");
}

#[test]
fn a_key_cache_written_at_the_wrong_cell_is_refused_at_its_set_rows() {
    let mut json = read("qwen35-c-f32kv-fused");
    let leaves = json["leaves"].as_array_mut().expect("leaves");
    let idx = leaves.iter_mut().find(|l| l["name"] == "attn_inp_k_idxs").expect("the key cells");
    idx["values"] = serde_json::json!([1]);
    let e = verdict(&json).expect_err("refused");
    assert!(e.contains("`cache_k_l1 (view)` (SET_ROWS)") && e.contains("not at cell 2"), "{e}");
}

#[test]
fn a_conv_state_shifted_the_wrong_way_is_refuted_at_its_copy() {
    // The state kept as the window's oldest `K−1` columns instead of its newest.
    let mut json = read("qwen35-c-f32kv-fused");
    let n = node(&mut json, "conv_state_last-0");
    n["view_offs"] = 0.into();
    n["op_params"][0] = 0.into();
    let v = verdict(&json).expect("imported");
    let ProofVerdict::Refuted(r) = &v else { panic!("{v}") };
    assert_eq!(r.output, "conv@l0");
    assert!(r.why.contains("llama.cpp: node n19 `conv_state_update-0 (copy of conv_state_last-0)` (CPY)"), "{}", r.why);
}

/// `json` with node `new` inserted before the node whose id is `before`.
fn insert_before(json: &mut Value, before: &str, new: Value) {
    let nodes = json["nodes"].as_array_mut().expect("nodes");
    let at = nodes.iter().position(|n| n["id"] == before).unwrap_or_else(|| panic!("no node {before}"));
    nodes.insert(at, new);
}

/// Points source `slot` of node `id` at `to`.
fn rewire(json: &mut Value, id: &str, slot: usize, to: &str) {
    let nodes = json["nodes"].as_array_mut().expect("nodes");
    let n = nodes.iter_mut().find(|n| n["id"] == id).unwrap_or_else(|| panic!("no node {id}"));
    n["src"][slot] = serde_json::json!({ "id": to, "name": to });
}

/// A node of `op` on `src` with sizes `ne`, contiguous f32, a view of `view` when given.
fn made(id: &str, op: &str, ne: [i64; 4], src: &[&str], view: Option<&str>) -> Value {
    let nb = [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]];
    serde_json::json!({
        "id": id, "name": id, "op": op, "type": "f32", "ne": ne, "nb": nb, "op_params": vec![0; 16], "flags": [],
        "view_src": view.map(|v| serde_json::json!({ "id": v, "name": v })), "view_offs": 0,
        "src": src.iter().map(|s| serde_json::json!({ "id": s, "name": s })).collect::<Vec<_>>(),
    })
}

#[test]
fn the_decay_applied_after_the_update_is_refused_at_the_keys_read() {
    // In the primitive composition of the converter's layer 0: the keys are read from the
    // undecayed state and the update added to it, then the sum decayed (`n35` is `EXP(g)`).
    let mut json = read("converter-f32-f32kv-primitive");
    assert_eq!(node(&mut json, "node_35")["unary"], "EXP");
    rewire(&mut json, "n47", 0, "n27");
    rewire(&mut json, "n58", 0, "n27");
    insert_before(&mut json, "n59", made("late_decay", "MUL", [8, 8, 4, 1], &["n58", "n35"], None));
    rewire(&mut json, "n60", 0, "late_decay");
    rewire(&mut json, "n67", 0, "late_decay");
    let e = verdict(&json).expect_err("refused");
    assert!(e.starts_with("node n47 `node_47` (MUL)"), "{e}");
}

#[test]
fn value_heads_read_grouped_instead_of_tiled_are_refuted() {
    // The converter's file has 2 key heads for 4 value heads, tiled: value head h reads key head
    // h mod 2. Here the normalised keys and queries are repeated grouped instead (h reads h / 2),
    // as `repeat_interleave` would: `[dk, 1, 2]` repeated to `[dk, 2, 2]`, then read as 4 heads.
    let mut json = read("converter-f32-f32kv-primitive");
    for (x, repeat, consumer) in [("n41", "n42", "n43"), ("n63", "n64", "n65")] {
        let (three, four) = (format!("{repeat}_as_3d"), format!("{repeat}_as_4_heads"));
        insert_before(&mut json, repeat, made(&three, "RESHAPE", [8, 1, 2, 1], &[x], Some(x)));
        let r = node_by_id(&mut json, repeat);
        r["ne"] = serde_json::json!([8, 2, 2, 1]);
        r["nb"] = serde_json::json!([4, 32, 64, 128]);
        r["src"][0] = serde_json::json!({ "id": three, "name": three });
        insert_before(&mut json, consumer, made(&four, "RESHAPE", [8, 4, 1, 1], &[repeat], Some(repeat)));
        rewire(&mut json, consumer, 0, &four);
    }
    let v = verdict(&json).expect("imported");
    let ProofVerdict::Refuted(r) = &v else { panic!("{v}") };
    assert!(r.why.contains("grouped] vs delta_rule[hv=4, hk=2, dk=8, dv=8, tiled]"), "{}", r.why);
    assert!(r.why.contains("llama.cpp: node n68 `node_68` (SUM_ROWS)"), "{}", r.why);
    assert!(r.witness.is_some(), "a refutation with its witness");
}

fn node_by_id<'a>(json: &'a mut Value, id: &str) -> &'a mut Value {
    let nodes = json["nodes"].as_array_mut().expect("nodes");
    nodes.iter_mut().find(|n| n["id"] == id).unwrap_or_else(|| panic!("no node {id}"))
}

fn stepcheck(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("stepcheck runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn prove_and_check_against_llama_cpps_graph_report_the_link_and_its_numerics() {
    let model = "reference/fixtures/converter-f32/model.gguf";
    let graph = "reference/fixtures/llama-graphs/converter-f32-f16kv-fused.json";
    let (code, out) = stepcheck(&["prove", model, "--against-llama-graph", graph]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("llama.cpp's step (246 ggml nodes, imported as"), "{out}");
    assert!(out.contains("logits: llama.cpp ≡ authored"), "{out}");
    assert!(out.contains("numerics of the imported graph: act=f16 kv=f16 attn=f16 state=f32"), "{out}");
    let (code, out) = stepcheck(&["prove", model, "--json", "--against-llama-graph", graph]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["llama_cpp"]["verdict"], "proved");
    let (code, out) = stepcheck(&["check", model, "--against-llama-graph", graph]);
    assert_eq!(code, 0, "{out}");
    assert!(out.lines().next().is_some_and(|h| h.contains("llama.cpp")), "{out}");
}

#[test]
fn a_mutated_llama_graph_fails_prove_and_check_naming_its_node() {
    let mut json = read("qwen35-c-f32kv-fused");
    node(&mut json, "Qcur-3")["op_params"][11] = 1.into();
    let dir = std::env::temp_dir().join(format!("stepcheck-llama-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("mutated.json");
    std::fs::write(&path, json.to_string()).expect("written");
    let model = "reference/fixtures/qwen35-c/model.gguf";
    let graph = path.to_str().expect("a path");
    let (code, out) = stepcheck(&["prove", model, "--against-llama-graph", graph]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not imported: node n183 `Qcur-3` (ROPE)"), "{out}");
    let (code, out) = stepcheck(&["check", model, "--against-llama-graph", graph]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not imported"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The recording of llama.cpp's graph at the qwen3.5-0.8b preset's shape (24 layers, 248320
/// tokens; `reference/make_llama_big.py` writes the GGUF, which is not committed).
const BIG: &str = "reference/fixtures/llama-graph-0.8b/qwen3.5-0.8b-f16-f32kv-fused.json";

#[test]
fn llama_cpps_graph_at_the_0_8b_shape_is_proved_equal_to_the_presets_authored_step() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(BIG);
    let rec = stepcheck_ggml::read_recording(&path).expect("the recording");
    let imported = stepcheck_ggml::import(&rec, "llama").expect("imported");
    let spec = stepcheck::model::presets::preset("qwen3.5-0.8b").expect("the preset");
    let authored = stepcheck::model::author::decode_step(&spec).expect("authored");
    let v = prove_engine(&imported.graph, &imported.origin, &authored, &imported.numerics);
    let ProofVerdict::Proved(p) = &v else { panic!("{v}") };
    assert_eq!(p.numerics, "act=f16 kv=f32 state=f32");
    assert_eq!(p.outputs.len(), 1 + 1 + 2 * 24, "the logits, the position and two states per layer");
}

/// Run by hand after `reference/make_llama_big.py` (its GGUF is 1.4 GiB, never committed):
/// `cargo test --release --test llama_link -- --ignored`.
#[test]
#[ignore = "needs the 0.8B-shape GGUF reference/make_llama_big.py writes to /tmp"]
fn llama_cpps_graph_at_the_0_8b_shape_run_by_the_reference_interpreter_gives_llama_cpps_logits() {
    let gguf = Path::new("/tmp/qwen3.5-0.8b-f16.gguf");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(BIG);
    let json: Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    let rec = stepcheck_ggml::read_recording(&path).expect("the recording");
    let imported = stepcheck_ggml::import(&rec, "llama").expect("imported");
    let (_, ckpt) = ModelSource::Gguf(gguf.to_path_buf()).load().expect("the checkpoint");
    let mut runner = at_llamas_numerics(&imported, &ckpt);
    let kept = json["logits_kept"].as_u64().expect("the logits kept") as usize;
    for (step, token) in json["tokens"].as_array().expect("tokens").iter().enumerate() {
        let logits = runner.step(token.as_u64().expect("a token") as u32).expect("a step");
        let err = relative(&logits[..kept], &numbers(&json["logits"][step]));
        eprintln!("0.8B step {step}: {err:.2e} from llama.cpp's first {kept} logits");
        // With its product columns rounded to f16 as llama.cpp's are, the 24 random layers still
        // leave 1.4e-3 to 1.6e-3 (docs/IMPORT.md: not yet explained); held, by hand, to 1%.
        assert!(err < 1e-2, "step {step}: {err:.2e}");
    }
}

#[test]
fn an_earlier_step_that_wrote_its_key_at_another_cell_is_refused_by_the_rollouts_inputs() {
    // The recorded step is position 2; step 1 wrote its key at cell 0, over step 0's.
    let mut json = read("qwen35-c-f32kv-fused");
    json["inputs"][1]["attn_inp_k_idxs"] = serde_json::json!([0]);
    let e = verdict(&json).expect_err("refused");
    assert!(e.contains("step 1's `attn_inp_k_idxs`: [0.0]"), "{e}");
}

/// The largest relative distance of the values' [sum, Σ|x|, min, max] from the recorded ones, the
/// sums relative to the recorded Σ|x|, the extremes to the larger recorded extreme.
fn stats_distance(values: &[f64], want: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let abs: f64 = values.iter().map(|v| v.abs()).sum();
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (s_abs, s_ext) = (want[1].max(1e-30), want[2].abs().max(want[3].abs()).max(1e-30));
    [
        (sum - want[0]).abs() / s_abs,
        (abs - want[1]).abs() / s_abs,
        (min - want[2]).abs() / s_ext,
        (max - want[3]).abs() / s_ext,
    ]
    .into_iter()
    .fold(0.0, f64::max)
}

/// Every computed node the importer translated, its values at the recorded step on the reference
/// interpreter (at llama.cpp's numerics) against llama.cpp's own [sum, Σ|x|, min, max] of that
/// node: the worst distance and its node.
fn worst_node(json: &Value, gguf: &Path) -> (f64, String, usize, Option<(String, f64)>) {
    let rec = stepcheck_ggml::Recording::from_json(json.to_string().as_bytes()).expect("the recording");
    let traced = stepcheck_ggml::trace(&rec, "llama").expect("traced");
    let (_, ckpt) = ModelSource::Gguf(gguf.to_path_buf()).load().expect("the checkpoint");
    let mut runner = at_llamas_numerics(&traced.imported, &ckpt);
    let tokens = json["tokens"].as_array().expect("tokens");
    let at = json["graph_step"].as_u64().expect("the recorded step") as usize;
    for token in &tokens[..at] {
        runner.step(token.as_u64().expect("a token") as u32).expect("a step");
    }
    let (_, values) = runner.step_values(tokens[at].as_u64().expect("a token") as u32).expect("the recorded step");
    let stats: std::collections::HashMap<&str, Vec<f64>> = json["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["stats"].is_array())
        .map(|n| (n["id"].as_str().expect("an id"), numbers(&n["stats"])))
        .collect();
    let mut worst = (0.0, String::new(), 0);
    let mut first = None;
    for (node, elems) in &traced.nodes {
        let Some(want) = stats.get(node.as_str()) else { continue };
        let got: Option<Vec<f64>> = elems
            .iter()
            .map(|&(t, i)| values.get(t.0).and_then(|v| v.as_ref()).and_then(|v| v.get(i).copied()))
            .collect();
        let Some(got) = got else { continue };
        let d = stats_distance(&got, want);
        if d > BOUND && first.is_none() {
            first = Some((node.clone(), d));
        }
        if d > worst.0 {
            worst = (d, node.clone(), worst.2);
        }
        worst.2 += 1;
    }
    (worst.0, worst.1, worst.2, first)
}

#[test]
fn every_translated_node_holds_llama_cpps_values_at_the_recorded_step_up_to_a_rounding_not_made() {
    // Each node's [sum, Σ|x|, min, max] at the recorded step (the recorder's per-node figures),
    // within the bound. The one rounding the interpreter does not make, an F16 cache's `attn=f16`
    // inside the attention, is where the F16 recordings may first leave it, and nowhere before.
    for (name, _) in GRAPHS {
        let json = read(name);
        let model =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("reference").join(json["model"].as_str().expect("model"));
        let (d, node, count, first) = worst_node(&json, &model);
        eprintln!("{name}: {count} nodes compared, worst {d:.2e} at {node}, first past the bound {first:?}");
        assert!(count > 50, "{name}: {count} nodes compared");
        let rec = stepcheck_ggml::Recording::from_json(json.to_string().as_bytes()).expect("the recording");
        let unmade: Vec<String> = stepcheck_ggml::import(&rec, "llama")
            .expect("imported")
            .numerics
            .iter()
            .filter_map(|r| r.strip_prefix("attn=")?.split_once('(')?.1.split(' ').next().map(str::to_string))
            .collect();
        if let Some((at, d)) = first {
            assert!(
                unmade.contains(&at),
                "{name}: node {at} is {d:.2e} from llama.cpp's, before any rounding not made"
            );
        }
    }
}

#[test]
#[ignore = "needs the 0.8B-shape GGUF reference/make_llama_big.py writes to /tmp"]
fn every_translated_node_at_the_0_8b_shape_against_llama_cpps_values() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(BIG);
    let json: Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    let (d, node, count, first) = worst_node(&json, Path::new("/tmp/qwen3.5-0.8b-f16.gguf"));
    eprintln!("0.8B: {count} nodes compared, worst {d:.2e} at {node}, first past the bound {first:?}");
}
