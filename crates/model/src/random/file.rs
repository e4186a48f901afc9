//! A large random checkpoint, written as a GGUF file into the temp dir and read in place.
//!
//! The file holds the tensors only (no metadata): a GGUF v3 header, each tensor's info (its dims
//! innermost first, its type, its offset), then the data, each tensor aligned to 32 bytes. It is
//! written slab by slab, so that writing it takes little more memory than one slab; it is then
//! mapped and read back through the GGUF reader. Its name is removed the moment it is created, so
//! that no exit — an error, a panic, Ctrl-C, SIGTERM, SIGKILL — can leave it behind: the open file
//! and then its map keep its pages until the checkpoint is dropped.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{CHUNK, RandomError, Weights, fill_bytes, stored_len};
use crate::gguf::checkpoint_of_file;
use crate::layout::TensorInfo;
use formats::checkpoint::Checkpoint;
use formats::gguf::GgufFile;

/// The alignment of tensor data: GGUF's default.
const ALIGNMENT: u64 = 32;

/// Chunks drawn and written at a time (64 MiB of F32).
const SLAB_CHUNKS: usize = 256;

/// Files made by this process, so that each has its own name.
static MADE: AtomicUsize = AtomicUsize::new(0);

/// The checkpoint of `infos` in `weights`, drawn with `seed`, written to a GGUF file in the temp
/// dir, mapped, and read in place.
pub(crate) fn mapped_checkpoint(infos: &[TensorInfo], weights: Weights, seed: u64) -> Result<Checkpoint, RandomError> {
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("stepcheck-random-{}-{n}.gguf", std::process::id()));
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(io(&path))?;
    // Nothing reads it by name: unlinked now, it is gone with the last of its descriptor and map.
    std::fs::remove_file(&path).map_err(io(&path))?;
    write(&path, &file, infos, weights, seed)?;
    let gguf = GgufFile::of_open(path, &file).map_err(crate::gguf::LoadError::from)?;
    Ok(checkpoint_of_file(&gguf)?)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RandomError + '_ {
    move |source| RandomError::Io { path: path.to_path_buf(), source }
}

/// Writes the GGUF file of `infos` into `file` (new and empty; `path` names it in errors).
fn write(path: &Path, file: &File, infos: &[TensorInfo], weights: Weights, seed: u64) -> Result<(), RandomError> {
    let mut w = BufWriter::with_capacity(8 << 20, file);
    let mut header = Vec::new();
    header.extend_from_slice(b"GGUF");
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(infos.len() as u64).to_le_bytes());
    header.extend_from_slice(&0u64.to_le_bytes());
    let mut offset = 0u64;
    let mut placed = Vec::with_capacity(infos.len());
    for info in infos {
        let ty = weights.type_of(info);
        let len = stored_len(ty, info.shape.iter().product()) as u64;
        header.extend_from_slice(&(info.name.len() as u64).to_le_bytes());
        header.extend_from_slice(info.name.as_bytes());
        header.extend_from_slice(&(info.shape.len() as u32).to_le_bytes());
        for &d in info.shape.iter().rev() {
            header.extend_from_slice(&(d as u64).to_le_bytes());
        }
        header.extend_from_slice(&ty.0.to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        placed.push((info, ty, offset, len));
        offset = (offset + len).next_multiple_of(ALIGNMENT);
    }
    header.resize((header.len() as u64).next_multiple_of(ALIGNMENT) as usize, 0);
    w.write_all(&header).map_err(io(path))?;
    let mut at = 0u64;
    let mut slab = Vec::new();
    for (info, ty, start, len) in placed {
        w.write_all(&vec![0u8; (start - at) as usize]).map_err(io(path))?;
        let slab_bytes = stored_len(ty, CHUNK) * SLAB_CHUNKS;
        let mut done = 0usize;
        let len = len as usize;
        while done < len {
            let n = slab_bytes.min(len - done);
            slab.resize(n, 0);
            fill_bytes(info, ty, seed, done / stored_len(ty, CHUNK), &mut slab);
            w.write_all(&slab).map_err(io(path))?;
            done += n;
        }
        at = start + len as u64;
    }
    // No sync: the map reads the same page cache the writes went to.
    w.flush().map_err(io(path))?;
    Ok(())
}
