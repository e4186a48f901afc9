//! Reading a `.pt2` archive (what `torch.export.save` writes: a zip whose
//! `<archive>/models/model.json` is the serialized program), or that JSON alone.
//!
//! The archive's entries are read without trusting them: only the one entry is read, and no more
//! than [`MAX_PROGRAM_BYTES`] of it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use super::error::ImportError;
use super::graph::Exported;

/// The largest serialized program read: a 24-layer decode step is about 7 MB.
pub const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// The program at `path`: a `.pt2` archive, or its `model.json` alone (gzipped or not).
pub fn read_program(path: &Path) -> Result<Exported, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::Archive(format!("{}: {e}", path.display())))?;
    let fail = |why: String| ImportError::Archive(format!("{}: {why}", path.display()));
    if bytes.starts_with(b"PK") {
        Exported::from_json(&program_json(&bytes).map_err(fail)?)
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .take(MAX_PROGRAM_BYTES + 1)
            .read_to_end(&mut json)
            .map_err(|e| fail(format!("not gzip: {e}")))?;
        if json.len() as u64 > MAX_PROGRAM_BYTES {
            return Err(fail(format!("its program is over {MAX_PROGRAM_BYTES} bytes unpacked")));
        }
        Exported::from_json(&json)
    } else {
        Exported::from_json(&bytes)
    }
}

/// The step at `path` and the constant buffers it reads: a `.pt2` archive's own, or for a
/// `model.json` alone (gzipped or not) those of a `buffers.json` beside it (name → values, as
/// `reference/export_step.py` writes for an export whose archive is not kept), or none.
pub fn read_step(path: &Path) -> Result<(Exported, BTreeMap<String, Vec<f64>>), ImportError> {
    let program = read_program(path)?;
    let mut head = [0u8; 2];
    let is_zip = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == *b"PK";
    if is_zip {
        return Ok((program, read_buffers(path)?));
    }
    let beside = path.with_file_name("buffers.json");
    if !beside.is_file() {
        return Ok((program, BTreeMap::new()));
    }
    let fail = |why: String| ImportError::Archive(format!("{}: {why}", beside.display()));
    let file = std::fs::File::open(&beside).map_err(|e| fail(e.to_string()))?;
    let mut text = Vec::new();
    file.take(MAX_BUFFER_VALUES * 32).read_to_end(&mut text).map_err(|e| fail(e.to_string()))?;
    let buffers: BTreeMap<String, Vec<f64>> = serde_json::from_slice(&text).map_err(|e| fail(e.to_string()))?;
    Ok((program, buffers))
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

/// The largest constant buffer read, in values: the rotary frequencies are a few hundred.
pub const MAX_BUFFER_VALUES: u64 = 1 << 20;

/// The constant buffers of the `.pt2` archive at `path` (`data/constants/`: the non-persistent
/// buffers such as `model.rotary_emb.inv_freq`), by name, each f32 buffer's values widened to f64.
/// A buffer of another dtype, or larger than [`MAX_BUFFER_VALUES`], is an error naming it.
pub fn read_buffers(path: &Path) -> Result<BTreeMap<String, Vec<f64>>, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::Archive(format!("{}: {e}", path.display())))?;
    buffers(&bytes).map_err(|why| ImportError::Archive(format!("{}: {why}", path.display())))
}

/// The constant buffers of the `.pt2` archive held in `bytes` (as [`read_buffers`]).
pub fn buffers(bytes: &[u8]) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| format!("not a zip archive: {e}"))?;
    let Some(config_name) =
        zip.file_names().find(|n| n.ends_with("data/constants/model_constants_config.json")).map(str::to_string)
    else {
        return Ok(BTreeMap::new());
    };
    let prefix = config_name.trim_end_matches("model_constants_config.json").to_string();
    let mut read = |name: &str, limit: u64| -> Result<Vec<u8>, String> {
        let entry = zip.by_name(name).map_err(|e| format!("{name}: {e}"))?;
        if entry.size() > limit {
            return Err(format!("{name} is {} bytes; the limit is {limit}", entry.size()));
        }
        let mut out = vec![];
        entry.take(limit).read_to_end(&mut out).map_err(|e| format!("{name}: {e}"))?;
        Ok(out)
    };
    let config: serde_json::Value =
        serde_json::from_slice(&read(&config_name, 1 << 20)?).map_err(|e| format!("{config_name}: {e}"))?;
    let entries = config["config"].as_object().ok_or_else(|| format!("{config_name} has no `config` object"))?;
    let mut out = BTreeMap::new();
    for (name, c) in entries {
        if c["tensor_meta"]["dtype"] != 7 {
            return Err(format!("buffer {name} is not f32 (dtype {})", c["tensor_meta"]["dtype"]));
        }
        let file = c["path_name"].as_str().ok_or_else(|| format!("buffer {name} has no path"))?;
        let data = read(&format!("{prefix}{file}"), MAX_BUFFER_VALUES * 4)?;
        if data.len() % 4 != 0 {
            return Err(format!("buffer {name} is {} bytes, not whole f32 values", data.len()));
        }
        let values = data.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect();
        out.insert(name.clone(), values);
    }
    Ok(out)
}
