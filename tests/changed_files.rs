//! A checkpoint that changes while it is read: a file truncated under its memory map ends the
//! process with exit status 2 and a message naming the file, and the steps already decoded stay
//! printed (it was a SIGBUS, exit 135, with nothing said and the steps lost).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/fixtures").join(path)
}

/// Runs `stepcheck run model --tokens 1 -n 4095` (a prompt of one token, then many generated
/// steps), truncates `file` to 64 bytes once the prompt's line is printed, and returns the exit
/// status, stdout and stderr.
fn run_and_truncate(model: &Path, file: &Path) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(["run", model.to_str().expect("UTF-8"), "--tokens", "1", "-n", "4095"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("the first step's line");
    std::fs::OpenOptions::new().write(true).open(file).and_then(|f| f.set_len(64)).expect("truncated");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let o = child.wait_with_output().expect("ends");
    (o.status.code(), first + &rest, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_gguf_truncated_while_run_reads_it_ends_with_status_2_naming_it_and_keeps_the_steps_printed() {
    let dir = scratch("changed-gguf");
    let file = dir.join("model.gguf");
    std::fs::copy(fixture("converter-f32/model.gguf"), &file).expect("copied");
    let (status, out, err) = run_and_truncate(&file, &file);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains(&format!("error: {} changed while it was read", file.display())), "{err}");
    assert!(out.starts_with("step 0, token 1: argmax "), "{out}");
}

#[test]
fn a_safetensors_file_truncated_while_run_reads_it_ends_with_status_2_naming_it() {
    let dir = scratch("changed-safetensors");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("qwen35-c").join(f), dir.join(f)).expect("copied");
    }
    let file = dir.join("model.safetensors");
    let (status, out, err) = run_and_truncate(&dir, &file);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains(&format!("error: {} changed while it was read", file.display())), "{err}");
    assert!(out.starts_with("step 0, token 1: argmax "), "{out}");
}
