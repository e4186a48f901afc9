//! The per-slot half of the batched proof: what one step of a program reads and writes, state by
//! state, read off the Commands' terms, and a term algebra of slot states built from it.
//!
//! [`step_shape`] builds the program's terms ([`super::program_terms`], the Commands' documented
//! meaning) over one leaf per state and reads off, for each output, which states entering the step
//! and whether the token it depends on: a conv window (its oldest column dropped, the step's input
//! column appended), the position (one more), a state the step keeps, or a state computed from what
//! it reads. [`SlotTerms`] names a slot's state by the computation that made it under that shape:
//! `step(reads, token)` builds each state's term over the terms of exactly the states it reads, so
//! two states are one term exactly when the same computations made them, and a conv window is the
//! list of its columns, so a window that forgot a difference is the same term again.
//!
//! The induction that uses it (over a slot plan's operations) is `batch::prove`'s; this module
//! knows nothing of slots or plans. [`SlotTerms::differ`] says how two terms of one state differ:
//! *definitely* when their first difference (descending while both are the same step of the same
//! output) is two different tokens, or the start state against a stepped state that depends on the
//! token or is the advanced position; *undecided* when it is whatever a storage held before the plan
//! (unknown: it may hold anything, the start state included). The definite rule is the prover's own
//! standard (two different leaves are a definite mismatch): every output is taken to be a function
//! that some checkpoint makes injective in what it reads. A step writes its input into every state
//! that depends on the token (the conv window's newest column, the delta rule's `k vᵀ` update, the
//! cache's entry at the position), which no checkpoint-independent identity undoes.

use foldhash::HashMap;

use super::term::{Dag, Id, Sym};
use super::{graph_terms, program_state_kinds, program_terms};
use program::{Program, StateLayout};

/// What one output of the step reads: whether the token, and which states entering the step (by
/// index into [`Program::states`], ascending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reads {
    pub token: bool,
    pub states: Vec<usize>,
}

/// How one state leaves the step, read off the Commands' terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateStep {
    /// The step leaves it as it entered.
    Kept,
    /// The position: one more than it entered.
    Advance,
    /// A conv window of `columns` columns: the oldest dropped, the step's input column appended;
    /// the column reads `column` (never the window itself).
    Window { columns: usize, column: Reads },
    /// Anything else: a function of what it reads.
    Computed(Reads),
}

/// What one step of a program reads and writes, state by state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepShape {
    pub states: Vec<StateStep>,
    pub logits: Reads,
}

/// Reads off the shape of `program`'s step from its terms, or why it cannot (the program does not
/// read as terms, two states share a leaf, a conv window that is not a shift, a position the
/// program reads but keeps no state for).
pub(crate) fn step_shape(program: &Program) -> Result<StepShape, String> {
    let kinds = program_state_kinds(program)?;
    let mut dag = Dag::new();
    let leaves: Vec<Id> =
        program.states.iter().zip(&kinds).map(|(s, &k)| graph_terms::state_leaf(&mut dag, k, s.layer)).collect();
    for (i, l) in leaves.iter().enumerate() {
        if leaves[..i].contains(l) {
            return Err(format!("the states {} and another share one leaf", program.states[i].name));
        }
    }
    let terms = program_terms::program_terms(&mut dag, program, &leaves)?;
    let token = dag.leaf(Sym::Token);
    let pos = dag.leaf(Sym::Pos);
    let reads = |root: Id| -> Result<Reads, String> {
        let cone = dag.cone(root);
        if cone.contains(&pos) && !leaves.contains(&pos) {
            return Err("the step reads a position the program keeps no state for".into());
        }
        let states = (0..leaves.len()).filter(|&j| cone.contains(&leaves[j])).collect();
        Ok(Reads { token: cone.contains(&token), states })
    };
    let mut states = Vec::with_capacity(leaves.len());
    for (i, s) in program.states.iter().enumerate() {
        let out = terms.states[i];
        let n = dag.node(out);
        let step = if out == leaves[i] {
            StateStep::Kept
        } else if s.layout == StateLayout::Position {
            if n.sym != Sym::Advance || n.args != [leaves[i]] {
                return Err(format!("the position {} leaves the step as other than its advance", s.name));
            }
            StateStep::Advance
        } else if let StateLayout::ConvWindow { .. } = s.layout {
            let shifted = match (&n.sym, n.args.as_slice()) {
                (&Sym::DropFirstCol { c, k }, &[full]) => match (&dag.node(full).sym, dag.node(full).args.as_slice()) {
                    (&Sym::AppendCol { c: c2, k: k2 }, &[w, x]) if (c2, k2) == (c, k) && w == leaves[i] => Some((k, x)),
                    _ => None,
                },
                _ => None,
            };
            let Some((k, x)) = shifted else {
                return Err(format!("the conv window {} leaves the step as other than a shift", s.name));
            };
            let column = reads(x)?;
            if column.states.contains(&i) {
                return Err(format!("the input column of the conv window {} reads the window", s.name));
            }
            StateStep::Window { columns: k.saturating_sub(1), column }
        } else {
            StateStep::Computed(reads(out)?)
        };
        states.push(step);
    }
    Ok(StepShape { states, logits: reads(terms.logits)? })
}

