//! The one IR: step graphs, authored and fused alike.

mod graph;
pub mod interp;
mod op;
mod parse;
mod text;
mod ty;
mod validate;

pub use graph::{Const, Def, Graph, GraphBuilder, State, StateKind, TensorDecl};
pub use op::{Act, Fused, HeadMap, Op, OpKind, RopeStyle, ShapeError, TensorId};
pub use parse::{ParseError, parse_binding, parse_graph, parse_op_kind};
pub use ty::Ty;
pub use validate::GraphError;
