//! The transformers link, proved: transformers' own exported decode step (`reference/fixtures/
//! exported/`), imported into the IR, equals the authored graph of the same config for every
//! checkpoint and every step, through the checkpoint convention (its value heads tiled where the
//! converter tiles them). A changed equation or a changed exported graph is refuted with the ATen
//! node named.

use std::path::{Path, PathBuf};

#[path = "common/scratch.rs"]
mod scratch;

use stepcheck::aten::import::{Imported, import};
use stepcheck::aten::{Exported, read_buffers, read_program, read_step};
use stepcheck::ir::Graph;
use stepcheck::model::author::decode_step;
use stepcheck::model::hf::names::convention;
use stepcheck::model::hf::spec_of_hf_folder;
use stepcheck::model::presets::qwen35_08b;
use stepcheck::model::spec::ModelSpec;
use stepcheck::prove::ProofVerdict;
use stepcheck::prove::source::prove_source;

fn exported() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/exported")
}

/// Each op's label: the ATen node it was written for, its target and its source line.
fn labels(program: &Exported, imported: &Imported) -> Vec<String> {
    imported
        .origin
        .iter()
        .map(|name| match program.nodes.iter().find(|n| &n.name == name) {
            Some(n) => format!("node {} ({}, traced at {})", n.name, n.target, n.source),
            None => name.clone(),
        })
        .collect()
}

/// The export in `folder`, its authored graph's spec (from the checkpoint's config) and both graphs.
struct Case {
    name: String,
    program: Exported,
    imported: Imported,
    spec: ModelSpec,
    authored: Graph,
}

fn case(folder: &Path) -> Case {
    let name = folder.file_name().expect("a name").to_string_lossy().to_string();
    let program = read_program(&folder.join("step.pt2")).expect("the program");
    let imported = import(&program, &read_buffers(&folder.join("step.pt2")).expect("buffers"), &name).expect("import");
    let rollout: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("rollout.json")).expect("rollout")).expect("JSON");
    let checkpoint = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rollout["checkpoint"].as_str().expect("a path"));
    let spec = spec_of_hf_folder(&checkpoint).expect("the spec");
    let authored = decode_step(&spec).expect("authored");
    Case { name, program, imported, spec, authored }
}

fn prove(c: &Case) -> ProofVerdict {
    let conv = convention(&c.spec).expect("the convention");
    prove_source(&c.imported.graph, &labels(&c.program, &c.imported), &c.authored, &conv)
}

fn cases() -> Vec<Case> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(exported())
        .expect("exports")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("rollout.json").exists())
        .collect();
    folders.sort();
    folders.iter().map(|f| case(f)).collect()
}

#[test]
fn every_export_is_proved_equal_to_its_authored_graph() {
    let mut proved = vec![];
    for c in cases() {
        let verdict = prove(&c);
        assert!(verdict.is_proved(), "{}: {verdict}", c.name);
        proved.push(c.name);
    }
    // Value heads per key head 1 to 4, one key head, tiled heads (several key heads, each shared).
    assert_eq!(proved.len(), 8, "{proved:?}");
}

#[test]
fn a_loader_that_does_not_tile_the_value_heads_is_refuted() {
    // llama.cpp's converter tiles the value heads of a qwen35 GGUF; a loader that reads them in
    // HF's grouped order (prior-art.md) is the convention with its tiling dropped.
    let c = case(&exported().join("int2-two-layers"));
    let mut conv = convention(&c.spec).expect("the convention");
    assert!(conv.tiling_moves, "int2-two-layers has 2 key heads of 4 value heads");
    conv.tiling_moves = false;
    let v = prove_source(&c.imported.graph, &labels(&c.program, &c.imported), &c.authored, &conv);
    assert!(!v.is_proved(), "{v}");
    assert!(v.is_refuted(), "{v}");
}

