//! Translation validation: a proof, per program, that the program computes what its fused graph
//! computes and the fused graph what the authored graph computes, for every checkpoint and every
//! step, in the manner of Alive2 and TASO's verifier.
//!
//! All three are built as terms ([`term`]) in one hash-consed DAG: the authored graph (each
//! primitive op its symbol), the fused graph (each fused symbol through `fuse::meaning`), the
//! program (each Command by its documented meaning, written in [`program_terms`]). The leaves are
//! the checkpoint's tensors with their views, the token, the position and each piece of state as it
//! enters the step, so an equality of terms holds for every checkpoint, token and position. The
//! builder normalises each node as it builds it by a finite, named set of [`Lemma`]s; two outputs
//! are proved equal when their normal forms are one node. The program's Commands run in order over
//! these terms: each reads the buffers, the states and the position as the Commands before it left
//! them, so an attention after an advance reads `pos + 1` and is refuted with both Commands named.
//!
//! **Induction over steps.** The engine's state entering the step is the [`layout`] map of the
//! graph's; the proof shows the logits equal and every state leaving the step again the layout map
//! of the graph's. Both start at zero (the caches empty), where the maps hold, so this covers every
//! step of every sequence. The position enters as one leaf `pos` on both sides (the program's
//! incoming states are the graph's leaves under the layout maps, the position's the identity); its
//! advance is `pos + 1`.
//!
//! **Arithmetic.** Real: each value the engine stores below f32 is rounded, and the proof checks
//! that the roundings sit exactly where `Numerics` says ([`rounding`]).
//!
//! **Verdict.** [`ProofVerdict::Proved`] with the lemmas used and the term sizes;
//! [`ProofVerdict::Refuted`] when the normal forms differ *definitely* at their first differing
//! subterm: two different leaves (another tensor, view, state), one symbol with different
//! attributes over the same operands (another eps, θ, head map), two different integers (`pos`
//! and `pos + 1`), a state one side has and the other lacks, a layout that cannot correspond, a
//! misplaced rounding, or a program that does not read as a step (a buffer read before any Command
//! writes it, named by its Command); [`ProofVerdict::Inconclusive`] otherwise (two different
//! symbols that a lemma the set lacks might relate, with no witness found, or a limit reached). A
//! failure to prove is never called incorrect without such a definite mismatch, or a numeric
//! witness: both outputs evaluated on random leaves ([`eval`]) and found to differ, which refutes
//! whatever the symbols are. A refutation names the program's reads of a state an earlier Command
//! of the step wrote that its difference passes through (an attention reading the position an
//! advance before it moved).

#![forbid(unsafe_code)]

pub mod engine;
pub mod eval;
pub mod graph_terms;
pub mod layout;
pub mod lemma;
pub mod permute;
pub mod program_terms;
pub mod rounding;
pub mod slots;
pub mod source;
pub mod term;

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::fmt;

use ir::{Graph, StateKind};
pub use lemma::Lemma;
use program::{Command, Program, StateLayout};
use term::{Dag, Id, Sym};

/// The most nodes a proof may build before it gives up (inconclusive).
pub(crate) const NODE_LIMIT: usize = 4_000_000;

/// Which two of the three terms an output's proof relates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Transformers' exported step (imported) and the authored graph, through the checkpoint
    /// convention ([`source`]).
    SourceAuthored,
    /// llama.cpp's own compute graph for the step (imported from its recording) and the authored
    /// graph, over the same GGUF leaves ([`engine`]).
    EngineAuthored,
    /// The authored graph and the fused graph (the shim).
    AuthoredFused,
    /// The fused graph and the program (the lowering), through the layout maps.
    FusedProgram,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Link::SourceAuthored => "transformers ≡ authored",
            Link::EngineAuthored => "llama.cpp ≡ authored",
            Link::AuthoredFused => "authored ≡ fused",
            Link::FusedProgram => "fused ≡ program",
        })
    }
}

