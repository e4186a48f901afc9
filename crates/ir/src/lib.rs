//! The one IR: step graphs, authored and fused alike. The ground floor: it imports nothing else of
//! the crate (the reference interpreter that runs it is `interp`).

#![forbid(unsafe_code)]

mod binding;
mod graph;
mod op;
mod parse;
mod text;
mod ty;
mod validate;

pub use binding::{Binding, View};
pub use graph::{Const, Def, Graph, GraphBuilder, State, StateKind, TensorDecl};
pub use op::{Act, Fused, HeadMap, Op, OpKind, RopeStyle, ShapeError, TensorId};
pub use parse::{ParseError, parse_binding, parse_graph, parse_op_kind};
pub use ty::{Shape, Ty, Types};
pub use validate::GraphError;
