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
    /// The inconclusive cases by the kind of their reason ([`super::oracle::Inconclusive::kind`]).
    pub inconclusive_kinds: BTreeMap<&'static str, u64>,
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
            Judgement::Inconclusive(why, _) => {
                self.inconclusive += 1;
                *self.inconclusive_kinds.entry(why.kind()).or_default() += 1;
            }
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
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }
}

impl fmt::Display for Stats {
    /// One line: `10000 cases: 2874 accepted, 7100 refused (WrongOp 1200, …), 26 inconclusive
    /// (non-finite 26), 0 failures; proofs: 2900 proved, 0 refuted, 0 inconclusive`; the
    /// inconclusive cases' kinds are shown when there are any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = |m: &BTreeMap<&'static str, u64>| m.iter().map(|(v, n)| format!("{v} {n}")).collect::<Vec<_>>();
        let kinds = match counts(&self.inconclusive_kinds) {
            k if k.is_empty() => String::new(),
            k => format!(" ({})", k.join(", ")),
        };
        write!(
            f,
            "{} cases: {} accepted, {} refused ({}), {} inconclusive{}, {} failures; proofs: {} proved, {} refuted, {} inconclusive",
            self.cases,
            self.accepted,
            self.refused_total(),
            counts(&self.refused).join(", "),
            self.inconclusive,
            kinds,
            self.failures,
            self.proved,
            self.refuted,
            self.unproved
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Unjudged;
    use crate::engine::Numerics;
    use crate::r#gen::oracle::Inconclusive;
    use crate::prove::ProofOutcome;

    fn inconclusive(why: Unjudged) -> Judgement {
        Judgement::Inconclusive(Inconclusive { why, numerics: Numerics::F32 }, ProofOutcome::Proved)
    }

    #[test]
    fn the_line_names_the_kinds_of_the_inconclusive_cases_when_there_are_any() {
        let mut stats = Stats::default();
        assert!(stats.to_string().contains(" 0 inconclusive, 0 failures"), "{stats}");
        let non_finite =
            || inconclusive(Unjudged::NonFinite { step: 1, tensor: "logits".into(), index: 0, command: None });
        for j in [non_finite(), non_finite()] {
            stats.record(&j);
        }
        assert!(stats.to_string().contains(" 2 inconclusive (non-finite 2), 0 failures"), "{stats}");
    }
}
