//! The transformers link, proved: transformers' own exported decode step (`reference/fixtures/
//! exported/`), imported into the IR, equals the authored graph of the same config for every
//! checkpoint and every step, through the checkpoint convention — or, for a model whose value heads
//! the converter tiles, is inconclusive by name. A changed equation or a changed exported graph is
//! refuted with the ATen node named.

use std::path::{Path, PathBuf};

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
fn every_export_is_proved_equal_to_its_authored_graph_or_inconclusive_for_tiled_heads() {
    let mut proved = vec![];
    for c in cases() {
        let verdict = prove(&c);
        let (hk, hv) = (c.spec.delta_net.key_heads, c.spec.delta_net.value_heads);
        if hk > 1 && hk != hv {
            assert!(
                matches!(&verdict, ProofVerdict::Inconclusive { why } if why.contains("tiles this model's value heads")),
                "{}: {verdict}",
                c.name
            );
        } else {
            assert!(verdict.is_proved(), "{}: {verdict}", c.name);
            proved.push(c.name);
        }
    }
    assert_eq!(proved, ["attn-first-tied-gqa3", "gva4-int4-tied-1e7", "qwen35-c"]);
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