/// The 0.8B-shape export (24 layers, fake weights) against the `qwen3.5-0.8b` preset's authored
/// graph: the whole model's step, proved.
#[test]
fn the_08b_shape_export_is_proved_equal_to_the_presets_authored_graph() {
    let (program, buffers) = read_step(&exported().join("qwen3.5-0.8b/model.json.gz")).expect("the step");
    let imported = import(&program, &buffers, "qwen3.5-0.8b").expect("import");
    let spec = qwen35_08b();
    let authored = decode_step(&spec).expect("authored");
    let c = Case { name: "qwen3.5-0.8b".into(), program, imported, spec, authored };
    let verdict = prove(&c);
    assert!(verdict.is_proved(), "{verdict}");
}

// ---- Refutations that name the cause: the exported graph or the convention changed. ----

/// The proved export `attn-first-tied-gqa3` with its graph edited by `edit` (on torch's JSON), its
/// verdict, or the import's error.
fn edited(edit: impl FnOnce(&mut Vec<serde_json::Value>)) -> Result<ProofVerdict, String> {
    let folder = exported().join("attn-first-tied-gqa3");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("model.json")).expect("model.json")).expect("JSON");
    let nodes = json["graph_module"]["graph"]["nodes"].as_array_mut().expect("nodes");
    edit(nodes);
    let program = Exported::from_json(&serde_json::to_vec(&json).expect("JSON")).expect("the edited program");
    let base = case(&folder);
    let buffers = read_buffers(&folder.join("step.pt2")).expect("buffers");
    let imported = import(&program, &buffers, "edited").map_err(|e| e.to_string())?;
    let c = Case { imported, program, ..base };
    Ok(prove(&c))
}

/// The node named `name`.
fn node<'a>(nodes: &'a mut [serde_json::Value], name: &str) -> &'a mut serde_json::Value {
    nodes.iter_mut().find(|n| n["outputs"][0]["as_tensor"]["name"] == name).unwrap_or_else(|| panic!("no node {name}"))
}

/// Argument `arg` of a node.
fn arg<'a>(node: &'a mut serde_json::Value, arg: &str) -> &'a mut serde_json::Value {
    node["inputs"].as_array_mut().expect("inputs").iter_mut().find(|a| a["name"] == arg).expect("the argument")
}

/// The refutation's text, or a panic naming what was found instead.
fn refutation(v: Result<ProofVerdict, String>, what: &str) -> String {
    match v {
        Ok(v @ ProofVerdict::Refuted(_)) => v.to_string(),
        other => panic!("{what}: not refuted: {other:?}"),
    }
}

#[test]
fn a_norm_weight_read_without_its_one_plus_is_refuted_at_that_node() {
    // `add_4 = add(to_5, 1.0)`: the input norm's `1 + w`; dropped, the norm reads `w`.
    let v = edited(|nodes| arg(node(nodes, "add_4"), "other")["arg"] = serde_json::json!({ "as_float": 0.0 }));
    let text = refutation(v, "1 + dropped");
    assert!(text.contains("offset with different attributes"), "{text}");
    assert!(text.contains("transformers: node add_4 (torch.ops.aten.add.Tensor, traced at"), "{text}");
    assert!(text.contains("modeling_qwen3_5.py"), "{text}");
}

#[test]
fn a_moved_l2_norm_eps_is_refuted_at_the_norm() {
    // `add_x = add(sum_1, 1e-6)`: the delta rule's query l2 norm.
    let v = edited(|nodes| {
        let at = nodes.iter().position(|n| n["inputs"][0]["arg"]["as_tensor"]["name"] == "sum_1").expect("sum_1's add");
        arg(&mut nodes[at], "other")["arg"] = serde_json::json!({ "as_float": 1e-5 });
    });
    let text = refutation(v, "l2 eps");
    assert!(text.contains("l2_norm with different attributes"), "{text}");
    assert!(text.contains("transformers: node mul_"), "{text}");
}

