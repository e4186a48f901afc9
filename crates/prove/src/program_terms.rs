//! A program as terms: each Command by its documented meaning (its doc comment in
//! `engine::program` and docs/PROGRAM.md), written here and nowhere else; nothing of the engine
//! interpreter or of the lowering is used.
//!
//! The Commands run in order over symbolic state: every Command reads each buffer, each state and
//! the position as the Commands before it in the step left them, never as a leaf of its own. A read
//! of a state that an earlier Command of the step wrote is recorded ([`StateRead`]), so that a
//! refutation can name both Commands; a correct program has none, since each of its states is read
//! by the Commands that use it before the one Command that writes it.

use std::fmt;

use super::rounding::{Misplaced, Place, Roundings, kquant_input_name, storage_name};
use super::term::{Dag, Id, Real, Sym};
use formats::bind::Binding;
use ir::Act;
use program::numerics::Storage;
use program::{BlockKind, Buf, Command, Program, StateLayout, StateRef};

/// The terms of a program's outputs: its logits, each state as it leaves the step (in the engine's
/// layout), and the stored values whose rounding differs from the numerics' rule.
#[derive(Clone, Debug)]
pub struct ProgramTerms {
    pub logits: Id,
    pub states: Vec<Id>,
    pub misplaced: Vec<Misplaced>,
    /// The places rounded below f32, each where the numerics say (the misplaced ones excluded).
    pub roundings: Roundings,
    /// Every read of a state that an earlier Command of the step wrote, in command order.
    pub reads: Vec<StateRead>,
}

/// Where a Command sits in its program, named as the engine's errors name it: `block 3 (layer 1
/// Gated-DeltaNet block) command 2 (delta_rule)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandSite {
    pub block: usize,
    pub kind: BlockKind,
    pub layer: Option<usize>,
    pub command: usize,
    pub unit: &'static str,
}

impl CommandSite {
    /// The site of command `command` of block `block` of `program` (both in range).
    pub fn of(program: &Program, block: usize, command: usize) -> CommandSite {
        let b = &program.blocks[block];
        CommandSite { block, kind: b.kind, layer: b.layer, command, unit: b.commands[command].unit() }
    }
}

impl fmt::Display for CommandSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layer = self.layer.map_or(String::new(), |l| format!("layer {l} "));
        write!(f, "block {} ({layer}{}) command {} ({})", self.block, self.kind.name(), self.command, self.unit)
    }
}

/// A Command's read of a state that an earlier Command of the same step wrote: the reader, the
/// state (its name and layout), the Command that last wrote it, the term read, and the terms the
/// reader wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct StateRead {
    pub reader: CommandSite,
    pub state: String,
    pub layout: StateLayout,
    pub writer: CommandSite,
    pub read: Id,
    pub wrote: Vec<Id>,
}

impl fmt::Display for StateRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layout {
            StateLayout::Position => {
                write!(f, "{} reads the position {} as {} moved it", self.reader, self.state, self.writer)
            }
            _ => write!(f, "{} reads the state {} as {} left it", self.reader, self.state, self.writer),
        }
    }
}

/// Why a program does not read as a step: the Command that cannot be read (none for the logits),
/// and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub at: Option<CommandSite>,
    pub why: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) => write!(f, "{at}: {}", self.why),
            None => write!(f, "the logits: {}", self.why),
        }
    }
}

impl From<Unreadable> for String {
    fn from(u: Unreadable) -> String {
        u.to_string()
    }
}

/// The delta rule's fixed l2-norm eps (docs/PROGRAM.md, `DeltaRule`).
pub(crate) const DELTA_L2_EPS: f64 = 1e-6;

