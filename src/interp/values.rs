//! The values the reference interpreter computes with, and the constants it reads in place.

use std::borrow::Cow;

use ndarray::{Array3, ArrayD, ArrayViewD, IxDyn};

use crate::ir::Ty;
use crate::ir::View;

/// Why an op could not run on the values it was given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fault {
    /// The token is not a row of the embedding table.
    TokenOutOfRange { token: u32, rows: usize },
    /// A value is not of the kind or shape the op reads.
    Shape(String),
}

/// A shape surprise, with its reason.
pub(crate) fn surprise<T>(why: impl Into<String>) -> Result<T, Fault> {
    Err(Fault::Shape(why.into()))
}

/// The value of a tensor during one step: the token, the position, an array of reals, a key or value
/// cache `[heads, T, dim]`, or a constant still in the checkpoint.
#[derive(Clone, Debug)]
pub(crate) enum Value<'c> {
    Token(u32),
    Position(u64),
    Array(ArrayD<f64>),
    Cache(Array3<f64>),
    Const(ConstView<'c>),
}

impl<'c> Value<'c> {
    /// The token this value is.
    pub fn token(&self) -> Result<u32, Fault> {
        match self {
            Value::Token(t) => Ok(*t),
            other => surprise(format!("expected the token, found {}", other.describe())),
        }
    }

    /// The position this value is.
    pub fn position(&self) -> Result<u64, Fault> {
        match self {
            Value::Position(p) => Ok(*p),
            other => surprise(format!("expected a position, found {}", other.describe())),
        }
    }

    /// The array this value is; a constant is read from the checkpoint and widened to f64.
    pub fn array(&self) -> Result<Cow<'_, ArrayD<f64>>, Fault> {
        match self {
            Value::Array(a) => Ok(Cow::Borrowed(a)),
            Value::Const(c) => c.to_array().map(Cow::Owned),
            other => surprise(format!("expected an array, found {}", other.describe())),
        }
    }

    /// The cache this value is.
    pub fn cache(&self) -> Result<&Array3<f64>, Fault> {
        match self {
            Value::Cache(c) => Ok(c),
            other => surprise(format!("expected a cache, found {}", other.describe())),
        }
    }

    /// Whether this value is what a tensor of type `ty` holds.
    pub fn fits(&self, ty: &Ty) -> bool {
        match (self, ty) {
            (Value::Token(_), Ty::Token) | (Value::Position(_), Ty::Position) => true,
            (Value::Array(a), Ty::Tensor(s)) => a.shape() == s.as_slice(),
            (Value::Const(c), Ty::Tensor(s)) => c.shape() == s.as_slice(),
            (Value::Cache(c), Ty::Cache { heads, dim }) => c.dim().0 == *heads && c.dim().2 == *dim,
            _ => false,
        }
    }

    /// What this value is, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Value::Token(t) => format!("token {t}"),
            Value::Position(p) => format!("position {p}"),
            Value::Array(a) => format!("an array of shape {:?}", a.shape()),
            Value::Cache(c) => format!("a cache of shape {:?}", c.shape()),
            Value::Const(c) => format!("a constant of shape {:?}", c.shape()),
        }
    }

    /// The start-of-step value of a state of type `ty` before the first step: position 0, an array
    /// of zeros, or an empty cache.
    pub fn initial(ty: &Ty) -> Option<Value<'c>> {
        match ty {
            Ty::Position => Some(Value::Position(0)),
            Ty::Tensor(s) => Some(Value::Array(ArrayD::zeros(IxDyn(s)))),
            Ty::Cache { heads, dim } => Some(Value::Cache(Array3::zeros((*heads, 0, *dim)))),
            Ty::Token => None,
        }
    }
}

/// A constant as the view of a checkpoint tensor, read in place: its f32 values are widened to f64
/// only as an op reads them. A matrix view is read row by row through [`View::source_row`].
#[derive(Clone, Debug)]
pub(crate) struct ConstView<'c> {
    /// The checkpoint tensor's values, row-major, `source.iter().product()` of them.
    data: &'c [f32],
    /// The checkpoint tensor's shape.
    source: &'c [usize],
    view: View,
    /// The view's shape (the constant's).
    shape: Vec<usize>,
}

impl<'c> ConstView<'c> {
    /// The view `view` of a tensor of shape `source` holding `data`, or why the view does not fit or
    /// the data does not fill the shape.
    pub fn new(data: &'c [f32], source: &'c [usize], view: View) -> Result<ConstView<'c>, String> {
        let numel: usize = source.iter().product();
        if data.len() != numel {
            return Err(format!("shape {source:?} needs {numel} values, but the tensor holds {}", data.len()));
        }
        let shape = view.shape(source)?;
        Ok(ConstView { data, source, view, shape })
    }

    /// The view's shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The view's `[rows, cols]`, when it is a matrix.
    pub fn matrix(&self) -> Result<[usize; 2], Fault> {
        match self.shape[..] {
            [rows, cols] => Ok([rows, cols]),
            _ => surprise(format!("expected a matrix, found a constant of shape {:?}", self.shape)),
        }
    }

    /// Row `r` of a matrix view, as the checkpoint's f32 values.
    pub fn row(&self, r: usize) -> Result<&'c [f32], Fault> {
        let [rows, cols] = self.matrix()?;
        if r >= rows {
            return surprise(format!("row {r} of a constant of {rows} rows"));
        }
        let s = self.view.source_row(self.source, r);
        match self.data.get(s * cols..(s + 1) * cols) {
            Some(row) => Ok(row),
            None => {
                surprise(format!("row {r} (checkpoint row {s}) lies outside the tensor of shape {:?}", self.source))
            }
        }
    }

    /// The whole view as an f64 array.
    pub fn to_array(&self) -> Result<ArrayD<f64>, Fault> {
        if self.view == View::Whole {
            let whole =
                ArrayViewD::from_shape(IxDyn(self.source), self.data).map_err(|e| Fault::Shape(e.to_string()))?;
            return Ok(whole.mapv(f64::from));
        }
        if let View::Expert { index } = self.view {
            // An expert is one contiguous block of its stack, whatever its rank.
            let n: usize = self.shape.iter().product();
            let block = self
                .data
                .get(index * n..(index + 1) * n)
                .ok_or(Fault::Shape(format!("expert {index} lies outside the tensor of shape {:?}", self.source)))?;
            return ArrayD::from_shape_vec(IxDyn(&self.shape), block.iter().map(|&v| f64::from(v)).collect())
                .map_err(|e| Fault::Shape(e.to_string()));
        }
        let [rows, _] = self.matrix()?;
        let mut values = Vec::with_capacity(self.shape.iter().product());
        for r in 0..rows {
            values.extend(self.row(r)?.iter().map(|&v| f64::from(v)));
        }
        ArrayD::from_shape_vec(IxDyn(&self.shape), values).map_err(|e| Fault::Shape(e.to_string()))
    }
}
