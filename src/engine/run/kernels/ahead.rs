//! Reading the next group of weight rows into cache while a batch's passes run over this one.
//!
//! A batch of more vectors than a pass holds is served in several passes over each group of rows
//! (`super::rows`): the first pass reads the group from memory, the others from cache. Without help
//! the memory then idles while the later passes compute, and the arithmetic idles while the first
//! one waits; so each kernel call of a group's passes first asks for its share of the next group's
//! cache lines (`prefetcht1`, into L2), and the next group's first pass finds them there. A prefetch
//! is a hint: it reads nothing into a register, never faults and changes no value.

/// The bytes of a cache line.
const LINE: usize = 64;

/// The next group's bytes, asked for a few lines at a time.
pub(super) struct Ahead<'w> {
    bytes: &'w [u8],
    /// The offset of the next line to ask for.
    at: usize,
    /// Bytes asked for per [`Ahead::step`].
    per_step: usize,
}

impl<'w> Ahead<'w> {
    /// `next` (the next group's bytes; empty after the last group) asked for over `steps` calls
    /// of [`Ahead::step`].
    pub(super) fn new(next: &'w [u8], steps: usize) -> Ahead<'w> {
        let lines = next.len().div_ceil(LINE);
        Ahead { bytes: next, at: 0, per_step: lines.div_ceil(steps.max(1)) * LINE }
    }

    /// Asks for the next share of the lines.
    #[inline(always)]
    pub(super) fn step(&mut self) {
        let end = (self.at + self.per_step).min(self.bytes.len());
        #[cfg(target_arch = "x86_64")]
        for line in (self.at..end).step_by(LINE) {
            use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
            // SAFETY: `line < self.bytes.len()`, so the pointer is within the slice; a prefetch
            // reads nothing into a register and cannot fault (SSE, which every x86-64 has).
            unsafe { _mm_prefetch::<_MM_HINT_T1>(self.bytes.as_ptr().add(line).cast()) };
        }
        self.at = end;
    }
}
