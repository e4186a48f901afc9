//! The engine's prefill: a prompt of one sequence run chunk by chunk, each unit over a chunk's
//! tokens at once (docs/PROGRAM.md, "Prefill").
//!
//! Within a chunk the units run in the program's order, each over every token of the chunk: a
//! matrix unit gathers the tokens' inputs into one `len × cols` block and reads its matrix once
//! ([`kernels::matmat`], through the batched step's `Matmat`); every other unit runs token after
//! token, in order, on that token's own buffers and the one carried state, at the token's
//! position. The attention appends every token's key and value first and then reads each token's
//! queries over the positions its mask shows. The final projection to the vocabulary runs only for
//! the tokens whose logits are asked for ([`Outputs`]).
//!
//! Since a vector's sum has one order whatever its batch (`kernels/mod.rs`), a correct prefill
//! computes, to the bit, what the same tokens' decode steps compute one after another;
//! [`EngineRunner::prefill_observed`] runs it token after token, each token a step, for the check
//! to watch Command by Command.

use std::mem;

use program::prefill::{Chunk, Entry, Prefill, PrefillError};

use super::batched::Matmat;
use super::plan::Unit;
use super::real::{Keep, Real};
use super::{EngineRunner, RunError, StepObserver, append_kv, read_kv, run};

/// Which tokens' logits a prefill computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// The prompt's last token's only (what generation needs next).
    Last,
    /// Every token's, in the prompt's order.
    All,
}

/// What a watched prefill shows before each of its tokens' steps.
pub trait TokenObserver<R>: StepObserver<R> {
    /// The prompt's token `token` (the chunk's `index`-th of chunk `chunk`) steps next.
    fn token(&mut self, chunk: usize, index: usize, token: usize);
}

impl<R> TokenObserver<R> for () {
    fn token(&mut self, _: usize, _: usize, _: usize) {}
}

/// A matrix unit over a chunk's rows, where the arithmetic has one (`false`: run it per row).
type MatrixUnits<'m, 'c, R> = &'m mut dyn FnMut(&mut Unit<'c, R>, &mut [Vec<Vec<R>>], &[Keep]) -> bool;

impl<'c> EngineRunner<'c, f32> {
    /// Runs `prefill` over `tokens` from the carried state, each matrix read once per chunk;
    /// returns the logits `outputs` asks for (one vector per token, in the order the chunks run
    /// them). A prefill that cannot run, a prompt of another length, a token outside the
    /// vocabulary or a chunk beyond the caches' capacity is refused before any state changes.
    pub fn prefill(&mut self, prefill: &Prefill, tokens: &[u32], outputs: Outputs) -> Result<Vec<Vec<f32>>, RunError> {
        let mut scratch = mem::take(&mut self.batch);
        let threads = self.threads;
        let mut m = Matmat { xs: &mut scratch.xs, outs: &mut scratch.outs, ups: &mut scratch.ups, threads };
        let mut matrix = |unit: &mut Unit<'c, f32>, rows: &mut [Vec<Vec<f32>>], st: &[Keep]| {
            if !Matmat::reads_weights(unit) {
                return false;
            }
            m.unit(unit, rows, st);
            true
        };
        let result = self.prefill_with(prefill, tokens, outputs, &mut matrix);
        self.batch = scratch;
        result
    }
}

impl<'c, R: Real> EngineRunner<'c, R> {
    /// [`EngineRunner::prefill`] in any arithmetic, each matrix unit run token after token (the
    /// check's exact run of the prefill's meaning).
    pub fn prefill_unbatched(
        &mut self,
        prefill: &Prefill,
        tokens: &[u32],
        outputs: Outputs,
    ) -> Result<Vec<Vec<R>>, RunError> {
        self.prefill_with(prefill, tokens, outputs, &mut |_, _, _| false)
    }

