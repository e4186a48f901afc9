//! The checkpoint as the check reads it: each tensor decoded by the format's decoder (the values
//! both interpreters read, `formats::quants`), widened exactly to f64; small tensors once per
//! check, matrices a row at a time.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use rayon::prelude::*;

use super::bound::Ball;
use crate::engine::numerics::KquantInputs;
use crate::formats::gguf::GgmlType;
use crate::formats::quants::kquants::q45_k_minimums;
use crate::model::checkpoint::{Checkpoint, Tensor};

/// Rows × columns from which a matrix's rows are evaluated on the machine's threads.
const PARALLEL_VALUES: usize = 1 << 16;

/// The most values a matrix may have to be decoded once per check and kept (4 MiB of f32): a
/// generated case's and a small preset's matrices, read at every step; a larger one is decoded a
/// row at a time whenever it is read.
const KEPT_VALUES: usize = 1 << 20;

/// The most values all kept matrices may hold together (64 MiB of f32), so that a checkpoint of
/// many small matrices is not held decoded whole.
const KEPT_TOTAL: usize = 1 << 24;

/// A checkpoint's tensors, read for the check.
pub struct Weights<'c> {
    checkpoint: &'c Checkpoint,
    vectors: RefCell<HashMap<String, Rc<[f64]>>>,
    /// The small matrices decoded so far.
    matrices: RefCell<Kept>,
}

/// Matrices decoded once, by name, and how many values they hold together.
#[derive(Default)]
struct Kept(HashMap<String, Arc<[f32]>>, usize);

/// A matrix of the checkpoint, read a row at a time.
pub struct Rows<'c> {
    tensor: &'c Tensor,
    cols: usize,
    /// Every value, decoded, for a small matrix.
    decoded: Option<Arc<[f32]>>,
    /// Whether a matvec reads its input quantized to Q8_K (the program's numerics and the stored
    /// type say so: [`KquantInputs::quantizes`]).
    pub quantized_inputs: bool,
}

impl<'c> Weights<'c> {
    pub fn new(checkpoint: &'c Checkpoint) -> Weights<'c> {
        Weights { checkpoint, vectors: RefCell::default(), matrices: RefCell::default() }
    }

    fn tensor(&self, name: &str) -> Result<&'c Tensor, String> {
        self.checkpoint.get(name).ok_or_else(|| format!("the checkpoint has no tensor {name}"))
    }

    /// Every value of the tensor `name` (a norm's weight, a bias, a conv weight, a decay), decoded
    /// once.
    pub fn vector(&self, name: &str) -> Result<Rc<[f64]>, String> {
        if let Some(v) = self.vectors.borrow().get(name) {
            return Ok(Rc::clone(v));
        }
        let t = self.tensor(name)?;
        let values: Rc<[f64]> = t.to_f32().map_err(|e| format!("{name}: {e}"))?.iter().map(|&x| f64::from(x)).collect();
        self.vectors.borrow_mut().insert(name.to_string(), Rc::clone(&values));
        Ok(values)
    }

    /// The matrix `name`, of `cols` columns, read as a matvec at `inputs` reads it.
    pub fn matrix(&self, name: &str, cols: usize, inputs: KquantInputs) -> Result<Rows<'c>, String> {
        let tensor = self.tensor(name)?;
        if !matches!(tensor.shape[..], [_, c] if c == cols) {
            return Err(format!("{name} is {:?}, not a matrix of {cols} columns", tensor.shape));
        }
        let kept = self.matrices.borrow().0.get(name).cloned();
        let room = tensor.numel() <= KEPT_VALUES && self.matrices.borrow().1 + tensor.numel() <= KEPT_TOTAL;
        let decoded = match kept {
            Some(d) => Some(d),
            None if room => {
                let d: Arc<[f32]> = tensor.to_f32().map_err(|e| format!("{name}: {e}"))?.into();
                let mut kept = self.matrices.borrow_mut();
                kept.0.insert(name.to_string(), Arc::clone(&d));
                kept.1 += d.len();
                Some(d)
            }
            None => None,
        };
        Ok(Rows { tensor, cols, decoded, quantized_inputs: inputs.quantizes(tensor.ty()) })
    }

    /// Row `row` of the table `name`, decoded.
    pub fn row(&self, name: &str, row: usize) -> Result<Vec<f64>, String> {
        let t = self.tensor(name)?;
        Ok(t.decode_rows(row..row + 1).map_err(|e| format!("{name}: {e}"))?.iter().map(|&x| f64::from(x)).collect())
    }
}

impl Rows<'_> {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.tensor.shape[0]
    }

    /// `f(row's values, their magnitudes)` for each of the first `rows` rows, in order: the
    /// magnitudes are given where the row's arithmetic handles terms larger than its values (a
    /// Q4_K or Q5_K row against Q8_K inputs: `|w| + 2·|dmin·min|`, [`q45_k_minimums`]). Rows run on
    /// the machine's threads when the matrix is large.
    pub(crate) fn each_row(
        &self,
        rows: usize,
        f: impl Fn(&[f32], Option<&[f64]>) -> Ball + Sync,
    ) -> Result<Vec<Ball>, String> {
        let minimums = match self.tensor.ty() {
            GgmlType::Q4_K | GgmlType::Q5_K if self.quantized_inputs => Some(self.tensor.ty() == GgmlType::Q5_K),
            _ => None,
        };
        let one = |r: usize| -> Result<Ball, String> {
            let decoded;
            let values = match &self.decoded {
                Some(all) => &all[r * self.cols..(r + 1) * self.cols],
                None => {
                    decoded = self.tensor.decode_rows(r..r + 1).map_err(|e| e.to_string())?;
                    &decoded[..]
                }
            };
            let magnitudes = match minimums {
                Some(q5) => {
                    let bytes = self.tensor.row_bytes(r..r + 1).map_err(|e| e.to_string())?;
                    let mins = q45_k_minimums(bytes, q5).map_err(|e| e.to_string())?;
                    // The factor covers `|w|`'s own distance from the exact value (four roundings).
                    let up = 1.0 + 8.0 * super::bound::U;
                    let m = values.iter().zip(mins).map(|(&w, m)| (f64::from(w).abs() + 2.0 * f64::from(m).abs()) * up);
                    Some(m.collect::<Vec<f64>>())
                }
                None => None,
            };
            Ok(f(values, magnitudes.as_deref()))
        };
        if rows.saturating_mul(self.cols) >= PARALLEL_VALUES {
            (0..rows).into_par_iter().map(one).collect()
        } else {
            (0..rows).map(one).collect()
        }
    }
}