/// A term of [`SlotTerms`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotTerm(u32);

/// Which output a stepped node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Out {
    State(usize),
    /// The input column a step appends to the conv window `usize`.
    Column(usize),
    Logits,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Node {
    /// State `state` (or a column of its window) as the start state has it.
    Start { state: usize },
    /// Whatever storage `storage` held of state `state` (column `col` of a window) before the plan.
    Held { state: usize, storage: usize, col: usize },
    /// An output of one step: the token it was fed (when it depends on it) and the terms it read.
    Step { out: Out, token: Option<u32>, reads: Vec<SlotTerm> },
    /// A conv window, oldest column first.
    Window { cols: Vec<SlotTerm> },
}

/// How two terms of one state differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// Different on some checkpoint: the reason, in words.
    Definite(String),
    /// Not decided: the reason, in words.
    Undecided(String),
}

/// Hash-consed slot states over one program's [`StepShape`].
pub struct SlotTerms {
    shape: StepShape,
    names: Vec<String>,
    nodes: Vec<Node>,
    index: HashMap<Node, SlotTerm>,
}

impl SlotTerms {
    /// The terms of `program`'s slot states (see [`step_shape`]).
    pub fn new(program: &Program) -> Result<SlotTerms, String> {
        let shape = step_shape(program)?;
        let names = program.states.iter().map(|s| s.name.clone()).collect();
        Ok(SlotTerms { shape, names, nodes: Vec::new(), index: HashMap::default() })
    }

    /// The number of terms built.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The shape the terms follow.
    pub fn shape(&self) -> &StepShape {
        &self.shape
    }

    fn mk(&mut self, node: Node) -> SlotTerm {
        if let Some(&t) = self.index.get(&node) {
            return t;
        }
        let t = SlotTerm(self.nodes.len() as u32);
        self.nodes.push(node.clone());
        self.index.insert(node, t);
        t
    }

    fn node(&self, t: SlotTerm) -> &Node {
        &self.nodes[t.0 as usize]
    }

    /// Each state of `at` built by `leaf` (for a window, its columns).
    fn state_of(&mut self, leaf: impl Fn(usize, usize) -> Node) -> Vec<SlotTerm> {
        (0..self.shape.states.len())
            .map(|i| match self.shape.states[i] {
                StateStep::Window { columns, .. } => {
                    let cols = (0..columns).map(|c| self.mk(leaf(i, c))).collect();
                    self.mk(Node::Window { cols })
                }
                _ => self.mk(leaf(i, 0)),
            })
            .collect()
    }

    /// The start state, every piece of it.
    pub fn start(&mut self) -> Vec<SlotTerm> {
        self.state_of(|state, _| Node::Start { state })
    }

    /// Whatever storage `storage` held before the plan, every piece of it.
    pub fn held(&mut self, storage: usize) -> Vec<SlotTerm> {
        self.state_of(|state, col| Node::Held { state, storage, col })
    }

    fn stepped(&mut self, out: Out, r: &Reads, read: &[SlotTerm], token: u32) -> SlotTerm {
        let reads = r.states.iter().map(|&j| read[j]).collect();
        self.mk(Node::Step { out, token: r.token.then_some(token), reads })
    }

    /// One step on the state `read` (a term per state) fed `token`: the logits and each state as
    /// it leaves the step.
    pub fn step(&mut self, read: &[SlotTerm], token: u32) -> (SlotTerm, Vec<SlotTerm>) {
        let mut outs = Vec::with_capacity(read.len());
        for i in 0..self.shape.states.len() {
            let t = match self.shape.states[i].clone() {
                StateStep::Kept => read[i],
                StateStep::Advance => self.mk(Node::Step { out: Out::State(i), token: None, reads: vec![read[i]] }),
                StateStep::Window { column, .. } => {
                    let col = self.stepped(Out::Column(i), &column, read, token);
                    match self.node(read[i]) {
                        Node::Window { cols } if !cols.is_empty() => {
                            let mut cols = cols[1..].to_vec();
                            cols.push(col);
                            self.mk(Node::Window { cols })
                        }
                        _ => read[i],
                    }
                }
                StateStep::Computed(r) => self.stepped(Out::State(i), &r, read, token),
            };
            outs.push(t);
        }
        let logits = self.shape.logits.clone();
        (self.stepped(Out::Logits, &logits, read, token), outs)
    }

    fn out_name(&self, out: Out) -> String {
        match out {
            Out::State(i) => self.names[i].clone(),
            Out::Column(i) => format!("{}'s input column", self.names[i]),
            Out::Logits => "logits".into(),
        }
    }

