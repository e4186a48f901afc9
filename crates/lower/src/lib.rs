//! `lower_graph`: the engine's program read off a step graph.
//!
//! The step is read as the blocks the engine has units for: the embedding, then each layer's norm,
//! its mixer (a Gated-DeltaNet block or an attention block), the residual add, the FFN's norm, the
//! SwiGLU FFN and its add, then the step's advance, the final norm and the head. Every op of a block
//! is checked three ways before the block is written (see [`pattern`]); each block is written in the
//! order the engine's units take it. What a block does that the engine has no unit for is refused
//! by name. The lowering reads only the graph, the shim's facts and the numerics.

#![forbid(unsafe_code)]

mod error;
mod pattern;
mod refusals;
mod scan;
pub mod shim;
mod templates;

use foldhash::HashMap;

pub use error::{LowerError, Site};
use pattern::{Found, Matcher, Pick, Template};
pub use scan::refusals_in_order;
use templates as t;

use formats::bind::View;
use fuse::Uses;
use ir::{Act, Fused, Graph, HeadMap, OpKind, RopeStyle, StateKind, TensorId, Ty};
use program::numerics::{Numerics, Storage};
use program::{Block, BlockKind, Buf, Buffer, Command, Program, Rope, StateBuffer, StateLayout, StateRef};
use shim::EngineShim;

/// The program of `graph`, the step a spec authors as the engine's shim leaves it, at `numerics`.
pub fn lower_graph(graph: &Graph, numerics: Numerics) -> Result<Program, LowerError> {
    lower_graph_with(graph, numerics, &EngineShim::default())
}

/// The program of `graph` as `shim` leaves it: a pattern whose symbol the shim does not take is
/// refused by that symbol's name.
pub fn lower_graph_with(graph: &Graph, numerics: Numerics, shim: &EngineShim) -> Result<Program, LowerError> {
    graph.validate()?;
    if numerics.recurrent_state != Storage::F32 {
        return Err(LowerError::RecurrentStateBelowF32 { found: numerics.recurrent_state });
    }
    let uses = Uses::of(graph);
    let mut l = Lowering {
        m: Matcher::new(graph, &uses, shim),
        numerics,
        buffers: vec![],
        buf_of: HashMap::default(),
        states: vec![],
        state_of: HashMap::default(),
        blocks: vec![],
    };
    l.step()
}

struct Lowering<'g> {
    m: Matcher<'g>,
    numerics: Numerics,
    buffers: Vec<Buffer>,
    buf_of: HashMap<TensorId, Buf>,
    states: Vec<StateBuffer>,
    state_of: HashMap<(StateKind, Option<usize>), StateRef>,
    blocks: Vec<Block>,
}

fn site(block: BlockKind, layer: Option<usize>) -> Site {
    Site { block, layer, op: None }
}

