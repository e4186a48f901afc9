//! The committed exports of transformers' decode step (`reference/fixtures/exported/`, written by
//! `reference/export_step.py`) read as torch wrote them, and every node keeps its operator's shape
//! rule; what the reader cannot follow is an error naming the node, its target and its source line.

use std::io::Read as _;
use std::path::PathBuf;

use aten::ops::{ROWS, check_shapes, row_of};
use aten::{Exported, ImportError, read_program};

fn exported_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../reference/fixtures/exported")
}

/// The committed graphs' folders (every one has a `model.json`, or the 0.8B one a `.json.gz`), but
/// the configs the engine refuses (`refused-*`), whose graphs use operators no row reads.
fn folders() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(exported_dir())
        .expect("the exported fixtures")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("refused-")))
        .collect();
    out.sort();
    out
}

/// The program of a folder, from its `model.json` or `model.json.gz`.
fn program(folder: &std::path::Path) -> Exported {
    let plain = folder.join("model.json");
    if plain.exists() {
        return read_program(&plain).unwrap_or_else(|e| panic!("{}: {e}", plain.display()));
    }
    let gz = std::fs::File::open(folder.join("model.json.gz")).expect("model.json or model.json.gz");
    let mut json = vec![];
    flate2::read::GzDecoder::new(gz).read_to_end(&mut json).expect("gzip");
    Exported::from_json(&json).unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
}

#[test]
fn every_committed_graph_reads_and_every_node_keeps_its_operators_shape_rule() {
    let folders = folders();
    assert_eq!(folders.len(), 9, "{folders:?}");
    let mut targets = std::collections::BTreeSet::new();
    for folder in &folders {
        let p = program(folder);
        check_shapes(&p).unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
        targets.extend(p.nodes.iter().map(|n| n.target.clone()));
        // Parameters are named as in the checkpoint, and the user's inputs come last.
        let first = &p.inputs[0];
        assert_eq!(first.kind, aten::graph::InputKind::Parameter("model.embed_tokens.weight".into()), "{folder:?}");
        assert!(p.inputs.iter().any(|i| i.name == "input_ids" && i.kind == aten::graph::InputKind::User));
    }
    // Every row is used by some committed graph, and every target they use has its row.
    let rows: std::collections::BTreeSet<String> = ROWS.iter().map(|r| r.target.to_string()).collect();
    assert_eq!(rows, targets);
    assert_eq!(ROWS.len(), 47);
}

#[test]
fn a_pt2_archive_holds_the_program_its_model_json_holds() {
    for folder in folders().iter().filter(|f| f.join("step.pt2").exists()) {
        let from_archive = read_program(&folder.join("step.pt2")).unwrap_or_else(|e| panic!("{folder:?}: {e}"));
        assert_eq!(from_archive, program(folder), "{folder:?}");
    }
}

/// The smallest committed graph's JSON, as a value to edit.
fn smallest() -> serde_json::Value {
    let text = std::fs::read(exported_dir().join("int2-two-layers/model.json")).expect("the fixture");
    serde_json::from_slice(&text).expect("JSON")
}

fn imported(v: &serde_json::Value) -> Result<(), ImportError> {
    check_shapes(&Exported::from_json(v.to_string().as_bytes())?)
}

#[test]
fn an_operator_without_a_row_is_refused_naming_the_node_its_target_and_its_source_line() {
    let mut v = smallest();
    let nodes = v.pointer_mut("/graph_module/graph/nodes").and_then(|n| n.as_array_mut()).expect("nodes");
    let i = nodes.iter().position(|n| n["target"] == "torch.ops.aten.softplus.default").expect("a softplus");
    nodes[i]["target"] = "torch.ops.aten.softplus_with_a_twist.default".into();
    let name = nodes[i]["name"].as_str().expect("a name").to_string();
    match imported(&v) {
        Err(ImportError::NoRow { node, target, traced }) => {
            assert_eq!((node, target.as_str()), (name, "torch.ops.aten.softplus_with_a_twist.default"));
            assert!(traced.contains("modeling_qwen3_5.py:") || traced.contains(".py:"), "{traced}");
        }
        other => panic!("{other:?}"),
    }
    assert!(row_of("torch.ops.aten.softplus.default").is_some());
}

#[test]
fn sizes_a_rule_does_not_give_are_refused_naming_both() {
    let mut v = smallest();
    // The first RMSNorm's mean keeps its dim: declare it dropped.
    let nodes = v.pointer("/graph_module/graph/nodes").and_then(|n| n.as_array()).expect("nodes").clone();
    let mean = nodes.iter().find(|n| n["target"] == "torch.ops.aten.mean.dim").expect("a mean");
    let out = mean["outputs"][0]["as_tensor"]["name"].as_str().expect("its output").to_string();
    let sizes = v.pointer_mut(&format!("/graph_module/graph/tensor_values/{out}/sizes")).expect("its sizes");
    let kept = sizes.as_array_mut().expect("a list").pop();
    assert_eq!(kept, Some(serde_json::json!({"as_int": 1})));
    let e = imported(&v).expect_err("a size its rule does not give").to_string();
    assert!(e.contains("(torch.ops.aten.mean.dim, traced at") && e.contains(&format!("{out} is declared [")), "{e}");
    assert!(e.contains("its rule gives ["), "{e}");
}

#[test]
fn what_the_reader_cannot_read_is_an_error_not_a_guess() {
    // A size that is not linear in the graph's symbols.
    let mut v = smallest();
    let past = v
        .pointer_mut("/graph_module/graph/sym_int_values/sym_size_int_5/as_expr/expr_str")
        .expect("the past length's expression");
    *past = "FloorDiv(Symbol('s21', positive=True, integer=True), Integer(2))".into();
    let e = imported(&v).expect_err("not linear").to_string();
    assert!(e.contains("`FloorDiv` is not a linear size"), "{e}");
    // Not a program at all, and an archive without one.
    assert!(matches!(Exported::from_json(b"{\"graph_module\": 3}"), Err(ImportError::Schema(_))));
    let e = aten::archive::program_json(b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0").expect_err("empty");
    assert!(e.contains("no models/model.json"), "{e}");
}
