//! A scratch folder in the temp dir for one test, removed when the test ends, passed or failed.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A fresh folder `stepcheck-{name}-{pid}` in the temp dir; dropping it removes it and everything
/// in it, also when the test panics, so that `cargo test` leaves nothing behind.
pub struct Scratch(PathBuf);

/// Makes the scratch folder `name`, empty.
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("stepcheck-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    Scratch(dir)
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
