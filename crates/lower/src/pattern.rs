//! Block templates and the matcher that finds them in a graph by dataflow.
//!
//! A template lists the ops of a block as the engine's units read them: each op's kind, its
//! operands (tensors the block has named, constants bound to a checkpoint tensor and view, the
//! layer's state, the position, the token) and the names of what it writes. The matcher starts from
//! the tensors the block reads and finds each op among the readers of a tensor it has already
//! named, so the author's op order does not matter; every op is checked three ways as it is found:
//! its kind, the tensors it reads and writes, and the binding of each constant it reads.

use foldhash::HashMap;

use super::error::{LowerError, Site};
use crate::shim::EngineShim;
use formats::bind::View;
use formats::names;
use fuse::{Symbol, Uses, merged_views_precondition};
use ir::{Def, Graph, Op, StateKind, TensorId};

/// An operand of a template op.
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    /// A tensor the block names: read by this op, written by another op of the block or given.
    Var(&'static str),
    /// A constant bound to the layer's tensor `blk.{layer}.{name}` through this view.
    Weight(&'static str, ViewPat),
    /// A constant bound to the whole of one of these tensors.
    Global(&'static [&'static str]),
    /// The layer's state of this kind, as read at the start of the step.
    State(StateKind),
    /// The step's position.
    Position,
    /// The step's token.
    Token,
}

/// The view a template expects of a constant.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ViewPat {
    Whole,
    /// The `n`th of row ranges that follow one another from row 0 (within one op's operands).
    Rows(usize),
    /// Half `n` of each head.
    Half(usize),
}

/// A template op: what it is (for errors), its kind's name, its operands and what it writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pat {
    pub what: &'static str,
    pub kind: &'static str,
    pub ins: &'static [Operand],
    pub outs: &'static [&'static str],
}

/// A block template: its ops, the state each state-writing name must be, and the names the next
/// blocks read.
pub(crate) struct Template {
    pub pats: &'static [Pat],
    pub writes: &'static [(StateKind, &'static str)],
    pub exports: &'static [&'static str],
}

/// A block found in a graph: the tensor of every name and the op that writes each name the
/// template's ops write.
pub struct Found {
    pub vars: HashMap<&'static str, TensorId>,
    writers: HashMap<&'static str, usize>,
}

impl Found {
    /// The tensor named `name` (a template's own name: always bound once the block is found).
    pub fn var(&self, name: &str) -> TensorId {
        self.vars.get(name).copied().unwrap_or(TensorId(usize::MAX))
    }

    /// The op that writes the name `out` (a template op's output: always bound once the block is
    /// found), so that a builder reads a template's ops by what they make, never by position.
    pub fn writer(&self, out: &str) -> usize {
        self.writers.get(out).copied().unwrap_or(usize::MAX)
    }
}

/// Narrows the candidates for a template op beyond kind and operands (e.g. which slice).
pub type Pick = fn(&Op, &Graph, &HashMap<&'static str, TensorId>) -> bool;

/// Finds blocks in one graph, claiming each op at most once.
pub(crate) struct Matcher<'g> {
    pub graph: &'g Graph,
    pub uses: &'g Uses,
    pub shim: &'g EngineShim,
    pub claimed: Vec<bool>,
}

