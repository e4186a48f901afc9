//! The listing of a program: a stable, readable text form, one line per buffer, state and command,
//! for reading, diffing and snapshots.
//!
//! ```text
//! program tiny numerics f32/f32/f32 hidden 64 vocab 97
//! %x: [64] f32
//! state %l1.conv layer 1 conv_window[40][3] f32
//!
//! block 3 layer 1 Gated-DeltaNet block
//!   %l1.q.raw, %l1.k.raw, %l1.v.raw = merged_rows blk.1.attn_qkv.weight, %l1.x
//! …
//! logits %logits
//! ```
//!
//! Buffers and states are written `%name`; weights by their checkpoint names; an index the program
//! does not have is written `%?index`, so that any program lists.

use std::fmt::{self, Write};

use crate::{Buf, Command, Program, StateLayout, StateRef};

impl Program {
    /// Where command `command` of block `block` sits, as errors and witnesses name it: `block 3
    /// (layer 1 Gated-DeltaNet block) command 2 (delta_rule)`.
    pub fn site(&self, block: usize, command: usize) -> String {
        let Some(b) = self.blocks.get(block) else { return format!("block {block} command {command}") };
        let layer = b.layer.map_or(String::new(), |l| format!("layer {l} "));
        match b.commands.get(command) {
            Some(c) => format!("block {block} ({layer}{}) command {command} ({})", b.kind.name(), c.unit()),
            None => format!("block {block} ({layer}{}) command {command}", b.kind.name()),
        }
    }
}

impl Command {
    /// The name of the command's unit, as the listing writes it.
    pub fn unit(&self) -> &'static str {
        match self {
            Command::Embed { .. } => "embed",
            Command::RmsNorm { .. } => "rms_norm",
            Command::MatVec { .. } => "matvec",
            Command::MergedRows { .. } => "merged_rows",
            Command::MergedHeadHalves { .. } => "merged_head_halves",
            Command::Conv { .. } => "conv",
            Command::Gates { .. } => "gates",
            Command::DeltaRule { .. } => "delta_rule",
            Command::GatedNorm { .. } => "gated_norm",
            Command::Attention { .. } => "attention",
            Command::SigmoidGate { .. } => "sigmoid_gate",
            Command::SwiGlu { .. } => "swiglu",
            Command::Add { .. } => "add",
            Command::Advance { .. } => "advance",
        }
    }
}

impl StateLayout {
    /// The layout as the listing writes it: `position`, `conv_window[C][K−1]`,
    /// `delta_state[Hv][dv][dk]`, `kv_cache[heads][capacity][dim]`.
    pub fn describe(&self) -> String {
        match *self {
            StateLayout::Position => "position".into(),
            StateLayout::ConvWindow { channels, taps } => {
                format!("conv_window[{channels}][{}]", taps.saturating_sub(1))
            }
            StateLayout::DeltaState { value_heads, key_dim, value_dim } => {
                format!("delta_state[{value_heads}][{value_dim}][{key_dim}]")
            }
            StateLayout::KvCache { heads, dim } => format!("kv_cache[{heads}][capacity][{dim}]"),
        }
    }
}

/// Writes buffers and states by name.
struct Names<'p>(&'p Program);

