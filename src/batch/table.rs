//! A schedule as a table, step × slot: what each slot holds and which row reads it at each step.

use std::fmt::Write;

use super::BatchProgram;
use super::plan::{Lowered, SlotOp};

/// The table of a lowered schedule (its plan possibly mutated): one line per step, one column per
/// slot. A cell is `s<n>=<token>` when the row of sequence `s<n>` runs on the slot (`r<i>` its
/// row), `pad=<token>` when a padding row does, `·` for a live slot no row uses, blank for a free
/// one. The operations between two steps are listed on the line before the step.
pub fn table(pool: &BatchProgram, lowered: &Lowered) -> String {
    let w = 12;
    let mut out = String::new();
    let _ = write!(out, "{:<6}", "step");
    for s in 0..pool.slots {
        let _ = write!(out, "{:<w$}", format!("@{s}"));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    let mut live = vec![false; pool.slots];
    let mut pending: Vec<String> = Vec::new();
    let mut step = 0;
    for op in &lowered.plan.ops {
        match op {
            SlotOp::Step { rows } => {
                if !pending.is_empty() {
                    let _ = writeln!(out, "{:<6}{}", "", pending.join(", "));
                    pending.clear();
                }
                let mut cells: Vec<String> =
                    live.iter().map(|&l| if l { "·".to_string() } else { String::new() }).collect();
                let meant = lowered.trace.steps.get(step);
                for (r, row) in rows.iter().enumerate() {
                    let Some(slot) = row.slot.filter(|&s| s < pool.slots) else { continue };
                    cells[slot] = match meant.and_then(|m| m.get(r)) {
                        Some(m) => format!("{}={} r{r}", m.seq, m.token),
                        None => format!("pad={} r{r}", row.token),
                    };
                }
                let _ = write!(out, "{step:<6}");
                for c in cells {
                    let _ = write!(out, "{c:<w$}");
                }
                out.truncate(out.trim_end().len());
                out.push('\n');
                step += 1;
            }
            other => {
                match *other {
                    SlotOp::Claim { slot } if slot < pool.slots => live[slot] = true,
                    SlotOp::Free { slot } if slot < pool.slots => live[slot] = false,
                    _ => {}
                }
                pending.push(other.to_string());
            }
        }
    }
    if !pending.is_empty() {
        let _ = writeln!(out, "{:<6}{}", "", pending.join(", "));
    }
    out
}
