//! The reference fixtures load from both of their files to one canonical checkpoint.
//!
//! Each fixture's safetensors go through our reading of llama.cpp's converter transforms; its GGUF
//! was written by the converter's rules in Python (reference/make_fixtures.py). Equal checkpoints
//! mean the two readings agree value for value, tiled value heads included.

use std::path::PathBuf;

use stepcheck::model::{Checkpoint, ModelSpec, author::decode_step, bind, gguf::load_gguf, hf::load_hf_folder};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(name)
}

fn from_safetensors(name: &str) -> (ModelSpec, Checkpoint) {
    load_hf_folder(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn from_gguf(name: &str) -> (ModelSpec, Checkpoint) {
    load_gguf(fixture(name).join("model.gguf")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const FIXTURES: [&str; 3] = ["qwen35-a", "qwen35-b", "qwen35-c"];

#[test]
fn safetensors_and_gguf_give_the_same_spec_and_checkpoint() {
    for name in FIXTURES {
        let (mut hf_spec, hf) = from_safetensors(name);
        let (gguf_spec, gguf) = from_gguf(name);
        hf_spec.name = gguf_spec.name.clone();
        assert_eq!(hf_spec, gguf_spec, "{name}");
        assert_eq!(hf.tensors.keys().collect::<Vec<_>>(), gguf.tensors.keys().collect::<Vec<_>>(), "{name}");
        for (t, a) in &hf.tensors {
            let b = &gguf.tensors[t];
            assert_eq!(a.shape, b.shape, "{name}: {t}");
            let (a, b) = (a.to_f32().expect("decodes"), b.to_f32().expect("decodes"));
            assert_eq!(a.len(), b.len(), "{name}: {t}");
            let diff = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
            assert_eq!(diff, None, "{name}: {t} differs at {diff:?}");
        }
    }
}

#[test]
fn every_fixture_authors_a_graph_its_checkpoint_binds() {
    for name in FIXTURES {
        let (spec, ckpt) = from_safetensors(name);
        let g = decode_step(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        bind::check(&g, &ckpt).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