    /// The prefill token after token: each token of a chunk one step (its attention reading what
    /// its mask shows of the caches as they stand), shown to `observer`; the windows entering and
    /// the state kept as each chunk says. Returns every token's logits. A correct prefill
    /// computes, to the bit, what [`EngineRunner::prefill`] does; a mask that shows a later token
    /// reads a cell not yet written.
    pub fn prefill_observed(
        &mut self,
        prefill: &Prefill,
        tokens: &[u32],
        observer: &mut impl TokenObserver<R>,
    ) -> Result<Vec<Vec<R>>, RunError> {
        self.check_prefill(prefill, tokens)?;
        let mut logits = Vec::with_capacity(prefill.tokens);
        for (c, chunk) in prefill.chunks.iter().enumerate() {
            self.enter(chunk);
            let start = self.store.position;
            let mut kept = None;
            for (i, &seen) in chunk.seen.iter().enumerate() {
                observer.token(c, i, chunk.first + i);
                let extent = start + seen - 1;
                logits.push(self.step_attending(tokens[chunk.first + i], Some(extent), observer)?);
                if i == chunk.keep && chunk.keep + 1 < chunk.len {
                    kept = Some((self.store.conv.clone(), self.store.delta.clone()));
                }
            }
            if let Some((conv, delta)) = kept {
                (self.store.conv, self.store.delta) = (conv, delta);
            }
        }
        Ok(logits)
    }

    /// Refuses, before any state changes, a prefill that cannot run on `tokens` from the carried
    /// state.
    fn check_prefill(&self, prefill: &Prefill, tokens: &[u32]) -> Result<(), RunError> {
        prefill.validate().map_err(RunError::Prefill)?;
        if tokens.len() != prefill.tokens {
            return Err(RunError::Prefill(PrefillError::OutsidePrompt {
                chunk: 0,
                first: 0,
                end: tokens.len(),
                tokens: prefill.tokens,
            }));
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(RunError::TokenOutOfRange { token, vocab: self.vocab });
        }
        let run: usize = prefill.chunks.iter().map(|c| c.len).sum();
        if self.attends && run > 0 {
            super::check_room(self.attends, self.store.position.saturating_add(run - 1), self.capacity)?;
        }
        Ok(())
    }

    /// The conv windows as `chunk` enters them.
    fn enter(&mut self, chunk: &Chunk) {
        if chunk.windows == Entry::Start {
            self.store.conv.iter_mut().for_each(|c| c.values.fill(R::from(0.0)));
        }
    }

    /// The prefill, each unit over every token of a chunk, `matrix` running the matrix units it
    /// takes over all the chunk's rows at once.
    fn prefill_with(
        &mut self,
        prefill: &Prefill,
        tokens: &[u32],
        outputs: Outputs,
        matrix: MatrixUnits<'_, 'c, R>,
    ) -> Result<Vec<Vec<R>>, RunError> {
        self.check_prefill(prefill, tokens)?;
        // Only the rows whose logits are asked for compute them, unless a Command reads them or
        // one that carries state writes them.
        let asked = outputs;
        let outputs = if self.logits_every_row { Outputs::All } else { outputs };
        let mut logits = Vec::new();
        let mut rows = mem::take(&mut self.prefill_rows);
        let last = prefill.chunks.len().saturating_sub(1);
        for (c, chunk) in prefill.chunks.iter().enumerate() {
            // The rows whose logits are computed: a suffix of the chunk.
            let from = match outputs {
                Outputs::All => 0,
                Outputs::Last if c == last => chunk.len - 1,
                Outputs::Last => chunk.len,
            };
            self.shape_rows(&mut rows, chunk.len, from);
            self.chunk(chunk, &tokens[chunk.first..chunk.first + chunk.len], &mut rows[..chunk.len], from, matrix);
            logits.extend(rows[from..chunk.len].iter().map(|b| b[self.logits].clone()));
        }
        if asked == Outputs::Last && logits.len() > 1 {
            logits.drain(..logits.len() - 1);
        }
        self.prefill_rows = rows;
        Ok(logits)
    }

