//! `Stats`: running counts of what the oracle found, for a fuzz target or a long test to print.

use std::collections::BTreeMap;
use std::fmt;

use super::oracle::{Failure, Judgement};
use crate::prove::ProofOutcome;

/// Counts of judgements: accepted (agreeing), refused by `LowerError` variant, inconclusive, and
/// failures of the gate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub cases: u64,
    pub accepted: u64,
    pub refused: BTreeMap<&'static str, u64>,
    pub inconclusive: u64,
    pub failures: u64,
    /// Per numerics (its text form), the cases accepted (agreeing, inconclusive or unsound) and
    /// the inconclusive among them: the budget of inconclusive verdicts is counted over the cases
    /// that reached a comparison, at each numerics, never over all cases.
    pub by_numerics: BTreeMap<String, (u64, u64)>,
    /// Accepted cases whose program is proved, refuted, or neither (`crate::prove`).
    pub proved: u64,
    pub refuted: u64,
    pub unproved: u64,
}

impl Stats {
    /// Counts one judgement.
    pub fn record(&mut self, j: &Judgement) {
        self.cases += 1;
        match j {
            Judgement::Agreed { proof, .. } | Judgement::Inconclusive(_, proof) => match proof {
                ProofOutcome::Proved => self.proved += 1,
                ProofOutcome::Refuted(_) => self.refuted += 1,
                ProofOutcome::Inconclusive(_) => self.unproved += 1,
            },
            Judgement::Failure(Failure::Refuted { .. }) => self.refuted += 1,
            _ => {}
        }
        match j {
            Judgement::Agreed { .. } => self.accepted += 1,
            Judgement::Refused { error } => *self.refused.entry(error.name()).or_default() += 1,
            Judgement::Inconclusive(..) => self.inconclusive += 1,
            Judgement::Failure(_) => self.failures += 1,
        }
    }

    /// Counts one judgement of a case at `numerics`, also per numerics.
    pub fn record_at(&mut self, j: &Judgement, numerics: crate::engine::Numerics) {
        self.record(j);
        let compared = matches!(
            j,
            Judgement::Agreed { .. }
                | Judgement::Inconclusive(..)
                | Judgement::Failure(Failure::Unsound { .. } | Failure::Refuted { .. })
        );
        if compared {
            let e = self.by_numerics.entry(numerics.to_string()).or_default();
            e.0 += 1;
            e.1 += u64::from(matches!(j, Judgement::Inconclusive(..)));
        }
    }

    /// The cases that reached a comparison: agreeing or inconclusive (failures aside).
    pub fn compared(&self) -> u64 {
        self.accepted + self.inconclusive
    }

    /// How many cases were refused, in all.
    pub fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }
}

impl fmt::Display for Stats {
    /// One line: `10000 cases: 2874 accepted, 7100 refused (WrongOp 1200, …), 26 inconclusive, 0 failures;
    /// proofs: 2900 proved, 0 refuted, 0 inconclusive`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let refused: Vec<String> = self.refused.iter().map(|(v, n)| format!("{v} {n}")).collect();
        write!(
            f,
            "{} cases: {} accepted, {} refused ({}), {} inconclusive, {} failures; proofs: {} proved, {} refuted, {} inconclusive",
            self.cases,
            self.accepted,
            self.refused_total(),
            refused.join(", "),
            self.inconclusive,
            self.failures,
            self.proved,
            self.refuted,
            self.unproved
        )
    }
}
