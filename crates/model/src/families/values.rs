//! A family's tensor as its transforms see it: a shape and its values in f32.

/// A tensor's shape and its values, row-major, widened to f32.
#[derive(Clone, Debug, PartialEq)]
pub struct Values {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}