impl Lowering<'_> {
    fn graph(&self) -> &Graph {
        self.m.graph
    }

    fn step(&mut self) -> Result<Program, LowerError> {
        let mut h = self.embedding()?;
        // The planted lowering bug: the advance written before the layers that read the position.
        #[cfg(any(test, feature = "planted"))]
        if planted::is(planted::Bug::LowerAdvanceFirst) {
            self.advance()?;
        }
        for layer in 0..self.layer_count() {
            h = self.layer(layer, h)?;
        }
        if !self.blocks.iter().any(|b| b.kind == BlockKind::Advance) {
            self.advance()?;
        }
        let logits = self.head(h)?;
        if let Some(op) = self.m.claimed.iter().position(|c| !c) {
            let o = &self.graph().ops[op];
            let writes = o.outputs.iter().map(|&t| self.graph().name_of(t).to_string()).collect::<Vec<_>>().join(", ");
            return Err(LowerError::UnreadOp { op, kind: o.kind.name(), writes });
        }
        let g = self.graph();
        let (name, vocab) = (g.name.clone(), g.ty(g.logits).numel().unwrap_or(0));
        let hidden = self.buffers.first().map_or(0, |b| b.len);
        Ok(Program {
            name,
            numerics: self.numerics,
            hidden,
            vocab,
            buffers: std::mem::take(&mut self.buffers),
            states: std::mem::take(&mut self.states),
            blocks: std::mem::take(&mut self.blocks),
            logits,
        })
    }

    /// How many layers the step has: one more than the highest layer a state belongs to (every
    /// layer's mixer carries state). Read off the state, not off the final norm's binding, so that
    /// a norm bound to the wrong tensor is refused where it is instead of moving the step's end.
    fn layer_count(&self) -> usize {
        self.graph().states.iter().filter_map(|s| s.layer).max().map_or(0, |l| l.saturating_add(1))
    }

    fn find(
        &mut self,
        tpl: &Template,
        given: &[(&'static str, TensorId)],
        at: Site,
        picks: &[(&str, Pick)],
    ) -> Result<Found, LowerError> {
        self.m.find(tpl, given, at, picks)
    }

    fn embedding(&mut self) -> Result<TensorId, LowerError> {
        let at = site(BlockKind::Embedding, None);
        let f = self.find(&t::EMBEDDING, &[], at, &[])?;
        let h = f.var("h");
        first(refusals::scaled_embedding(&self.m, h, at))?;
        let out = self.buf(h);
        self.block(BlockKind::Embedding, None, vec![Command::Embed { table: formats::names::TOKEN_EMBD.into(), out }]);
        Ok(h)
    }

    fn layer(&mut self, l: usize, h: TensorId) -> Result<TensorId, LowerError> {
        // The mixer's norm.
        let at = site(BlockKind::MixerNorm, Some(l));
        first(refusals::missing_pre_norm(&self.m, h, at))?;
        let f = self.find(&t::MIXER_NORM, &[("h", h)], at, &[])?;
        let x = f.var("x");
        let cmd = self.rms_norm(&f, h, "x");
        self.block(BlockKind::MixerNorm, Some(l), vec![cmd]);
        // The mixer.
        let has = |k: StateKind| self.graph().states.iter().any(|s| s.kind == k && s.layer == Some(l));
        let y = if has(StateKind::Conv) || has(StateKind::Recurrent) {
            self.delta_net(l, x)?
        } else if has(StateKind::KeyCache) || has(StateKind::ValueCache) {
            self.attention(l, x, h)?
        } else {
            return Err(LowerError::UnknownMixer { at: site(BlockKind::DeltaNet, Some(l)) });
        };
        let h1 = self.residual_add(BlockKind::MixerAdd, l, h, y, &t::MIXER_ADD)?;
        // The FFN.
        let at = site(BlockKind::FfnNorm, Some(l));
        let f = self.find(&t::FFN_NORM, &[("h", h1)], at, &[])?;
        let x = f.var("x");
        let cmd = self.rms_norm(&f, h1, "x");
        self.block(BlockKind::FfnNorm, Some(l), vec![cmd]);
        let y = self.ffn(l, x, h1)?;
        self.residual_add(BlockKind::FfnAdd, l, h1, y, &t::FFN_ADD)
    }

    fn residual_add(
        &mut self,
        kind: BlockKind,
        l: usize,
        h: TensorId,
        y: TensorId,
        tpl: &Template,
    ) -> Result<TensorId, LowerError> {
        let at = site(kind, Some(l));
        first(refusals::norm_after(&self.m, y, at))?;
        let f = self.find(tpl, &[("h", h), ("y", y)], at, &[])?;
        let h1 = f.var("h1");
        let (residual, x, out) = (self.buf(h), self.buf(y), self.buf(h1));
        self.block(kind, Some(l), vec![Command::Add { residual, x, out }]);
        Ok(h1)
    }

    fn delta_net(&mut self, l: usize, x: TensorId) -> Result<TensorId, LowerError> {
        let at = site(BlockKind::DeltaNet, Some(l));
        let picks: [(&str, Pick); 3] = [("qc", slice_q), ("kc", slice_k), ("vc", slice_v)];
        let f = self.find(&t::DELTA_NET, &[("x", x)], at, &picks)?;
        let g = self.m.graph;
        let op = |out: &str| &g.ops[f.writer(out)];
        let at_op = |out: &str| Site { op: Some(f.writer(out)), ..at };
        let [_, dk, _] = shape3(g.ty(f.var("state")));
        for (i, what) in [("qn", "the query l2 norm"), ("kn", "the key l2 norm")] {
            if let OpKind::L2Norm { eps } = op(i).kind {
                expect_attr(at_op(i), what, "eps", 1e-6, eps)?;
            }
        }
        if let OpKind::Scale { factor } = op("qs").kind {
            expect_attr(at_op("qs"), "the query scale", "factor", 1.0 / (dk as f64).sqrt(), factor)?;
        }
        if let OpKind::DeltaRule { head_map } = op("o").kind
            && head_map != HeadMap::Tiled
        {
            return Err(wrong(at_op("o"), "the delta rule", "head map", "tiled", head_map.name()));
        }
        glu_act(at_op("og"), "the gated norm's gate", op("og"), Act::Silu)?;
        let eps = norm_eps(op("on"));
        let key_heads = g.ty(f.var("q")).shape().and_then(|s| s.first().copied()).unwrap_or(0);
        let dv = g.ty(f.var("v")).shape().and_then(|s| s.get(1).copied()).unwrap_or(0);
        // Reshapes move no values: the engine's buffers are the values before them.
        for (after, before) in [("q", "qc"), ("k", "kc"), ("v", "vc"), ("zh", "z"), ("of", "og")] {
            self.alias(f.var(after), f.var(before));
        }
        let window = self.state_ref(StateKind::Conv, at)?;
        let state = self.state_ref(StateKind::Recurrent, at)?;
        let b = |me: &mut Self, n: &str| me.buf(f.var(n));
        let weight = |what: &str| formats::names::blk(l, what);
        use formats::names::layer as n;
        let commands = vec![
            Command::MergedRows {
                weight: weight(n::ATTN_QKV),
                x: b(self, "x"),
                outs: vec![b(self, "q0"), b(self, "k0"), b(self, "v0")],
            },
            Command::MatVec { weight: weight(n::ATTN_GATE), x: b(self, "x"), out: b(self, "z") },
            Command::MatVec { weight: weight(n::SSM_BETA), x: b(self, "x"), out: b(self, "b") },
            Command::MatVec { weight: weight(n::SSM_ALPHA), x: b(self, "x"), out: b(self, "a") },
            Command::Conv {
                ins: vec![b(self, "q0"), b(self, "k0"), b(self, "v0")],
                window,
                weight: weight(n::SSM_CONV1D),
                bias: None,
                outs: vec![b(self, "qc"), b(self, "kc"), b(self, "vc")],
            },
            Command::Gates {
                b: b(self, "b"),
                a: b(self, "a"),
                decay: weight(n::SSM_A),
                dt_bias: weight(n::SSM_DT_BIAS),
                beta: b(self, "beta"),
                g: b(self, "g"),
            },
            Command::DeltaRule {
                state,
                q: b(self, "q"),
                k: b(self, "k"),
                v: b(self, "v"),
                g: b(self, "g"),
                beta: b(self, "beta"),
                out: b(self, "o"),
                key_heads,
            },
            Command::GatedNorm {
                x: b(self, "o"),
                z: b(self, "zh"),
                weight: weight(n::SSM_NORM),
                eps,
                dim: dv,
                out: b(self, "og"),
            },
            Command::MatVec { weight: weight(n::SSM_OUT), x: b(self, "of"), out: b(self, "y") },
        ];
        self.block(BlockKind::DeltaNet, Some(l), commands);
        Ok(f.var("y"))
    }

    /// An attention block: the variant its graph states (an output gate iff `attn_q` is read as
    /// the halves of each head, q/k norms iff the layer binds their weights), refused by name when
    /// it holds a construct the attention unit lacks.
    fn attention(&mut self, l: usize, x: TensorId, h: TensorId) -> Result<TensorId, LowerError> {
        let at = site(BlockKind::Attention, Some(l));
        let ops = refusals::region(&self.m, x, h);
        first(refusals::attention(&self.m, &ops, x, at))?;
        let g = self.m.graph;
        let bound = |what: &str, half: bool| {
            let tensor = formats::names::blk(l, what);
            g.consts
                .iter()
                .any(|c| c.binding.tensor == tensor && (!half || matches!(c.binding.view, View::HeadHalf { .. })))
        };
        use formats::names::layer as n;
        let gated = bound(n::ATTN_Q, true);
        let qk_norm = bound(n::ATTN_Q_NORM, false) || bound(n::ATTN_K_NORM, false);
        let f = self.find(t::attention(gated, qk_norm), &[("x", x)], at, &[])?;
        let writer = |name: &str| f.writer(name);
        let op = |name: &str| &g.ops[writer(name)];
        let at_op = |name: &str| Site { op: Some(writer(name)), ..at };
        let [heads, head_dim] = shape2(g.ty(f.var("q")));
        let [kv_heads, _] = shape2(g.ty(f.var("k")));
        if gated {
            let half_dim = op("q0")
                .inputs
                .get(1)
                .and_then(|&w| g.constant(w))
                .and_then(|c| match c.binding.view {
                    View::HeadHalf { head_dim, .. } => Some(head_dim),
                    _ => None,
                })
                .unwrap_or(0);
            expect_dims(at_op("q0"), "the query and output gate projection", "head size", head_dim, half_dim)?;
        }
        expect_dims(at_op("k"), "the key heads", "head size", head_dim, shape2(g.ty(f.var("k")))[1])?;
        expect_dims(at_op("v"), "the value heads", "head size", head_dim, shape2(g.ty(f.var("v")))[1])?;
        let eps = if qk_norm {
            let (q_eps, k_eps) = (norm_eps(op("qn")), norm_eps(op("kn")));
            expect_attr(at_op("kn"), "the key norm", "eps", q_eps, k_eps)?;
            q_eps
        } else {
            0.0
        };
        let rope = match (&op("qr").kind, &op("kr").kind) {
            (OpKind::Rope { theta, rotary_dims, style }, k) => {
                if *style != RopeStyle::Neox {
                    return Err(wrong(at_op("qr"), "the query RoPE", "style", "neox", style.name()));
                }
                if *k != op("qr").kind {
                    return Err(wrong(
                        at_op("kr"),
                        "the key RoPE",
                        "attributes",
                        &format!("{:?}", op("qr").kind),
                        &format!("{k:?}"),
                    ));
                }
                Rope { theta: *theta, dims: *rotary_dims }
            }
            _ => Rope { theta: 0.0, dims: 0 },
        };
        let scale = match op("o").kind {
            OpKind::Attention { scale, head_map, .. } => {
                if head_map != HeadMap::Grouped {
                    return Err(wrong(at_op("o"), "the attention", "head map", "grouped", head_map.name()));
                }
                expect_attr(at_op("o"), "the attention", "scale", 1.0 / (head_dim as f64).sqrt(), scale)?;
                scale
            }
            _ => 0.0,
        };
        if gated {
            glu_act(at_op("og"), "the output gate", op("og"), Act::Sigmoid)?;
        }
        self.alias(f.var("of"), f.var("o"));
        let k_cache = self.state_ref(StateKind::KeyCache, at)?;
        let v_cache = self.state_ref(StateKind::ValueCache, at)?;
        let b = |me: &mut Self, n: &str| me.buf(f.var(n));
        let weight = |what: &str| formats::names::blk(l, what);
        let norm = |what: &str| qk_norm.then(|| weight(what));
        let mut commands = vec![if gated {
            Command::MergedHeadHalves {
                weight: weight(n::ATTN_Q),
                head_dim,
                x: b(self, "x"),
                first: b(self, "q0"),
                second: b(self, "gate"),
            }
        } else {
            Command::MatVec { weight: weight(n::ATTN_Q), x: b(self, "x"), out: b(self, "q0") }
        }];
        commands.extend([
            Command::MatVec { weight: weight(n::ATTN_K), x: b(self, "x"), out: b(self, "k0") },
            Command::MatVec { weight: weight(n::ATTN_V), x: b(self, "x"), out: b(self, "v0") },
            Command::Attention {
                q: b(self, "q0"),
                k: b(self, "k0"),
                v: b(self, "v0"),
                q_norm: norm(n::ATTN_Q_NORM),
                k_norm: norm(n::ATTN_K_NORM),
                eps,
                rope,
                heads,
                kv_heads,
                head_dim,
                scale,
                k_cache,
                v_cache,
                out: b(self, "o"),
            },
        ]);
        let projected = if gated {
            let (x, gate) = (b(self, "of"), b(self, "gate"));
            // The planted lowering half of a prover bug: the gate's operands swapped.
            #[cfg(any(test, feature = "planted"))]
            let (x, gate) = if planted::is(planted::Bug::ProverMatchesSwappedGate) { (gate, x) } else { (x, gate) };
            commands.push(Command::SigmoidGate { x, gate, out: b(self, "og") });
            "og"
        } else {
            "of"
        };
        commands.push(Command::MatVec { weight: weight(n::ATTN_OUTPUT), x: b(self, projected), out: b(self, "y") });
        self.block(BlockKind::Attention, Some(l), commands);
        Ok(f.var("y"))
    }

    fn ffn(&mut self, l: usize, x: TensorId, h: TensorId) -> Result<TensorId, LowerError> {
        let at = site(BlockKind::Ffn, Some(l));
        let ops = refusals::region(&self.m, x, h);
        first(refusals::experts(&self.m, &ops, at))?;
        first(refusals::ffn_shape(&self.m, x, &ops, false, at))?;
        let f = self.find(&t::FFN, &[("x", x)], at, &[])?;
        let product = &self.graph().ops[f.writer("m")];
        if product.kind != OpKind::Fused(Fused::GluActMul { act: Act::Silu }) {
            return Err(LowerError::NotSwiGlu {
                at: Site { op: Some(f.writer("m")), ..at },
                found: format!("{:?}", product.kind),
            });
        }
        use formats::names::layer as n;
        let weight = |what: &str| formats::names::blk(l, what);
        let (xb, out) = (self.buf(x), self.buf(f.var("y")));
        let cmd =
            Command::SwiGlu { x: xb, gate: weight(n::FFN_GATE), up: weight(n::FFN_UP), down: weight(n::FFN_DOWN), out };
        self.block(BlockKind::Ffn, Some(l), vec![cmd]);
        Ok(f.var("y"))
    }

    fn advance(&mut self) -> Result<(), LowerError> {
        let at = site(BlockKind::Advance, None);
        self.find(&t::ADVANCE, &[], at, &[])?;
        let position = self.state_ref(StateKind::Position, at)?;
        self.block(BlockKind::Advance, None, vec![Command::Advance { position }]);
        Ok(())
    }

    fn head(&mut self, h: TensorId) -> Result<Buf, LowerError> {
        let at = site(BlockKind::FinalNorm, None);
        let f = self.find(&t::FINAL_NORM, &[("h", h)], at, &[])?;
        let x = f.var("x");
        let cmd = Command::RmsNorm {
            x: self.buf(h),
            weight: formats::names::OUTPUT_NORM.into(),
            eps: norm_eps(&self.graph().ops[f.writer("x")]),
            out: self.buf(x),
        };
        self.block(BlockKind::FinalNorm, None, vec![cmd]);
        let at = site(BlockKind::Head, None);
        let f = self.find(&t::HEAD, &[("x", x)], at, &[])?;
        let logits = f.var("logits");
        if logits != self.graph().logits {
            return Err(LowerError::WrongTensor {
                at: Site { op: Some(f.writer("logits")), ..at },
                what: "the head",
                operand: 0,
                expected: self.graph().name_of(self.graph().logits).into(),
                found: self.graph().name_of(logits).into(),
            });
        }
        let weight = self.graph().ops[f.writer("logits")]
            .inputs
            .first()
            .and_then(|&w| self.graph().constant(w))
            .map(|c| c.binding.tensor.clone())
            .unwrap_or_default();
        let (xb, out) = (self.buf(x), self.buf(logits));
        self.block(BlockKind::Head, None, vec![Command::MatVec { weight, x: xb, out }]);
        Ok(out)
    }

    /// The `RmsNorm` of `x` that the found block's op writing `out` states: its eps and weight.
    fn rms_norm(&mut self, f: &Found, x: TensorId, out: &str) -> Command {
        let op = &self.graph().ops[f.writer(out)];
        let out = f.var(out);
        let eps = norm_eps(op);
        let weight = op.inputs.get(1).and_then(|&w| self.graph().constant(w)).map(|c| c.binding.tensor.clone());
        Command::RmsNorm { x: self.buf(x), weight: weight.unwrap_or_default(), eps, out: self.buf(out) }
    }

    fn block(&mut self, kind: BlockKind, layer: Option<usize>, commands: Vec<Command>) {
        self.blocks.push(Block { kind, layer, commands });
    }

    /// The buffer holding tensor `t`, made on first use.
    fn buf(&mut self, t: TensorId) -> Buf {
        if let Some(&b) = self.buf_of.get(&t) {
            return b;
        }
        let g = self.m.graph;
        let b = Buf(self.buffers.len());
        self.buffers.push(Buffer {
            name: g.name_of(t).to_string(),
            len: g.ty(t).numel().unwrap_or(0),
            storage: self.numerics.activations,
        });
        self.buf_of.insert(t, b);
        b
    }

    /// Makes `t` share the buffer of `same_as` (a reshape).
    fn alias(&mut self, t: TensorId, same_as: TensorId) {
        let b = self.buf(same_as);
        self.buf_of.insert(t, b);
    }

    /// The engine's state for the graph's state of `kind` in the layer of `at`, made on first use;
    /// the block at `at` reads it, and a missing one is refused there.
    fn state_ref(&mut self, kind: StateKind, at: Site) -> Result<StateRef, LowerError> {
        let layer = at.layer;
        if let Some(&s) = self.state_of.get(&(kind, layer)) {
            return Ok(s);
        }
        let g = self.m.graph;
        let state = g
            .states
            .iter()
            .find(|s| s.kind == kind && s.layer == layer)
            .ok_or(LowerError::MissingState { at, state: kind.name() })?;
        let ty = g.ty(state.read);
        let dims = match ty {
            Ty::Tensor(s) => s.as_slice(),
            _ => &[],
        };
        let (layout, storage) = match (kind, dims, ty) {
            (StateKind::Position, _, _) => (StateLayout::Position, Storage::F32),
            (StateKind::Conv, &[channels, taps], _) => {
                (StateLayout::ConvWindow { channels, taps }, self.numerics.activations)
            }
            (StateKind::Recurrent, &[value_heads, key_dim, value_dim], _) => {
                (StateLayout::DeltaState { value_heads, key_dim, value_dim }, self.numerics.recurrent_state)
            }
            (StateKind::KeyCache | StateKind::ValueCache, _, &Ty::Cache { heads, dim }) => {
                (StateLayout::KvCache { heads, dim }, self.numerics.kv_cache)
            }
            _ => return Err(LowerError::MissingState { at, state: kind.name() }),
        };
        let r = StateRef(self.states.len());
        self.states.push(StateBuffer { name: g.name_of(state.read).to_string(), layer, layout, storage });
        self.state_of.insert((kind, layer), r);
        Ok(r)
    }
}

/// The first of a rule's findings, as the lowering's refusal.
fn first(findings: Vec<LowerError>) -> Result<(), LowerError> {
    match findings.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn norm_eps(op: &ir::Op) -> f64 {
    match op.kind {
        OpKind::RmsNorm { eps } => eps,
        _ => 0.0,
    }
}

fn shape2(ty: &Ty) -> [usize; 2] {
    ty.shape().and_then(|s| <[usize; 2]>::try_from(s).ok()).unwrap_or([0, 0])
}

fn shape3(ty: &Ty) -> [usize; 3] {
    ty.shape().and_then(|s| <[usize; 3]>::try_from(s).ok()).unwrap_or([0, 0, 0])
}

fn wrong(at: Site, what: &'static str, attribute: &'static str, expected: &str, found: &str) -> LowerError {
    LowerError::WrongAttribute { at, what, attribute, expected: expected.into(), found: found.into() }
}

/// An attribute the engine's unit fixes: equal to `expected` up to rounding of its last bit.
fn expect_attr(
    at: Site,
    what: &'static str,
    attribute: &'static str,
    expected: f64,
    found: f64,
) -> Result<(), LowerError> {
    if (expected - found).abs() <= 4.0 * f64::EPSILON * expected.abs() {
        Ok(())
    } else {
        Err(wrong(at, what, attribute, &format!("{expected:?}"), &format!("{found:?}")))
    }
}

fn expect_dims(
    at: Site,
    what: &'static str,
    attribute: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), LowerError> {
    if expected == found { Ok(()) } else { Err(wrong(at, what, attribute, &expected.to_string(), &found.to_string())) }
}

fn glu_act(at: Site, what: &'static str, op: &ir::Op, act: Act) -> Result<(), LowerError> {
    match op.kind {
        OpKind::Fused(Fused::GluActMul { act: a }) if a == act => Ok(()),
        OpKind::Fused(Fused::GluActMul { act: a }) => Err(wrong(at, what, "activation", act.name(), a.name())),
        _ => Ok(()),
    }
}

/// The length of the tensor named `name`, once bound.
fn len_of(g: &Graph, vars: &HashMap<&'static str, TensorId>, name: &str) -> Option<usize> {
    vars.get(name).and_then(|&t| g.tensors.get(t.0)).and_then(|d| d.ty.numel())
}

fn is_slice(op: &ir::Op, start: Option<usize>, end: Option<usize>) -> bool {
    matches!(op.kind, OpKind::Slice { start: s, end: e } if Some(s) == start && Some(e) == end)
}

/// The conv's query channels: the first, as many as the merged projection's query rows.
fn slice_q(op: &ir::Op, g: &Graph, vars: &HashMap<&'static str, TensorId>) -> bool {
    is_slice(op, Some(0), len_of(g, vars, "q0"))
}

/// The conv's key channels: right after the query channels.
fn slice_k(op: &ir::Op, g: &Graph, vars: &HashMap<&'static str, TensorId>) -> bool {
    let q = len_of(g, vars, "q0");
    is_slice(op, q, q.zip(len_of(g, vars, "k0")).map(|(q, k)| q + k))
}

/// The conv's value channels: right after the key channels, to the end.
fn slice_v(op: &ir::Op, g: &Graph, vars: &HashMap<&'static str, TensorId>) -> bool {
    let qk = len_of(g, vars, "q0").zip(len_of(g, vars, "k0")).map(|(q, k)| q + k);
    is_slice(op, qk, len_of(g, vars, "c"))
}
