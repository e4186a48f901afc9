//! Every quantized format the GGUF reader decodes gives, bit for bit, the f32 values gguf-py's
//! `gguf.quants.dequantize` (ggml's dequantization, restated in numpy) gives the same blocks; bytes
//! that end inside a block, and rows that do not fill whole blocks, are typed errors.
//!
//! The fixtures are `reference/fixtures/quants/<TYPE>.json`, written by
//! `reference/make_quant_fixtures.py`: random valid blocks of every format (and, for the legacy
//! formats, blocks gguf-py quantized) with gguf-py's values as u32 bit patterns.

use std::path::PathBuf;

use stepcheck::formats::gguf::{GgmlType, Gguf, GgufError};
use stepcheck::formats::quants::QuantError;

/// The quantized formats the reader decodes; each has a fixture.
const QUANT_TYPES: [&str; 12] =
    ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"];

/// The float types the reader decodes without a block format of their own.
const FLOAT_TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

/// One fixture: the blocks' bytes and the bits gguf-py decoded them to.
struct Fixture {
    ty: GgmlType,
    block_values: usize,
    block_bytes: usize,
    blocks: Vec<u8>,
    want: Vec<u32>,
}

fn fixture(name: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("reference/fixtures/quants/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("fixture json");
    assert_eq!(v["type"], name, "{name}: fixture names another type");
    let hex = v["blocks_hex"].as_str().expect("blocks_hex");
    let blocks = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex")).collect();
    let want = v["f32_bits"].as_array().expect("f32_bits").iter().map(|b| b.as_u64().expect("bits") as u32).collect();
    let field = |k: &str| v[k].as_u64().expect(k) as usize;
    Fixture {
        ty: GgmlType(v["type_id"].as_u64().expect("type_id") as u32),
        block_values: field("block_values"),
        block_bytes: field("block_bytes"),
        blocks,
        want,
    }
}

/// The values the reader's decoder for `ty` gives `bytes`.
fn decode(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    let decoder = ty.decoder().unwrap_or_else(|| panic!("{ty} has no decoder"));
    decoder(bytes)
}

/// Panics, naming the block and both values, at the first value whose bits differ.
fn assert_same_bits(name: &str, f: &Fixture, got: &[f32]) {
    assert_eq!(got.len(), f.want.len(), "{name}: value count");
    if let Some(i) = got.iter().zip(&f.want).position(|(g, &w)| g.to_bits() != w) {
        let (g, w) = (got[i], f32::from_bits(f.want[i]));
        panic!(
            "{name}: value {i} (block {}, value {}) is {g:e}, gguf-py gives {w:e}",
            i / f.block_values,
            i % f.block_values
        );
    }
}

/// A GGUF file of one tensor `t` with dims `ne` (innermost first) of type `ty` holding `data`.
fn one_tensor_file(ne: &[u64], ty: GgmlType, data: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(1u64.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(1u64.to_le_bytes());
    out.push(b't');
    out.extend((ne.len() as u32).to_le_bytes());
    ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
    out.extend(ty.0.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.resize(out.len().next_multiple_of(32), 0);
    out.extend(data);
    out
}

#[test]
fn every_quantized_format_decodes_to_gguf_py_s_bits() {
    for name in QUANT_TYPES {
        let f = fixture(name);
        assert_eq!(f.ty.name(), Some(name), "{name}: type id {}", f.ty.0);
        assert_eq!(f.ty.block(), Some((f.block_values as u64, f.block_bytes as u64)), "{name}: block size");
        let got = decode(f.ty, &f.blocks).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same_bits(name, &f, &got);
        eprintln!("{name}: {} values of {} blocks, every bit as gguf-py's", got.len(), f.blocks.len() / f.block_bytes);
    }
}

#[test]
fn a_gguf_tensor_of_each_quantized_format_reads_to_gguf_py_s_bits() {
    // The decoder table is what the reader uses: a tensor of the fixture's blocks, one row per
    // block, reads (row-major, as `read_f32` returns it) to the same bits.
    for name in QUANT_TYPES {
        let f = fixture(name);
        let n_blocks = (f.blocks.len() / f.block_bytes) as u64;
        let bytes = one_tensor_file(&[f.block_values as u64, n_blocks], f.ty, &f.blocks);
        let gguf = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = &gguf.info().tensors()[0];
        assert_eq!(t.shape, vec![n_blocks as usize, f.block_values], "{name}");
        assert!(t.ggml_type.decodes(), "{name}");
        let got = gguf.read_f32(t).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same_bits(name, &f, &got);
    }
}

#[test]
fn every_type_the_reader_decodes_is_a_float_type_or_has_a_fixture() {
    let decoded: Vec<GgmlType> = (0..64).map(GgmlType).filter(|t| t.decodes()).collect();
    let expected: Vec<GgmlType> = FLOAT_TYPES.into_iter().chain(QUANT_TYPES.map(|n| fixture(n).ty)).collect();
    let mut sorted = expected.clone();
    sorted.sort_by_key(|t| t.0);
    assert_eq!(decoded, sorted);
}

#[test]
fn bytes_that_end_inside_a_block_are_a_typed_error() {
    let types = QUANT_TYPES.map(|n| (n, fixture(n).ty)).into_iter().chain(FLOAT_TYPES.map(|t| (t.name().unwrap(), t)));
    for (name, ty) in types {
        let block_bytes = ty.block().expect("block").1 as usize;
        for len in [1, block_bytes - 1, block_bytes + 1, 3 * block_bytes - 1] {
            if len % block_bytes == 0 {
                continue; // F32's 1-byte-short cases and the like
            }
            let e = decode(ty, &vec![0; len]).expect_err(name);
            assert_eq!(e, QuantError::PartialBlock { format: name, len, block_bytes }, "{name}, {len} bytes");
        }
        assert_eq!(decode(ty, &[]), Ok(vec![]), "{name}: no bytes are no blocks");
        assert_eq!(decode(ty, &vec![0; 2 * block_bytes]).map(|v| v.len()), Ok(2 * ty.block().unwrap().0 as usize));
    }
    let e = decode(GgmlType::Q4_K, &[0; 150]).expect_err("150 bytes");
    assert_eq!(e.to_string(), "Q4_K blocks take 144 bytes each, but 150 bytes end 6 bytes into a block");
}

#[test]
fn a_row_that_does_not_fill_whole_blocks_is_refused_before_decoding() {
    for (name, row) in [("Q4_K", 128u64), ("Q6_K", 320), ("IQ4_XS", 32), ("Q4_0", 48), ("IQ4_NL", 16)] {
        let ty = fixture(name).ty;
        let bytes = one_tensor_file(&[row, 2], ty, &[0; 1024]);
        let e = Gguf::parse(&bytes).expect_err(name);
        let block = ty.block().unwrap().0;
        assert!(
            matches!(&e, GgufError::PartialBlock { type_name, ne0, block: b, .. } if *type_name == name && *ne0 == row && *b == block),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn a_non_finite_scale_is_no_error_and_gives_non_finite_values() {
    // ggml decodes every bit pattern; a NaN scale makes every value of its block NaN.
    const NAN_F16: [u8; 2] = 0x7E00u16.to_le_bytes();
    let d_at = [
        ("Q4_0", 0),
        ("Q4_1", 0),
        ("Q5_0", 0),
        ("Q5_1", 0),
        ("Q8_0", 0),
        ("Q2_K", 80),
        ("Q3_K", 108),
        ("Q4_K", 0),
        ("Q5_K", 0),
        ("Q6_K", 208),
        ("IQ4_NL", 0),
        ("IQ4_XS", 0),
    ];
    for (name, at) in d_at {
        let f = fixture(name);
        let mut block = f.blocks[..f.block_bytes].to_vec();
        block[at..at + 2].copy_from_slice(&NAN_F16);
        let got = decode(f.ty, &block).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got.iter().all(|v| v.is_nan()), "{name}: {got:?}");
    }
}
