//! What several test files read alike: the golden logits transformers wrote for a fixture.

use std::path::Path;

/// A fixture's `golden.json`: the tokens fed, one per step, and transformers' logits after each.
pub struct Golden {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<f64>>,
}

/// Reads the `golden.json` at `path` (reference/README.md has its form).
pub fn read_golden(path: &Path) -> Golden {
    let text = std::fs::read_to_string(path).expect("golden.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("golden json");
    let tokens = v["tokens"].as_array().expect("tokens").iter().map(|t| t.as_u64().expect("token") as u32).collect();
    let logits = v["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|row| row.as_array().expect("row").iter().map(|x| x.as_f64().expect("logit")).collect())
        .collect();
    Golden { tokens, logits }
}
