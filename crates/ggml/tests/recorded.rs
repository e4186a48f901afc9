//! The committed recordings of llama.cpp's qwen35 decode step (`reference/fixtures/llama-graphs/`,
//! written by `reference/record_llama_graph.py`) read as recorded, and every node keeps its op's
//! shape rule; what the reader cannot follow is an error naming the node.

use std::collections::BTreeSet;
use std::path::PathBuf;

use ggml::ops::{ROWS, check_shapes};
use ggml::{GraphError, Recording, read_recording};

fn recordings() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../reference/fixtures/llama-graphs");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the recordings")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_recording_reads_and_every_node_keeps_its_ops_shape_rule() {
    let files = recordings();
    assert_eq!(files.len(), 13, "{files:?}");
    let mut used = BTreeSet::new();
    for f in &files {
        let rec = read_recording(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        check_shapes(&rec).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(
            !rec.nodes.is_empty() && rec.nodes.len() == rec.nodes.iter().map(|n| &n.id).collect::<BTreeSet<_>>().len()
        );
        used.extend(rec.nodes.iter().map(|n| n.row_name()));
    }
    // Every row is used by some recording, and every op they use has its row.
    let rows: BTreeSet<String> = ROWS.iter().map(|r| r.op.to_string()).collect();
    assert_eq!(rows, used);
}

/// The first recording's JSON, edited by `edit`.
fn edited(edit: impl FnOnce(&mut serde_json::Value)) -> Result<(), GraphError> {
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&recordings()[0]).expect("read")).expect("JSON");
    edit(&mut v);
    let rec = Recording::from_json(&serde_json::to_vec(&v).expect("JSON"))?;
    check_shapes(&rec)
}

#[test]
fn a_node_whose_sizes_its_rule_does_not_give_is_named() {
    let e = edited(|v| {
        let n = v["nodes"].as_array_mut().expect("nodes").iter_mut().find(|n| n["op"] == "MUL_MAT").expect("a matmul");
        n["ne"][0] = (n["ne"][0].as_i64().expect("a size") + 1).into();
    });
    assert!(
        matches!(&e, Err(GraphError::Node { op, why, .. }) if op == "MUL_MAT" && why.contains("its rule gives")),
        "{e:?}"
    );
}

#[test]
fn an_op_with_no_row_and_a_source_recorded_later_are_errors() {
    let e = edited(|v| v["nodes"][3]["op"] = "CONV_TRANSPOSE_2D".into());
    assert!(matches!(&e, Err(GraphError::NoRow { op, .. }) if op == "CONV_TRANSPOSE_2D"), "{e:?}");
    let e = edited(|v| {
        let last = v["nodes"].as_array().expect("nodes").last().expect("a node")["id"].clone();
        v["nodes"][1]["src"][0]["id"] = last;
    });
    assert!(
        matches!(&e, Err(GraphError::Node { why, .. }) if why.contains("not a tensor recorded before it")),
        "{e:?}"
    );
    let e = edited(|v| {
        let n = v["nodes"]
            .as_array_mut()
            .expect("nodes")
            .iter_mut()
            .find(|n| n["op"] == "VIEW" && n["ne"][0].as_i64() > Some(0))
            .expect("a view");
        n["view_offs"] = (1u64 << 40).into();
    });
    assert!(matches!(&e, Err(GraphError::Node { op, .. }) if op == "VIEW"), "{e:?}");
}