/// The proof of one output: which stage, its name, the size of its normal form and the lemmas the
/// builder applied inside it.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputProof {
    pub stage: Link,
    pub output: String,
    pub size: usize,
    pub lemmas: BTreeMap<Lemma, usize>,
}

/// A proof: every output of both stages, the lemmas used in all (with counts), and the sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Proof {
    pub outputs: Vec<OutputProof>,
    pub lemmas: BTreeMap<Lemma, usize>,
    /// The nodes of the DAG all three terms live in.
    pub nodes: usize,
    /// The program's commands.
    pub commands: usize,
    /// The stored places rounded below f32, each checked to sit where `Numerics` say.
    pub roundings: rounding::Roundings,
    /// The numerics the roundings were checked against.
    pub numerics: String,
    /// What the proof takes as given beyond its lemmas, each stated with its bound (the
    /// transformers link: its rotary frequencies, computed in f32).
    pub stated: Vec<String>,
}

/// A refutation: the output, the first differing subterms of its two normal forms, and why the
/// difference is definite.
#[derive(Clone, Debug, PartialEq)]
pub struct Refutation {
    pub stage: Link,
    pub output: String,
    pub why: String,
    /// The first differing subterm of the graph's side (for the program stage: the fused graph's
    /// term under the layout map), printed and truncated.
    pub left: String,
    /// The first differing subterm of the other side.
    pub right: String,
    /// The path from the output down to the difference, as symbol names.
    pub path: Vec<String>,
    /// Where the two outputs differ when evaluated on random leaves ([`eval`]), if they were.
    pub witness: Option<String>,
    /// The program's reads, on the way down to the difference, of a state an earlier Command of the
    /// step wrote: each names the reading Command, the state and the Command that wrote it
    /// ([`program_terms::StateRead`]).
    pub order: Vec<String>,
}

/// The three-valued verdict of a proof.
#[derive(Clone, Debug, PartialEq)]
pub enum ProofVerdict {
    Proved(Proof),
    Refuted(Box<Refutation>),
    Inconclusive { why: String },
}

/// A verdict in short, for counts and one-line reports: the refutation or the reason, in words.
#[derive(Clone, Debug, PartialEq)]
pub enum ProofOutcome {
    Proved,
    Refuted(String),
    Inconclusive(String),
}

impl fmt::Display for ProofOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProofOutcome::Proved => f.write_str("proved"),
            ProofOutcome::Refuted(why) => write!(f, "{why}"),
            ProofOutcome::Inconclusive(why) => write!(f, "{why}"),
        }
    }
}

impl ProofVerdict {
    /// The verdict in short (the refutation and the reason keep their full text).
    pub fn outcome(&self) -> ProofOutcome {
        match self {
            ProofVerdict::Proved(_) => ProofOutcome::Proved,
            ProofVerdict::Refuted(_) => ProofOutcome::Refuted(self.to_string()),
            ProofVerdict::Inconclusive { .. } => ProofOutcome::Inconclusive(self.to_string()),
        }
    }

    pub fn is_proved(&self) -> bool {
        matches!(self, ProofVerdict::Proved(_))
    }

    pub fn is_refuted(&self) -> bool {
        matches!(self, ProofVerdict::Refuted(_))
    }

    /// One word: `proved`, `refuted` or `inconclusive`.
    pub fn word(&self) -> &'static str {
        match self {
            ProofVerdict::Proved(_) => "proved",
            ProofVerdict::Refuted(_) => "refuted",
            ProofVerdict::Inconclusive { .. } => "inconclusive",
        }
    }
}

/// The name of a piece of state in a proof: its kind, and its layer.
fn state_name(kind: StateKind, layer: Option<usize>) -> String {
    match layer {
        Some(l) => format!("{}@l{l}", kind.name()),
        None => kind.name().to_string(),
    }
}