    /// Whether the stepped node `t` is one a start state can never equal: it depends on the token
    /// (the step writes its input into it) or is the advanced position.
    fn never_start(&self, t: SlotTerm) -> bool {
        match self.node(t) {
            Node::Step { token: Some(_), .. } => true,
            Node::Step { out: Out::State(i), token: None, .. } => self.shape.states[*i] == StateStep::Advance,
            _ => false,
        }
    }

    /// `None` when `a` and `b` are one term; else how they differ at their first difference.
    pub fn differ(&self, a: SlotTerm, b: SlotTerm) -> Option<Difference> {
        let (mut a, mut b) = (a, b);
        let mut depth = 0usize;
        loop {
            if a == b {
                return None;
            }
            let (na, nb) = (self.node(a), self.node(b));
            let next = match (na, nb) {
                (Node::Step { out: o1, token: t1, reads: r1 }, Node::Step { out: o2, token: t2, reads: r2 })
                    if o1 == o2 && r1.len() == r2.len() =>
                {
                    if t1 != t2 {
                        let show = |t: &Option<u32>| t.map_or("none".into(), |t| t.to_string());
                        return Some(Difference::Definite(format!(
                            "{} (at depth {depth}) was fed token {} where its own history feeds {}",
                            self.out_name(*o1),
                            show(t1),
                            show(t2)
                        )));
                    }
                    r1.iter().zip(r2).find(|(x, y)| x != y).map(|(x, y)| (*x, *y))
                }
                (Node::Window { cols: c1 }, Node::Window { cols: c2 }) if c1.len() == c2.len() => {
                    c1.iter().zip(c2).find(|(x, y)| x != y).map(|(x, y)| (*x, *y))
                }
                (Node::Held { storage, .. }, _) | (_, Node::Held { storage, .. }) => {
                    return Some(Difference::Undecided(format!(
                        "one side is whatever storage {storage} held before the plan (never zeroed or copied)"
                    )));
                }
                (Node::Start { .. }, Node::Step { out, .. }) | (Node::Step { out, .. }, Node::Start { .. }) => {
                    let stepped = if matches!(na, Node::Start { .. }) { b } else { a };
                    let name = self.out_name(*out);
                    return Some(if self.never_start(stepped) {
                        Difference::Definite(format!("{name} (at depth {depth}) is the start state on one side only"))
                    } else {
                        Difference::Undecided(format!(
                            "{name} (at depth {depth}) is the start state on one side and a step that reads no \
                             token on the other"
                        ))
                    });
                }
                _ => None,
            };
            match next {
                Some((x, y)) => {
                    (a, b) = (x, y);
                    depth += 1;
                }
                None => return Some(Difference::Undecided("the terms differ in shape".into())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lower::{lower_graph, shim::EngineShim};
    use model::{author::decode_step, presets};
    use program::Numerics;

    fn tiny() -> Program {
        let spec = presets::preset("tiny").expect("the tiny preset");
        let graph = EngineShim::default().prepare(&decode_step(&spec).expect("a graph"));
        lower_graph(&graph, Numerics::F32).expect("a program")
    }

    #[test]
    fn the_shape_reads_each_state_off_the_commands() -> Result<(), String> {
        let program = tiny();
        let shape = step_shape(&program)?;
        for (s, step) in program.states.iter().zip(&shape.states) {
            match (&s.layout, step) {
                (StateLayout::Position, StateStep::Advance) => {}
                (StateLayout::ConvWindow { taps, .. }, StateStep::Window { columns, column }) => {
                    assert_eq!(*columns, taps - 1, "{}", s.name);
                    assert!(column.token, "{}: the conv input depends on the token", s.name);
                }
                (StateLayout::DeltaState { .. } | StateLayout::KvCache { .. }, StateStep::Computed(r)) => {
                    assert!(r.token, "{}", s.name);
                }
                (l, st) => panic!("{}: {l:?} steps as {st:?}", s.name),
            }
        }
        assert_eq!(shape.logits.states.len(), program.states.len(), "the logits read every state");
        Ok(())
    }

    #[test]
    fn two_histories_are_one_term_exactly_when_they_make_the_same_state() -> Result<(), String> {
        let mut t = SlotTerms::new(&tiny())?;
        let z = t.start();
        let run = |t: &mut SlotTerms, tokens: &[u32]| tokens.iter().fold(z.clone(), |s, &k| t.step(&s, k).1);
        let (a, b, c) = (run(&mut t, &[1, 2]), run(&mut t, &[1, 2]), run(&mut t, &[1, 3]));
        assert_eq!(a, b);
        let d: Vec<_> = a.iter().zip(&c).filter_map(|(x, y)| t.differ(*x, *y)).collect();
        assert!(!d.is_empty() && d.iter().all(|d| matches!(d, Difference::Definite(_))), "{d:?}");
        let held = t.held(0);
        assert!(matches!(t.differ(z[0], held[0]), Some(Difference::Undecided(_))));
        Ok(())
    }
}
