//! The command line on bad inputs and closed pipes, run as a user runs it: every input gets a
//! clear `error:` and exit status 2, or its row; nothing panics or aborts; `check` explains
//! itself. docs/SOUNDNESS.md, "Bad inputs", is the table of these.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stepcheck"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn stepcheck(args: &[&str]) -> Output {
    bin().args(args).output().expect("runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

// ---- The boundary: a closed stdout. ----

/// Runs `args` with a stdout whose reader reads `keep` bytes, then closes it (as `| head -c` does);
/// the exit status and stderr.
fn into_closed_pipe(args: &[&str], keep: usize) -> (Option<i32>, String) {
    let mut child = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawns");
    let mut out = child.stdout.take().expect("stdout");
    let mut buf = vec![0; keep];
    let _ = out.read_exact(&mut buf);
    drop(out);
    let o = child.wait_with_output().expect("waits");
    (o.status.code(), stderr(&o))
}

#[test]
fn every_command_writing_to_a_closed_stdout_ends_quietly_with_status_0() {
    let cases: &[&[&str]] = &[
        &["explain", "tests/corpus/experts-deepseek-routing.case"],
        &["corpus", "review", "tests/corpus"],
        &["check", "--preset", "tiny", "--steps", "2"],
        &["check", "--preset", "tiny", "--steps", "2", "--json"],
        &["graph", "--preset", "small"],
        &["lower", "--preset", "small", "--json"],
        &["run", "--preset", "tiny", "--tokens", "1,2,3", "--json"],
        &["verdict", "reference/fixtures/qwen35-c", "--json"],
        &["corpus", "import", "tests/corpus/experts-deepseek-routing.case"],
        &["--help"],
    ];
    for args in cases {
        for keep in [0, 3] {
            let (code, err) = into_closed_pipe(args, keep);
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert_eq!(code, Some(0), "{args:?} after {keep} bytes: {err}");
        }
    }
}

// ---- The boundary: sizes in flags and files. ----

/// Runs each `(arguments, what stderr says)`: an `error:` that says it, and exit status 2.
fn each_is_an_error_with_status_2(cases: &[(&[&str], &str)]) {
    for (args, says) in cases {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("error:") && stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_size_over_its_limit_is_refused_with_its_limit_and_status_2() {
    // (arguments, what stderr says)
    let cases: &[(&[&str], &str)] = &[
        (&["check", "--preset", "tiny", "--steps", "1000000000000"], "`--steps` is 1000000000000, the limit is 4096"),
        (&["run", "--preset", "tiny", "--tokens", "1,x"], "\"x\" is not a token id"),
        (&["check", "--preset", "tiny", "--max-gib", "NaN"], "`--max-gib` is NaN, it must be a finite number"),
        (&["check", "--preset", "tiny", "--max-gib", "-1"], "`--max-gib` is -1"),
        (&["run", "--preset", "tiny", "--tokens", "1", "--max-gib", "inf"], "`--max-gib` is inf"),
    ];
    each_is_an_error_with_status_2(cases);
}

#[test]
fn a_flag_at_zero_over_its_limit_or_changing_nothing_is_refused_with_status_2() {
    // (arguments, what stderr says)
    let cases: &[(&[&str], &str)] = &[
        (&["check", "--preset", "tiny", "--batch", "0"], "`--batch` is 0, it must be at least 1"),
        (&["check", "--preset", "tiny", "--batch", "1000000"], "`--batch` is 1000000, the limit is 64"),
        (&["prove", "--preset", "tiny", "--layers", "0"], "`--layers` is 0, it must be at least 1"),
        (&["prove", "--preset", "tiny", "--layers", "1000000"], "`--layers` is 1000000, the limit is 1024"),
        (
            &["prove", "--preset", "tiny", "--layers", "8", "--interval", "0"],
            "`--interval` is 0, it must be at least 1",
        ),
        (&["prove", "--preset", "tiny", "--interval", "2"], "the following required arguments were not provided"),
        (&["check", "--preset", "tiny", "--legend", "--json"], "cannot be used with"),
        (&["check", "tests/missing.gguf", "--weights", "q8_0"], "cannot be used with"),
        (&["run", "tests/missing.gguf", "--tokens", "1", "--weights", "q8_0"], "cannot be used with"),
        // (was: a `refused Check` row)
        (&["check", "--preset", "tiny", "--steps", "0"], "`--steps` is 0; a verdict needs at least 2"),
        (&["check", "--preset", "tiny", "--steps", "1"], "`--steps` is 1; a verdict needs at least 2"),
        // No matrix of tiny has rows of 256 values: every weight stayed F32, with nothing said.
        (
            &["run", "--preset", "tiny", "--tokens", "1", "--weights", "q4_k"],
            "--weights q4_k: no matrix of tiny has rows of whole Q4_K blocks (256 values each",
        ),
    ];
    each_is_an_error_with_status_2(cases);
}

#[test]
fn a_fifo_a_directory_or_a_device_in_place_of_a_file_is_refused_by_what_it_is() {
    let dir = scratch("cli-not-files");
    let (fifo, gguf) = (dir.join("config.json"), dir.join("model.gguf"));
    assert!(Command::new("mkfifo").arg(&fifo).arg(&gguf).status().is_ok_and(|s| s.success()), "mkfifo");
    // (arguments, what stderr says). A FIFO with no writer blocked `verdict` and `explain` forever.
    let cases: &[(&[&str], &str)] = &[
        (&["verdict", path(&fifo)], "not a regular file: a FIFO"),
        (&["explain", path(&fifo)], "not a regular file: a FIFO"),
        (&["verdict", path(&dir)], "not a regular file: a FIFO"),
        (&["explain", path(&dir)], "not a regular file: a directory"),
        (&["run", path(&gguf), "--tokens", "1"], "not a regular file: a FIFO"),
        (&["verdict", path(&gguf)], "not a regular file: a FIFO"),
    ];
    for (args, says) in cases {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_model_too_large_for_the_memory_is_refused_with_what_it_needs() {
    let o = stepcheck(&["run", "--preset", "qwen3.5-9b-style", "--tokens", "1", "--max-gib", "4"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: qwen3.5-9b-style needs about 33.7 GiB"), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than the 4.0 GiB --max-gib 4 allows"), "{}", stderr(&o));
    // Under a 2 GB address-space limit, `run` and `check` say so instead of aborting.
    let bin = env!("CARGO_BIN_EXE_stepcheck");
    for cmd in ["run --preset qwen3.5-0.8b --tokens 1", "check --preset qwen3.5-0.8b --steps 2"] {
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v 2000000 && exec {bin} {cmd}"))
            .output()
            .expect("sh runs");
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}{}", stdout(&o), stderr(&o));
        let said = stdout(&o) + &stderr(&o);
        assert!(said.contains("needs about") && said.contains("the address-space limit (ulimit -v)"), "{cmd}: {said}");
    }
}

#[test]
fn corpus_review_gives_a_bad_file_its_row_and_runs_the_rest() {
    let dir = scratch("cli-review-bad");
    let good = "head-bound-to-embedding.case";
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    std::fs::copy(corpus.join(good), dir.join(good)).expect("copy");
    let text = std::fs::read_to_string(corpus.join(good)).expect("read");
    std::fs::write(dir.join("a-steps.case"), format!("{text}steps 1000000000000\n")).expect("write");
    std::fs::write(dir.join("b-vocab.case"), text.replacen("\"vocab\": ", "\"vocab\": 1000000000", 1)).expect("write");
    let o = stepcheck(&["corpus", "review", path(&dir)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("a-steps.case") && out.contains("field `steps` is 1000000000000, the limit is 4096"), "{out}");
    assert!(out.contains("b-vocab.case") && out.contains("field `vocab` is"), "{out}");
    assert!(!out.contains(good) && out.ends_with("3 cases, 2 changed\n"), "{out}");
}

// ---- The boundary: `check`'s table. ----

#[test]
fn check_gives_every_model_a_row_a_legend_and_a_summary() {
    let o = stepcheck(&[
        "check",
        "--legend",
        "--preset",
        "tiny",
        "--preset",
        "no-such",
        "no/such/folder",
        "--preset",
        "qwen3.5-9b-style",
        "--preset",
        "small",
        "--steps",
        "2",
        "--max-gib",
        "8",
    ]);
    // A model the user named and that could not be checked makes it exit 2.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = stdout(&o);
    let row =
        |model: &str| out.lines().find(|l| l.starts_with(model)).unwrap_or_else(|| panic!("no row {model}:\n{out}"));
    assert!(row("folder ").contains("error NoSuchPath"), "{out}");
    assert!(row("tiny ").contains(" agree "), "{out}");
    assert!(row("no-such").contains("error NoSuchPreset"), "{out}");
    assert!(row("qwen3.5-9b-style").contains("skipped"), "{out}");
    // The skipped row says plainly that nothing was run but the proof.
    assert!(out.contains("not run: qwen3.5-9b-style needs about 33.7 GiB"), "{out}");
    assert!(out.contains("only its proof was checked (proved)"), "{out}");
    // The models after a refused one still run.
    assert!(row("small ").contains(" agree "), "{out}");
    for legend in ["structure:", "max rel, bound:", "verdicts: agree", "inconclusive", "refused", "error", "skipped"] {
        assert!(out.contains(legend), "no {legend}:\n{out}");
    }
    // A skipped model is counted apart from the ones judged, never as agreeing.
    // A model that could not be read is an error, not a refusal, and not judged.
    let summary = "5 models: 2 judged (2 agree, 0 disagree, 0 inconclusive, 0 refused), 2 errors (not judged), 1 \
                   skipped (not run, not counted as agreeing); 3 proved";
    assert!(out.contains(summary), "{out}");
    // A pipe gets progress as plain lines, never a terminal's escape codes.
    assert!(!stderr(&o).contains(['\x1b', '\r']), "{}", stderr(&o));
}

#[test]
fn the_legend_is_printed_with_legend_or_on_a_terminal_never_otherwise() {
    let legend = ["verdicts: agree", "structure: the engine's units", "max rel, bound:", "proof: the program proved"];
    // (arguments, whether the legend is printed): stdout is a pipe here, not a terminal.
    let cases: [(&[&str], bool); 4] = [
        (&["check", "--preset", "tiny", "--steps", "2"], false),
        (&["check", "--preset", "tiny", "--steps", "2", "--legend"], true),
        (&["check", "--batch", "1", "--preset", "tiny"], false),
        (&["check", "--batch", "1", "--preset", "tiny", "--legend"], true),
    ];
    for (args, printed) in cases {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        for line in legend {
            assert_eq!(stdout(&o).contains(line), printed, "{args:?}, {line:?}:\n{}", stdout(&o));
        }
    }
}

#[test]
fn check_names_a_model_by_its_file_or_folder_and_json_by_its_path() {
    let (folder, gguf) = ("reference/fixtures/qwen35-c", "reference/fixtures/qwen35-b/model.gguf");
    let o = stepcheck(&["check", folder, gguf, "--preset", "tiny", "--steps", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().skip(1).take(3).collect();
    for (row, name) in rows.iter().zip(["qwen35-c ", "model.gguf ", "tiny "]) {
        assert!(row.starts_with(name), "{name:?}: {out}");
    }
    assert!(!out.contains("reference/fixtures"), "{out}");
    let o = stepcheck(&["check", folder, gguf, "--steps", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!((&v["models"][0]["model"], &v["models"][1]["model"]), (&folder.into(), &gguf.into()));
}

#[test]
fn counts_of_one_are_singular() {
    // (arguments, what stdout says, what it must not say)
    let dir = scratch("cli-one-case");
    let case = "head-bound-to-embedding.case";
    std::fs::copy(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus").join(case), dir.join(case))
        .expect("copy");
    let cases: [(&[&str], &str, &str); 4] = [
        (&["check", "--preset", "tiny", "--steps", "2"], "\n1 model: 1 judged", "1 models"),
        (&["check", "--batch", "1", "--preset", "tiny"], "\n1 model: 1 judged", "1 models"),
        (&["prove", "--preset", "tiny", "--layers", "1"], "tiny (1 layer, numerics", "1 layers"),
        (&["corpus", "review", path(&dir)], "1 case, 0 changed", "1 cases"),
    ];
    for (args, says, never) in cases {
        let o = stepcheck(args);
        assert!(stdout(&o).contains(says) && !stdout(&o).contains(never), "{args:?}: {}", stdout(&o));
    }
}

#[test]
fn check_json_prints_one_object_with_a_row_per_model() {
    let o = stepcheck(&["check", "--preset", "tiny", "--preset", "nope", "--steps", "2", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    let models = v["models"].as_array().expect("models");
    assert_eq!(models.len(), 2);
    assert_eq!(models[0]["verdict"], "agree");
    assert_eq!(models[0]["steps"], 2);
    assert!(models[0]["max_rel"].as_f64().is_some_and(|x| x < 1e-4));
    assert!(models[0]["widest"].as_f64().is_some_and(|x| x < 1e-3));
    assert!(models[0]["structure"].as_f64().is_some_and(|x| x < 1e-9));
    assert_eq!((&models[1]["verdict"], &models[1]["refusal"]), (&"error".into(), &"NoSuchPreset".into()));
    assert_eq!(v["summary"]["agree"], 1);
    assert_eq!(v["summary"]["exit"], 2);
}

#[test]
fn a_preset_of_the_default_list_skipped_for_its_size_is_no_failure_but_a_named_one_is() {
    let o = stepcheck(&["check", "--preset", "tiny", "--preset", "small", "--max-gib", "0.001"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "2 models: 0 judged (0 agree, 0 disagree, 0 inconclusive, 0 refused), 0 errors (not judged), 2 skipped"
        ),
        "{out}"
    );
    // The default list with presets too large: the others answer, the skipped ones are named.
    let o = stepcheck(&["check", "--steps", "2", "--max-gib", "1"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains(
            "3 judged (3 agree, 0 disagree, 0 inconclusive, 0 refused), 0 errors (not judged), 2 skipped (not run"
        ),
        "{out}"
    );
    assert!(out.contains("not run: qwen3.5-0.8b, qwen3.5-9b-style; the exit status answers for the models"), "{out}");
    // Nothing judged at all is no answer.
    let o = stepcheck(&["check", "--max-gib", "0.001"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

#[test]
fn check_batch_runs_covering_schedules_and_counts_a_skipped_model_apart() {
    let o = stepcheck(&["check", "--batch", "2", "--preset", "tiny"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let kinds =
        "each holds admit, decode, finish, reuse of a freed slot, fork, rollback, a partial batch and a prefill";
    assert!(out.lines().next().is_some_and(|l| l.contains("3 schedules (seeds 0–2)") && l.ends_with(kinds)), "{out}");
    // `check`'s table: its header, a row per model, each schedule's line under it.
    assert!(out.lines().nth(1).is_some_and(|l| l.starts_with("model ") && l.contains(" verdict ")), "{out}");
    let row = out.lines().find(|l| l.starts_with("tiny ")).unwrap_or_default();
    assert_eq!(row.split_whitespace().take(4).collect::<Vec<_>>(), ["tiny", "agree", "54", "proved"], "{out}");
    for seed in 0..3 {
        let line = out.lines().find(|l| l.trim_start().starts_with(&format!("seed {seed}: "))).unwrap_or_default();
        assert!(line.contains("proof: proved; symbolic: slots isolated; interpreters: agree over"), "{out}");
    }
    assert!(
        out.contains(
            "\n1 model: 1 judged (1 agree, 0 disagree, 0 inconclusive, 0 refused), 0 errors (not judged), 0 skipped"
        ),
        "{out}"
    );
    assert!(out.contains("\n3 schedules run: 3 agree, 0 disagree, 0 inconclusive, 0 refused; 3 of 3"), "{out}");
    assert!(out.contains("\npeak memory: "), "{out}");
    // A named model too large is not run, only proved, and makes the command exit 2.
    let o = stepcheck(&["check", "--batch", "2", "--preset", "tiny", "--preset", "qwen3.5-9b-style", "--max-gib", "8"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(2), "{out}{}", stderr(&o));
    let row = out.lines().find(|l| l.starts_with("qwen3.5-9b-style ")).unwrap_or_default();
    assert!(row.contains(" skipped ") && row.contains(" proved "), "{out}");
    assert!(out.contains("not run: qwen3.5-9b-style needs about"), "{out}");
    assert!(out.contains("only its proofs were checked (3 of 3 schedules proved)"), "{out}");
    assert!(
        out.contains(
            "2 models: 1 judged (1 agree, 0 disagree, 0 inconclusive, 0 refused), 0 errors (not judged), 1 skipped"
        ),
        "{out}"
    );
}

#[test]
fn check_batch_json_has_checks_shape_with_each_schedule_in_its_row() {
    let o = stepcheck(&["check", "--batch", "1", "--preset", "tiny", "--preset", "nope", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    let single = stepcheck(&["check", "--preset", "tiny", "--preset", "nope", "--steps", "2", "--json"]);
    let w: serde_json::Value = serde_json::from_str(stdout(&single).trim()).expect("one JSON object");
    let keys = |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    // Every field of `check --json` is there, in the rows and in the summary.
    for (batch, single) in [(&v["models"][0], &w["models"][0]), (&v["summary"], &w["summary"])] {
        let missing: Vec<String> = keys(single).into_iter().filter(|k| batch.get(k).is_none()).collect();
        assert!(missing.is_empty(), "missing {missing:?}: {batch}");
    }
    let tiny = &v["models"][0];
    assert_eq!((&tiny["verdict"], &tiny["proof"], &tiny["commands"]), (&"agree".into(), &"proved".into(), &54.into()));
    assert!(tiny["structure"].as_f64().is_some_and(|x| x < 1e-9), "{tiny}");
    let schedules = tiny["schedules"].as_array().expect("schedules");
    assert_eq!(schedules.len(), 3);
    for s in schedules {
        assert_eq!(
            (&s["proof"], &s["symbolic"], &s["verdict"]),
            (&"proved".into(), &"slots isolated".into(), &"agree".into())
        );
        assert!(s["interpreters"].as_str().is_some_and(|i| i.starts_with("agree over")), "{s}");
    }
    assert_eq!((&v["models"][1]["verdict"], &v["models"][1]["refusal"]), (&"error".into(), &"NoSuchPreset".into()));
    assert_eq!((&v["summary"]["agree"], &v["summary"]["exit"]), (&1.into(), &2.into()));
    assert_eq!((&v["batch"]["slots"], &v["batch"]["schedules"]["agree"]), (&1.into(), &3.into()));
}

// ---- The boundary: the other commands. ----

#[test]
fn verdict_json_on_an_error_prints_a_json_error_object() {
    let dir = scratch("cli-verdict-json");
    std::fs::write(dir.join("config.json"), "{\"model_type\": ").expect("write");
    let o = stepcheck(&["verdict", path(&dir), "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["error"], "NotJudged");
    assert_eq!(v["accepted"], serde_json::Value::Null);
    assert!(v["message"].as_str().is_some_and(|m| m.contains("config.json") && m.contains("not valid JSON")), "{v}");
}

#[test]
fn a_config_with_pythons_infinity_gets_its_verdict() {
    let dir = scratch("cli-verdict-infinity");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/qwen35-c/config.json");
    let text = std::fs::read_to_string(fixture).expect("read");
    let text = text.replacen("\"use_cache\": true", "\"use_cache\": true,\n  \"time_step_limit\": [0.0, Infinity]", 1);
    std::fs::write(dir.join("config.json"), text).expect("write");
    let o = stepcheck(&["verdict", path(&dir)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("accepted: a program of"), "{}", stdout(&o));
}

/// Every command and subcommand, as `--help` is asked of it.
const COMMANDS: &[&[&str]] = &[
    &[],
    &["graph"],
    &["lower"],
    &["run"],
    &["check"],
    &["verdict"],
    &["corpus"],
    &["corpus", "import"],
    &["corpus", "review"],
    &["explain"],
    &["prove"],
];

/// The `--help` of `command`, asserted to succeed.
fn help(command: &[&str]) -> String {
    let o = stepcheck(&[command, &["--help"]].concat());
    assert!(o.status.success(), "{command:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn every_help_states_the_exit_statuses() {
    for command in COMMANDS {
        assert!(help(command).contains("Exit status: 0 "), "{command:?}: {}", help(command));
    }
}

#[test]
fn no_help_names_an_internal_path() {
    for command in COMMANDS {
        let text = help(command);
        assert!(!text.contains("crate::") && !text.contains("::"), "{command:?}: {text}");
    }
}

#[test]
fn prove_json_prints_one_object_with_the_verdict_and_what_the_text_carries() {
    // (arguments, exit status, verdict)
    let cases: [(&[&str], i32, &str); 2] = [
        (&["prove", "--preset", "tiny", "--json"], 0, "proved"),
        (&["prove", "--preset", "tiny", "--numerics", "bf16/bf16/bf16", "--json"], 1, "refused"),
    ];
    for (args, status, verdict) in cases {
        let o = stepcheck(args);
        assert_eq!(o.status.code(), Some(status), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
        assert_eq!((&v["model"], &v["layers"], &v["verdict"]), (&"tiny".into(), &4.into(), &verdict.into()), "{v}");
    }
    let o = stepcheck(&["prove", "--preset", "tiny", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    let text = stdout(&stepcheck(&["prove", "--preset", "tiny"]));
    // Each output the text lists, with its stage, size and lemmas.
    let outputs = v["proof"]["outputs"].as_array().expect("outputs");
    assert!(text.contains(&format!("proved: {} outputs over {} commands", outputs.len(), v["proof"]["commands"])));
    let logits = &outputs[0];
    let lemmas = logits["lemmas"].as_object().expect("lemmas").iter().map(|(l, n)| format!("{l} ×{n}"));
    let line = format!("  logits: {} ({} nodes) by ", logits["stage"].as_str().unwrap_or_default(), logits["size"]);
    assert!(text.lines().any(|l| l.starts_with(&line) && lemmas.clone().all(|x| l.contains(&x))), "{line}\n{text}");
    assert_eq!(v["numerics"], "f32/f32/f32");
    let o = stepcheck(&["prove", "--preset", "tiny", "--numerics", "bf16/bf16/bf16", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["refusal"], "RecurrentStateBelowF32");
    assert!(v["message"].as_str().is_some_and(|m| m.starts_with("the recurrent state must be stored in f32")), "{v}");
}

#[test]
fn graph_json_prints_one_object_with_the_graphs_text() {
    for fused in [false, true] {
        let flags: &[&str] = if fused { &["--fused"] } else { &[] };
        let o = stepcheck(&[&["graph", "--preset", "tiny", "--json"], flags].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
        let text = stdout(&stepcheck(&[&["graph", "--preset", "tiny"], flags].concat()));
        assert_eq!((&v["model"], &v["fused"], &v["text"]), (&"tiny".into(), &fused.into(), &text.into()));
        assert!(v["ops"].as_u64().is_some_and(|n| n > 0) && v["tensors"].as_u64().is_some_and(|n| n > 0), "{v}");
    }
}

#[test]
fn usage_lines_name_the_preset_and_graph_reads_no_weight() {
    for cmd in ["graph", "lower", "run"] {
        let o = stepcheck(&[cmd, "--help"]);
        let usage = stdout(&o).lines().find(|l| l.starts_with("Usage:")).unwrap_or_default().to_string();
        assert!(usage.contains("<MODEL | --preset NAME>"), "{cmd}: {usage}");
    }
    // A folder with a config and no weights: `graph` prints its step, `run` needs the weights.
    let dir = scratch("cli-graph-no-weights");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures/qwen35-c/config.json");
    std::fs::copy(fixture, dir.join("config.json")).expect("copy");
    let o = stepcheck(&["graph", path(&dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("logits"), "{}", stdout(&o));
    let o = stepcheck(&["run", path(&dir), "--tokens", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("neither model.safetensors nor model.safetensors.index.json"), "{}", stderr(&o));
}

#[test]
fn run_shows_the_argmax_and_the_top_5_of_each_step_and_reads_tokens_with_spaces() {
    let o = stepcheck(&["run", "--preset", "tiny", "--tokens", "3, 1 4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    // A line per prompt token, the prompt's rate, then the peak memory the run used.
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines[3].starts_with("prompt: 3 tokens in "), "{}", lines[3]);
    assert!(lines[4].starts_with("peak memory: "), "{}", lines[4]);
    for (step, (line, token)) in lines.iter().zip([3, 1, 4]).enumerate() {
        assert!(line.starts_with(&format!("step {step}, token {token}: argmax ")), "{line}");
        assert_eq!(line.matches(" (").count(), 5, "{line}");
    }
    // The argmax is the largest logit of the step, as `--json` prints them.
    let o = stepcheck(&["run", "--preset", "tiny", "--tokens", "3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    let logits: Vec<f64> = v["logits"][0].as_array().expect("row").iter().map(|x| x.as_f64().expect("f64")).collect();
    let best = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
    assert!(lines[0].starts_with(&format!("step 0, token 3: argmax {best};")), "{}", lines[0]);
}