/// The terms of `program` when its states enter the step as `states_in` (one term per
/// [`Program::states`], in the engine's layout; the position's is the term the attention reads
/// until an advance moves it), its Commands run in order; or why the program cannot be read (a
/// buffer read before it is written, an index out of range, a state of the wrong layout for its
/// command, an attention in a program without exactly one position state).
pub fn program_terms(dag: &mut Dag, program: &Program, states_in: &[Id]) -> Result<ProgramTerms, Unreadable> {
    let positions: Vec<usize> = (0..program.states.len().min(states_in.len()))
        .filter(|&i| program.states[i].layout == StateLayout::Position)
        .collect();
    let mut b = Builder {
        dag,
        program,
        bufs: vec![None; program.buffers.len()],
        states: states_in.to_vec(),
        position: match positions.as_slice() {
            [p] => Ok(*p),
            ps => Err(format!("the program has {} position states, where the attention reads its one", ps.len())),
        },
        writers: vec![None; states_in.len()],
        reads: vec![],
        wrote: vec![],
    };
    let mut misplaced = vec![];
    let mut roundings = Roundings::new();
    let mut place = |what: &str, place: Place, found: Storage| {
        let Some(expected) = place.storage(&program.numerics) else { return };
        if found != expected {
            misplaced.push(Misplaced { what: what.to_string(), found, expected });
        } else if found != Storage::F32 {
            *roundings.entry((place, storage_name(found))).or_default() += 1;
        }
    };
    for s in &program.states {
        place(&s.name, Place::of_state(&s.layout), s.storage);
    }
    for (bi, block) in program.blocks.iter().enumerate() {
        for (ci, c) in block.commands.iter().enumerate() {
            let at = CommandSite::of(program, bi, ci);
            let first_read = b.reads.len();
            b.wrote.clear();
            b.command(c, &at).map_err(|why| Unreadable { at: Some(at.clone()), why })?;
            for r in &mut b.reads[first_read..] {
                r.wrote.clone_from(&b.wrote);
            }
        }
    }
    for (buf, _) in b.bufs.iter().enumerate().filter(|(_, v)| v.is_some()) {
        let decl = &program.buffers[buf];
        place(&decl.name, Place::Buffer, decl.storage);
    }
    if let Some(name) = kquant_input_name(program.numerics.kquant_inputs) {
        let matvecs = program.blocks.iter().flat_map(|b| &b.commands).map(matvecs).sum();
        roundings.insert((Place::KquantInput, name), matvecs);
    }
    let logits = b.get(program.logits).map_err(|why| Unreadable { at: None, why })?;
    Ok(ProgramTerms { logits, states: b.states, misplaced, roundings, reads: b.reads })
}

/// The matvecs `command` runs, each over a matrix of the checkpoint.
fn matvecs(command: &Command) -> usize {
    match command {
        Command::MatVec { .. } | Command::MergedRows { .. } | Command::MergedHeadHalves { .. } => 1,
        Command::SwiGlu { .. } => 3,
        _ => 0,
    }
}

/// The symbolic state of a step as its Commands run: each buffer's and each state's term as the
/// Commands so far left it.
struct Builder<'a> {
    dag: &'a mut Dag,
    program: &'a Program,
    bufs: Vec<Option<Id>>,
    states: Vec<Id>,
    /// The index of the program's one position state, or why there is not exactly one.
    position: Result<usize, String>,
    /// The Command that last wrote each state in this step, if one has.
    writers: Vec<Option<CommandSite>>,
    reads: Vec<StateRead>,
    /// The terms the Command being read has written so far.
    wrote: Vec<Id>,
}

