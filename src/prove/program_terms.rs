//! A program as terms: each Command by its documented meaning (its doc comment in
//! `engine::program` and docs/PROGRAM.md), written here and nowhere else; nothing of the engine
//! interpreter or of the lowering is used.

use super::rounding::{Misplaced, Place, Roundings, kquant_input_name, storage_name};
use super::term::{Dag, Id, Real, Sym};
use crate::engine::numerics::Storage;
use crate::engine::program::{Buf, Command, Program, StateLayout, StateRef};
use crate::ir::Act;
use crate::model::bind::Binding;

/// The terms of a program's outputs: its logits, each state as it leaves the step (in the engine's
/// layout), and the stored values whose rounding differs from the numerics' rule.
#[derive(Clone, Debug)]
pub struct ProgramTerms {
    pub logits: Id,
    pub states: Vec<Id>,
    pub misplaced: Vec<Misplaced>,
    /// The places rounded below f32, each where the numerics say (the misplaced ones excluded).
    pub roundings: Roundings,
}

/// The delta rule's fixed l2-norm eps (docs/PROGRAM.md, `DeltaRule`).
pub const DELTA_L2_EPS: f64 = 1e-6;

/// The terms of `program` when its states enter the step as `states_in` (one term per
/// [`Program::states`], in the engine's layout), or why the program cannot be read (a buffer read
/// before it is written, an index out of range, a state of the wrong layout for its command).
pub fn program_terms(dag: &mut Dag, program: &Program, states_in: &[Id]) -> Result<ProgramTerms, String> {
    let mut b = Builder { dag, program, bufs: vec![None; program.buffers.len()], states: states_in.to_vec() };
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
            b.command(c).map_err(|e| format!("block {bi} command {ci}: {e}"))?;
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
    let logits = b.get(program.logits)?;
    Ok(ProgramTerms { logits, states: b.states, misplaced, roundings })
}

/// The matvecs `command` runs, each over a matrix of the checkpoint.
fn matvecs(command: &Command) -> usize {
    match command {
        Command::MatVec { .. } | Command::MergedRows { .. } | Command::MergedHeadHalves { .. } => 1,
        Command::SwiGlu { .. } => 3,
        _ => 0,
    }
}

struct Builder<'a> {
    dag: &'a mut Dag,
    program: &'a Program,
    bufs: Vec<Option<Id>>,
    states: Vec<Id>,
}

impl Builder<'_> {
    fn get(&self, b: Buf) -> Result<Id, String> {
        self.bufs.get(b.0).copied().flatten().ok_or_else(|| format!("buffer {} is read before it is written", b.0))
    }

    fn len(&self, b: Buf) -> Result<usize, String> {
        self.program.buffers.get(b.0).map(|d| d.len).ok_or_else(|| format!("buffer {} does not exist", b.0))
    }

    fn set(&mut self, b: Buf, id: Id) -> Result<(), String> {
        match self.bufs.get_mut(b.0) {
            Some(slot @ None) => {
                *slot = Some(id);
                Ok(())
            }
            Some(Some(_)) => Err(format!("buffer {} is written twice", b.0)),
            None => Err(format!("buffer {} does not exist", b.0)),
        }
    }

    fn state(&self, s: StateRef) -> Result<(Id, &StateLayout), String> {
        let id = self.states.get(s.0).copied().ok_or_else(|| format!("state {} does not exist", s.0))?;
        Ok((id, &self.program.states[s.0].layout))
    }

    fn w(&mut self, name: &str) -> Id {
        self.dag.leaf(Sym::Weight(Binding::whole(name)))
    }

    fn mk(&mut self, sym: Sym, args: &[Id]) -> Id {
        self.dag.mk(sym, args)
    }

    fn command(&mut self, c: &Command) -> Result<(), String> {
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
                let (win, layout) = self.state(*window)?;
                let &StateLayout::ConvWindow { channels: c, taps: k } = layout else {
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
                self.states[window.0] = self.mk(Sym::DropFirstCol { c, k }, &[full]);
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
                let (s, layout) = self.state(*state)?;
                let &StateLayout::DeltaState { value_heads: hv, key_dim: dk, value_dim: dv } = layout else {
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
                self.states[state.0] = self.mk(Sym::Proj(0), &[t]);
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
                let pos = self.dag.leaf(Sym::Pos);
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
                    style: crate::ir::RopeStyle::Neox,
                    hd: *head_dim,
                };
                let qr = self.mk(r.clone(), &[qv, pos]);
                let kr = self.mk(r, &[kv, pos]);
                let (kc, kl) = self.state(*k_cache)?;
                let (vc, vl) = self.state(*v_cache)?;
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
                self.states[k_cache.0] = kc1;
                self.states[v_cache.0] = vc1;
                Ok(())
            }
            // out = sigmoid(gate) · x
            Command::SigmoidGate { x, gate, out } => {
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
                let (p, layout) = self.state(*position)?;
                if *layout != StateLayout::Position {
                    return Err(format!("advance of {layout:?}"));
                }
                self.states[position.0] = self.mk(Sym::Advance, &[p]);
                Ok(())
            }
        }
    }
}
