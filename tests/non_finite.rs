//! Values that are not finite numbers, as a user meets them: a checkpoint holding a NaN or an
//! infinity in a weight the step reads (a block scale's included) is refused by tensor, row, value
//! and block before anything runs, whether or not a token reaches it; a step whose logits or
//! state come out non-finite from finite weights names the step, the tensor and the index.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stepcheck::formats::gguf::GgufFile;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

fn stepcheck(args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stepcheck"));
    c.current_dir(env!("CARGO_MANIFEST_DIR")).args(args).output().expect("runs")
}

fn said(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(path)
}

/// A copy of the GGUF `source` in `dir` with `bytes` written at byte `at` of tensor `tensor`'s data
/// (`None`: of the first tensor of layer 0 stored as `ty`); the tensor's name.
fn corrupted_gguf(dir: &Path, source: &Path, tensor: Tensor, at: usize, bytes: &[u8]) -> (PathBuf, String) {
    let mut data = std::fs::read(source).expect("the fixture");
    let file = GgufFile::open(source).expect("a GGUF");
    let info = match tensor {
        Tensor::Named(name) => file.info().tensor(name).expect("the tensor").clone(),
        Tensor::FirstOfType(ty) => file
            .info()
            .tensors()
            .iter()
            .find(|t| t.name.starts_with("blk.0.") && t.ggml_type.to_string() == ty)
            .unwrap_or_else(|| panic!("a {ty} tensor in layer 0 of {}", source.display()))
            .clone(),
    };
    let range = file.info().data_range(data.len(), &info).expect("its bytes");
    let at = if at == usize::MAX { range.end - bytes.len() } else { range.start + at };
    data[at..at + bytes.len()].copy_from_slice(bytes);
    let out = dir.join(format!("{}.gguf", info.name));
    std::fs::write(&out, &data).expect("written");
    (out, info.name)
}

/// Which tensor of a fixture to corrupt.
#[derive(Clone, Copy)]
enum Tensor {
    Named(&'static str),
    FirstOfType(&'static str),
}

const F16_NAN: [u8; 2] = 0x7E00u16.to_le_bytes();
const F16_INF: [u8; 2] = 0x7C00u16.to_le_bytes();
const BF16_NAN: [u8; 2] = 0x7FC0u16.to_le_bytes();

#[test]
fn a_non_finite_weight_is_refused_by_tensor_row_value_and_block_before_anything_runs() {
    let dir = scratch("non-finite-weights");
    let nan = f32::NAN.to_le_bytes();
    // (fixture, tensor, byte offset in its data (MAX: its last value), bytes written, what the
    // error says after the tensor's name). Each ran before: `run` printed an argmax over NaN
    // logits, or `check` said agree.
    let cases: &[(&str, Tensor, usize, &[u8], &str)] = &[
        // The last embedding row: no token of a short run reads it (check said agree).
        (
            "converter-f32/model.gguf",
            Tensor::Named("token_embd.weight"),
            usize::MAX,
            &nan,
            "(F32) row 96, value 31 is NaN",
        ),
        (
            "quant-models/q8_0/model.gguf",
            Tensor::FirstOfType("Q8_0"),
            0,
            &F16_NAN,
            "(Q8_0) row 0, value 0 (block 0 of the row) is NaN",
        ),
        (
            "quant-models/q4_k_m/model.gguf",
            Tensor::FirstOfType("Q4_K"),
            0,
            &F16_INF,
            "(Q4_K) row 0, value 0 (block 0 of the row) is",
        ),
        ("quant-models/bf16/model.gguf", Tensor::FirstOfType("BF16"), 0, &BF16_NAN, "(BF16) row 0, value 0 is NaN"),
        ("quant-models/f16/model.gguf", Tensor::FirstOfType("F16"), 2, &F16_INF, "(F16) row 0, value 1 is inf"),
    ];
    for &(source, tensor, at, bytes, says) in cases {
        let (file, name) = corrupted_gguf(&dir, &fixture(source), tensor, at, bytes);
        let file = file.to_str().expect("UTF-8");
        for args in [&["run", file, "--tokens", "1,2"][..], &["check", file, "--steps", "2"][..]] {
            let o = stepcheck(args);
            let said = said(&o);
            assert_eq!(o.status.code(), Some(2), "{source} {args:?}: {said}");
            assert!(said.contains(&format!("weight {name} {says}")), "{source} {args:?}: {said}");
            assert!(!said.contains("argmax") && !said.contains("(1 agree"), "{source} {args:?}: {said}");
        }
    }
}

#[test]
fn a_nan_in_a_safetensors_weight_is_refused_by_the_tensor_the_step_reads() {
    let dir = scratch("non-finite-safetensors");
    let source = fixture("qwen35-c");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(source.join(f), dir.join(f)).expect("copied");
    }
    // The final norm's weight, stored as transformers stores it (`w`, read as `1 + w`).
    let path = dir.join("model.safetensors");
    let mut data = std::fs::read(&path).expect("read");
    let header_len = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&data[8..8 + header_len]).expect("a JSON header");
    let entry = &header["model.norm.weight"];
    assert_eq!(entry["dtype"], "F32", "{entry}");
    let start = 8 + header_len + entry["data_offsets"][0].as_u64().expect("an offset") as usize;
    data[start + 4..start + 8].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, &data).expect("written");
    let dir = dir.to_str().expect("UTF-8");
    for args in [&["run", dir, "--tokens", "1"][..], &["check", dir, "--steps", "2"][..]] {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", said(&o));
        assert!(said(&o).contains("weight output_norm.weight (F32) row 0, value 1 is NaN"), "{args:?}: {}", said(&o));
    }
}