    /// `len` rows of buffers, those from `from` on with room for the logits.
    fn shape_rows(&self, rows: &mut Vec<Vec<Vec<R>>>, len: usize, from: usize) {
        while rows.len() < len {
            let mut b: Vec<Vec<R>> = self.buffers.iter().map(|b| vec![R::from(0.0); b.len()]).collect();
            b[self.logits] = vec![];
            rows.push(b);
        }
        for (r, b) in rows.iter_mut().enumerate().take(len) {
            let want = if r >= from { self.vocab } else { 0 };
            b[self.logits].resize(want, R::from(0.0));
        }
    }

    /// One chunk: the units in order, each over the chunk's rows.
    fn chunk(
        &mut self,
        chunk: &Chunk,
        tokens: &[u32],
        rows: &mut [Vec<Vec<R>>],
        from: usize,
        matrix: MatrixUnits<'_, 'c, R>,
    ) {
        self.enter(chunk);
        let start = self.store.position;
        let (st, threads) = (&self.storages[..], self.threads);
        for (u, unit) in self.units.iter_mut().enumerate() {
            // The head writes the logits, of the rows from `at` on, which keep them, only (a unit
            // that carries state never: `prefill_with` then keeps every row's).
            let at = if self.writes_logits[u] { from } else { 0 };
            let rows = &mut rows[at..];
            if rows.is_empty() || matrix(unit, rows, st) {
                continue;
            }
            if let Unit::Attention(a) = unit {
                for (i, b) in rows.iter().enumerate() {
                    append_kv(a, b, &mut self.store, start + at + i);
                }
                for (i, (b, &seen)) in rows.iter_mut().zip(&chunk.seen[at..]).enumerate() {
                    read_kv(a, b, st, &self.store, start + at + i, start + seen - 1);
                }
                continue;
            }
            let kept = chunk.keep + 1 < chunk.len;
            let mut saved = None;
            for (i, (b, &t)) in rows.iter_mut().zip(&tokens[at..]).enumerate() {
                let i = at + i;
                self.store.position = start + i;
                run(unit, b, st, &mut self.store, t as usize, threads);
                if kept && i == chunk.keep {
                    saved = Some(saved_state(unit, &self.store));
                }
            }
            if let Some(Some(saved)) = saved {
                restore_state(unit, &mut self.store, saved);
            }
        }
        self.store.position = start + chunk.len;
    }
}

/// The state a recurrent unit carries, as it stands.
fn saved_state<R: Real>(unit: &Unit<'_, R>, store: &super::state::Store<R>) -> Option<Vec<R>> {
    match unit {
        Unit::Conv { window, .. } => Some(store.conv[*window].values.clone()),
        Unit::DeltaRule { state, .. } => Some(store.delta[*state].values.clone()),
        _ => None,
    }
}

