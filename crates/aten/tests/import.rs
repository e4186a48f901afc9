//! The translation into the IR, judged by transformers: every committed export with a checkpoint,
//! imported (`aten::import`) and run on the reference interpreter from the empty state through its
//! prefix and its tokens, gives transformers' own logits for each token and its state after the
//! last (`rollout.json`), within 1e-4 of their scale (the interpreter is f64, transformers f32);
//! and the 0.8B-shape graph imports with one composite op per layer where its layer has one.

mod fixtures;

use std::collections::BTreeMap;
use std::io::Read as _;

use aten::import::import;
use aten::{Exported, read_buffers, read_program};
use formats::checkpoint::{Checkpoint, Tensor};
use interp::Runner;

#[test]
fn every_export_imported_into_the_ir_runs_to_transformers_logits() {
    let mut checked = 0;
    for folder in fixtures::rollouts() {
        let name = folder.file_name().expect("a name").to_string_lossy().to_string();
        let program = read_program(&folder.join("step.pt2")).expect("the program");
        let buffers = read_buffers(&folder.join("step.pt2")).expect("the buffers");
        let imported = import(&program, &buffers, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rollout = fixtures::rollout(&folder);
        let weights = fixtures::checkpoint(&rollout);
        let mut checkpoint = Checkpoint::default();
        for c in &imported.graph.consts {
            let w = fixtures::weight(&weights, &c.binding.tensor);
            checkpoint.insert(c.binding.tensor.clone(), Tensor::f32(w.shape.clone(), &w.values));
        }
        let mut runner = Runner::new(&imported.graph, &checkpoint).unwrap_or_else(|e| panic!("{name}: {e}"));
        let token = |v: &serde_json::Value| v.as_u64().expect("a token") as u32;
        for t in rollout["prefix_tokens"].as_array().expect("the prefix") {
            runner.step(token(t)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        for (step, t) in rollout["tokens"].as_array().expect("tokens").iter().enumerate() {
            let logits = runner.step(token(t)).unwrap_or_else(|e| panic!("{name} step {step}: {e}"));
            let err = fixtures::relative(&logits, &fixtures::floats(&rollout["logits"][step]));
            assert!(err < 1e-4, "{name} step {step}: logits {err:.2e} from transformers'");
        }
        let state = runner.state();
        for (entry, want) in
            state.entries.iter().filter(|e| e.layer.is_some()).zip(rollout["final_state"].as_array().expect("states"))
        {
            let shape: Vec<usize> = want["shape"]
                .as_array()
                .expect("a shape")
                .iter()
                .map(|d| d.as_u64().expect("a size") as usize)
                .collect();
            assert_eq!(entry.shape, shape[1..], "{name} {}", want["input"]);
            let err = fixtures::relative(&entry.values, &fixtures::floats(&want["values"]));
            assert!(err < 1e-4, "{name} {}: {err:.2e} from transformers'", want["input"]);
        }
        checked += 1;
    }
    assert_eq!(checked, 8);
}

#[test]
fn the_08b_shape_graph_imports_with_its_composites_per_layer() {
    let folder = fixtures::repo().join("reference/fixtures/exported/qwen3.5-0.8b");
    let mut json = vec![];
    let gz = std::fs::File::open(folder.join("model.json.gz")).expect("model.json.gz");
    flate2::read::GzDecoder::new(gz).read_to_end(&mut json).expect("gzip");
    let program = Exported::from_json(&json).expect("the program");
    let buffers: BTreeMap<String, Vec<f64>> =
        serde_json::from_slice(&std::fs::read(folder.join("buffers.json")).expect("buffers.json")).expect("JSON");
    let imported = import(&program, &buffers, "qwen3.5-0.8b").expect("the 0.8B-shape graph imports");
    let count = |kind: &str| imported.graph.ops.iter().filter(|o| o.kind.name() == kind).count();
    // 24 layers, every fourth full attention: 18 delta-rule layers and 6 attention layers.
    assert_eq!([count("delta_rule"), count("conv_shift"), count("depthwise_conv"), count("l2_norm")], [18, 18, 18, 36]);
    assert_eq!([count("attention"), count("kv_append"), count("rope_freqs")], [6, 12, 12]);
    // A norm before each mixer and each FFN, the final norm, the delta rule's gated norm, and the
    // attention's query and key norms.
    assert_eq!(count("rms_norm"), 24 * 2 + 1 + 18 + 6 * 2);
    assert_eq!(imported.graph.states.len(), 1 + 24 * 2);
    imported.graph.validate().expect("a valid graph");
}
