//! The refused families' folders load into the canonical checkpoint: each family's names and value
//! transforms, and folders that do not hold the family's model refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use stepcheck::model::Checkpoint;
use stepcheck::model::families::{FamilyError, load_family_folder};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/refused").join(name)
}

// ---- Boundary: the file system. ----

/// A fixture's tensors as transformers saved them: name → (shape, f32 values).
type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

fn read_tensors(dir: &Path) -> Tensors {
    let bytes = std::fs::read(dir.join("model.safetensors")).expect("model.safetensors");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), Dtype::F32, "{name}");
            let data = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            (name, (view.shape().to_vec(), data))
        })
        .collect()
}

/// A scratch copy of a fixture with its config edited by `config` and its tensors by `tensors`;
/// removed when dropped.
struct Copy(PathBuf);

impl Copy {
    fn of(name: &str, config: impl FnOnce(&mut serde_json::Value), tensors: impl FnOnce(&mut Tensors)) -> Copy {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("stepcheck-families-{}-{n}", std::process::id())).join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("scratch folder");
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture(name).join("config.json")).expect("config"))
                .expect("json");
        config(&mut c);
        std::fs::write(path.join("config.json"), c.to_string()).expect("write config");
        let mut t = read_tensors(&fixture(name));
        tensors(&mut t);
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = t
            .into_iter()
            .map(|(name, (shape, data))| (name, shape, data.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views = bytes
            .iter()
            .map(|(name, shape, data)| (name.clone(), TensorView::new(Dtype::F32, shape.clone(), data).expect("view")));
        std::fs::write(path.join("model.safetensors"), safetensors::serialize(views, None).expect("serialize"))
            .expect("write weights");
        Copy(path)
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

fn load(name: &str) -> (Tensors, Checkpoint) {
    let (_, ckpt) = load_family_folder(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    (read_tensors(&fixture(name)), ckpt)
}

fn canonical(ckpt: &Checkpoint, name: &str) -> Vec<f32> {
    ckpt.get(name).unwrap_or_else(|| panic!("no {name}")).to_f32().expect("decodes")
}

// ---- The names and transforms of each family. ----

#[test]
fn gemma_norms_hold_one_plus_w_and_its_post_attention_norm_is_the_post_mixer_norm() {
    let (hf, ckpt) = load("gemma3_text");
    for (from, to) in [
        ("model.layers.1.post_attention_layernorm.weight", "blk.1.post_mixer_norm.weight"),
        ("model.layers.1.pre_feedforward_layernorm.weight", "blk.1.post_attention_norm.weight"),
        ("model.layers.1.post_feedforward_layernorm.weight", "blk.1.post_ffw_norm.weight"),
        ("model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"),
        ("model.norm.weight", "output_norm.weight"),
    ] {
        let want: Vec<f32> = hf[from].1.iter().map(|w| 1.0 + w).collect();
        assert_eq!(canonical(&ckpt, to), want, "{to}");
    }
    assert!(ckpt.get("output.weight").is_none(), "the head is tied");
}

#[test]
fn gpt_oss_gate_and_up_are_the_interleaved_columns_of_gate_up_transposed() {
    let (hf, ckpt) = load("gpt_oss");
    let (shape, gate_up) = &hf["model.layers.2.mlp.experts.gate_up_proj"];
    let [experts, h, two_i] = shape[..] else { panic!("{shape:?}") };
    let i = two_i / 2;
    let gate = canonical(&ckpt, "blk.2.ffn_gate_exps.weight");
    let up = canonical(&ckpt, "blk.2.ffn_up_exps.weight");
    for e in 0..experts {
        for j in 0..i {
            for k in 0..h {
                let at = |half: usize| gate_up[e * h * two_i + k * two_i + 2 * j + half];
                assert_eq!(gate[(e * i + j) * h + k], at(0), "gate e{e} j{j} k{k}");
                assert_eq!(up[(e * i + j) * h + k], at(1), "up e{e} j{j} k{k}");
            }
        }
    }
    let (_, down) = &hf["model.layers.2.mlp.experts.down_proj"];
    let d = canonical(&ckpt, "blk.2.ffn_down_exps.weight");
    assert_eq!(d[(experts - 1) * h * i + 3 * i + 1], down[(experts - 1) * i * h + h + 3], "down is transposed");
    let (_, bias) = &hf["model.layers.2.mlp.experts.gate_up_proj_bias"];
    assert_eq!(canonical(&ckpt, "blk.2.ffn_up_exps.bias")[i + 2], bias[two_i + 5], "up bias: odd columns");
    assert_eq!(canonical(&ckpt, "blk.0.attn_sinks.weight"), &hf["model.layers.0.self_attn.sinks"].1[..]);
    assert_eq!(
        canonical(&ckpt, "blk.0.post_attention_norm.weight"),
        &hf["model.layers.0.post_attention_layernorm.weight"].1[..],
        "plain w"
    );
}

#[test]
fn per_expert_tensors_are_stacked_in_expert_order() {
    for (name, layer) in [("qwen3_5_moe_text", 1), ("deepseek_v3", 2)] {
        let (hf, ckpt) = load(name);
        for (what, gguf) in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]
        {
            let stack = canonical(&ckpt, &format!("blk.{layer}.{gguf}.weight"));
            let mut want = vec![];
            for e in 0.. {
                match hf.get(&format!("model.layers.{layer}.mlp.experts.{e}.{what}.weight")) {
                    Some((_, data)) => want.extend_from_slice(data),
                    None => break,
                }
            }
            assert_eq!(stack, want, "{name} {gguf}");
        }
    }
}

#[test]
fn qwen3_5_moe_dense_parts_load_as_the_qwen35_loader_reads_them() {
    let (hf, ckpt) = load("qwen3_5_moe_text");
    let a_log = &hf["model.layers.0.linear_attn.A_log"].1;
    let ssm_a = canonical(&ckpt, "blk.0.ssm_a");
    // Hk 2, Hv 4: tiled head 1 is grouped head 2.
    assert_eq!(ssm_a[1], -a_log[2].exp());
    let gate = canonical(&ckpt, "blk.3.ffn_gate_inp_shexp.weight");
    assert_eq!(gate, &hf["model.layers.3.mlp.shared_expert_gate.weight"].1[..]);
}

#[test]
fn deepseek_router_bias_is_exp_probs_b_and_layer_0_keeps_its_dense_ffn() {
    let (hf, ckpt) = load("deepseek_v3");
    assert_eq!(
        canonical(&ckpt, "blk.1.exp_probs_b.bias"),
        &hf["model.layers.1.mlp.gate.e_score_correction_bias"].1[..]
    );
    assert!(ckpt.get("blk.0.ffn_gate.weight").is_some() && ckpt.get("blk.0.ffn_gate_inp.weight").is_none());
    assert_eq!(
        canonical(&ckpt, "blk.0.attn_kv_a_mqa.weight"),
        &hf["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"].1[..]
    );
}

// ---- Folders that do not hold the family's model. ----

fn refused(copy: &Copy) -> FamilyError {
    match load_family_folder(&copy.0) {
        Ok(_) => panic!("{}: loaded", copy.0.display()),
        Err(e) => e,
    }
}

#[test]
fn folders_that_do_not_hold_the_familys_model_are_refused_by_name() {
    let extra = Copy::of(
        "qwen3_5_moe_text",
        |_| {},
        |t| {
            t.insert("model.layers.0.mlp.experts.4.up_proj.weight".into(), (vec![16, 32], vec![0.0; 512]));
        },
    );
    assert!(
        matches!(refused(&extra), FamilyError::Unexpected { ref hf } if hf == "model.layers.0.mlp.experts.4.up_proj.weight")
    );
    let missing = Copy::of(
        "deepseek_v3",
        |_| {},
        |t| {
            t.remove("model.layers.2.mlp.experts.7.down_proj.weight");
        },
    );
    assert!(matches!(refused(&missing), FamilyError::MissingTensor { ref hf, ref tensor }
            if hf == "model.layers.2.mlp.experts.7.down_proj.weight" && tensor == "blk.2.ffn_down_exps.weight"),);
    let reshaped = Copy::of(
        "gpt_oss",
        |_| {},
        |t| {
            let sinks = t.get_mut("model.layers.1.self_attn.sinks").expect("sinks");
            *sinks = (vec![2, 2], sinks.1.clone());
        },
    );
    assert!(matches!(refused(&reshaped), FamilyError::Shape { ref hf, .. } if hf == "model.layers.1.self_attn.sinks"));
    let softcapped = Copy::of("gemma3_text", |c| c["final_logit_softcapping"] = 30.0.into(), |_| {});
    assert!(
        matches!(refused(&softcapped), FamilyError::Config { ref field, .. } if field == "final_logit_softcapping")
    );
    let llama3 = Copy::of("gpt_oss", |c| c["rope_parameters"]["rope_type"] = "llama3".into(), |_| {});
    assert!(matches!(refused(&llama3), FamilyError::Config { ref field, .. } if field == "rope_parameters.rope_type"));
    let other = Copy::of("gpt_oss", |c| c["model_type"] = "mixtral".into(), |_| {});
    assert!(matches!(refused(&other), FamilyError::UnknownFamily(ref t) if t == "mixtral"));
}

// ---- Config forms the fixtures do not exercise. ----

#[test]
fn deepseek_yarn_scales_the_scores_by_mscale_squared() {
    use stepcheck::model::families::spec_of_folder;
    use stepcheck::model::spec::RopeScaling;
    let yarn = Copy::of(
        "deepseek_v3",
        |c| {
            c["rope_parameters"] = serde_json::json!({
                "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0,
                "beta_fast": 32, "beta_slow": 1
            })
        },
        |_| {},
    );
    let spec = spec_of_folder(&yarn.0).expect("spec");
    let mscale = 0.1 * 40f64.ln() + 1.0;
    let scale = spec.constructs.attention_scale.expect("a score scale");
    assert!((scale - mscale * mscale / 20f64.sqrt()).abs() < 1e-15, "{scale}");
    match spec.constructs.rope_scaling {
        Some(RopeScaling::Yarn { attention_factor, truncate, original_context, .. }) => {
            // mscale / mscale_all_dim: equal, so the turned dims are not scaled.
            assert_eq!((attention_factor, truncate, original_context), (1.0, true, 4096));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gemma_without_layer_types_slides_all_but_every_patternth_layer() {
    use stepcheck::model::families::spec_of_folder;
    let legacy = Copy::of(
        "gemma3_text",
        |c| {
            c.as_object_mut().expect("object").remove("layer_types");
            c["num_hidden_layers"] = 4.into();
            c["_sliding_window_pattern"] = 2.into();
        },
        |_| {},
    );
    let spec = spec_of_folder(&legacy.0).expect("spec");
    assert_eq!(spec.constructs.sliding_window.expect("a window").layers, vec![0, 2]);
}

#[test]
fn gemmas_embedding_scale_is_root_hidden_in_the_configs_dtype() {
    use stepcheck::model::families::spec_of_folder;
    for (dtype, want) in [("float32", f64::from(32f32.sqrt())), ("bfloat16", 5.65625)] {
        let copy = Copy::of("gemma3_text", |c| c["dtype"] = dtype.into(), |_| {});
        let spec = spec_of_folder(&copy.0).expect("spec");
        assert_eq!(spec.constructs.embedding_scale, Some(want), "{dtype}");
    }
}
