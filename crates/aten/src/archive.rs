//! Reading a `.pt2` archive (what `torch.export.save` writes: a zip whose
//! `<archive>/models/model.json` is the serialized program), or that JSON alone.
//!
//! The archive's entries are read without trusting them: only the one entry is read, and no more
//! than [`MAX_PROGRAM_BYTES`] of it.

use std::io::Read;
use std::path::Path;

use super::error::ImportError;
use super::graph::Exported;

/// The largest serialized program read: a 24-layer decode step is about 7 MB.
pub const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// The program at `path`: a `.pt2` archive, or its `model.json` alone.
pub fn read_program(path: &Path) -> Result<Exported, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::Archive(format!("{}: {e}", path.display())))?;
    if bytes.starts_with(b"PK") {
        let json = program_json(&bytes).map_err(|why| ImportError::Archive(format!("{}: {why}", path.display())))?;
        Exported::from_json(&json)
    } else {
        Exported::from_json(&bytes)
    }
}

/// The `models/model.json` entry of the `.pt2` archive held in `bytes`.
pub fn program_json(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| format!("not a zip archive: {e}"))?;
    let name = zip
        .file_names()
        .find(|n| *n == "models/model.json" || n.ends_with("/models/model.json"))
        .map(str::to_string)
        .ok_or("the archive has no models/model.json: not what torch.export.save writes")?;
    let entry = zip.by_name(&name).map_err(|e| format!("{name}: {e}"))?;
    if entry.size() > MAX_PROGRAM_BYTES {
        return Err(format!("{name} is {} bytes; the limit is {MAX_PROGRAM_BYTES}", entry.size()));
    }
    let mut json = Vec::new();
    entry.take(MAX_PROGRAM_BYTES).read_to_end(&mut json).map_err(|e| format!("{name}: {e}"))?;
    Ok(json)
}