/// Proves that `program` computes what `fused` computes, and `fused` what `authored` computes, for
/// every checkpoint and every step: see the module documentation.
pub fn prove(authored: &Graph, fused: &Graph, program: &Program) -> ProofVerdict {
    let prover = Prover {
        dag: Dag::default(),
        outputs: vec![],
        graphs: [authored, fused],
        envs: OnceCell::new(),
        reads: vec![],
    };
    match prover.run(program) {
        Ok(v) => v,
        Err(why) => ProofVerdict::Inconclusive { why },
    }
}

struct Prover<'g> {
    dag: Dag,
    outputs: Vec<OutputProof>,
    /// The authored and the fused graph: the two graphs proved, whose constants and states the
    /// witness leaves fill.
    graphs: [&'g Graph; 2],
    /// Random leaves to look for a numeric witness with (none when the model is too large), made
    /// when the first pair of outputs differs: a proved program never needs them.
    envs: OnceCell<Vec<eval::Env>>,
    /// The program's reads of a state an earlier Command of the step wrote (none in a correct
    /// program), to name in a refutation.
    reads: Vec<program_terms::StateRead>,
}

/// The most checkpoint values a witness search makes up.
pub(crate) const WITNESS_LIMIT: usize = 1 << 22;

impl Prover<'_> {
    fn run(mut self, program: &Program) -> Result<ProofVerdict, String> {
        let [authored, fused] = self.graphs;
        let a = graph_terms::graph_terms(&mut self.dag, authored).map_err(|e| format!("the authored graph: {e}"))?;
        let f = graph_terms::graph_terms(&mut self.dag, fused).map_err(|e| format!("the fused graph: {e}"))?;
        // Authored ≡ fused: the same outputs, state by state.
        if let Some(r) = self.equal(Link::AuthoredFused, "logits", a.logits, f.logits) {
            return Ok(r);
        }
        for s in &a.states {
            let name = state_name(s.kind, s.layer);
            let Some(t) = f.states.iter().find(|t| t.kind == s.kind && t.layer == s.layer) else {
                return Ok(missing(Link::AuthoredFused, &name, "the fused graph has no such state"));
            };
            if let Some(r) = self.equal(Link::AuthoredFused, &name, s.out, t.out) {
                return Ok(r);
            }
        }
        if let Some(t) = f.states.iter().find(|t| !a.states.iter().any(|s| s.kind == t.kind && s.layer == t.layer)) {
            return Ok(missing(
                Link::AuthoredFused,
                &state_name(t.kind, t.layer),
                "the authored graph has no such state",
            ));
        }
        // Fused ≡ program: the program's states correspond to the graph's by the layout maps.
        let kinds = match program_state_kinds(program) {
            Ok(k) => k,
            Err(why) => return Ok(missing(Link::FusedProgram, "states", &why)),
        };
        let mut maps = vec![];
        let mut states_in = vec![];
        for (i, s) in program.states.iter().enumerate() {
            let (kind, layer) = (kinds[i], s.layer);
            let name = state_name(kind, layer);
            let Some(g) = f.states.iter().find(|g| g.kind == kind && g.layer == layer) else {
                return Ok(missing(
                    Link::FusedProgram,
                    &name,
                    &format!("the graph has no state for the program's {}", s.name),
                ));
            };
            let map = match layout::layout_map(kind, &g.ty, &s.layout) {
                Ok(m) => m,
                Err(e) => return Ok(missing(Link::FusedProgram, &name, &e.to_string())),
            };
            let leaf = graph_terms::state_leaf(&mut self.dag, kind, layer);
            states_in.push(self.apply(map, leaf));
            maps.push((map, g.out, name));
        }
        if let Some(g) = f
            .states
            .iter()
            .find(|g| !(0..program.states.len()).any(|i| kinds[i] == g.kind && program.states[i].layer == g.layer))
        {
            return Ok(missing(Link::FusedProgram, &state_name(g.kind, g.layer), "the program keeps no such state"));
        }
        let p = match program_terms::program_terms(&mut self.dag, program, &states_in) {
            Ok(p) => p,
            Err(u) => {
                let output = u.at.as_ref().map_or("logits".to_string(), |at| at.to_string());
                let why = format!("the program does not read as a step: {}", u.why);
                return Ok(missing(Link::FusedProgram, &output, &why));
            }
        };
        self.reads = p.reads;
        if let Some(m) = p.misplaced.first() {
            return Ok(missing(
                Link::FusedProgram,
                &format!("rounding of {}", m.what),
                &format!("stored as {}, where the numerics {} store it as {}", m.found, program.numerics, m.expected),
            ));
        }
        if self.dag.len() > NODE_LIMIT {
            return Ok(ProofVerdict::Inconclusive { why: format!("more than {NODE_LIMIT} term nodes") });
        }
        if let Some(r) = self.equal(Link::FusedProgram, "logits", f.logits, p.logits) {
            return Ok(r);
        }
        for (i, (map, out, name)) in maps.into_iter().enumerate() {
            let want = self.apply(map, out);
            if let Some(r) = self.equal(Link::FusedProgram, &name, want, p.states[i]) {
                return Ok(r);
            }
        }
        let mut lemmas = BTreeMap::new();
        for (l, _) in &self.dag.fired {
            *lemmas.entry(*l).or_default() += 1;
        }
        let commands = program.blocks.iter().map(|b| b.commands.len()).sum();
        Ok(ProofVerdict::Proved(Proof {
            outputs: self.outputs,
            lemmas,
            nodes: self.dag.len(),
            commands,
            roundings: p.roundings,
            numerics: program.numerics.to_string(),
            stated: vec![],
        }))
    }

    /// The engine's layout of the graph's state term `t`.
    fn apply(&mut self, map: layout::LayoutMap, t: Id) -> Id {
        use layout::LayoutMap::*;
        match map {
            Identity => t,
            DropOldest { channels, taps } => self.dag.mk(Sym::DropFirstCol { c: channels, k: taps }, &[t]),
            Transpose { value_heads, key_dim, value_dim } => {
                self.dag.mk(Sym::TransposeKv { hv: value_heads, dk: key_dim, dv: value_dim }, &[t])
            }
            Prealloc { heads, dim } => self.dag.mk(Sym::Prealloc { h: heads, d: dim }, &[t]),
        }
    }

    /// `None` when `a` and `b` are one node (recording the output's proof); else the verdict their
    /// first difference gives.
    fn equal(&mut self, stage: Link, output: &str, a: Id, b: Id) -> Option<ProofVerdict> {
        if a == b {
            let cone = self.dag.cone(a);
            let mut lemmas = BTreeMap::new();
            for (l, id) in &self.dag.fired {
                if cone.contains(id) {
                    *lemmas.entry(*l).or_default() += 1;
                }
            }
            self.outputs.push(OutputProof { stage, output: output.to_string(), size: cone.len(), lemmas });
            return None;
        }
        let Difference { left: x, right: y, path, trail, definite } = first_difference(&self.dag, a, b);
        let (left, right) = (self.dag.show(x, 3), self.dag.show(y, 3));
        // Positions 3 and 5: RoPE is not the identity there, and the caches hold earlier entries.
        let envs = self.envs.get_or_init(|| {
            [(1, 3), (2, 5)]
                .into_iter()
                .filter_map(|(seed, pos)| eval::Env::random(&self.graphs, seed, pos, WITNESS_LIMIT))
                .collect()
        });
        let witness = envs.iter().find_map(|env| {
            let (va, vb) = (eval::eval(&self.dag, a, env), eval::eval(&self.dag, b, env));
            let (va, vb) = (va.ok()?, vb.ok()?);
            eval::differ(&va, &vb).map(|d| format!("at position {}, token {}: {d}", env.pos, env.token))
        });
        if !definite && witness.is_none() {
            return Some(ProofVerdict::Inconclusive {
                why: format!(
                    "{stage}, {output}: the normal forms differ at {} vs {}, which no lemma relates \
                     (two different symbols: not a definite mismatch)",
                    truncate(&left),
                    truncate(&right)
                ),
            });
        }
        let why = if definite { describe(&self.dag, x, y) } else { "the outputs differ numerically".into() };
        let order = self.reads_into(y, &trail);
        let r = Refutation { stage, output: output.into(), why, left, right, path, witness, order };
        Some(ProofVerdict::Refuted(Box::new(r)))
    }

    /// The program's out-of-order reads a difference at `y` passes through: those whose term read
    /// lies in `y`, and of those the ones whose reader wrote a node of `trail` (the program's side
    /// of the path to `y`) when any does.
    fn reads_into(&self, y: Id, trail: &[Id]) -> Vec<String> {
        if self.reads.is_empty() {
            return vec![];
        }
        let cone = self.dag.cone(y);
        let inside: Vec<_> = self.reads.iter().filter(|r| cone.contains(&r.read)).collect();
        let on_path: Vec<_> = inside.iter().filter(|r| r.wrote.iter().any(|w| trail.contains(w))).collect();
        if on_path.is_empty() {
            inside.iter().map(|r| r.to_string()).collect()
        } else {
            on_path.iter().map(|r| r.to_string()).collect()
        }
    }
}

