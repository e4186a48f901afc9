//! The engine's shim: which entries of the shared fusion table this engine takes.

use std::collections::BTreeSet;

use fuse::{Symbol, rewrite, table::TABLE};
use ir::Graph;

/// The entries of the shared fusion table an engine takes. The engine's units run fused symbols;
/// a pattern whose symbol the shim does not take stays unfused, and the lowering refuses it by the
/// symbol's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineShim {
    takes: BTreeSet<Symbol>,
}

impl Default for EngineShim {
    /// The engine's shim: every symbol of the table.
    fn default() -> EngineShim {
        EngineShim { takes: Symbol::ALL.into_iter().collect() }
    }
}

impl EngineShim {
    /// This shim without `symbol`.
    pub fn without(mut self, symbol: Symbol) -> EngineShim {
        self.takes.remove(&symbol);
        self
    }

    /// Whether this shim takes `symbol`.
    pub fn takes(&self, symbol: Symbol) -> bool {
        self.takes.contains(&symbol)
    }

    /// The symbols this shim takes, in table order.
    pub fn symbols(&self) -> impl Iterator<Item = Symbol> + '_ {
        self.takes.iter().copied()
    }

    /// `graph` with the patterns of every entry this shim takes replaced by their fused symbols, in
    /// table order. A graph that is not well formed is left as it is, for the lowering to refuse.
    pub fn prepare(&self, graph: &Graph) -> Graph {
        if graph.validate().is_err() {
            return graph.clone();
        }
        TABLE.iter().filter(|e| self.takes(e.symbol)).fold(graph.clone(), rewrite::apply)
    }
}
