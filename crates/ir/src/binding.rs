//! Bindings: which checkpoint tensor, and which view of it, each constant of a step graph reads.
//!
//! A binding is part of the graph (every constant carries one), so its types live with the IR;
//! `formats::bind` checks them against a checkpoint.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A constant's source: a checkpoint tensor (GGUF naming) and the view of it the constant holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub tensor: String,
    pub view: View,
}

/// The part of a checkpoint tensor a constant holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum View {
    /// The whole tensor.
    Whole,
    /// Rows `start..end` of a matrix (`[start..end, :]`).
    Rows { start: usize, end: usize },
    /// One half of each head of a matrix whose rows hold, head after head, `2·head_dim` rows: the
    /// first `head_dim` (`half` 0: an attention block's queries) or the last (`half` 1: its output
    /// gate). The view is `[heads·head_dim, :]`.
    HeadHalf { head_dim: usize, half: usize },
    /// Expert `index` of a stack of expert tensors: of a `[E, out, in]` stack of matrices, `[out, in]`;
    /// of an `[E, n]` stack of vectors (the experts' biases), `[n]`.
    Expert { index: usize },
}

impl Binding {
    /// The whole of tensor `name`.
    pub fn whole(name: impl Into<String>) -> Binding {
        Binding { tensor: name.into(), view: View::Whole }
    }

    /// Rows `start..end` of tensor `name`.
    pub fn rows(name: impl Into<String>, start: usize, end: usize) -> Binding {
        Binding { tensor: name.into(), view: View::Rows { start, end } }
    }

    /// Expert `index` of the stack of expert tensors `name`.
    pub fn expert(name: impl Into<String>, index: usize) -> Binding {
        Binding { tensor: name.into(), view: View::Expert { index } }
    }

    /// Half `half` of each `2·head_dim`-row head of tensor `name`.
    pub fn head_half(name: impl Into<String>, head_dim: usize, half: usize) -> Binding {
        Binding { tensor: name.into(), view: View::HeadHalf { head_dim, half } }
    }
}

impl View {
    /// The shape of this view of a tensor of shape `of`, or why it does not fit.
    pub fn shape(&self, of: &[usize]) -> Result<Vec<usize>, String> {
        match *self {
            View::Whole => Ok(of.to_vec()),
            View::Rows { start, end } => match of {
                [r, c] if start < end && end <= *r => Ok(vec![end - start, *c]),
                _ => Err(format!("rows {start}..{end} of a tensor of shape {of:?}")),
            },
            View::HeadHalf { head_dim, half } => match of {
                [r, c] if half < 2 && head_dim > 0 && r % (2 * head_dim) == 0 => Ok(vec![r / 2, *c]),
                _ => Err(format!("half {half} of heads of {head_dim} rows of a tensor of shape {of:?}")),
            },
            View::Expert { index } => match of {
                [e, o, i] if index < *e => Ok(vec![*o, *i]),
                [e, n] if index < *e => Ok(vec![*n]),
                _ => Err(format!("expert {index} of a tensor of shape {of:?}")),
            },
        }
    }

    /// The row of the viewed tensor (viewed as `[rows, cols]`, experts stacked) that row `r` of the
    /// view is.
    pub fn source_row(&self, of: &[usize], r: usize) -> usize {
        match *self {
            View::Whole => r,
            View::Rows { start, .. } => start + r,
            View::HeadHalf { head_dim, half } => (r / head_dim) * 2 * head_dim + half * head_dim + r % head_dim,
            View::Expert { index } => index * of.get(1).copied().unwrap_or(0) + r,
        }
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            View::Whole => Ok(()),
            View::Rows { start, end } => write!(f, " rows {start}..{end}"),
            View::HeadHalf { head_dim, half } => write!(f, " head_half {head_dim} {half}"),
            View::Expert { index } => write!(f, " expert {index}"),
        }
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.tensor, self.view)
    }
}