fn missing(stage: Link, output: &str, why: &str) -> ProofVerdict {
    ProofVerdict::Refuted(Box::new(Refutation {
        stage,
        output: output.into(),
        why: why.into(),
        left: String::new(),
        right: String::new(),
        path: vec![],
        witness: None,
        order: vec![],
    }))
}

/// The graph state kind each program state stands for: its layout, and for a KV cache whether an
/// attention command reads it as keys or values.
pub(crate) fn program_state_kinds(program: &Program) -> Result<Vec<StateKind>, String> {
    let mut keys = vec![];
    let mut values = vec![];
    for c in program.blocks.iter().flat_map(|b| &b.commands) {
        if let Command::Attention { k_cache, v_cache, .. } = c {
            keys.push(k_cache.0);
            values.push(v_cache.0);
        }
    }
    program
        .states
        .iter()
        .enumerate()
        .map(|(i, s)| match s.layout {
            StateLayout::Position => Ok(StateKind::Position),
            StateLayout::ConvWindow { .. } => Ok(StateKind::Conv),
            StateLayout::DeltaState { .. } => Ok(StateKind::Recurrent),
            StateLayout::KvCache { .. } => match (keys.contains(&i), values.contains(&i)) {
                (true, false) => Ok(StateKind::KeyCache),
                (false, true) => Ok(StateKind::ValueCache),
                _ => Err(format!("the cache {} is not read as keys alone or as values alone", s.name)),
            },
        })
        .collect()
}

