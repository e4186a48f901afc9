//! Prompt processing: a prompt of one sequence run as a prefill, chunk by chunk
//! ([`crate::engine::program::prefill`]), and its two judges.
//!
//! The step graph stays one token's step and the program its lowering; a prefill is how the
//! engine runs that program over many tokens at once. [`prove`] proves a prefill computes, for
//! every token, what the program's step computes on the state the tokens before it left (by
//! induction over the tokens of each chunk, then over the chunks), so that with a proved program
//! it computes the graph's step, `T` times. [`check`] runs it on the engine interpreter, both
//! ways (token by token with every Command judged where it runs, and as the engine runs it, which
//! must be the same to the bit), against the reference's `T` decode steps.

pub mod check;
pub mod prove;

use crate::engine::program::prefill::{Entry, Prefill};

/// A mistake a real engine makes in its prefill, written into a correct prefill's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The causal mask off by one within a chunk: token `i` sees the chunk's first `i + 2`.
    MaskOffByOne,
    /// The conv windows not carried across a chunk boundary: the second chunk starts zeroed.
    WindowNotCarried,
    /// The state written back from the wrong token: a chunk keeps its second-to-last token's.
    KeptFromWrongToken,
    /// A chunk's last partial block dropped: the prompt's last chunk, when partial, never runs.
    PartialBlockDropped,
}

impl Mutation {
    pub const ALL: [Mutation; 4] = [
        Mutation::MaskOffByOne,
        Mutation::WindowNotCarried,
        Mutation::KeptFromWrongToken,
        Mutation::PartialBlockDropped,
    ];

    /// The mutation's name in kebab case.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::MaskOffByOne => "mask-off-by-one",
            Mutation::WindowNotCarried => "window-not-carried",
            Mutation::KeptFromWrongToken => "kept-from-wrong-token",
            Mutation::PartialBlockDropped => "partial-block-dropped",
        }
    }

    /// `prefill` with this mistake, or `None` where it has nowhere to sit (a mask in a chunk of
    /// one token, a second chunk in a prompt of one, a kept token in chunks of one, no partial
    /// chunk).
    pub fn apply(self, prefill: &Prefill) -> Option<Prefill> {
        let mut p = prefill.clone();
        match self {
            Mutation::MaskOffByOne => {
                let chunk = p.chunks.iter_mut().find(|c| c.len > 1)?;
                chunk.seen[0] = 2;
            }
            Mutation::WindowNotCarried => p.chunks.get_mut(1)?.windows = Entry::Start,
            Mutation::KeptFromWrongToken => {
                let chunk = p.chunks.iter_mut().find(|c| c.len > 1)?;
                chunk.keep = chunk.len - 2;
            }
            Mutation::PartialBlockDropped => {
                let widest = p.widest();
                let last = p.chunks.last()?;
                if p.chunks.len() < 2 || last.len == widest {
                    return None;
                }
                p.chunks.pop();
            }
        }
        Some(p)
    }
}