impl Builder<'_> {
    fn get(&self, b: Buf) -> Result<Id, String> {
        match self.bufs.get(b.0) {
            Some(Some(id)) => Ok(*id),
            Some(None) => Err(format!(
                "buffer {} ({}) is read before any command of the step writes it",
                b.0, self.program.buffers[b.0].name
            )),
            None => Err(format!("buffer {} does not exist", b.0)),
        }
    }

    fn len(&self, b: Buf) -> Result<usize, String> {
        self.program.buffers.get(b.0).map(|d| d.len).ok_or_else(|| format!("buffer {} does not exist", b.0))
    }

    fn set(&mut self, b: Buf, id: Id) -> Result<(), String> {
        match self.bufs.get_mut(b.0) {
            Some(slot @ None) => {
                *slot = Some(id);
                self.wrote.push(id);
                Ok(())
            }
            Some(Some(_)) => Err(format!("buffer {} is written twice", b.0)),
            None => Err(format!("buffer {} does not exist", b.0)),
        }
    }

    /// State `s` as the Commands before `at` left it, with its layout; a read of what an earlier
    /// Command of the step wrote is recorded.
    fn state(&mut self, s: StateRef, at: &CommandSite) -> Result<(Id, StateLayout), String> {
        let (Some(&id), Some(decl)) = (self.states.get(s.0), self.program.states.get(s.0)) else {
            return Err(format!("state {} does not exist", s.0));
        };
        if let Some(writer) = &self.writers[s.0] {
            let (state, layout, writer) = (decl.name.clone(), decl.layout.clone(), writer.clone());
            self.reads.push(StateRead { reader: at.clone(), state, layout, writer, read: id, wrote: vec![] });
        }
        Ok((id, decl.layout.clone()))
    }

    /// Leaves state `s` as `id`, written by the Command at `at`.
    fn put(&mut self, s: StateRef, id: Id, at: &CommandSite) {
        self.states[s.0] = id;
        self.writers[s.0] = Some(at.clone());
        self.wrote.push(id);
    }

    /// The program's one position state as the Commands before `at` left it.
    fn position(&mut self, at: &CommandSite) -> Result<Id, String> {
        let p = self.position.clone()?;
        Ok(self.state(StateRef(p), at)?.0)
    }

    fn w(&mut self, name: &str) -> Id {
        self.dag.leaf(Sym::Weight(Binding::whole(name)))
    }

    fn mk(&mut self, sym: Sym, args: &[Id]) -> Id {
        self.dag.mk(sym, args)
    }

    fn command(&mut self, c: &Command, at: &CommandSite) -> Result<(), String> {
        match c {
            // out = table[token]
            Command::Embed { table, out } => {
                let (t, tok) = (self.w(table), self.dag.leaf(Sym::Token));
                let v = self.mk(Sym::Embed, &[t, tok]);
                self.set(*out, v)
            }
            // out = x · rsqrt(mean(x²) + eps) · weight
            Command::RmsNorm { x, weight, eps, out } => {
                let n = self.len(*x)?;
                let (xv, w) = (self.get(*x)?, self.w(weight));
                let v = self.mk(Sym::RmsNorm { eps: Real::new(*eps), n }, &[xv, w]);
                self.set(*out, v)
            }
            // out = weight · x
            Command::MatVec { weight, x, out } => {
                let (w, xv) = (self.w(weight), self.get(*x)?);
                let v = self.mk(Sym::MatVec, &[w, xv]);
                self.set(*out, v)
            }
            // one matvec over the first Σ len(outs) rows, split into consecutive row ranges
            Command::MergedRows { weight, x, outs } => {
                let (w, xv) = (self.w(weight), self.get(*x)?);
                let m = self.mk(Sym::MatVec, &[w, xv]);
                let mut start = 0;
                for o in outs {
                    let end = start + self.len(*o)?;
                    let v = self.mk(Sym::Rows { start, end }, &[m]);
                    self.set(*o, v)?;
                    start = end;
                }
                Ok(())
            }
            // one matvec over all rows; head after head 2·head_dim rows: first half, second half
            Command::MergedHeadHalves { weight, head_dim, x, first, second } => {
                let (w, xv) = (self.w(weight), self.get(*x)?);
                let m = self.mk(Sym::MatVec, &[w, xv]);
                let a = self.mk(Sym::HeadHalf { d: *head_dim, half: 0 }, &[m]);
                let b = self.mk(Sym::HeadHalf { d: *head_dim, half: 1 }, &[m]);
                self.set(*first, a)?;
                self.set(*second, b)
            }
            // silu(Σ_{j<K−1} w[c,j]·window[c,j] + w[c,K−1]·x[c] (+ bias[c])), then the window shifts in x
            Command::Conv { ins, window, weight, bias, outs } => {
                let (win, layout) = self.state(*window, at)?;
                let StateLayout::ConvWindow { channels: c, taps: k } = layout else {
                    return Err(format!("conv window {} is {layout:?}", window.0));
                };
                let lens = ins.iter().map(|&i| self.len(i)).collect::<Result<Vec<_>, _>>()?;
                if lens.iter().sum::<usize>() != c {
                    return Err(format!("conv inputs of {lens:?} channels into a window of {c}"));
                }
                let parts = ins.iter().map(|&i| self.get(i)).collect::<Result<Vec<_>, _>>()?;
                let x = if parts.len() == 1 { parts[0] } else { self.mk(Sym::Concat { rows: 1, lens }, &parts) };
                let full = self.mk(Sym::AppendCol { c, k }, &[win, x]);
                let w = self.w(weight);
                let mut pre = self.mk(Sym::DepthwiseConv { c, k }, &[full, w]);
                if let Some(bias) = bias {
                    let bv = self.w(bias);
                    pre = self.mk(Sym::Add, &[pre, bv]);
                }
                let o = self.mk(Sym::Act(Act::Silu), &[pre]);
                let mut start = 0;
                for out in outs {
                    let end = start + self.len(*out)?;
                    let v = self.mk(Sym::Slice { start, end, n: c }, &[o]);
                    self.set(*out, v)?;
                    start = end;
                }
                let left = self.mk(Sym::DropFirstCol { c, k }, &[full]);
                self.put(*window, left, at);
                Ok(())
            }
            // beta = sigmoid(b), g = decay · softplus(a + dt_bias)
            Command::Gates { b, a, decay, dt_bias, beta, g } => {
                let bv = self.get(*b)?;
                let s = self.mk(Sym::Act(Act::Sigmoid), &[bv]);
                self.set(*beta, s)?;
                let (av, dt, d) = (self.get(*a)?, self.w(dt_bias), self.w(decay));
                let biased = self.mk(Sym::Add, &[av, dt]);
                let sp = self.mk(Sym::Act(Act::Softplus), &[biased]);
                let gv = self.mk(Sym::Mul, &[d, sp]);
                self.set(*g, gv)
            }
            // per value head h with key head h mod key_heads: q̂ = l2(q)/√dk, k̂ = l2(k); the update in [dv][dk]
            Command::DeltaRule { state, q, k, v, g, beta, out, key_heads } => {
                let (s, layout) = self.state(*state, at)?;
                let StateLayout::DeltaState { value_heads: hv, key_dim: dk, value_dim: dv } = layout else {
                    return Err(format!("delta state {} is {layout:?}", state.0));
                };
                let eps = Real::new(DELTA_L2_EPS);
                let qv = self.get(*q)?;
                let qn = self.mk(Sym::L2Norm { eps, n: dk }, &[qv]);
                let qs = self.mk(Sym::Scale(Real::new(1.0 / (dk as f64).sqrt())), &[qn]);
                let kv = self.get(*k)?;
                let kn = self.mk(Sym::L2Norm { eps, n: dk }, &[kv]);
                let args = [s, qs, kn, self.get(*v)?, self.get(*g)?, self.get(*beta)?];
                let t = self.mk(Sym::DeltaRuleVk { hv, hk: *key_heads, dk, dv }, &args);
                let o = self.mk(Sym::Proj(1), &[t]);
                self.set(*out, o)?;
                let left = self.mk(Sym::Proj(0), &[t]);
                self.put(*state, left, at);
                Ok(())
            }
            // per head of dim values: rms_norm(x, weight) · silu(z)
            Command::GatedNorm { x, z, weight, eps, dim, out } => {
                let (xv, w, zv) = (self.get(*x)?, self.w(weight), self.get(*z)?);
                let n = self.mk(Sym::RmsNorm { eps: Real::new(*eps), n: *dim }, &[xv, w]);
                let s = self.mk(Sym::Act(Act::Silu), &[zv]);
                let v = self.mk(Sym::Mul, &[n, s]);
                self.set(*out, v)
            }
            // q, k per-head RMS-normed (when given), NeoX RoPE at pos, k and v written at pos,
            // softmax attention of head h over positions 0..=pos of KV head h / (heads / kv_heads)
            Command::Attention {
                q,
                k,
                v,
                q_norm,
                k_norm,
                eps,
                rope,
                heads,
                kv_heads,
                head_dim,
                scale,
                k_cache,
                v_cache,
                out,
            } => {
                let pos = self.position(at)?;
                let eps = Real::new(*eps);
                let mut qv = self.get(*q)?;
                let mut kv = self.get(*k)?;
                if let Some(w) = q_norm {
                    let w = self.w(w);
                    qv = self.mk(Sym::RmsNorm { eps, n: *head_dim }, &[qv, w]);
                }
                if let Some(w) = k_norm {
                    let w = self.w(w);
                    kv = self.mk(Sym::RmsNorm { eps, n: *head_dim }, &[kv, w]);
                }
                let r = Sym::Rope {
                    theta: Real::new(rope.theta),
                    dims: rope.dims,
                    style: ir::RopeStyle::Neox,
                    hd: *head_dim,
                };
                let qr = self.mk(r.clone(), &[qv, pos]);
                let kr = self.mk(r, &[kv, pos]);
                let (kc, kl) = self.state(*k_cache, at)?;
                let (vc, vl) = self.state(*v_cache, at)?;
                for l in [kl, vl] {
                    if !matches!(l, StateLayout::KvCache { .. }) {
                        return Err(format!("attention cache is {l:?}"));
                    }
                }
                let write = Sym::KvWrite { h: *kv_heads, d: *head_dim };
                let kc1 = self.mk(write.clone(), &[kc, pos, kr]);
                let vv = self.get(*v)?;
                let vc1 = self.mk(write, &[vc, pos, vv]);
                let attend = Sym::AttendPrefix { scale: Real::new(*scale), heads: *heads, kv_heads: *kv_heads };
                let o = self.mk(attend, &[qr, kc1, vc1, pos]);
                self.set(*out, o)?;
                self.put(*k_cache, kc1, at);
                self.put(*v_cache, vc1, at);
                Ok(())
            }
            // out = sigmoid(gate) · x
            Command::SigmoidGate { x, gate, out } => {
                // The planted prover bug: a meaning written to match a lowering that swaps the two.
                #[cfg(any(test, feature = "planted"))]
                let (x, gate) = if planted::is(planted::Bug::ProverMatchesSwappedGate) { (gate, x) } else { (x, gate) };
                let gv = self.get(*gate)?;
                let s = self.mk(Sym::Act(Act::Sigmoid), &[gv]);
                let xv = self.get(*x)?;
                let v = self.mk(Sym::Mul, &[s, xv]);
                self.set(*out, v)
            }
            // out = down · (silu(gate · x) ⊙ (up · x))
            Command::SwiGlu { x, gate, up, down, out } => {
                let xv = self.get(*x)?;
                let (gw, uw, dw) = (self.w(gate), self.w(up), self.w(down));
                let g = self.mk(Sym::MatVec, &[gw, xv]);
                let u = self.mk(Sym::MatVec, &[uw, xv]);
                let a = self.mk(Sym::Act(Act::Silu), &[g]);
                let h = self.mk(Sym::Mul, &[a, u]);
                let v = self.mk(Sym::MatVec, &[dw, h]);
                self.set(*out, v)
            }
            // out = residual + x
            Command::Add { residual, x, out } => {
                let (r, xv) = (self.get(*residual)?, self.get(*x)?);
                let v = self.mk(Sym::Add, &[r, xv]);
                self.set(*out, v)
            }
            // the position moves to the next token
            Command::Advance { position } => {
                let (p, layout) = self.state(*position, at)?;
                if layout != StateLayout::Position {
                    return Err(format!("advance of {layout:?}"));
                }
                let moved = self.mk(Sym::Advance, &[p]);
                self.put(*position, moved, at);
                Ok(())
            }
        }
    }
}