/// The integer a term is, as `pos + n`, when it is one.
fn integer(dag: &Dag, id: Id) -> Option<usize> {
    let n = dag.node(id);
    match n.sym {
        Sym::Pos => Some(0),
        Sym::Advance => integer(dag, n.args[0]).map(|k| k + 1),
        _ => None,
    }
}

/// The first differing subterms of two terms, and how the descent reached them.
struct Difference {
    left: Id,
    right: Id,
    /// The symbols from the outputs down to the difference.
    path: Vec<String>,
    /// The nodes of the right side from its output down to the difference, the difference excluded.
    trail: Vec<Id>,
    /// Whether the difference is definite.
    definite: bool,
}

/// The first differing subterms of `a` and `b` (descending while the symbols agree, or into the
/// operands a lemma would relate), the path to them, and whether the difference there is definite.
fn first_difference(dag: &Dag, a: Id, b: Id) -> Difference {
    let (mut a, mut b) = (a, b);
    let (mut path, mut trail) = (vec![], vec![]);
    loop {
        let (na, nb) = (dag.node(a), dag.node(b));
        let next = if na.sym == nb.sym && na.args.len() == nb.args.len() {
            commuted_pair(dag, na, nb)
                .or_else(|| na.args.iter().zip(&nb.args).find(|(x, y)| x != y).map(|(&x, &y)| (x, y)))
        } else {
            unfired_pair(dag, na, nb)
        };
        if let Some((x, y)) = next {
            let (ha, hb) = (na.sym.name(), nb.sym.name());
            path.push(if ha == hb { ha.to_string() } else { format!("{ha}/{hb}") });
            trail.push(b);
            (a, b) = (x, y);
            continue;
        }
        let integers = matches!((integer(dag, a), integer(dag, b)), (Some(x), Some(y)) if x != y);
        // One symbol with other attributes is definite only over the same operands: over different
        // ones, an attribute may make up for an operand (a concat of other lengths of other rows).
        // The same symbol over the same operands everywhere is no difference found (not definite).
        let same = na.sym == nb.sym && na.args.len() == nb.args.len();
        let definite = !same
            && ((na.sym.is_leaf() && nb.sym.is_leaf())
                || (na.sym.same_head(&nb.sym) && na.args == nb.args)
                || integers);
        return Difference { left: a, right: b, path, trail, definite };
    }
}