/// `run` on a copy of the f32 converter fixture with `value` as every value of `tensor`; the exit
/// status, stdout and stderr.
fn run_with_every_value_of(tensor: &'static str, value: f32, more: &[&str]) -> (Option<i32>, String, String) {
    let dir = scratch(&format!("non-finite-run-{tensor}-{}", more.join("")));
    let source = fixture("converter-f32/model.gguf");
    let (file, _) = {
        let file = GgufFile::open(&source).expect("a GGUF");
        let info = file.info().tensor(tensor).expect("the tensor").clone();
        let len = std::fs::metadata(&source).expect("its size").len() as usize;
        let range = file.info().data_range(len, &info).expect("its bytes");
        let values: Vec<u8> = value.to_le_bytes().repeat(range.len() / 4);
        corrupted_gguf(&dir, &source, Tensor::Named(tensor), 0, &values)
    };
    let mut args = vec!["run", file.to_str().expect("UTF-8"), "--tokens", "1,2"];
    args.extend(more);
    let o = stepcheck(&args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    (o.status.code(), out, err)
}

#[test]
fn finite_weights_that_overflow_a_logit_name_the_step_and_show_no_argmax() {
    // The final norm's weight at f32's largest value: every normed value overflows, and the
    // head's sums of infinities of both signs are NaN. (was: `argmax 0; top 5: 0 (NaN), …`, exit 0)
    // (The reference computes in f64, where these weights do not overflow.)
    for more in [&[][..], &["--json"]] {
        let (status, out, err) = run_with_every_value_of("output_norm.weight", f32::MAX, more);
        assert_eq!(status, Some(2), "{more:?}: {out}{err}");
        assert!(err.contains("error: step 0, token 1: logits["), "{more:?}: {err}");
        assert!(err.contains("no argmax is shown for it or after it"), "{more:?}: {err}");
        assert!(!out.contains("argmax") && !out.contains("\"logits\""), "{more:?}: {out}");
    }
}

#[test]
fn finite_weights_that_overflow_the_carried_state_name_the_step_the_state_and_the_index() {
    // Layer 0's merged DeltaNet projection at f32's largest value: its outputs overflow, and the
    // conv window carries them to the next step before any logit shows it.
    let (status, out, err) = run_with_every_value_of("blk.0.attn_qkv.weight", f32::MAX, &[]);
    assert_eq!(status, Some(2), "{out}{err}");
    assert!(err.contains("error: step 0, token 1: state l0.conv holds a value that is not finite at index"), "{err}");
    assert!(!out.contains("argmax"), "{out}");
}