#[test]
fn a_log_read_without_exp_is_refuted_at_the_negation() {
    // `neg_2 = neg(exp)`, `exp = exp(to_17)`: read `neg(to_17)` instead.
    let v = edited(|nodes| arg(node(nodes, "neg_2"), "self")["arg"]["as_tensor"]["name"] = "to_17".into());
    let text = refutation(v, "A_log without exp");
    assert!(text.contains("transformers: node neg_2 (torch.ops.aten.neg.default"), "{text}");
}

#[test]
fn rotate_half_with_its_sign_flipped_is_not_imported_and_the_node_is_named() {
    // `cat_2 = cat([neg, slice_14])` is `rotate_half(q)`; `cat([slice_14, neg])` is its negation.
    let v = edited(|nodes| {
        let tensors = &mut arg(node(nodes, "cat_2"), "tensors")["arg"]["as_tensors"];
        tensors.as_array_mut().expect("tensors").swap(0, 1);
    });
    let Err(why) = v else { panic!("imported: {v:?}") };
    assert!(why.contains("node mul_9 (torch.ops.aten.mul.Tensor, traced at"), "{why}");
    assert!(why.contains("is read by no row here"), "{why}");
}

#[test]
fn a_changed_equation_of_the_convention_is_refuted() {
    // The planted change: the input norms' rule read as a copy instead of `1 + w`.
    let c = case(&exported().join("attn-first-tied-gqa3"));
    let mut conv = convention(&c.spec).expect("the convention");
    for e in conv.equations.iter_mut().filter(|e| e.gguf.ends_with("attn_norm.weight")) {
        e.rule = stepcheck::formats::convention::Rule::Copy;
    }
    let v = prove_source(&c.imported.graph, &labels(&c.program, &c.imported), &c.authored, &conv);
    let text = refutation(Ok(v), "a planted equation");
    assert!(text.contains("transformers: node add_4"), "{text}");
}

#[test]
fn a_causal_mask_off_by_one_is_not_imported_and_the_mask_is_named() {
    // `add_2 = add(arange(past + 1), 0)` are the keys' positions; `+ 1` hides the newest key.
    let v = edited(|nodes| arg(node(nodes, "add_2"), "other")["arg"] = serde_json::json!({ "as_int": 1 }));
    let Err(why) = v else { panic!("imported: {v:?}") };
    assert!(why.contains("node matmul_1 (torch.ops.aten.matmul.default, traced at"), "{why}");
    assert!(why.contains("not the causal mask of a one-token step"), "{why}");
    assert!(why.contains("where.ScalarOther"), "{why}");
}

// ---- The command line: `prove --against` and `check --against`. ----

