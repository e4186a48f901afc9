//! A command ended by a signal leaves nothing behind: the random checkpoint a large preset writes to
//! the temp dir is unlinked the moment it is created, so SIGTERM or SIGKILL while it is written (or
//! read) cannot leave a multi-gigabyte `stepcheck-random-*.gguf` (they did: 0.6–2.7 GB each).

use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch;

/// Starts `run --preset qwen3.5-0.8b --weights bf16` (a 1.6 GB random checkpoint, over the 1 GiB
/// that is written to a file) with `dir` as its temp dir, sends `signal` as soon as a file shows
/// in `dir` or after 3 s, and returns what `dir` holds once the process is gone.
fn entries_left_after(signal: &str, dir: &std::path::Path) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepcheck"))
        .args(["run", "--preset", "qwen3.5-0.8b", "--weights", "bf16", "--tokens", "1,2,3"])
        .env("TMPDIR", dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if std::fs::read_dir(dir).expect("the temp dir").next().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill runs");
    assert!(sent.success(), "kill {signal}");
    let _ = child.wait();
    std::fs::read_dir(dir)
        .expect("the temp dir")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn sigterm_or_sigkill_while_the_random_checkpoint_is_written_leaves_no_file() {
    for signal in ["-TERM", "-KILL"] {
        let dir = scratch(&format!("signals{signal}"));
        let left = entries_left_after(signal, &dir);
        assert!(left.is_empty(), "{signal}: {left:?} left in the temp dir");
    }
}
