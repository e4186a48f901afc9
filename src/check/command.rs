//! Every Command checked where it runs: the engine's f32 run watched Command by Command
//! ([`StepObserver`]), each output judged against the Command's documented meaning evaluated by
//! the check on the very inputs the engine's Command read ([`super::meaning`]), within the bound
//! derived before looking ([`super::bound`]), and stored where and in the type the program's
//! numerics say ([`super::storage`]).
//!
//! A value the engine stored is admitted when it is a value of its storage type and lies between
//! the roundings to that type of the ball's two ends: the rounding of some value an f32 evaluation
//! of the meaning can give. So a value stored in another type, rounded wrongly, or off by more than
//! f32 arithmetic can be is a failure naming the Command, the buffer or state, the index and the
//! step, whatever code path computed it: the inputs are the engine's own, so the graph's
//! conditioning does not enter. Beside the outputs the check keeps what it judged: each buffer as
//! its writer left it, which its readers must read, and (for one sequence) each state as its
//! writer last left it, which its next reader must find, and every value of a state its Command
//! does not write must stay as it was. What cannot be bounded (a non-finite input, a ball that is
//! not finite) is inconclusive, with the Command named.

use std::borrow::Cow;
use std::rc::Rc;

use super::bound::Ball;
use super::meaning::{Reads, Written, meaning};
use super::storage::{Place, round_to, stored_as};
use super::verdict::{Comparison, Unjudged, Witness};
use super::weights::Weights;
use crate::engine::numerics::Storage;
use crate::engine::program::{Buf, Command, Program, StateRef};
use crate::engine::run::{StepObserver, StepView};

/// What the per-Command check found.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    /// Every judged value is admitted.
    Admitted,
    /// The first Command with a value out of its bound: its worst value.
    Failure(Witness),
    /// A Command whose outputs cannot be bounded.
    Unjudged(Unjudged),
    /// The check could not evaluate a Command (a weight it cannot read): why.
    Broken(String),
}

/// A Command of the program, where it sits, and what it reads and writes.
struct Site<'p> {
    command: &'p Command,
    /// Its place, as witnesses name it (`Program::site`).
    name: String,
    reads: Vec<Buf>,
    writes: Vec<Buf>,
    states: Vec<StateRef>,
}

/// The per-Command check of one engine run, a [`StepObserver`] of its steps.
pub struct CommandCheck<'p, 'c> {
    program: &'p Program,
    /// The program's Commands in order, blocks flattened.
    sites: Rc<[Site<'p>]>,
    weights: Weights<'c>,
    /// The step being run (0-based).
    step: usize,
    /// Per state, its values before the running Command, for the states it touches.
    before: Vec<Option<Vec<f32>>>,
    /// The position before the running Command.
    position: usize,
    /// Each buffer as its writer last left it, and whether it wrote it this step.
    written: Vec<(Vec<f32>, bool)>,
    /// Each state and the position as their writers last left them, when the run is one sequence
    /// from the start state (`None`: states move between runs, as in a batched engine).
    carried: Option<(Vec<Vec<f32>>, usize)>,
    found: Found,
    /// How many values were judged.
    pub values: usize,
    /// The largest distance of a judged value from its midpoint, relative to its tensor's scale.
    pub max_rel: f64,
    /// The farthest from its midpoint a judged value was allowed to be (its bound, and the
    /// rounding to its storage type), relative to its tensor's scale.
    pub widest: f64,
}

impl<'p, 'c> CommandCheck<'p, 'c> {
    /// A check of `program`'s Commands on `weights`. `from_start` says the run is one sequence
    /// from the start state, whose states the check then carries from step to step.
    pub fn new(program: &'p Program, weights: Weights<'c>, from_start: bool) -> CommandCheck<'p, 'c> {
        let sites = program
            .blocks
            .iter()
            .enumerate()
            .flat_map(|(b, block)| {
                block.commands.iter().enumerate().map(move |(c, command)| Site {
                    command,
                    name: program.site(b, c),
                    reads: command.reads(),
                    writes: command.writes(),
                    states: command.states(),
                })
            })
            .collect();
        let carried = from_start.then(|| (vec![vec![]; program.states.len()], 0));
        CommandCheck {
            program,
            sites,
            weights,
            step: 0,
            before: vec![None; program.states.len()],
            position: 0,
            written: vec![(vec![], false); program.buffers.len()],
            carried,
            found: Found::Admitted,
            values: 0,
            max_rel: 0.0,
            widest: 0.0,
        }
    }

    /// What the check found so far.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// Sets the step the next Commands belong to (witnesses name it).
    pub fn at_step(&mut self, step: usize) {
        self.step = step;
    }

    fn judging(&self) -> bool {
        self.found == Found::Admitted
    }

    fn fail(&mut self, witness: Witness) {
        self.found = Found::Failure(witness);
    }

