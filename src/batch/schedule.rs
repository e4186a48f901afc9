//! A schedule: the events an engine's scheduler drives, one sequence at a time, and their text form.
//!
//! A schedule speaks of sequences (`s0`, `s1`, …) and the slots they occupy (`@0`, `@1`, …); it
//! says nothing of how the engine keeps their state. Its meaning for each sequence is a token
//! history: admitting starts an empty one, a decode row appends its token, a fork gives the new
//! sequence a copy of its source's history, a rollback of `n` drops the last `n` tokens. The
//! reference runs each history alone from the zero state; the engine runs the whole schedule at
//! once on its slot pool.
//!
//! The text form has one event per line; `#` starts a comment, blank lines are skipped:
//!
//! ```text
//! admit s0 @0          # s0 enters slot 0, its state reset
//! decode s0=5 s1=7     # one step: row 0 feeds token 5 to s0, row 1 token 7 to s1
//! fork s0 -> s2 @1     # s2 enters slot 1 with a copy of s0's state
//! rollback s2 1        # s2's state as it was one step ago
//! prefill s2 9,4,4     # s2 runs a prompt of three tokens as one prefill
//! finish s0            # s0 leaves, slot 0 is free
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A sequence, named `s<n>` in the text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Seq(pub u32);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// One event of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// `seq` enters the free slot `slot`, its state reset to the zero state.
    Admit { seq: Seq, slot: usize },
    /// One decode step: row `i` feeds token `rows[i].1` to sequence `rows[i].0`. The rows are at
    /// most the pool's batch; the engine pads the rest.
    Decode { rows: Vec<(Seq, u32)> },
    /// `seq` leaves; its slot is free.
    Finish { seq: Seq },
    /// `new` enters the free slot `slot` with a copy of `src`'s state (prefix caching, beam search).
    Fork { src: Seq, new: Seq, slot: usize },
    /// `seq`'s state becomes what it was `n` of its steps ago (speculative decoding's reject).
    Rollback { seq: Seq, n: usize },
    /// `seq` runs the prompt `tokens` (at least one) as one prefill, alone; its history grows by
    /// them, and its earlier states can no longer be rolled back to.
    Prefill { seq: Seq, tokens: Vec<u32> },
}

/// The events of a schedule, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub events: Vec<Event>,
}

impl Schedule {
    /// The number of decode steps and prefills (each a step of the trace: docs/PROGRAM.md).
    pub fn steps(&self) -> usize {
        self.events.iter().filter(|e| matches!(e, Event::Decode { .. } | Event::Prefill { .. })).count()
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Admit { seq, slot } => write!(f, "admit {seq} @{slot}"),
            Event::Decode { rows } => {
                write!(f, "decode")?;
                for (seq, token) in rows {
                    write!(f, " {seq}={token}")?;
                }
                Ok(())
            }
            Event::Finish { seq } => write!(f, "finish {seq}"),
            Event::Fork { src, new, slot } => write!(f, "fork {src} -> {new} @{slot}"),
            Event::Rollback { seq, n } => write!(f, "rollback {seq} {n}"),
            Event::Prefill { seq, tokens } => {
                let tokens: Vec<String> = tokens.iter().map(u32::to_string).collect();
                write!(f, "prefill {seq} {}", tokens.join(","))
            }
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Why a line of a schedule's text does not read as an event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("schedule line {line}: {kind}")]
pub struct ScheduleParseError {
    /// The line, counted from 1.
    pub line: usize,
    pub kind: ParseErrorKind,
}

/// What is wrong with a schedule line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("unknown event `{0}` (expected admit, decode, finish, fork, rollback or prefill)")]
    UnknownEvent(String),
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("`{0}` is not a sequence (expected s<n>)")]
    BadSeq(String),
    #[error("`{0}` is not a slot (expected @<n>)")]
    BadSlot(String),
    #[error("`{0}` is not a count")]
    BadCount(String),
    #[error("`{0}` is not a decode row (expected s<n>=<token>)")]
    BadRow(String),
    #[error("a decode needs at least one row")]
    EmptyDecode,
    #[error("`{0}` is not a prompt (expected <token>,<token>,…)")]
    BadPrompt(String),
    #[error("expected `->`, found `{0}`")]
    BadArrow(String),
    #[error("unexpected `{0}` after the event")]
    Trailing(String),
}

fn seq(word: &str) -> Result<Seq, ParseErrorKind> {
    word.strip_prefix('s').and_then(|n| n.parse().ok()).map(Seq).ok_or_else(|| ParseErrorKind::BadSeq(word.into()))
}

fn slot(word: &str) -> Result<usize, ParseErrorKind> {
    word.strip_prefix('@').and_then(|n| n.parse().ok()).ok_or_else(|| ParseErrorKind::BadSlot(word.into()))
}

