//! The command line as a user meets it: what each command prints and its exit status.

use std::process::{Command, Output};

fn stepcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn run_json_prints_one_object_with_the_tokens_and_a_row_of_logits_per_step() {
    for interp in ["engine", "reference"] {
        let o = stepcheck(&["run", "--preset", "tiny", "--tokens", "3,1,4", "--json", "--interp", interp]);
        assert!(o.status.success(), "{interp}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
        assert_eq!(v["tokens"], serde_json::json!([3, 1, 4]));
        let rows = v["logits"].as_array().expect("logits");
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(|r| r.as_array().is_some_and(|r| r.len() == 97)));
        // A pipe gets progress as plain lines, never a terminal's escape codes.
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains(['\x1b', '\r']), "{stderr}");
    }
}

#[test]
fn lower_prints_the_program_or_the_refusal_with_its_exit_status() {
    // (arguments, exit status, what stdout starts with)
    let cases: [(&[&str], i32, &str); 3] = [
        (&["lower", "--preset", "tiny"], 0, "program tiny numerics f32/f32/f32"),
        (&["lower", "--preset", "tiny", "--numerics", "bf16/bf16/bf16"], 1, "refused: RecurrentStateBelowF32"),
        (&["lower", "reference/fixtures/qwen35-b/model.gguf"], 0, "program qwen35-b"),
    ];
    for (args, status, starts) in cases {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(status), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(stdout(&o).starts_with(starts), "{args:?}: {}", stdout(&o));
    }
}

#[test]
fn check_prints_one_agreeing_line_per_model() {
    let o = stepcheck(&["check", "--preset", "tiny", "reference/fixtures/qwen35-c", "--steps", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The header, a row per model, then (after a blank line) the summary: the legend is printed
    // only on a terminal or with `--legend`.
    let lines: Vec<String> = stdout(&o).lines().take_while(|l| !l.is_empty()).map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1..].iter().all(|l| l.split_whitespace().nth(1) == Some("agree")), "{lines:?}");
}

#[test]
fn a_bad_model_path_is_an_error_not_a_panic() {
    let o = stepcheck(&["run", "no/such/model.gguf", "--tokens", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error:"));
}

#[test]
fn random_checkpoints_in_a_quantized_type_run_and_check() {
    for weights in ["q8_0", "q4_k", "bf16"] {
        let o = stepcheck(&["check", "--preset", "small", "--weights", weights, "--steps", "2"]);
        assert!(o.status.success(), "{weights}: {}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
        let row = stdout(&o).lines().nth(1).unwrap_or_default().to_string();
        assert_eq!(row.split_whitespace().nth(1), Some("agree"), "{weights}: {row}");
        let o = stepcheck(&["run", "--preset", "small", "--weights", weights, "--tokens", "1,2"]);
        assert!(o.status.success(), "{weights}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = stepcheck(&["check", "--preset", "tiny", "--weights", "q8_1"]);
    assert_eq!(o.status.code(), Some(2), "an unknown type is a bad flag");
    assert!(String::from_utf8_lossy(&o.stderr).contains("q8_0"), "the error lists the types");
}

#[test]
fn bench_reports_pp_and_tg_as_llama_bench_names_them() {
    let o = stepcheck(&["bench", "--preset", "tiny", "-p", "9", "-n", "3", "-r", "2", "--chunk", "4", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let tests = v["tests"].as_array().expect("tests");
    let names: Vec<&str> = tests.iter().filter_map(|t| t["test"].as_str()).collect();
    assert_eq!(names, ["pp9", "tg3"]);
    for t in tests {
        let samples = t["samples_ts"].as_array().expect("samples");
        assert_eq!(samples.len(), 2, "{t}");
        assert!(samples.iter().all(|s| s.as_f64().is_some_and(|x| x > 0.0)), "{t}");
        assert!(t["avg_ts"].as_f64().is_some_and(|x| x > 0.0), "{t}");
    }
    let table = stdout(&stepcheck(&["bench", "--preset", "tiny", "-p", "4", "-n", "2", "-r", "1"]));
    assert!(table.lines().any(|l| l.starts_with("| tiny ") && l.contains("| pp4 |")), "{table}");
}

#[test]
fn run_prefills_the_prompt_generates_n_tokens_and_prints_both_rates() {
    // The engine's prefill and the reference's steps give the same prompt logits (within the
    // check's f32 tolerance) and so generate the same tokens.
    let run = |interp: &str| {
        let o = stepcheck(&[
            "run",
            "--preset",
            "tiny",
            "--tokens",
            "3,1,4,1,5",
            "-n",
            "3",
            "--chunk",
            "2",
            "--json",
            "--interp",
            interp,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).expect("one JSON object")
    };
    let (engine, reference) = (run("engine"), run("reference"));
    let logits =
        |v: &serde_json::Value| -> Vec<Vec<f64>> { serde_json::from_value(v["logits"].clone()).expect("logits") };
    let (e, r) = (logits(&engine), logits(&reference));
    assert_eq!(e.len(), 5);
    for (a, b) in e.iter().zip(&r) {
        assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4 * y.abs().max(1.0)), "{a:?} {b:?}");
    }
    assert_eq!(engine["generated"].as_array().map(Vec::len), Some(3));
    assert_eq!(engine["generated"], reference["generated"]);
    assert!(engine["prompt_tokens_per_s"].as_f64().is_some_and(|x| x > 0.0));
    let text = stdout(&stepcheck(&["run", "--preset", "tiny", "--tokens", "3,1", "-n", "1"]));
    assert!(text.contains("step 2, token ") && text.contains("(generated): argmax"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("prompt: 2 tokens in ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("generation: 1 token in ")), "{text}");
}
