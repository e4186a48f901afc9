//! `Progress`: one line on stderr that long work rewrites in place, shown only on a terminal.

use std::io::{IsTerminal, Write};

/// A progress line: on a terminal, each [`Progress::show`] replaces the line before it and
/// [`Progress::clear`] erases it before a result is printed, so it never breaks a table; when
/// stderr is not a terminal (a log, a pipe, a test) it writes nothing.
pub struct Progress {
    on: bool,
}

impl Progress {
    /// A progress line, on when stderr is a terminal.
    pub fn new() -> Progress {
        Progress { on: std::io::stderr().is_terminal() }
    }

    /// Replaces the line with `what`.
    pub fn show(&self, what: &str) {
        if self.on {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K{what}");
            let _ = e.flush();
        }
    }

    /// Erases the line.
    pub fn clear(&self) {
        if self.on {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}