impl<'g> Matcher<'g> {
    pub fn new(graph: &'g Graph, uses: &'g Uses, shim: &'g EngineShim) -> Matcher<'g> {
        Matcher { graph, uses, shim, claimed: vec![false; graph.ops.len()] }
    }

    /// Finds `template` starting from `given` (names already bound), at `site`; `picks` narrows
    /// the candidates of the template ops that write the names it gives.
    pub fn find(
        &mut self,
        template: &Template,
        given: &[(&'static str, TensorId)],
        site: Site,
        picks: &[(&str, Pick)],
    ) -> Result<Found, LowerError> {
        let mut vars: HashMap<&'static str, TensorId> = given.iter().copied().collect();
        let mut ops = vec![usize::MAX; template.pats.len()];
        let mut mine: Vec<usize> = vec![];
        while let Some(i) = (0..template.pats.len()).find(|&i| ops[i] == usize::MAX) {
            let pat = &template.pats[i];
            let (slot, anchor) = self.anchor(pat, &vars, site)?;
            let readers: Vec<usize> = self
                .uses
                .readers(anchor)
                .iter()
                .copied()
                .filter(|&r| !self.claimed[r] && self.graph.ops[r].inputs.get(slot) == Some(&anchor))
                .collect();
            let of_kind: Vec<usize> =
                readers.iter().copied().filter(|&r| self.graph.ops[r].kind.name() == pat.kind).collect();
            let pick = picks.iter().find(|(out, _)| pat.outs.contains(out)).map(|(_, f)| *f);
            let fits: Vec<usize> = of_kind
                .iter()
                .copied()
                .filter(|&r| {
                    self.check_operands(pat, r, &vars, site).is_ok()
                        && pick.is_none_or(|f| f(&self.graph.ops[r], self.graph, &vars))
                })
                .collect();
            let op = match (fits.as_slice(), of_kind.as_slice()) {
                ([one], _) => *one,
                ([], []) => {
                    if let Some(e) = self.unfused(pat, anchor, site) {
                        return Err(e);
                    }
                    return Err(LowerError::WrongOp {
                        at: site,
                        what: pat.what,
                        expected: pat.kind,
                        reading: self.graph.name_of(anchor).to_string(),
                        found: self.describe_all(self.uses.readers(anchor)),
                    });
                }
                // Ops of the right kind, none with the right operands: the first one's fault.
                ([], [first, ..]) => {
                    if pat.kind == Symbol::MergedQkv.name() {
                        self.merged_views(*first, site)?;
                    }
                    self.check_operands(pat, *first, &vars, site)?;
                    return Err(LowerError::WrongOp {
                        at: Site { op: Some(*first), ..site },
                        what: pat.what,
                        expected: pat.kind,
                        reading: self.graph.name_of(anchor).to_string(),
                        found: self.describe_all(&of_kind),
                    });
                }
                (many, _) => {
                    return Err(LowerError::AmbiguousOp { at: site, what: pat.what, found: self.describe_all(many) });
                }
            };
            let at = Site { op: Some(op), ..site };
            for (k, &name) in pat.outs.iter().enumerate() {
                let t = self.graph.ops[op].outputs.get(k).copied().ok_or(LowerError::WrongArity {
                    at,
                    what: pat.what,
                    expected: pat.outs.len(),
                    found: self.graph.ops[op].outputs.len(),
                })?;
                // Each name a template writes is new where it is written (the templates' tests).
                vars.insert(name, t);
            }
            for (j, operand) in pat.ins.iter().enumerate() {
                if let Operand::Var(name) = operand {
                    vars.entry(name).or_insert(self.graph.ops[op].inputs[j]);
                }
            }
            self.claimed[op] = true;
            ops[i] = op;
            mine.push(op);
        }
        let writers =
            template.pats.iter().zip(&ops).flat_map(|(p, &op)| p.outs.iter().map(move |&o| (o, op))).collect();
        let found = Found { vars, writers };
        self.check_state_writes(template, &found, site)?;
        self.check_no_stray_reads(template, &found, &mine, site)?;
        Ok(found)
    }

    /// Where a fused symbol is expected and the ops its pattern starts from are found instead: the
    /// symbol's name, and why the shim did not fuse them.
    fn unfused(&self, pat: &Pat, anchor: TensorId, site: Site) -> Option<LowerError> {
        let symbol = Symbol::ALL.into_iter().find(|s| s.name() == pat.kind)?;
        let starts = (self.uses.readers(anchor).iter().copied())
            .filter(|&r| !self.claimed[r] && symbol.starts_with(&self.graph.ops[r].kind))
            .collect::<Vec<_>>();
        let first = *starts.first()?;
        let at = Site { op: Some(first), ..site };
        if !self.shim.takes(symbol) {
            return Some(LowerError::Unfused { at, what: pat.what, symbol: symbol.name() });
        }
        let why = match symbol {
            Symbol::MergedQkv => {
                // The matvecs of the expected tensor reading the anchor, in row order.
                let expected = pat.ins.iter().find_map(|o| match o {
                    Operand::Weight(name, _) => Some(names::blk(site.layer.unwrap_or(usize::MAX), name)),
                    _ => None,
                });
                let mut bindings: Vec<&formats::bind::Binding> = starts
                    .iter()
                    .filter_map(|&r| self.graph.ops[r].inputs.first().and_then(|&w| self.binding(w)))
                    .filter(|b| Some(&b.tensor) == expected.as_ref())
                    .collect();
                bindings.sort_by_key(|b| match b.view {
                    View::Rows { start, .. } => start,
                    View::HeadHalf { half, .. } => half,
                    _ => usize::MAX,
                });
                match merged_views_precondition(&bindings) {
                    Err(why) => why,
                    Ok(()) => {
                        format!("the projections of {} are not all read from one input", expected.unwrap_or_default())
                    }
                }
            }
            s => format!("its preconditions do not hold: {}", s.entry().preconditions),
        };
        Some(LowerError::NotFusable { at, what: pat.what, symbol: symbol.name(), why })
    }

    /// A `merged_qkv` whose views are not ones one matvec runs.
    fn merged_views(&self, op: usize, site: Site) -> Result<(), LowerError> {
        let bindings: Vec<&formats::bind::Binding> =
            self.graph.ops[op].inputs.iter().skip(1).filter_map(|&w| self.binding(w)).collect();
        merged_views_precondition(&bindings)
            .map_err(|why| LowerError::MergedNotContiguous { at: Site { op: Some(op), ..site }, why })
    }

    /// The operand a template op is found through: its first operand already bound.
    fn anchor(
        &self,
        pat: &Pat,
        vars: &HashMap<&'static str, TensorId>,
        site: Site,
    ) -> Result<(usize, TensorId), LowerError> {
        for (j, operand) in pat.ins.iter().enumerate() {
            let t = match operand {
                Operand::Var(name) => vars.get(name).copied(),
                Operand::State(kind) => Some(self.state(*kind, site)?.0),
                Operand::Position => self.graph.position(),
                Operand::Token => Some(self.graph.token),
                _ => None,
            };
            if let Some(t) = t {
                return Ok((j, t));
            }
        }
        // A template whose op reads nothing the block has named is a template bug; report it as
        // the op the block could not find.
        Err(LowerError::WrongOp { at: site, what: pat.what, expected: pat.kind, reading: "?".into(), found: vec![] })
    }

    /// The layer's state of `kind`: its start-of-step and end-of-step tensors.
    pub fn state(&self, kind: StateKind, site: Site) -> Result<(TensorId, TensorId), LowerError> {
        self.graph
            .states
            .iter()
            .find(|s| s.kind == kind && s.layer == site.layer)
            .map(|s| (s.read, s.write))
            .ok_or(LowerError::MissingState { at: site, state: kind.name() })
    }

    /// Checks op `r` against template op `pat`: the number of operands, every named tensor, every
    /// constant's binding, the state and the position.
    fn check_operands(
        &self,
        pat: &Pat,
        r: usize,
        vars: &HashMap<&'static str, TensorId>,
        site: Site,
    ) -> Result<(), LowerError> {
        let op = &self.graph.ops[r];
        let at = Site { op: Some(r), ..site };
        if op.inputs.len() != pat.ins.len() {
            return Err(LowerError::WrongArity { at, what: pat.what, expected: pat.ins.len(), found: op.inputs.len() });
        }
        if op.outputs.len() != pat.outs.len() {
            return Err(LowerError::WrongArity {
                at,
                what: pat.what,
                expected: pat.outs.len(),
                found: op.outputs.len(),
            });
        }
        // Row ranges must follow one another, and head halves share one head size: the engine's unit
        // splits one matrix at those rows, or both halves at one head size.
        let mut rows_end = 0;
        let mut half_dim = None;
        for (j, (operand, &t)) in pat.ins.iter().zip(&op.inputs).enumerate() {
            let expect_tensor = |want: TensorId| -> Result<(), LowerError> {
                if want == t { Ok(()) } else { Err(self.wrong_tensor(at, pat.what, j, want, t)) }
            };
            match *operand {
                Operand::Var(name) => {
                    if let Some(&want) = vars.get(name) {
                        expect_tensor(want)?;
                    }
                }
                Operand::State(kind) => expect_tensor(self.state(kind, site)?.0)?,
                Operand::Position => match self.graph.position() {
                    Some(p) => expect_tensor(p)?,
                    None => return Err(LowerError::MissingState { at, state: StateKind::Position.name() }),
                },
                Operand::Token => expect_tensor(self.graph.token)?,
                Operand::Global(names) => {
                    let b = self.binding(t);
                    let ok = b.is_some_and(|b| b.view == View::Whole && names.contains(&b.tensor.as_str()));
                    if !ok {
                        return Err(LowerError::WrongBinding {
                            at,
                            what: pat.what,
                            expected: names.join(" or "),
                            found: self.describe_operand(t),
                        });
                    }
                }
                Operand::Weight(name, view) => {
                    let layer = site.layer.unwrap_or(usize::MAX);
                    let tensor = names::blk(layer, name);
                    let b = self.binding(t);
                    let fits = b.is_some_and(|b| {
                        b.tensor == tensor
                            && match (view, b.view) {
                                (ViewPat::Whole, View::Whole) => true,
                                (ViewPat::Rows(_), View::Rows { start, end }) => {
                                    let follows = start == rows_end;
                                    rows_end = end;
                                    follows
                                }
                                (ViewPat::Half(n), View::HeadHalf { half, head_dim }) => {
                                    half == n && *half_dim.get_or_insert(head_dim) == head_dim
                                }
                                _ => false,
                            }
                    });
                    if !fits {
                        let expected = match view {
                            ViewPat::Whole => tensor,
                            ViewPat::Rows(0) => format!("{tensor} rows from 0"),
                            ViewPat::Rows(_) => format!("{tensor} rows from {rows_end}"),
                            ViewPat::Half(n) => match half_dim {
                                Some(d) => format!("{tensor} head_half {d} {n}"),
                                None => format!("{tensor} head_half {n}"),
                            },
                        };
                        return Err(LowerError::WrongBinding {
                            at,
                            what: pat.what,
                            expected,
                            found: self.describe_operand(t),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn check_state_writes(&self, template: &Template, found: &Found, site: Site) -> Result<(), LowerError> {
        for &(kind, name) in template.writes {
            let at = site;
            let (_, write) = if kind == StateKind::Position {
                let s = self.graph.states.iter().find(|s| s.kind == kind);
                s.map(|s| (s.read, s.write)).ok_or(LowerError::MissingState { at, state: kind.name() })?
            } else {
                self.state(kind, site)?
            };
            let wrote = found.var(name);
            if write != wrote {
                return Err(LowerError::WrongStateWrite {
                    at,
                    state: kind.name(),
                    expected: self.name(wrote),
                    found: self.name(write),
                });
            }
        }
        Ok(())
    }

    /// Every tensor the block's ops write, except those it exports, is read only by the block.
    fn check_no_stray_reads(
        &self,
        template: &Template,
        found: &Found,
        mine: &[usize],
        site: Site,
    ) -> Result<(), LowerError> {
        for &op in mine {
            for &t in &self.graph.ops[op].outputs {
                if template.exports.iter().any(|&e| found.var(e) == t) {
                    continue;
                }
                if let Some(&r) = self.uses.readers(t).iter().find(|r| !mine.contains(r)) {
                    return Err(LowerError::StrayRead {
                        at: Site { op: Some(op), ..site },
                        tensor: self.name(t),
                        reader: r,
                        kind: self.graph.ops[r].kind.name(),
                    });
                }
            }
        }
        Ok(())
    }

    fn binding(&self, t: TensorId) -> Option<&'g formats::bind::Binding> {
        match self.uses.defs.get(t.0) {
            Some(Some(Def::Const(i))) => self.graph.consts.get(*i).map(|c| &c.binding),
            _ => None,
        }
    }

    fn name(&self, t: TensorId) -> String {
        self.graph.tensors.get(t.0).map_or_else(|| format!("#{}", t.0), |d| d.name.clone())
    }

    fn wrong_tensor(&self, at: Site, what: &'static str, operand: usize, want: TensorId, got: TensorId) -> LowerError {
        LowerError::WrongTensor { at, what, operand, expected: self.name(want), found: self.name(got) }
    }

    /// A constant as `%name = tensor view`, or a tensor as `%name`.
    pub(crate) fn describe_operand(&self, t: TensorId) -> String {
        match self.binding(t) {
            Some(b) => format!("%{} = {b}", self.name(t)),
            None => format!("%{}", self.name(t)),
        }
    }

    /// Ops as `op N (kind …)`, for errors.
    pub(crate) fn describe_all(&self, ops: &[usize]) -> Vec<String> {
        ops.iter().map(|&r| self.describe(r)).collect()
    }

    /// An op as `op N kind(attributes) reading …`.
    pub fn describe(&self, r: usize) -> String {
        let op = &self.graph.ops[r];
        let ins: Vec<String> = op.inputs.iter().map(|&t| self.describe_operand(t)).collect();
        format!("op {r} {:?} reading {}", op.kind, ins.join(", "))
    }
}