/// Puts back the state [`saved_state`] took.
fn restore_state<R: Real>(unit: &Unit<'_, R>, store: &mut super::state::Store<R>, saved: Vec<R>) {
    match unit {
        Unit::Conv { window, .. } => store.conv[*window].values = saved,
        Unit::DeltaRule { state, .. } => store.delta[*state].values = saved,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_programs::programs;

    const PROMPT: [u32; 9] = [3, 9, 1, 30, 7, 7, 2, 11, 5];

    /// A correct prefill is the decode steps of its tokens, to the bit: every token's logits and
    /// the state after the prompt, from the start and after two steps, in chunks of 1, 4 (one
    /// partial) and 9 — run at once, and token by token.
    #[test]
    fn a_prefill_is_its_tokens_decode_steps_to_the_bit() -> Result<(), RunError> {
        for (name, program, ckpt) in programs() {
            for before in [0usize, 2] {
                let mut steps = EngineRunner::new(&program, &ckpt, 16)?;
                let mut want = vec![];
                for &t in &PROMPT[..before] {
                    steps.step(t)?;
                }
                for &t in &PROMPT {
                    want.push(steps.step(t)?);
                }
                for chunk in [1, 4, 9] {
                    let p = Prefill::chunked(PROMPT.len(), chunk)?;
                    let mut at_once = EngineRunner::new(&program, &ckpt, 16)?;
                    let mut by_token = EngineRunner::new(&program, &ckpt, 16)?;
                    for &t in &PROMPT[..before] {
                        at_once.step(t)?;
                        by_token.step(t)?;
                    }
                    let got = at_once.prefill(&p, &PROMPT, Outputs::All)?;
                    assert_eq!(got, want, "{name}, {before} steps before, chunks of {chunk}: logits");
                    assert_eq!(at_once.state(), steps.state(), "{name}, chunks of {chunk}: state");
                    let watched = by_token.prefill_observed(&p, &PROMPT, &mut ())?;
                    assert_eq!(watched, want, "{name}, chunks of {chunk}: logits, token by token");
                    assert_eq!(by_token.state(), steps.state(), "{name}, chunks of {chunk}: state, token by token");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn the_last_tokens_logits_alone_are_the_last_of_all() -> Result<(), RunError> {
        for (name, program, ckpt) in programs() {
            let p = Prefill::chunked(PROMPT.len(), 4)?;
            let all = EngineRunner::new(&program, &ckpt, 16)?.prefill(&p, &PROMPT, Outputs::All)?;
            let last = EngineRunner::new(&program, &ckpt, 16)?.prefill(&p, &PROMPT, Outputs::Last)?;
            assert_eq!(last, all[PROMPT.len() - 1..], "{name}");
        }
        Ok(())
    }

    /// A mask that shows the next token, windows zeroed at a chunk's entry, or the state kept
    /// from another token change what the prefill computes (what the prover and the check are to
    /// catch): each is run here, and differs from the steps.
    #[test]
    fn a_mutated_prefill_computes_something_else() -> Result<(), RunError> {
        let (_, program, ckpt) = programs().remove(0);
        let mut steps = EngineRunner::new(&program, &ckpt, 16)?;
        let want: Vec<Vec<f32>> = PROMPT.iter().map(|&t| steps.step(t)).collect::<Result<_, _>>()?;
        let base = Prefill::chunked(PROMPT.len(), 4)?;
        let edits: [fn(&mut Prefill); 3] =
            [|p| p.chunks[0].seen[1] = 3, |p| p.chunks[1].windows = Entry::Start, |p| p.chunks[0].keep = 2];
        for edit in edits {
            let mut p = base.clone();
            edit(&mut p);
            let got = EngineRunner::new(&program, &ckpt, 16)?.prefill(&p, &PROMPT, Outputs::All)?;
            assert_ne!(got, want, "{p:?}");
        }
        Ok(())
    }

    #[test]
    fn a_prefill_that_cannot_run_is_refused_before_any_state_changes() -> Result<(), RunError> {
        let (_, program, ckpt) = programs().remove(0);
        let mut runner = EngineRunner::new(&program, &ckpt, 4)?;
        runner.step(1)?;
        let before = runner.state();
        let p = Prefill::chunked(4, 2)?;
        assert_eq!(
            runner.prefill(&p, &[1, 2, 3, 4], Outputs::Last),
            Err(RunError::CapacityExceeded { position: 4, capacity: 4 })
        );
        assert!(matches!(runner.prefill(&p, &[1, 2, 3], Outputs::Last), Err(RunError::Prefill(_))));
        assert!(matches!(runner.prefill(&p, &[1, 2, 1 << 30], Outputs::Last), Err(RunError::Prefill(_))));
        let p = Prefill::chunked(3, 2)?;
        assert!(matches!(runner.prefill(&p, &[1, 2, 1 << 30], Outputs::Last), Err(RunError::TokenOutOfRange { .. })));
        assert_eq!(runner.state(), before);
        Ok(())
    }
}
