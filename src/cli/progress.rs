//! `Progress`: what long work is doing, on stderr: one line rewritten in place on a terminal, a
//! plain line every few seconds in a log.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The least time between two lines of progress in a log.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// A progress report on stderr. On a terminal, each [`Progress::show`] replaces the line before it
/// and [`Progress::clear`] erases it before a result is printed, so it never breaks a table. When
/// stderr is not a terminal (a CI log, a pipe, a test), a `show` writes its text as a plain line,
/// with no escape code, when it is [`Pace::due`]: at most one line every [`LOG_EVERY`], as cargo
/// does in a CI log, so work shorter than that writes nothing.
pub struct Progress {
    to: To,
}

/// Where a progress report goes.
enum To {
    Terminal,
    Log(Pace),
}

/// The pace of a log's lines: a line is due once [`LOG_EVERY`] has passed since the last line
/// written, the start counting as one.
#[derive(Clone, Copy, Debug)]
struct Pace {
    last: Instant,
}

impl Pace {
    /// Whether a line shown at `now` is written; when it is, `now` becomes the last line's time.
    fn due(&mut self, now: Instant) -> bool {
        let due = now.saturating_duration_since(self.last) >= LOG_EVERY;
        if due {
            self.last = now;
        }
        due
    }
}

impl Progress {
    /// A progress report, rewritten in place when stderr is a terminal, paced lines otherwise.
    pub fn new() -> Progress {
        let to = if std::io::stderr().is_terminal() { To::Terminal } else { To::Log(Pace { last: Instant::now() }) };
        Progress { to }
    }

    /// Shows `what`: on a terminal in place of the line before; in a log as a line when one is due.
    pub fn show(&mut self, what: &str) {
        let mut e = std::io::stderr().lock();
        match &mut self.to {
            To::Terminal => {
                let _ = write!(e, "\r\x1b[2K{what}");
            }
            To::Log(pace) => {
                if pace.due(Instant::now()) {
                    let _ = writeln!(e, "{what}");
                }
            }
        }
        let _ = e.flush();
    }

    /// Erases the line on a terminal; a log's lines stay.
    pub fn clear(&mut self) {
        if let To::Terminal = self.to {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_gets_a_line_once_five_seconds_have_passed_since_the_last_one() {
        let start = Instant::now();
        let mut pace = Pace { last: start };
        let at = |s: f64| start + Duration::from_secs_f64(s);
        // (seconds since the start, whether a line shown then is written)
        let shows = [(0.0, false), (1.0, false), (4.9, false), (5.0, true), (6.0, false), (9.9, false), (10.5, true)];
        for (s, written) in shows {
            assert_eq!(pace.due(at(s)), written, "at {s} s");
        }
        // A clock read before the last line (another thread's `Instant`) writes nothing.
        assert!(!pace.due(at(2.0)));
        assert!(pace.due(at(15.5)));
    }
}
