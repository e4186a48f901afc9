//! The type of a tensor of the step graph.

use std::fmt;

use smallvec::SmallVec;

/// The dims of an array type, kept inline up to four (every shape the IR writes): a type is
/// made for every op output that is inferred, so it should not allocate.
pub type Shape = SmallVec<[usize; 4]>;

/// The types an op writes, kept inline up to two (every op writes one or two).
pub type Types = SmallVec<[Ty; 2]>;

/// What a tensor of the step graph holds: the token read, the position, an array of values with a
/// fixed shape, or a key or value cache whose length grows by one each step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// The token id the step reads.
    Token,
    /// The absolute position of the token: the number of tokens already processed.
    Position,
    /// An array of real values with this shape (row-major, the last axis fastest).
    Tensor(Shape),
    /// A cache of one vector of `dim` values per head and per position seen so far.
    Cache { heads: usize, dim: usize },
}

impl Ty {
    /// An array type of this shape.
    pub fn tensor(shape: &[usize]) -> Ty {
        Ty::Tensor(Shape::from_slice(shape))
    }

    /// The shape of an array type, or `None` for the other types.
    pub fn shape(&self) -> Option<&[usize]> {
        match self {
            Ty::Tensor(s) => Some(s),
            _ => None,
        }
    }

    /// The number of values of an array type (1 for a scalar `[]`), or `None`.
    pub fn numel(&self) -> Option<usize> {
        self.shape().map(|s| s.iter().product())
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Token => f.write_str("token"),
            Ty::Position => f.write_str("position"),
            Ty::Tensor(s) => write!(f, "[{}]", join(s)),
            Ty::Cache { heads, dim } => write!(f, "cache[{heads}, {dim}]"),
        }
    }
}

fn join(s: &[usize]) -> String {
    s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}
