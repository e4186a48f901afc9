//! The values the reference interpreter computes with, and the constants it reads in place.

use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;

use ndarray::{Array3, ArrayD, IxDyn};

use formats::checkpoint::Tensor;
use ir::Ty;
use ir::View;

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
            Value::Const(c) => c.to_array(),
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

/// A constant as the view of a checkpoint tensor, read in place: the tensor stays in its stored
/// type (F32, BF16, Q8_0, Q4_K, …), and a row is dequantized exactly (ggml's dequantization) and
/// widened to f64 only as an op reads it. A matrix view is read row by row through
/// [`View::source_row`]; nothing holds a widened copy of a large weight. A small constant (at most
/// [`SMALL_VALUES`] values: norms, biases, conv weights, and every matrix of a generated case) is
/// decoded once, when the view is made, and read from there by every step: the same values.
#[derive(Clone, Debug)]
pub(crate) struct ConstView<'c> {
    /// The checkpoint tensor, its rows whole blocks of its type and its bytes exactly the rows.
    tensor: &'c Tensor,
    view: View,
    /// The view's shape (the constant's).
    shape: Vec<usize>,
    /// A small constant's values, decoded once.
    decoded: Option<Values>,
}

/// A small constant's decoded values: in the view's order, and as the f64 array.
type Values = Rc<(Vec<f32>, ArrayD<f64>)>;

/// Decoded values by the tensor's address and the view, beside the tensor they borrow.
type ByView<'c> = foldhash::HashMap<(usize, View), (&'c Tensor, Values)>;

/// The most values a constant may have to be decoded once and kept (256 KiB of f32 values).
pub(crate) const SMALL_VALUES: usize = 1 << 16;

/// The small constants of one checkpoint decoded once for every runner that reads them (the
/// authored and the fused graph of a case bind the same tensors): each view of a tensor's values,
/// by the tensor and the view. Its values are what each runner would decode itself.
#[derive(Default)]
pub struct Decoded<'c> {
    views: RefCell<ByView<'c>>,
}

impl<'c> ConstView<'c> {
    /// The view `view` of `tensor`, or why the view does not fit or the tensor's bytes are not the
    /// values of its shape in its type; a small one's values are taken from `decoded` when it holds
    /// them, else decoded and kept there.
    pub fn new(tensor: &'c Tensor, view: View, decoded: &Decoded<'c>) -> Result<ConstView<'c>, String> {
        tensor.rows().map_err(|e| e.to_string())?;
        let shape = view.shape(&tensor.shape)?;
        let mut c = ConstView { tensor, view, shape, decoded: None };
        // A view that cannot be read whole (an error an op reports when it reads it) stays lazy.
        if c.shape.iter().product::<usize>() > SMALL_VALUES {
            return Ok(c);
        }
        // The tensor's address names it while `decoded` lives: it borrows every tensor it keeps.
        let key = (std::ptr::from_ref(tensor) as usize, view);
        if let Some((_, values)) = decoded.views.borrow().get(&key) {
            c.decoded = Some(Rc::clone(values));
            return Ok(c);
        }
        if let Ok(values) = c.values() {
            let array = ArrayD::from_shape_vec(IxDyn(&c.shape), values.iter().map(|&v| f64::from(v)).collect());
            if let Ok(array) = array {
                let values = Rc::new((values, array));
                decoded.views.borrow_mut().insert(key, (tensor, Rc::clone(&values)));
                c.decoded = Some(values);
            }
        }
        Ok(c)
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

    /// Row `r` of a matrix view, its stored values dequantized exactly to f32.
    pub fn row(&self, r: usize) -> Result<Cow<'_, [f32]>, Fault> {
        let [rows, cols] = self.matrix()?;
        if r >= rows {
            return surprise(format!("row {r} of a constant of {rows} rows"));
        }
        if let Some(d) = &self.decoded {
            return Ok(Cow::Borrowed(&d.0[r * cols..(r + 1) * cols]));
        }
        let s = self.view.source_row(&self.tensor.shape, r);
        self.source_rows(s..s + 1).map(Cow::Owned)
    }

    /// All rows of a matrix view at once, row-major, when its values were decoded when the view
    /// was made (a small constant's): what [`ConstView::row`] gives row by row.
    pub fn decoded_rows(&self) -> Option<&[f32]> {
        self.decoded.as_ref().filter(|_| self.shape.len() == 2).map(|d| d.0.as_slice())
    }

    /// Rows `range` of the checkpoint tensor (as rows of its innermost dim), dequantized.
    fn source_rows(&self, range: std::ops::Range<usize>) -> Result<Vec<f32>, Fault> {
        self.tensor.decode_rows(range.clone()).map_err(|e| {
            Fault::Shape(format!(
                "rows {}..{} of the tensor of shape {:?}: {e}",
                range.start, range.end, self.tensor.shape
            ))
        })
    }

    /// The whole view as an f64 array: for the small constants (norms, biases, conv weights) the
    /// ops read whole; a matrix is read by rows.
    pub(crate) fn to_array(&self) -> Result<Cow<'_, ArrayD<f64>>, Fault> {
        if let Some(d) = &self.decoded {
            return Ok(Cow::Borrowed(&d.1));
        }
        let values = self.values()?;
        ArrayD::from_shape_vec(IxDyn(&self.shape), values.into_iter().map(f64::from).collect())
            .map(Cow::Owned)
            .map_err(|e| Fault::Shape(e.to_string()))
    }

    /// The whole view's values in its order, dequantized, read from the tensor.
    fn values(&self) -> Result<Vec<f32>, Fault> {
        Ok(match self.view {
            View::Whole => {
                let rows = self.tensor.rows().map_err(|e| Fault::Shape(e.to_string()))?.rows;
                self.source_rows(0..rows)?
            }
            // An expert is one contiguous run of rows of its stack, whatever its rank.
            View::Expert { index } => {
                let n = if self.shape.len() == 2 { self.shape[0] } else { 1 };
                self.source_rows(index * n..(index + 1) * n)?
            }
            _ => {
                let [rows, _] = self.matrix()?;
                let mut values = Vec::with_capacity(self.shape.iter().product());
                // Each run of the view's rows that are consecutive rows of the tensor (a head's
                // half, a slice), decoded at once: rows hold whole blocks, so the run's values
                // are its rows' values one after the other.
                let source = |r: usize| self.view.source_row(&self.tensor.shape, r);
                let mut r = 0;
                while r < rows {
                    let s = source(r);
                    let n = (1..rows - r).find(|&k| source(r + k) != s + k).unwrap_or(rows - r);
                    values.extend(self.source_rows(s..s + n)?);
                    r += n;
                }
                values
            }
        })
    }
}