fn count(word: &str) -> Result<usize, ParseErrorKind> {
    word.parse().map_err(|_| ParseErrorKind::BadCount(word.into()))
}

fn row(word: &str) -> Result<(Seq, u32), ParseErrorKind> {
    let bad = || ParseErrorKind::BadRow(word.into());
    let (s, t) = word.split_once('=').ok_or_else(bad)?;
    Ok((seq(s).map_err(|_| bad())?, t.parse().map_err(|_| bad())?))
}

/// A prompt: tokens separated by commas, at least one, at most [`crate::limits::MAX_STEPS`].
fn prompt(word: &str) -> Result<Vec<u32>, ParseErrorKind> {
    let bad = || ParseErrorKind::BadPrompt(word.into());
    if word.split(',').count() > crate::limits::MAX_STEPS {
        return Err(bad());
    }
    word.split(',').map(|t| t.parse().map_err(|_| bad())).collect()
}

/// Reads one event from the words of a line.
fn event(words: &[&str]) -> Result<Event, ParseErrorKind> {
    let arg = |i: usize, what: &'static str| words.get(i).copied().ok_or(ParseErrorKind::Missing(what));
    let (e, used) = match words[0] {
        "admit" => (Event::Admit { seq: seq(arg(1, "a sequence")?)?, slot: slot(arg(2, "a slot")?)? }, 3),
        "decode" => {
            let rows = words[1..].iter().map(|w| row(w)).collect::<Result<Vec<_>, _>>()?;
            if rows.is_empty() {
                return Err(ParseErrorKind::EmptyDecode);
            }
            (Event::Decode { rows }, words.len())
        }
        "finish" => (Event::Finish { seq: seq(arg(1, "a sequence")?)? }, 2),
        "fork" => {
            let src = seq(arg(1, "the source sequence")?)?;
            let arrow = arg(2, "`->`")?;
            if arrow != "->" {
                return Err(ParseErrorKind::BadArrow(arrow.into()));
            }
            (Event::Fork { src, new: seq(arg(3, "the new sequence")?)?, slot: slot(arg(4, "a slot")?)? }, 5)
        }
        "rollback" => (Event::Rollback { seq: seq(arg(1, "a sequence")?)?, n: count(arg(2, "a count")?)? }, 3),
        "prefill" => (Event::Prefill { seq: seq(arg(1, "a sequence")?)?, tokens: prompt(arg(2, "a prompt")?)? }, 3),
        other => return Err(ParseErrorKind::UnknownEvent(other.into())),
    };
    match words.get(used) {
        Some(w) => Err(ParseErrorKind::Trailing((*w).into())),
        None => Ok(e),
    }
}

impl FromStr for Schedule {
    type Err = ScheduleParseError;

    /// Reads a schedule's text form; the first line that does not read is the error.
    fn from_str(text: &str) -> Result<Schedule, ScheduleParseError> {
        let mut events = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let content = line.split('#').next().unwrap_or("");
            let words: Vec<&str> = content.split_whitespace().collect();
            if words.is_empty() {
                continue;
            }
            events.push(event(&words).map_err(|kind| ScheduleParseError { line: i + 1, kind })?);
        }
        Ok(Schedule { events })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_reads_back() -> Result<(), ScheduleParseError> {
        let text = "admit s0 @0\ndecode s0=5 s1=7\nfork s0 -> s2 @1\nrollback s2 1\nprefill s2 9,4,4\nfinish s0\n";
        let s: Schedule = text.parse()?;
        assert_eq!(s.to_string(), text);
        assert_eq!(s.steps(), 2);
        Ok(())
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        // (text, line, error)
        let cases = [
            ("admit s0", 1, ParseErrorKind::Missing("a slot")),
            ("# c\nadmit x @0", 2, ParseErrorKind::BadSeq("x".into())),
            ("admit s0 0", 1, ParseErrorKind::BadSlot("0".into())),
            ("decode", 1, ParseErrorKind::EmptyDecode),
            ("decode s0:4", 1, ParseErrorKind::BadRow("s0:4".into())),
            ("fork s0 s1 @2", 1, ParseErrorKind::BadArrow("s1".into())),
            ("rollback s0 two", 1, ParseErrorKind::BadCount("two".into())),
            ("finish s0 now", 1, ParseErrorKind::Trailing("now".into())),
            ("evict s0", 1, ParseErrorKind::UnknownEvent("evict".into())),
            ("prefill s0", 1, ParseErrorKind::Missing("a prompt")),
            ("prefill s0 1,,2", 1, ParseErrorKind::BadPrompt("1,,2".into())),
        ];
        for (text, line, kind) in cases {
            assert_eq!(text.parse::<Schedule>(), Err(ScheduleParseError { line, kind }), "{text}");
        }
    }
}