/// For a graph's node against the program's node a lemma of the engine's symbols would have
/// rewritten to it, had the program read what the lemma asks (the cache entering the step, the
/// position `pos`): the pair of corresponding operands that differ, to descend into. The queries
/// of `attention(q, K, V)` and `attend_prefix(q′, K′, V′, p)` (`attend-filled-prefix`); the
/// appended entry, then the cache, of `prealloc(kv_append(C, x))` and `kv_write(prealloc(C′), p,
/// x′)` (`kv-append-at-fill`). Each side is a function of the operand paired, so a definite
/// difference there is one of the whole, by the verdict's rule.
fn unfired_pair(dag: &Dag, na: &term::Node, nb: &term::Node) -> Option<(Id, Id)> {
    let differ = |pairs: &[(Id, Id)]| pairs.iter().copied().find(|(x, y)| x != y);
    match (&na.sym, &nb.sym, na.args.as_slice(), nb.args.as_slice()) {
        (Sym::Attention { .. }, Sym::AttendPrefix { .. }, [q, ..], [q2, ..]) => differ(&[(*q, *q2)]),
        (Sym::Prealloc { .. }, Sym::KvWrite { .. }, [appended], [held, _, x2]) => {
            let (app, held) = (dag.node(*appended), dag.node(*held));
            match (&app.sym, app.args.as_slice(), &held.sym, held.args.as_slice()) {
                (Sym::KvAppend { .. }, [c, x], Sym::Prealloc { .. }, [c2]) => differ(&[(*x, *x2), (*c, *c2)]),
                _ => None,
            }
        }
        _ => None,
    }
}

/// For two nodes of one commutative symbol (`add`, `mul`), whose operands the builder ordered by
/// id: the pair of operands to descend into, matched by a shared operand, or else by their symbols
/// (`mul(silu(g), u)` against `mul(silu(u), g)` descends into `silu(g)` and `silu(u)`).
fn commuted_pair(dag: &Dag, na: &term::Node, nb: &term::Node) -> Option<(Id, Id)> {
    if !matches!(na.sym, Sym::Add | Sym::Mul) {
        return None;
    }
    let ([a0, a1], [b0, b1]) = (na.args.as_slice(), nb.args.as_slice()) else { return None };
    let head = |x: &Id| &dag.node(*x).sym;
    let like = |x: &Id, y: &Id| head(x).same_head(head(y));
    let first_differing = |p: [(Id, Id); 2]| p.into_iter().find(|(x, y)| x != y);
    if a0 == b0 || a1 == b1 {
        return None;
    }
    if a0 == b1 {
        return Some((*a1, *b0));
    }
    if a1 == b0 {
        return Some((*a0, *b1));
    }
    if like(a0, b0) && like(a1, b1) {
        return first_differing([(*a0, *b0), (*a1, *b1)]);
    }
    if like(a0, b1) && like(a1, b0) {
        return first_differing([(*a0, *b1), (*a1, *b0)]);
    }
    None
}