    /// A witness of a value the engine changed where nothing may: `tensor[index]` is `engine`
    /// where it was `kept`.
    fn changed(&mut self, site: &str, tensor: &str, index: usize, kept: f32, engine: f32) {
        self.fail(Witness {
            stage: Comparison::Command,
            step: self.step,
            command: Some(format!("{site}: a value it does not write changed")),
            tensor: tensor.to_string(),
            index,
            reference: f64::from(kept),
            engine: f64::from(engine),
            tolerance: 0.0,
            relative: f64::INFINITY,
        });
    }

    fn buffer_name(&self, b: Buf) -> &'p str {
        self.program.buffers.get(b.0).map_or("%?", |d| d.name.as_str())
    }

    fn state_name(&self, s: StateRef) -> &'p str {
        self.program.states.get(s.0).map_or("%?", |d| d.name.as_str())
    }

    /// Judges `values` (what the engine stored) against `balls` (the meaning's), stored as
    /// `storage` (`None`: exactly), as `tensor[at..]` of Command `site`; records the worst value
    /// out of bound.
    fn judge(&mut self, site: &str, tensor: &str, at: usize, balls: &[Ball], values: &[f32], storage: Storage) {
        if balls.len() != values.len() {
            let witness = Witness {
                stage: Comparison::Command,
                step: self.step,
                command: Some(site.to_string()),
                tensor: tensor.to_string(),
                index: at + balls.len().min(values.len()),
                reference: f64::NAN,
                engine: f64::NAN,
                tolerance: 0.0,
                relative: f64::INFINITY,
            };
            return self.fail(witness);
        }
        let scale = balls.iter().fold(1f64, |m, b| m.max(b.mid.abs()));
        let mut worst: Option<Witness> = None;
        for (i, (b, &v)) in balls.iter().zip(values).enumerate() {
            let t = f64::from(v);
            let (lo, hi) = (round_to(storage, b.lo()), round_to(storage, b.hi()));
            let distance = (t - b.mid).abs();
            let rel = if distance.is_nan() { f64::INFINITY } else { distance / scale };
            let representable = round_to(storage, t) == t;
            if !(representable && lo <= t && t <= hi) {
                if worst.as_ref().is_none_or(|w| rel > w.relative) {
                    let command = if representable || t.is_nan() {
                        site.to_string()
                    } else {
                        format!("{site}, stored as no {storage} value")
                    };
                    worst = Some(Witness {
                        stage: Comparison::Command,
                        step: self.step,
                        command: Some(command),
                        tensor: tensor.to_string(),
                        index: at + i,
                        reference: b.mid,
                        engine: t,
                        tolerance: (hi - b.mid).max(b.mid - lo),
                        relative: rel,
                    });
                }
                continue;
            }
            self.max_rel = self.max_rel.max(rel);
            self.widest = self.widest.max((hi - b.mid).max(b.mid - lo) / scale);
        }
        self.values += values.len();
        if let Some(w) = worst {
            self.fail(w);
        }
    }

    /// Where the first input value of `site`'s Command that is not finite sits, if one is.
    fn non_finite_input(&self, site: &Site<'_>, view: &StepView<'_, f32>) -> Option<(&'p str, usize)> {
        let buffers = site.reads.iter().filter_map(|&b| Some((self.buffer_name(b), view.buffer(b)?)));
        let states = site.states.iter().filter_map(|s| Some((self.state_name(*s), self.before.get(s.0)?.as_deref()?)));
        buffers.chain(states).find_map(|(name, values)| Some((name, values.iter().position(|x| !x.is_finite())?)))
    }
}

impl StepObserver<f32> for CommandCheck<'_, '_> {
    fn before(&mut self, command: usize, view: &StepView<'_, f32>) {
        if command == 0 {
            self.written.iter_mut().for_each(|w| w.1 = false);
        }
        let sites = Rc::clone(&self.sites);
        let Some(at) = sites.get(command) else { return };
        let site = at.name.as_str();
        if !self.judging() {
            return;
        }
        // Its inputs are what their writers left.
        for &b in &at.reads {
            let (Some((kept, true)), Some(live)) = (self.written.get(b.0), view.buffer(b)) else {
                continue;
            };
            if let Some(i) = kept.iter().zip(live).position(|(k, l)| k.to_bits() != l.to_bits()) {
                let (k, l) = (kept[i], live[i]);
                return self.changed(site, self.buffer_name(b), i, k, l);
            }
        }
        self.position = view.position();
        for &s in &at.states {
            let values = view.state(s).map(<[f32]>::to_vec);
            if let (Some((carried, _)), Some(live)) = (&self.carried, &values) {
                let kept = &carried[s.0];
                let start = kept.is_empty();
                let diff = live.iter().enumerate().find(|&(i, l)| {
                    let k = if start { 0f32 } else { kept[i] };
                    k.to_bits() != l.to_bits()
                });
                if let Some((i, &l)) = diff {
                    let k = if start { 0.0 } else { kept[i] };
                    return self.changed(site, self.state_name(s), i, k, l);
                }
            }
            self.before[s.0] = values;
        }
        if let Some((_, position)) = &self.carried
            && *position != self.position
        {
            let (kept, live) = (*position as f32, self.position as f32);
            self.changed(site, "position", 0, kept, live);
        }
    }

