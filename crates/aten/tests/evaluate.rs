//! The rows' meanings, run: every committed export of transformers' decode step, evaluated node by
//! node on its checkpoint (`aten::eval`), gives transformers' own rollout (`rollout.json`, written
//! by `reference/export_step.py`): every step's logits and the state after the last, each within
//! 1e-4 of its tensor's scale (the evaluation is f64, transformers' f32).

mod fixtures;

use std::collections::BTreeMap;

use aten::eval::{Tensor, evaluate};
use aten::graph::InputKind;
use aten::{read_buffers, read_program};
use serde_json::Value;

/// A checkpoint tensor widened to f64.
fn widened(t: &fixtures::Stored) -> Tensor {
    Tensor::new(t.shape.clone(), t.values.iter().map(|&v| f64::from(v)).collect())
}

/// A state of `rollout.json` as a tensor.
fn state(s: &Value) -> Tensor {
    let shape = s["shape"].as_array().expect("a shape").iter().map(|d| d.as_u64().expect("a size") as usize).collect();
    Tensor::new(shape, fixtures::floats(&s["values"]))
}

#[test]
fn every_export_evaluated_by_its_rows_meanings_gives_transformers_rollout() {
    let mut checked = 0;
    for folder in fixtures::rollouts() {
        let rollout = fixtures::rollout(&folder);
        let program = read_program(&folder.join("model.json")).expect("the program");
        let weights = fixtures::checkpoint(&rollout);
        let buffers = read_buffers(&folder.join("step.pt2")).expect("the buffers");
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
                    InputKind::Parameter(name) => widened(fixtures::weight(&weights, name)),
                    InputKind::Buffer { name, .. } => {
                        let values = buffers.get(name).cloned().expect("a buffer in the archive");
                        Tensor::new(vec![values.len()], values)
                    }
                    InputKind::User => user.next().expect("a user input"),
                };
                inputs.insert(input.name.clone(), value);
            }
            let outputs = evaluate(&program, inputs).unwrap_or_else(|e| panic!("{folder:?} step {step}: {e}"));
            let err = fixtures::relative(&outputs[0].values(), &fixtures::floats(&rollout["logits"][step]));
            assert!(err < 1e-4, "{folder:?} step {step}: logits {err:.2e} from transformers'");
            states = outputs[1..].to_vec();
        }
        for (got, want) in states.iter().zip(rollout["final_state"].as_array().expect("final states")) {
            let err = fixtures::relative(&got.values(), &state(want).values());
            assert!(err < 1e-4, "{folder:?} {}: {err:.2e} from transformers'", want["input"]);
        }
        checked += 1;
    }
    assert_eq!(checked, 8);
}
