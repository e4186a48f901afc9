//! The weight files of a Hugging Face folder: one `model.safetensors`, or the shards a
//! `model.safetensors.index.json` lists. Every file is checked before a tensor of it is read.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use formats::mapped::Mapped;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use super::LoadError;
use formats::checkpoint::{Bytes, Tensor};
use formats::gguf::GgmlType;

/// The single-file checkpoint's name.
pub(crate) const SINGLE: &str = "model.safetensors";
/// The sharded checkpoint's index.
pub(crate) const INDEX: &str = "model.safetensors.index.json";

/// Calls `visit(file, name, view)` for every tensor of the folder's weights, in name order within
/// each file and file-name order across shards. As in transformers, `model.safetensors` is read when
/// present, else the index; a sharded folder visits exactly the tensors its index lists, each in the
/// shard the index names.
pub(crate) fn for_each_tensor(
    dir: &Path,
    mut visit: impl FnMut(&Path, &str, &TensorView, &Arc<Mapped>) -> Result<(), LoadError>,
) -> Result<(), LoadError> {
    let single = dir.join(SINGLE);
    if single.is_file() {
        return with_file(&single, |path, st, map| {
            let mut names = st.names();
            names.sort_unstable();
            names.into_iter().try_for_each(|name| visit(path, name, &tensor(path, st, name)?, map))
        });
    }
    let index_path = dir.join(INDEX);
    if !index_path.exists() {
        return Err(LoadError::NoWeights { dir: dir.to_path_buf() });
    }
    // The index is JSON like the config, bounded like it before it is read.
    let text = super::read_bounded(&index_path, super::MAX_CONFIG_BYTES)?;
    let shards = read_index(&index_path, text.as_bytes())?;
    for (file, names) in shards {
        with_file(&dir.join(&file), |path, st, map| {
            names.iter().try_for_each(|name| {
                let view = st.tensor(name).map_err(|_| LoadError::BadIndex {
                    path: index_path.clone(),
                    why: format!("it maps {name} to {file}, which does not hold it"),
                })?;
                visit(path, name, &view, map)
            })
        })?;
    }
    Ok(())
}

/// The index's `weight_map` grouped by shard: file name → tensor names, both sorted. A shard's name
/// must be a plain file name in the folder: no path separator, no `..`.
fn read_index(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, Vec<String>>, LoadError> {
    let bad = |why: String| LoadError::BadIndex { path: path.to_path_buf(), why };
    let index: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Some(map) = index.get("weight_map").and_then(Value::as_object) else {
        return Err(bad("no `weight_map` object".into()));
    };
    if map.is_empty() {
        return Err(bad("its `weight_map` is empty: it maps no tensor to a shard".into()));
    }
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, file) in map {
        let Some(file) = file.as_str() else {
            return Err(bad(format!("the file of {name} is not a string")));
        };
        if file.is_empty() || file.contains(['/', '\\']) || file.contains("..") {
            return Err(bad(format!("shard name {file:?} (of {name}) is not a plain file name")));
        }
        shards.entry(file.to_string()).or_default().push(name.clone());
    }
    shards.values_mut().for_each(|names| names.sort_unstable());
    Ok(shards)
}

/// Maps the safetensors file at `path`, checks its header, and hands it to `read` with the map
/// (which a tensor read in place keeps).
fn with_file<T>(
    path: &Path,
    read: impl FnOnce(&Path, &SafeTensors, &Arc<Mapped>) -> Result<T, LoadError>,
) -> Result<T, LoadError> {
    let io = |source| LoadError::Io { path: path.to_path_buf(), source };
    let file = formats::open::open_regular(path).map_err(io)?;
    let map = Arc::new(formats::mapped::map_file(&file, path).map_err(io)?);
    read(path, &checked(path, &map)?, &map)
}

/// The safetensors file held in `bytes` (read from `path`), its header checked: every tensor ends
/// inside the data, then everything `SafeTensors::deserialize` checks.
fn checked<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, LoadError> {
    let bad = |why: String| LoadError::BadHeader { path: path.to_path_buf(), why };
    super::header::check_header(bytes).map_err(bad)?;
    SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))
}

/// Every tensor of the safetensors file held in `bytes`, in name order: its name, its shape and its
/// bytes in their stored type (copied), read as the loader reads each weight file of a folder (the
/// header checked, then each tensor's dtype). `path` names the buffer in errors. It reads no spec,
/// so it applies no transform; it is the loader's whole path through one file's bytes.
pub fn tensors_from_bytes(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Tensor)>, LoadError> {
    let st = checked(path, bytes)?;
    let mut names = st.names();
    names.sort_unstable();
    names
        .into_iter()
        .map(|name| {
            let view = tensor(path, &st, name)?;
            let ty = ggml_type(path, name, &view)?;
            Ok((name.to_string(), Tensor::stored(view.shape().to_vec(), ty, Bytes::owned(view.data().to_vec()))))
        })
        .collect()
}

fn tensor<'a>(path: &Path, st: &SafeTensors<'a>, name: &str) -> Result<TensorView<'a>, LoadError> {
    st.tensor(name).map_err(|e| LoadError::BadHeader { path: path.to_path_buf(), why: e.to_string() })
}

/// The ggml type a safetensors dtype is stored as, byte for byte: F32, F16 and BF16 (little-endian
/// in both formats).
pub fn ggml_type(path: &Path, name: &str, view: &TensorView) -> Result<GgmlType, LoadError> {
    Ok(match view.dtype() {
        Dtype::F32 => GgmlType::F32,
        Dtype::F16 => GgmlType::F16,
        Dtype::BF16 => GgmlType::BF16,
        other => {
            return Err(LoadError::UnsupportedDtype {
                path: path.to_path_buf(),
                tensor: name.to_string(),
                dtype: format!("{other:?}"),
            });
        }
    })
}

/// The tensor `view` of the mapped file `map`, in place, of shape `shape` (the view's, or the
/// same values under another shape).
pub(crate) fn in_place(
    path: &Path,
    name: &str,
    view: &TensorView,
    map: &Arc<Mapped>,
    shape: Vec<usize>,
) -> Result<Tensor, LoadError> {
    let ty = ggml_type(path, name, view)?;
    let data = view.data();
    let start = (data.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
    let bytes = Bytes::mapped(Arc::clone(map), start..start.wrapping_add(data.len()));
    // A view of a safetensors file parsed from `map` lies inside it; were it not, copy it.
    let bytes = bytes.filter(|b| b.as_slice().as_ptr() == data.as_ptr()).unwrap_or_else(|| Bytes::owned(data.to_vec()));
    Ok(Tensor::stored(shape, ty, bytes))
}

/// The values of a tensor widened to f32: F32, F16 and BF16 are read, little-endian.
pub fn widen(path: &Path, name: &str, view: &TensorView) -> Result<Vec<f32>, LoadError> {
    let bytes = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => bytes.as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b)).collect(),
        Dtype::F16 => bytes.as_chunks::<2>().0.iter().map(|b| half::f16::from_le_bytes(*b).to_f32()).collect(),
        Dtype::BF16 => bytes.as_chunks::<2>().0.iter().map(|b| half::bf16::from_le_bytes(*b).to_f32()).collect(),
        other => {
            return Err(LoadError::UnsupportedDtype {
                path: path.to_path_buf(),
                tensor: name.to_string(),
                dtype: format!("{other:?}"),
            });
        }
    })
}
