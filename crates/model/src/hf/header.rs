//! A safetensors header, checked before the `safetensors` crate reads it, so that every fault is
//! named by the tensor at fault.
//!
//! `SafeTensors::deserialize` checks that the offsets tile the data, but names the tensor at which
//! its walk in offset order fails (for an overlap or a gap, a neighbour of the fault), reads a key
//! given twice as the last of its values without a word, adds a tensor's end to the header's length
//! unchecked (which overflows when the offsets add up past `usize`), and names no tensor when a
//! shape does not fit its bytes. So the header is first read here, each key in the order written:
//! a key given twice, a tensor that ends past the data, a shape that does not fit its offsets, a
//! tensor that starts inside another, bytes between two tensors or after the last, each named.
//! Anything else wrong with it is left for the crate to name.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// The key of the header's free-form metadata, which is no tensor.
const METADATA: &str = "__metadata__";

/// A header's entries in the order written, a key given twice kept twice.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = vec![];
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(Each)
    }
}

/// One tensor's byte range in the data, as its header entry gives it.
struct Range<'a> {
    name: &'a str,
    start: u64,
    end: u64,
}

/// Refuses the header of the safetensors file held in `bytes` for any fault the module doc lists,
/// naming the tensor.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), String> {
    let Some((len, rest)) = bytes.split_first_chunk::<8>() else { return Ok(()) };
    let Some(header) = usize::try_from(u64::from_le_bytes(*len)).ok().and_then(|n| rest.get(..n)) else {
        return Ok(());
    };
    let data = (rest.len() - header.len()) as u64;
    let Ok(Entries(entries)) = serde_json::from_slice::<Entries>(header) else { return Ok(()) };
    let mut ranges = vec![];
    for (i, (name, entry)) in entries.iter().enumerate() {
        if entries[..i].iter().any(|(other, _)| other == name) {
            return Err(format!("tensor {name} is given twice in the header"));
        }
        if name == METADATA {
            continue;
        }
        let offset = |i: usize| entry.get("data_offsets").and_then(|o| o.get(i)).and_then(Value::as_u64);
        let (Some(start), Some(end)) = (offset(0), offset(1)) else { continue };
        if end > data {
            return Err(format!("tensor {name} ends at byte {end}, past the {data} bytes of data"));
        }
        let width = entry.get("dtype").and_then(Value::as_str).and_then(dtype_bytes);
        let dims: Option<Vec<u64>> =
            entry.get("shape").and_then(Value::as_array).and_then(|s| s.iter().map(Value::as_u64).collect());
        if let (Some(width), Some(dims)) = (width, dims) {
            let want = dims.iter().try_fold(width, |n, &d| n.checked_mul(d));
            let have = end.checked_sub(start);
            if want != have {
                return Err(format!(
                    "tensor {name}: shape {dims:?} of {} takes {} bytes, but its offsets [{start}, {end}] give {}",
                    entry.get("dtype").and_then(Value::as_str).unwrap_or_default(),
                    want.map_or("more than 2^64".into(), |w| w.to_string()),
                    have.map_or_else(|| "a negative count".into(), |h| h.to_string()),
                ));
            }
        }
        ranges.push(Range { name, start, end });
    }
    check_tiling(&mut ranges, data)
}

/// Refuses ranges that do not tile `0..data` exactly: a tensor starting inside the one before it
/// (in offset order), bytes between two tensors, or bytes after the last.
fn check_tiling(ranges: &mut [Range], data: u64) -> Result<(), String> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut at = 0u64;
    let mut before: Option<&Range> = None;
    for r in ranges.iter() {
        match (r.start.cmp(&at), before) {
            (std::cmp::Ordering::Less, Some(b)) => {
                return Err(format!(
                    "tensor {} starts at byte {}, inside tensor {} (bytes {}..{})",
                    r.name, r.start, b.name, b.start, b.end
                ));
            }
            (std::cmp::Ordering::Greater, Some(b)) => {
                return Err(format!(
                    "bytes {at}..{} between tensor {} and tensor {} belong to no tensor",
                    r.start, b.name, r.name
                ));
            }
            (std::cmp::Ordering::Greater, None) => {
                return Err(format!("bytes 0..{} before tensor {} belong to no tensor", r.start, r.name));
            }
            _ => {}
        }
        at = r.end;
        before = Some(r);
    }
    match before {
        Some(b) if at < data => Err(format!("bytes {at}..{data} after tensor {} belong to no tensor", b.name)),
        _ => Ok(()),
    }
}

/// The bytes a value of the safetensors dtype `name` takes, for the dtypes of a byte or more.
fn dtype_bytes(name: &str) -> Option<u64> {
    Some(match name {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "I64" | "U64" | "F64" | "C64" => 8,
        _ => return None,
    })
}