    fn after(&mut self, command: usize, view: &StepView<'_, f32>) {
        let sites = Rc::clone(&self.sites);
        let Some(at) = sites.get(command) else { return };
        let (cmd, site) = (at.command, at.name.as_str());
        if !self.judging() {
            return;
        }
        if let Some((tensor, index)) = self.non_finite_input(at, view) {
            let (tensor, command) = (tensor.to_string(), Some(site.to_string()));
            self.found = Found::Unjudged(Unjudged::NonFinite { step: self.step, tensor, index, command });
            return;
        }
        let reads = Reads {
            program: self.program,
            view,
            before: &self.before,
            position: self.position,
            weights: &self.weights,
        };
        let written = match meaning(cmd, &reads) {
            Ok(w) => w,
            Err(why) => {
                self.found = Found::Broken(format!("{site}: {why}"));
                return;
            }
        };
        let numerics = self.program.numerics;
        // Which values of each state the Command wrote.
        let mut covered: Vec<Vec<bool>> = vec![vec![]; self.program.states.len()];
        for w in &written {
            let (name, balls, values, storage, at) = match w {
                Written::Buffer(b, balls) => {
                    let values = view.buffer(*b).unwrap_or_default();
                    let storage = stored_as(&numerics, Place::Buffer).unwrap_or(Storage::F32);
                    (Cow::Borrowed(self.buffer_name(*b)), balls, values, storage, 0)
                }
                Written::State { state, at, values: balls } => {
                    let all = view.state(*state).unwrap_or_default();
                    let values = all.get(*at..at + balls.len()).unwrap_or_default();
                    let cover = &mut covered[state.0];
                    cover.resize(all.len(), false);
                    cover.iter_mut().skip(*at).take(balls.len()).for_each(|c| *c = true);
                    let layout = &self.program.states[state.0].layout;
                    let storage = stored_as(&numerics, Place::State(layout)).unwrap_or(Storage::F32);
                    (Cow::Borrowed(self.state_name(*state)), balls, values, storage, *at)
                }
                Written::Intermediate(balls) => {
                    let values = view.intermediate().unwrap_or_default();
                    (Cow::Owned(format!("{site}'s intermediate")), balls, values, Storage::F32, 0)
                }
                Written::Position(p) => {
                    if view.position() != *p {
                        let witness = Witness {
                            stage: Comparison::Command,
                            step: self.step,
                            command: Some(site.to_string()),
                            tensor: "position".into(),
                            index: 0,
                            reference: *p as f64,
                            engine: view.position() as f64,
                            tolerance: 0.0,
                            relative: f64::INFINITY,
                        };
                        return self.fail(witness);
                    }
                    continue;
                }
            };
            if let Some(i) = balls.iter().position(|b| !b.is_finite()) {
                let (tensor, command) = (name.to_string(), Some(site.to_string()));
                let why = Unjudged::NonFinite { step: self.step, tensor, index: at + i, command };
                self.found = Found::Unjudged(why);
                return;
            }
            self.judge(site, &name, at, balls, values, storage);
            if !self.judging() {
                return;
            }
        }
        // What the Command does not write of a state it touches stays as it was, and only an
        // advance moves the position.
        for &s in &at.states {
            let (Some(before), Some(live)) = (self.before[s.0].as_ref(), view.state(s)) else { continue };
            let cover = &covered[s.0];
            let moved = (0..live.len())
                .find(|&i| !cover.get(i).copied().unwrap_or(false) && before[i].to_bits() != live[i].to_bits());
            if let Some(i) = moved {
                let (k, l) = (before[i], live[i]);
                return self.changed(site, self.state_name(s), i, k, l);
            }
        }
        if !written.iter().any(|w| matches!(w, Written::Position(_))) && view.position() != self.position {
            let (kept, live) = (self.position as f32, view.position() as f32);
            return self.changed(site, "position", 0, kept, live);
        }
        // What the check judged is what the next readers must find.
        for &b in &at.writes {
            if let (Some((kept, fresh)), Some(live)) = (self.written.get_mut(b.0), view.buffer(b)) {
                kept.clear();
                kept.extend_from_slice(live);
                *fresh = true;
            }
        }
        if let Some((carried, position)) = &mut self.carried {
            for &s in &at.states {
                if let Some(live) = view.state(s) {
                    carried[s.0] = live.to_vec();
                }
            }
            *position = view.position();
        }
    }
}
