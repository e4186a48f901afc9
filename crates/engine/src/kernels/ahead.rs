//! Reading the next group of weight rows into cache while a batch's passes run over this one.
//!
//! A batch of more vectors than a pass holds is served in several passes over each group of rows
//! (`super::rows`): the first pass reads the group from memory, the others from cache. Without help
//! the memory then idles while the later passes compute, and the arithmetic idles while the first
//! one waits; so each kernel call of a group's passes takes a share of the next group's cache lines
//! and asks for them (`prefetcht1`, into L2), and the next group's first pass finds them there.
//! A kernel with a loop of its own ([`Spread`]) asks for its share a line at a time across that
//! loop: asked for at once, a share fills the core's queue of misses and the arithmetic waits on
//! it. A prefetch is a hint: it reads nothing into a register, never faults and changes no value.

use super::lines::LINE_BYTES as LINE;

/// The next group's bytes, handed out in shares, one per kernel call.
pub(super) struct Ahead<'w> {
    bytes: &'w [u8],
    /// The offset of the next share.
    at: usize,
    /// Bytes per share (whole lines).
    per_share: usize,
}

impl<'w> Ahead<'w> {
    /// `next` (the next group's bytes; empty after the last group, or where nothing is to be asked
    /// for) handed out over `shares` calls of [`Ahead::share`].
    pub(super) fn new(next: &'w [u8], shares: usize) -> Ahead<'w> {
        let lines = next.len().div_ceil(LINE);
        Ahead { bytes: next, at: 0, per_share: lines.div_ceil(shares.max(1)) * LINE }
    }

    /// The next share (empty once all is handed out).
    #[inline(always)]
    pub(super) fn share(&mut self) -> &'w [u8] {
        let end = (self.at + self.per_share).min(self.bytes.len());
        let share = &self.bytes[self.at..end];
        self.at = end;
        share
    }
}

/// Asks for every line of `bytes` at once (for kernels without a loop of their own to spread it
/// over).
#[inline(always)]
pub(super) fn ask_all(bytes: &[u8]) {
    for line in (0..bytes.len()).step_by(LINE) {
        ask(bytes, line);
    }
}

/// Asks for the line of `bytes` at `at` (which must be within it).
#[inline(always)]
fn ask(bytes: &[u8], at: usize) {
    debug_assert!(at < bytes.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: callers pass `at < bytes.len()`, so the pointer is within the slice; a prefetch reads
    // nothing into a register and cannot fault (SSE, which every x86-64 has).
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T1>(bytes.as_ptr().add(at).cast());
    }
}

/// A share's lines asked for evenly across `steps` steps of a kernel's loop: at each
/// [`Spread::step`] the lines whose turn has come (Bresenham's stepping: no division in the loop),
/// the rest at [`Spread::finish`].
pub(super) struct Spread<'w> {
    bytes: &'w [u8],
    at: usize,
    lines: usize,
    steps: usize,
    owed: usize,
}

impl<'w> Spread<'w> {
    /// `bytes` asked for over `steps` steps.
    #[inline(always)]
    pub(super) fn new(bytes: &'w [u8], steps: usize) -> Spread<'w> {
        Spread { bytes, at: 0, lines: bytes.len().div_ceil(LINE), steps: steps.max(1), owed: 0 }
    }

    /// One step of the loop.
    #[inline(always)]
    pub(super) fn step(&mut self) {
        self.owed += self.lines;
        while self.owed >= self.steps && self.at < self.bytes.len() {
            self.owed -= self.steps;
            ask(self.bytes, self.at);
            self.at += LINE;
        }
    }

    /// Asks for whatever lines are left.
    #[inline(always)]
    pub(super) fn finish(self) {
        ask_all(&self.bytes[self.at.min(self.bytes.len())..]);
    }
}
