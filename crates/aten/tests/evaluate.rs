//! The rows' meanings, run: every committed export of transformers' decode step, evaluated node by
//! node on its checkpoint (`aten::eval`), gives transformers' own rollout (`rollout.json`, written
//! by `reference/export_step.py`): every step's logits and the state after the last, each within
//! 1e-4 of its tensor's scale (the evaluation is f64, transformers' f32).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use aten::eval::{Tensor, evaluate};
use aten::graph::InputKind;
use aten::read_program;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every tensor of the safetensors files in `dir`, widened to f64, by name.
fn checkpoint(dir: &Path) -> BTreeMap<String, Tensor> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the checkpoint folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "safetensors") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("read");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
        for (name, view) in st.tensors() {
            let data = view.data();
            let values: Vec<f64> = match view.dtype() {
                safetensors::Dtype::F32 => {
                    data.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4")))).collect()
                }
                safetensors::Dtype::BF16 => data
                    .chunks_exact(2)
                    .map(|c| f64::from(half::bf16::from_le_bytes(c.try_into().expect("2")).to_f32()))
                    .collect(),
                other => panic!("{name}: {other:?}"),
            };
            out.insert(name.clone(), Tensor::new(view.shape().to_vec(), values));
        }
    }
    out
}

/// The archive's constants (the non-persistent buffers) by their names, from `step.pt2`.
fn constants(pt2: &Path) -> BTreeMap<String, Tensor> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(pt2).expect("step.pt2")).expect("a zip");
    let mut read = |name: &str| {
        let mut out = vec![];
        zip.by_name(name).expect(name).read_to_end(&mut out).expect("read");
        out
    };
    let config: Value = serde_json::from_slice(&read("step/data/constants/model_constants_config.json")).expect("JSON");
    let mut out = BTreeMap::new();
    for (name, c) in config["config"].as_object().expect("the constants") {
        assert_eq!(c["tensor_meta"]["dtype"], 7, "{name}: f32");
        let bytes = read(&format!("step/data/constants/{}", c["path_name"].as_str().expect("a path")));
        let values: Vec<f64> =
            bytes.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes(b.try_into().expect("4")))).collect();
        out.insert(name.clone(), Tensor::new(vec![values.len()], values));
    }
    out
}

/// A state of `rollout.json` as a tensor.
fn state(s: &Value) -> Tensor {
    let shape = s["shape"].as_array().expect("a shape").iter().map(|d| d.as_u64().expect("a size") as usize).collect();
    Tensor::new(shape, s["values"].as_array().expect("values").iter().map(|v| v.as_f64().expect("a float")).collect())
}

/// The largest difference of `got` from `want`, relative to `max(1, max |want|)`.
fn relative(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1f64, |m, x| m.max(x.abs()));
    got.iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max) / scale
}

#[test]
fn every_export_evaluated_by_its_rows_meanings_gives_transformers_rollout() {
    let dir = repo().join("reference/fixtures/exported");
    let mut checked = 0;
    for folder in std::fs::read_dir(&dir).expect("the exports").map(|e| e.expect("an entry").path()) {
        let rollout_path = folder.join("rollout.json");
        if !rollout_path.exists() {
            continue;
        }
        let rollout: Value = serde_json::from_slice(&std::fs::read(&rollout_path).expect("read")).expect("JSON");
        let program = read_program(&folder.join("model.json")).expect("the program");
        let weights = checkpoint(&repo().join(rollout["checkpoint"].as_str().expect("a checkpoint")));
        let buffers = constants(&folder.join("step.pt2"));
        let weight = |name: &str| -> Tensor {
            let hub = name.replacen("model.", "model.language_model.", 1);
            let tied = (name == "lm_head.weight").then(|| "model.embed_tokens.weight".to_string());
            [
                Some(name.to_string()),
                Some(hub),
                tied.clone(),
                tied.map(|t| t.replacen("model.", "model.language_model.", 1)),
            ]
            .into_iter()
            .flatten()
            .find_map(|n| weights.get(&n).cloned())
            .unwrap_or_else(|| panic!("{folder:?}: no weight {name}"))
        };
        let mut states: Vec<Tensor> = rollout["initial_state"].as_array().expect("states").iter().map(state).collect();
        let tokens = rollout["tokens"].as_array().expect("tokens");
        let positions = rollout["positions"].as_array().expect("positions");
        for (step, (token, position)) in tokens.iter().zip(positions).enumerate() {
            let mut inputs = BTreeMap::new();
            let mut user = vec![
                Tensor::new(vec![1, 1], vec![token.as_f64().expect("a token")]),
                Tensor::new(vec![1, 1], vec![position.as_f64().expect("a position")]),
            ];
            user.extend(states.iter().cloned());
            let mut user = user.into_iter();
            for input in &program.inputs {
                let value = match &input.kind {
                    InputKind::Parameter(name) => weight(name),
                    InputKind::Buffer { name, .. } => buffers.get(name).cloned().expect("a buffer in the archive"),
                    InputKind::User => user.next().expect("a user input"),
                };
                inputs.insert(input.name.clone(), value);
            }
            let outputs = evaluate(&program, inputs).unwrap_or_else(|e| panic!("{folder:?} step {step}: {e}"));
            let want: Vec<f64> =
                rollout["logits"][step].as_array().expect("logits").iter().map(|v| v.as_f64().expect("f")).collect();
            let err = relative(&outputs[0].values(), &want);
            assert!(err < 1e-4, "{folder:?} step {step}: logits {err:.2e} from transformers'");
            states = outputs[1..].to_vec();
        }
        for (got, want) in states.iter().zip(rollout["final_state"].as_array().expect("final states")) {
            let err = relative(&got.values(), &state(want).values());
            assert!(err < 1e-4, "{folder:?} {}: {err:.2e} from transformers'", want["input"]);
        }
        checked += 1;
    }
    assert_eq!(checked, 8);
}