impl Names<'_> {
    fn buf(&self, b: Buf) -> String {
        self.0.buffers.get(b.0).map_or(format!("%?{}", b.0), |x| format!("%{}", x.name))
    }

    fn bufs(&self, bs: &[Buf]) -> String {
        bs.iter().map(|&b| self.buf(b)).collect::<Vec<_>>().join(", ")
    }

    fn state(&self, s: StateRef) -> String {
        self.0.states.get(s.0).map_or(format!("%?{}", s.0), |x| format!("%{}", x.name))
    }

    /// The command's line: `outputs = unit operands` (or `advance %position`).
    fn command(&self, c: &Command) -> String {
        let unit = c.unit();
        match c {
            Command::Embed { table, out } => format!("{} = {unit} {table}, token", self.buf(*out)),
            Command::RmsNorm { x, weight, eps, out } => {
                format!("{} = {unit} {}, {weight}, eps {eps:e}", self.buf(*out), self.buf(*x))
            }
            Command::MatVec { weight, x, out } => format!("{} = {unit} {weight}, {}", self.buf(*out), self.buf(*x)),
            Command::MergedRows { weight, x, outs } => {
                format!("{} = {unit} {weight}, {}", self.bufs(outs), self.buf(*x))
            }
            Command::MergedHeadHalves { weight, head_dim, x, first, second } => {
                format!("{} = {unit} {weight}, {}, head_dim {head_dim}", self.bufs(&[*first, *second]), self.buf(*x))
            }
            Command::Conv { ins, window, weight, bias, outs } => {
                let bias = bias.as_ref().map_or(String::new(), |b| format!(", bias {b}"));
                format!(
                    "{} = {unit} {}, window {}, weight {weight}{bias}",
                    self.bufs(outs),
                    self.bufs(ins),
                    self.state(*window)
                )
            }
            Command::Gates { b, a, decay, dt_bias, beta, g } => format!(
                "{} = {unit} {}, decay {decay}, dt_bias {dt_bias}",
                self.bufs(&[*beta, *g]),
                self.bufs(&[*b, *a])
            ),
            Command::DeltaRule { state, q, k, v, g, beta, out, key_heads } => format!(
                "{} = {unit} {}, state {}, key_heads {key_heads}",
                self.buf(*out),
                self.bufs(&[*q, *k, *v, *g, *beta]),
                self.state(*state)
            ),
            Command::GatedNorm { x, z, weight, eps, dim, out } => {
                format!("{} = {unit} {}, {weight}, eps {eps:e}, dim {dim}", self.buf(*out), self.bufs(&[*x, *z]))
            }
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
                let mut s = format!("{} = {unit} {}", self.buf(*out), self.bufs(&[*q, *k, *v]));
                for (what, norm) in [("q_norm", q_norm), ("k_norm", k_norm)] {
                    if let Some(n) = norm {
                        let _ = write!(s, ", {what} {n}");
                    }
                }
                let _ = write!(
                    s,
                    ", eps {eps:e}, rope neox theta {} dims {}, heads {heads}, kv_heads {kv_heads}, \
                     head_dim {head_dim}, scale {scale}, k_cache {}, v_cache {}",
                    rope.theta,
                    rope.dims,
                    self.state(*k_cache),
                    self.state(*v_cache)
                );
                s
            }
            Command::SigmoidGate { x, gate, out } => {
                format!("{} = {unit} {}, gate {}", self.buf(*out), self.buf(*x), self.buf(*gate))
            }
            Command::SwiGlu { x, gate, up, down, out } => {
                format!("{} = {unit} {}, gate {gate}, up {up}, down {down}", self.buf(*out), self.buf(*x))
            }
            Command::Add { residual, x, out } => {
                format!("{} = {unit} {}", self.buf(*out), self.bufs(&[*residual, *x]))
            }
            Command::Advance { position } => format!("{unit} {}", self.state(*position)),
        }
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = Names(self);
        writeln!(f, "program {} numerics {} hidden {} vocab {}", self.name, self.numerics, self.hidden, self.vocab)?;
        for b in &self.buffers {
            writeln!(f, "%{}: [{}] {}", b.name, b.len, b.storage.name())?;
        }
        for s in &self.states {
            write!(f, "state %{}", s.name)?;
            if let Some(l) = s.layer {
                write!(f, " layer {l}")?;
            }
            match s.layout {
                StateLayout::Position => writeln!(f, " position")?,
                _ => writeln!(f, " {} {}", s.layout.describe(), s.storage.name())?,
            }
        }
        for (i, block) in self.blocks.iter().enumerate() {
            write!(f, "\nblock {i}")?;
            if let Some(l) = block.layer {
                write!(f, " layer {l}")?;
            }
            writeln!(f, " {}", block.kind.name())?;
            for c in &block.commands {
                writeln!(f, "  {}", names.command(c))?;
            }
        }
        writeln!(f, "\nlogits {}", names.buf(self.logits))
    }
}
