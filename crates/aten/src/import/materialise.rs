//! Materialisation: the elements a compute op reads, as one IR tensor of the shape it needs, by the
//! exact rules of `follow` (shared with the importer of llama.cpp's graph). An IR tensor made whole
//! by a layout op is itself; otherwise the elements must each name an IR value, and anything else
//! (values from numbers or the position alone) is refused with what the elements are.

use ir::{OpKind, StateKind, TensorId, Ty};

use super::Importer;
use super::elem::Elem;
use super::strided::Strided;

impl Importer<'_> {
    /// The elements of `v` as an IR tensor of `shape`.
    pub(super) fn materialise(&mut self, v: &Strided<Elem>, shape: &[usize]) -> Result<TensorId, String> {
        if let Some(Elem::Ir(t, _)) = v.made_whole()
            && self.numel(t) == Some(v.numel())
            && v.numel() == shape.iter().product::<usize>()
        {
            return self.reshaped(t, shape);
        }
        let values = v.values();
        if values.len() != shape.iter().product::<usize>() || values.is_empty() {
            return Err(format!("{} values cannot be a tensor of shape {shape:?}", values.len()));
        }
        let ids: Vec<(TensorId, usize)> = values.iter().map(|e| e.ir()).collect::<Option<_>>().ok_or_else(|| {
            format!(
                "its values are computed from numbers or the position alone ({:?}, …), which no IR op holds",
                values[0]
            )
        })?;
        follow::materialise(self, &ids, shape)
    }

    /// `t` as shape `shape`: itself, or a `reshape`.
    pub(super) fn reshaped(&mut self, t: TensorId, shape: &[usize]) -> Result<TensorId, String> {
        follow::reshaped(self, t, shape)
    }

    /// The number of values of IR tensor `t`, if it is an array.
    pub(super) fn numel(&self, t: TensorId) -> Option<usize> {
        self.builder.ty(t).numel()
    }
}

impl follow::Emitter for Importer<'_> {
    fn ty(&self, t: TensorId) -> &Ty {
        self.builder.ty(t)
    }

    fn emit(&mut self, kind: OpKind, inputs: &[TensorId]) -> Result<TensorId, String> {
        Importer::emit(self, kind, inputs)
    }

    fn state_kind(&self, t: TensorId) -> Option<StateKind> {
        Importer::state_kind(self, t)
    }

    fn memo(&mut self) -> &mut foldhash::HashMap<follow::Listed, TensorId> {
        &mut self.memo
    }
}