/// Why two definitely different subterms differ, in words.
fn describe(dag: &Dag, a: Id, b: Id) -> String {
    let (sa, sb) = (&dag.node(a).sym, &dag.node(b).sym);
    if sa.is_leaf() && sb.is_leaf() {
        format!("different leaves: {sa} vs {sb}")
    } else if let (Some(x), Some(y)) = (integer(dag, a), integer(dag, b)) {
        format!("different positions: pos + {x} vs pos + {y}")
    } else {
        format!("{} with different attributes: {sa} vs {sb}", sa.name())
    }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 240;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl fmt::Display for ProofVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProofVerdict::Proved(p) => {
                match p.commands {
                    0 => writeln!(f, "proved: {} outputs, {} term nodes", p.outputs.len(), p.nodes)?,
                    n => writeln!(f, "proved: {} outputs over {n} commands, {} term nodes", p.outputs.len(), p.nodes)?,
                }
                for o in &p.outputs {
                    writeln!(f, "  {}: {} ({} nodes){}", o.output, o.stage, o.size, lemma_list(&o.lemmas, " by "))?;
                }
                write!(f, "lemmas used:{}", lemma_list(&p.lemmas, " "))?;
                for s in &p.stated {
                    write!(f, "\nstated: {s}")?;
                }
                if p.commands == 0 {
                    if p.numerics != "reals" {
                        write!(f, "\nnumerics of the imported graph: {}", p.numerics)?;
                    }
                    return Ok(());
                }
                if p.roundings.is_empty() {
                    write!(f, "\nroundings: none (numerics {}: every place is f32)", p.numerics)
                } else {
                    let r: Vec<String> =
                        p.roundings.iter().map(|((place, s), n)| format!("{n} {} to {s}", place.name())).collect();
                    write!(f, "\nroundings, each where numerics {} say: {}", p.numerics, r.join(", "))
                }
            }
            ProofVerdict::Refuted(r) => {
                write!(f, "refuted: {}, {}: {}", r.stage, r.output, r.why)?;
                if !r.left.is_empty() {
                    let (left, right) = match r.stage {
                        Link::SourceAuthored => ("transformers:", "authored:    "),
                        Link::EngineAuthored => ("llama.cpp:", "authored: "),
                        _ => ("graph:  ", "program:"),
                    };
                    write!(
                        f,
                        "\n  at {}\n  {left} {}\n  {right} {}",
                        if r.path.is_empty() { "the output".into() } else { r.path.join(" > ") },
                        truncate(&r.left),
                        truncate(&r.right)
                    )?;
                }
                if let Some(w) = &r.witness {
                    write!(f, "\n  witness: {w}")?;
                }
                for read in &r.order {
                    write!(f, "\n  out of order: {read}")?;
                }
                Ok(())
            }
            ProofVerdict::Inconclusive { why } => write!(f, "inconclusive: {why}"),
        }
    }
}

/// `lemmas` as `prefix name ×count, …`, or nothing when empty.
fn lemma_list(lemmas: &BTreeMap<Lemma, usize>, prefix: &str) -> String {
    if lemmas.is_empty() {
        return String::new();
    }
    let l: Vec<String> = lemmas.iter().map(|(l, n)| format!("{l} ×{n}")).collect();
    format!("{prefix}{}", l.join(", "))
}