fn stepcheck(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("stepcheck runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn prove_and_check_against_transformers_graph_report_the_link() {
    let folder = "reference/fixtures/exported/int2-two-layers";
    let graph = format!("{folder}/step.pt2");
    let (code, out) = stepcheck(&["prove", folder, "--against", &graph, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!((&v["verdict"], &v["transformers"]["verdict"]), (&"proved".into(), &"proved".into()), "{out}");
    let (code, out) = stepcheck(&["check", folder, "--against", &graph]);
    assert_eq!(code, 0, "{out}");
    assert!(out.lines().next().is_some_and(|h| h.contains("transformers")), "{out}");
    assert!(out.lines().nth(1).is_some_and(|r| r.contains("proved        proved")), "{out}");
    // Another model's graph is not this model's step.
    let other = "reference/fixtures/exported/attn-first-tied-gqa3/step.pt2";
    let (code, out) = stepcheck(&["check", folder, "--against", other]);
    assert_eq!(code, 1, "{out}");
    let (code, _) = stepcheck(&["check", "--against", &graph]);
    assert_eq!(code, 2, "--against needs exactly one model");
}

#[test]
fn a_config_the_engine_refuses_is_refused_by_name_through_the_same_path() {
    // Qwen3.5-MoE (experts), exported as the dense models are: the importer stops at the router's
    // first operator it has no row for, naming the node and its source line; the engine's verdict
    // on the same config refuses its experts by name.
    let folder = exported().join("refused-qwen35-moe");
    let program = read_program(&folder.join("model.json")).expect("the program reads");
    let why = match import(&program, &Default::default(), "refused-qwen35-moe") {
        Ok(_) => panic!("an MoE step imported"),
        Err(e) => e.to_string(),
    };
    assert!(why.contains("torch.ops.aten.topk.default, which the importer has no row for"), "{why}");
    assert!(why.contains("traced at") && why.contains("modeling_qwen3_5_moe.py"), "{why}");
    let config = folder.join("config.json");
    let (code, out) = stepcheck(&["verdict", config.to_str().expect("a path")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Experts"), "{out}");
}

#[test]
fn the_gated_norms_gate_applied_before_the_norm_is_refuted_at_the_norm() {
    // Layer 1's gated norm: `to_26 = to(o)` is normed and weighted (`mul_31`), then gated by
    // `silu_2 = silu(to(z))` (`mul_32`). Edited: `mul_32 = o · silu_2` first, normed, weighted.
    let v = edited(|nodes| {
        let at = |nodes: &[serde_json::Value], name: &str| {
            nodes.iter().position(|n| n["outputs"][0]["as_tensor"]["name"] == name).expect(name)
        };
        for name in ["to_28", "silu_2", "mul_32"] {
            let n = nodes.remove(at(nodes, name));
            nodes.insert(at(nodes, "to_26"), n);
        }
        arg(node(nodes, "mul_32"), "self")["arg"]["as_tensor"]["name"] = "reshape_8".into();
        arg(node(nodes, "to_26"), "self")["arg"]["as_tensor"]["name"] = "mul_32".into();
        arg(node(nodes, "to_29"), "self")["arg"]["as_tensor"]["name"] = "mul_31".into();
    });
    let text = refutation(v, "gate before the norm");
    assert!(text.contains("transformers: node mul_31 (torch.ops.aten.mul.Tensor, traced at"), "{text}");
    assert!(text.contains("witness"), "{text}");
}

#[test]
fn a_graph_that_cannot_be_read_is_an_error_and_one_that_cannot_be_followed_fails_the_link() {
    let folder = "reference/fixtures/exported/attn-first-tied-gqa3";
    let dir = scratch::scratch("transformers-link-inputs");
    // Not there, or not a program: the input cannot be read (exit 2).
    let missing = dir.join("missing.pt2");
    let (code, _) = stepcheck(&["prove", folder, "--against", missing.to_str().expect("a path")]);
    assert_eq!(code, 2);
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, b"{\"graph_module\": 7}").expect("write");
    let (code, _) = stepcheck(&["prove", folder, "--against", garbage.to_str().expect("a path")]);
    assert_eq!(code, 2);
    // A program the importer cannot follow fails the link by name (exit 1): rotate_half's sign
    // flipped, written with its buffers beside it.
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(exported().join("attn-first-tied-gqa3/model.json")).expect("read"))
            .expect("JSON");
    let nodes = json["graph_module"]["graph"]["nodes"].as_array_mut().expect("nodes");
    arg(node(nodes, "cat_2"), "tensors")["arg"]["as_tensors"].as_array_mut().expect("tensors").swap(0, 1);
    let graph = dir.join("model.json");
    std::fs::write(&graph, serde_json::to_vec(&json).expect("JSON")).expect("write");
    let buffers = read_buffers(&exported().join("attn-first-tied-gqa3/step.pt2")).expect("buffers");
    std::fs::write(dir.join("buffers.json"), serde_json::to_vec(&buffers).expect("JSON")).expect("write");
    let (code, out) = stepcheck(&["prove", folder, "--against", graph.to_str().expect("a path")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not imported: node matmul_1"), "{out}");
    assert!(out.contains("node mul_9 (torch.ops.aten.mul.Tensor, traced at"), "{out}");
}
