//! A prefill: how the engine runs a prompt of one sequence, chunk by chunk, each Command of the
//! program over a chunk's tokens at once.
//!
//! The step graph stays one token's step and the [`crate::Program`] its lowering; a prefill is how
//! the engine runs that program over many tokens of one sequence. Within a chunk of `len` tokens
//! at positions `p..p + len` the program's Commands run in order, each over all the chunk's tokens:
//!
//! - a Command that reads a weight matrix reads it once for the chunk (the matrix times `len`
//!   columns); every other Command without state runs on each token's own buffers;
//! - `Conv` and `DeltaRule` run token after token on their state, carried from each token to the
//!   next; the conv windows enter the chunk as the chunk's [`Chunk::windows`] says;
//! - `Attention` first appends every token's key and value at its position, then token `i` attends
//!   over the positions before the chunk and the chunk's first [`Chunk::seen`]`[i]` tokens (its
//!   causal mask: `i + 1`);
//! - after the chunk the conv windows and delta states are those after the chunk's token
//!   [`Chunk::keep`] (its last), and the position has moved by `len`.
//!
//! Its meaning is the step, `len` times: token `i`'s logits are those of a decode step at position
//! `p + i` from the state the tokens before it left.

use serde::{Deserialize, Serialize};

/// The most tokens one chunk of a prefill may hold (its buffers are allocated per token).
pub const MAX_CHUNK: usize = 4096;

/// How the conv windows enter a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Entry {
    /// As the previous chunk (or the steps before the prefill) left them.
    Carried,
    /// Zeroed: the start state's windows.
    Start,
}

/// One chunk of a prefill: the prompt's tokens `first..first + len`, run as one pass over the
/// program's Commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The index in the prompt of the chunk's first token.
    pub first: usize,
    /// The number of tokens.
    pub len: usize,
    /// How the conv windows enter the chunk.
    pub windows: Entry,
    /// Per token of the chunk, how many of the chunk's tokens its attention reads (besides every
    /// position before the chunk): token `i` reads the chunk's first `seen[i]`; causal is `i + 1`.
    pub seen: Vec<usize>,
    /// The index in the chunk of the token after which the conv windows and delta states are kept
    /// (the last, `len − 1`).
    pub keep: usize,
}

/// A prefill of a prompt of `tokens` tokens: its chunks, in the order the engine runs them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefill {
    pub tokens: usize,
    pub chunks: Vec<Chunk>,
}

/// Why a prefill cannot be run at all. (A prefill that runs but computes something else than the
/// step, `len` times, is the prover's and the check's to find.)
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefillError {
    #[error("a chunk size of 0 tokens")]
    NoChunkSize,
    #[error("chunk {chunk}: {len} tokens, but a chunk holds 1 to {MAX_CHUNK}")]
    ChunkLength { chunk: usize, len: usize },
    #[error("chunk {chunk}: tokens {first}..{end} of a prompt of {tokens}")]
    OutsidePrompt { chunk: usize, first: usize, end: usize, tokens: usize },
    #[error("chunk {chunk}: {found} masks for {len} tokens")]
    MaskCount { chunk: usize, len: usize, found: usize },
    #[error("chunk {chunk}: token {token} sees {seen} of the chunk's tokens, but the chunk holds {len} (at least 1)")]
    MaskOutside { chunk: usize, token: usize, seen: usize, len: usize },
    #[error("chunk {chunk}: keeps the state after token {keep}, but the chunk holds {len}")]
    KeepOutside { chunk: usize, keep: usize, len: usize },
}

impl Prefill {
    /// The engine's prefill of a prompt of `tokens` tokens in chunks of `chunk`: consecutive
    /// chunks, the last one partial, each causal, carrying its windows in, keeping its last token's
    /// state.
    pub fn chunked(tokens: usize, chunk: usize) -> Result<Prefill, PrefillError> {
        if chunk == 0 {
            return Err(PrefillError::NoChunkSize);
        }
        if chunk > MAX_CHUNK {
            return Err(PrefillError::ChunkLength { chunk: 0, len: chunk });
        }
        let chunks = (0..tokens)
            .step_by(chunk)
            .map(|first| {
                let len = chunk.min(tokens - first);
                Chunk { first, len, windows: Entry::Carried, seen: (1..=len).collect(), keep: len - 1 }
            })
            .collect();
        Ok(Prefill { tokens, chunks })
    }

    /// Checks that every chunk can run: 1 to [`MAX_CHUNK`] tokens inside the prompt, a mask per
    /// token seeing 1 to `len` of the chunk's tokens, a kept token inside the chunk. Chunks may
    /// overlap, leave gaps or come out of order: that is the prover's to judge.
    pub fn validate(&self) -> Result<(), PrefillError> {
        for (c, ch) in self.chunks.iter().enumerate() {
            if ch.len == 0 || ch.len > MAX_CHUNK {
                return Err(PrefillError::ChunkLength { chunk: c, len: ch.len });
            }
            let end = ch.first.checked_add(ch.len).filter(|&e| e <= self.tokens);
            let Some(_) = end else {
                return Err(PrefillError::OutsidePrompt {
                    chunk: c,
                    first: ch.first,
                    end: ch.first.saturating_add(ch.len),
                    tokens: self.tokens,
                });
            };
            if ch.seen.len() != ch.len {
                return Err(PrefillError::MaskCount { chunk: c, len: ch.len, found: ch.seen.len() });
            }
            if let Some((token, &seen)) = ch.seen.iter().enumerate().find(|&(_, &s)| s == 0 || s > ch.len) {
                return Err(PrefillError::MaskOutside { chunk: c, token, seen, len: ch.len });
            }
            if ch.keep >= ch.len {
                return Err(PrefillError::KeepOutside { chunk: c, keep: ch.keep, len: ch.len });
            }
        }
        Ok(())
    }

    /// The largest chunk.
    pub fn widest(&self) -> usize {
        self.chunks.iter().map(|c| c.len).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_cut_into_causal_chunks_the_last_partial() {
        let p = Prefill::chunked(5, 2).expect("a prefill");
        let lens: Vec<(usize, usize)> = p.chunks.iter().map(|c| (c.first, c.len)).collect();
        assert_eq!(lens, [(0, 2), (2, 2), (4, 1)]);
        assert_eq!(p.chunks[1].seen, [1, 2]);
        assert_eq!(p.chunks[2].keep, 0);
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(Prefill::chunked(0, 4).map(|p| p.chunks.len()), Ok(0));
    }

    #[test]
    fn a_chunk_that_cannot_run_is_refused_by_name() {
        assert_eq!(Prefill::chunked(3, 0), Err(PrefillError::NoChunkSize));
        let mut p = Prefill::chunked(4, 4).expect("a prefill");
        p.chunks[0].seen[3] = 5;
        assert_eq!(p.validate(), Err(PrefillError::MaskOutside { chunk: 0, token: 3, seen: 5, len: 4 }));
        let mut p = Prefill::chunked(4, 4).expect("a prefill");
        p.chunks[0].first = usize::MAX;
        assert!(matches!(p.validate(), Err(PrefillError::OutsidePrompt { chunk: 0, .. })));
        let mut p = Prefill::chunked(4, 4).expect("a prefill");
        p.chunks[0].keep = 4;
        assert_eq!(p.validate(), Err(PrefillError::KeepOutside { chunk: 0, keep: 4, len: 4 }));
    }
}
