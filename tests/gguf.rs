//! The GGUF reader and the qwen35 loader.
//!
//! The reader gives back what a file says: every metadata value type, F32/F16/BF16/Q8_0 tensors with
//! their shape outermost first. It refuses every malformed file with the error that names what is
//! wrong, and never panics, whatever the bytes. The loader turns a qwen35 file into the spec its
//! metadata describes and the checkpoint its tensors hold. Files are built in memory by the small
//! writer below, so no test needs a fixture file.

use half::{bf16, f16};
use proptest::prelude::*;
use stepcheck::formats::gguf::{Array, GgmlType, Gguf, GgufError, GgufFile, GgufInfo, MAX_ARRAY_DEPTH, Value};
use stepcheck::model::gguf::{LoadError, checkpoint_from_bytes, checkpoint_from_gguf, load_gguf, spec_from_gguf};
use stepcheck::model::{Checkpoint, ModelSpec, presets, random::random_checkpoint, spec::Mixer};

#[path = "common/gguf_writer.rs"]
mod writer;

use writer::{GgufWriter, header, put_str};

/// The fuzzer's first find (CI, 2026-11-29): a file whose `f64` metadata is NaN parsed twice did not
/// equal itself, because equality compared floats as numbers. Metadata compares by its bits.
#[test]
fn metadata_compares_by_its_bits_so_a_file_parsed_twice_equals_itself() {
    let w = GgufWriter::default()
        .kv("nan.f64", Value::F64(f64::NAN))
        .kv("nan.f32", Value::F32(f32::NAN))
        .kv("a.nan", Value::Array(Array::F32(vec![f32::NAN, 1.0])))
        .kv("zero", Value::F64(0.0));
    let bytes = w.to_bytes();
    assert_eq!(parse(&bytes), parse(&bytes));
    assert_ne!(Value::F64(0.0), Value::F64(-0.0), "0 and -0 are different bits");
    assert_ne!(Value::F64(1.0), Value::F32(1.0), "values of different types differ");
}

// ---------------------------------------------------------------------------------------------
// Boundaries: one helper each.

/// Parses `bytes`, which must be a valid file.
fn parse(bytes: &[u8]) -> GgufInfo {
    GgufInfo::parse(bytes).unwrap_or_else(|e| panic!("a valid file was refused: {e}"))
}

/// Parses `bytes`, which must be refused; the error.
fn refusal(bytes: &[u8]) -> GgufError {
    match GgufInfo::parse(bytes) {
        Ok(info) => panic!("a malformed file was accepted: {info:?}"),
        Err(e) => e,
    }
}

/// Parses `bytes` and reads every tensor it can: the tensors' values, or the first error. Never
/// panics, whatever the bytes.
fn read_everything(bytes: &[u8]) -> Result<Vec<Vec<f32>>, GgufError> {
    let gguf = Gguf::parse(bytes)?;
    gguf.info().tensors().iter().map(|t| gguf.read_f32(t)).collect()
}

fn f16_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect()
}

fn bf16_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect()
}

/// A small valid file: two metadata entries and two tensors, the last of which ends the file.
fn small_file() -> Vec<u8> {
    GgufWriter::default()
        .kv("general.architecture", Value::String("test".into()))
        .kv("test.list", Value::Array(Array::U32(vec![1, 2, 3])))
        .f32_tensor("a", &[2, 3], &[1., 2., 3., 4., 5., 6.])
        .tensor("b", &[4], 1, f16_bytes(&[0.5, -1., 2., 0.]))
        .to_bytes()
}

// ---------------------------------------------------------------------------------------------
// What a valid file says.

#[test]
fn every_metadata_value_type_reads_back_as_written() {
    let values = [
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60_000)),
        ("i16", Value::I16(-30_000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(1.5e-6)),
        ("bool", Value::Bool(true)),
        ("string", Value::String("qwen35 · ünïcode".into())),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(1e7)),
        ("a.u8", Value::Array(Array::U8(vec![0, 255]))),
        ("a.i8", Value::Array(Array::I8(vec![-128, 127]))),
        ("a.u16", Value::Array(Array::U16(vec![1, 65_535]))),
        ("a.i16", Value::Array(Array::I16(vec![-1, 2]))),
        ("a.u32", Value::Array(Array::U32(vec![11, 11, 10, 0]))),
        ("a.i32", Value::Array(Array::I32(vec![-5]))),
        ("a.f32", Value::Array(Array::F32(vec![0.25, -3.0]))),
        ("a.bool", Value::Array(Array::Bool(vec![true, false, true]))),
        ("a.string", Value::Array(Array::String(vec!["<s>".into(), "".into(), "▁the".into()]))),
        ("a.u64", Value::Array(Array::U64(vec![1 << 40]))),
        ("a.i64", Value::Array(Array::I64(vec![-(1 << 40)]))),
        ("a.f64", Value::Array(Array::F64(vec![1e-300]))),
        ("a.empty", Value::Array(Array::U32(vec![]))),
        ("a.nested", Value::Array(Array::Array(vec![Array::U8(vec![1]), Array::String(vec!["x".into()])]))),
    ];
    let w = values.iter().fold(GgufWriter::default(), |w, (k, v)| w.kv(k, v.clone()));
    let info = parse(&w.to_bytes());
    assert_eq!(info.metadata_entries().len(), values.len());
    for (key, value) in &values {
        assert_eq!(info.metadata(key), Some(value), "{key}");
    }
    assert_eq!(info.get_u64("u32"), Some(4_000_000_000));
    assert_eq!(info.get_u64("i8"), None, "a negative integer is not a u64");
    assert_eq!(info.get_f64("f32"), Some(f64::from(1.5e-6f32)));
    assert_eq!(info.get_str("string"), Some("qwen35 · ünïcode"));
    assert_eq!(info.get_array("a.u32").and_then(Array::as_u64s), Some(vec![11, 11, 10, 0]));
    assert_eq!(info.metadata("absent"), None);
}

#[test]
fn tensors_read_back_row_major_with_their_shape_outermost_first() {
    let m: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let halves = [0.5, -2.0, 65504.0, 1.0 / 1024.0];
    let brains = [1.0, -0.15625, 3.0e38, 7.0];
    let q8_scale = 0.5f32;
    let q8_quants: Vec<i8> = (-16..16).collect();
    let mut q8 = f16::from_f32(q8_scale).to_le_bytes().to_vec();
    q8.extend(q8_quants.iter().map(|&q| q as u8));
    let w = GgufWriter::default()
        .aligned(64)
        .f32_tensor("m", &[3, 5], &m)
        .tensor("h", &[2, 2], 1, f16_bytes(&halves))
        .tensor("b", &[4, 1], 30, bf16_bytes(&brains))
        .tensor("q", &[32], 8, q8);
    let bytes = w.to_bytes();
    let gguf = Gguf::parse(&bytes).expect("valid");
    let read = |name: &str| {
        let t = gguf.info().tensor(name).expect("listed");
        (t.shape.clone(), gguf.read_f32(t).expect("decodes"))
    };
    // Stored ne = [5, 3]: shape [3, 5], the values as written, row-major.
    assert_eq!(gguf.info().tensor("m").map(|t| t.ne.clone()), Some(vec![5, 3]));
    assert_eq!(read("m"), (vec![3, 5], m));
    assert_eq!(read("h"), (vec![2, 2], halves.to_vec()));
    // A trailing 1 in ne is an outermost 1 in the shape, kept as stored.
    assert_eq!(read("b"), (vec![1, 4], brains.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()));
    let dequantized: Vec<f32> = q8_quants.iter().map(|&q| q8_scale * f32::from(q)).collect();
    assert_eq!(read("q"), (vec![32], dequantized));
    assert_eq!(gguf.info().alignment, 64);
    assert!(gguf.info().tensors().iter().all(|t| (gguf.info().data_offset + t.offset) % 64 == 0));
}

#[test]
fn version_2_files_read_like_version_3() {
    let mut w = GgufWriter::default().kv("k", Value::U32(7)).f32_tensor("t", &[2], &[1.0, 2.0]);
    w.version = 2;
    let info = parse(&w.to_bytes());
    assert_eq!((info.version, info.get_u64("k")), (2, Some(7)));
    assert_eq!(read_everything(&w.to_bytes()).expect("reads"), vec![vec![1.0, 2.0]]);
}

#[test]
fn a_file_on_disk_reads_like_the_same_bytes_in_memory() {
    let bytes = small_file();
    let path = std::env::temp_dir().join(format!("stepcheck-gguf-test-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).expect("write temp file");
    let file = GgufFile::open(&path);
    let ckpt = checkpoint_from_gguf(&path);
    std::fs::remove_file(&path).ok();
    let file = file.expect("opens");
    assert_eq!(file.info(), &parse(&bytes));
    let t = file.info().tensor("a").expect("listed");
    assert_eq!(file.read_f32(t).expect("reads"), vec![1., 2., 3., 4., 5., 6.]);
    assert_eq!(ckpt.expect("loads"), checkpoint_from_bytes(&bytes).expect("loads"));
    let missing = GgufFile::open(std::env::temp_dir().join("stepcheck-no-such-file.gguf"));
    assert!(matches!(missing, Err(GgufError::Io { .. })), "{missing:?}");
}

#[test]
fn tensors_of_types_it_does_not_decode_are_listed_and_refused_only_when_read() {
    let bytes = GgufWriter::default()
        .tensor("k4", &[256], 16, vec![0; 66])
        .tensor("odd", &[8], 1234, vec![0; 8])
        .f32_tensor("fine", &[1], &[3.0])
        .to_bytes();
    let gguf = Gguf::parse(&bytes).expect("listing works");
    let t = |name| gguf.info().tensor(name).expect("listed");
    assert_eq!((t("k4").ggml_type.name(), t("k4").n_bytes), (Some("IQ2_XXS"), Some(66)));
    assert_eq!((t("odd").ggml_type, t("odd").n_bytes), (GgmlType(1234), None));
    assert!(
        matches!(gguf.read_f32(t("k4")), Err(GgufError::UnsupportedTensorType { tensor, type_name: "IQ2_XXS", type_id: 16 }) if tensor == "k4")
    );
    assert!(
        matches!(gguf.read_f32(t("odd")), Err(GgufError::UnknownTensorType { tensor, type_id: 1234 }) if tensor == "odd")
    );
    assert_eq!(gguf.read_f32(t("fine")).expect("reads"), vec![3.0]);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each refused with the error that names what is wrong.

/// A file with one metadata entry: key `k`, value type `type_id`, then `payload` as the value.
fn one_kv(type_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = header(3, 0, 1);
    put_str(&mut out, "k");
    out.extend(type_id.to_le_bytes());
    out.extend(payload);
    out
}

/// A file whose one tensor info is `name` with dims `ne` of type `ggml_type` at `offset`, followed
/// by `data_len` zero bytes of aligned data.
fn one_tensor(ne: &[u64], ggml_type: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut out = header(3, 1, 0);
    put_str(&mut out, "t");
    out.extend((ne.len() as u32).to_le_bytes());
    ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
    out.extend(ggml_type.to_le_bytes());
    out.extend(offset.to_le_bytes());
    out.resize(out.len().next_multiple_of(32) + data_len, 0);
    out
}

/// Arrays nested `depth` deep around an empty u8 array.
fn nested_arrays(depth: usize) -> Vec<u8> {
    let mut payload = vec![];
    for _ in 1..depth {
        payload.extend(9u32.to_le_bytes());
        payload.extend(1u64.to_le_bytes());
    }
    payload.extend(0u32.to_le_bytes());
    payload.extend(0u64.to_le_bytes());
    one_kv(9, &payload)
}

/// What a refusal must be.
type Expect = fn(&GgufError) -> bool;

#[test]
fn malformed_files_are_refused_with_the_error_that_names_the_fault() {
    let u64_le = |n: u64| n.to_le_bytes().to_vec();
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("an empty file", vec![], |e| matches!(e, GgufError::Truncated { offset: 0, needed: 4, left: 0, .. })),
        (
            "bad magic",
            [b"GGUX".as_slice(), &[3, 0, 0, 0]].concat(),
            |e| matches!(e, GgufError::BadMagic { found } if found == b"GGUX"),
        ),
        ("version 1", header(1, 0, 0), |e| matches!(e, GgufError::UnsupportedVersion { version: 1 })),
        ("version 4", header(4, 0, 0), |e| matches!(e, GgufError::UnsupportedVersion { version: 4 })),
        ("a big-endian version 3", header(3u32.swap_bytes(), 0, 0), |e| {
            matches!(e, GgufError::UnsupportedVersion { version: 0x0300_0000 })
        }),
        (
            "a key length of u64::MAX",
            [header(3, 0, 1), u64_le(u64::MAX), vec![0; 8]].concat(),
            |e| matches!(e, GgufError::CountTooLarge { offset: 24, count: u64::MAX, what, .. } if what.contains("key of metadata entry 0")),
        ),
        (
            "a string value length of u64::MAX",
            one_kv(8, &u64_le(u64::MAX)),
            |e| matches!(e, GgufError::CountTooLarge { count: u64::MAX, what, .. } if what.contains("`k`")),
        ),
        (
            "an array count of 2^60",
            one_kv(9, &[4u32.to_le_bytes().as_slice(), &u64_le(1 << 60)].concat()),
            |e| matches!(e, GgufError::CountTooLarge { count, what, .. } if *count == 1 << 60 && what.contains("`k`")),
        ),
        (
            "a tensor count of 2^40 in a 64-byte file",
            [header(3, 1 << 40, 0), vec![0; 40]].concat(),
            |e| matches!(e, GgufError::CountTooLarge { offset: 8, count, max: 2, what } if *count == 1 << 40 && what == "the tensor count"),
        ),
        ("a metadata count past the end", header(3, 0, 1 << 30), |e| {
            matches!(e, GgufError::CountTooLarge { offset: 16, max: 0, .. })
        }),
        ("a key that is not UTF-8", [header(3, 0, 1), u64_le(2), vec![0xff, 0xfe, 4, 0, 0, 0, 1]].concat(), |e| {
            matches!(e, GgufError::NotUtf8 { offset: 32, .. })
        }),
        (
            "an unknown value type",
            one_kv(13, &[0; 8]),
            |e| matches!(e, GgufError::UnknownValueType { type_id: 13, what, .. } if what.contains("`k`")),
        ),
        (
            "an array of an unknown element type",
            one_kv(9, &[99u32.to_le_bytes().as_slice(), &u64_le(0)].concat()),
            |e| matches!(e, GgufError::UnknownValueType { type_id: 99, .. }),
        ),
        ("a bool of byte 2", one_kv(7, &[2]), |e| matches!(e, GgufError::BadBool { byte: 2, .. })),
        ("a bool array holding byte 7", one_kv(9, &[7, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 7]), |e| {
            matches!(e, GgufError::BadBool { byte: 7, offset: 50, .. })
        }),
        (
            "arrays nested 1000 deep",
            nested_arrays(1000),
            |e| matches!(e, GgufError::ArrayTooDeep { max: MAX_ARRAY_DEPTH, what, .. } if what.contains("`k`")),
        ),
        (
            "a duplicate key",
            GgufWriter::default().kv("k", Value::U8(1)).kv("k", Value::U8(2)).to_bytes(),
            |e| matches!(e, GgufError::DuplicateKey { key, .. } if key == "k"),
        ),
        (
            "an alignment of 3",
            GgufWriter::default().kv("general.alignment", Value::U32(3)).to_bytes(),
            |e| matches!(e, GgufError::BadAlignment { found, .. } if found == "u32 3"),
        ),
        (
            "an alignment that is a string",
            GgufWriter::default().kv("general.alignment", Value::String("32".into())).to_bytes(),
            |e| matches!(e, GgufError::BadAlignment { .. }),
        ),
        (
            "a tensor offset past the end",
            one_tensor(&[4], 0, 1 << 20, 16),
            |e| matches!(e, GgufError::OutOfBounds { tensor, offset, n_bytes: 16, .. } if tensor == "t" && *offset == 1 << 20),
        ),
        ("a tensor offset of u64::MAX − 31", one_tensor(&[4], 0, u64::MAX - 31, 16), |e| {
            matches!(e, GgufError::OutOfBounds { .. })
        }),
        ("tensor data cut short", one_tensor(&[4], 0, 0, 15), |e| {
            matches!(e, GgufError::OutOfBounds { n_bytes: 16, .. })
        }),
        ("a misaligned tensor offset", one_tensor(&[4], 0, 4, 32), |e| {
            matches!(e, GgufError::MisalignedOffset { offset: 4, alignment: 32, .. })
        }),
        (
            "dims whose product overflows u64",
            one_tensor(&[1 << 32, 1 << 32], 0, 0, 0),
            |e| matches!(e, GgufError::DimsOverflow { tensor, ne } if tensor == "t" && ne == &[1 << 32, 1 << 32]),
        ),
        ("dims whose product passes ggml's i64", one_tensor(&[1 << 32, 1 << 31], 0, 0, 0), |e| {
            matches!(e, GgufError::DimsOverflow { .. })
        }),
        ("dims whose byte size overflows", one_tensor(&[1 << 62], 0, 0, 0), |e| {
            matches!(e, GgufError::DimsOverflow { .. })
        }),
        (
            "n_dims 9",
            one_tensor(&[1; 9], 0, 0, 4),
            |e| matches!(e, GgufError::TooManyDims { n_dims: 9, tensor, .. } if tensor == "t"),
        ),
        ("a Q8_0 row of 16 values", one_tensor(&[16], 8, 0, 34), |e| {
            matches!(e, GgufError::PartialBlock { type_name: "Q8_0", ne0: 16, block: 32, .. })
        }),
        (
            "a duplicate tensor name",
            GgufWriter::default().f32_tensor("w", &[1], &[1.0]).f32_tensor("w", &[1], &[2.0]).to_bytes(),
            |e| matches!(e, GgufError::DuplicateTensor { tensor, .. } if tensor == "w"),
        ),
    ];
    for (what, bytes, expected) in cases {
        let e = refusal(&bytes);
        assert!(expected(&e), "{what}: refused with the wrong error: {e:?}");
    }
}

#[test]
fn a_tensor_with_a_zero_dim_holds_no_values_whatever_its_other_dims_and_their_order() {
    // Found by the `gguf` fuzz target: the shape's product, read outermost first, overflowed before
    // it met the zero that the header's product, innermost first, met at once.
    for ne in [[0, 1 << 32, 1 << 32], [1 << 32, 1 << 32, 0], [1 << 32, 0, 1 << 32]] {
        let bytes = one_tensor(&ne, 0, 0, 0);
        let gguf = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{ne:?}: {e}"));
        let t = &gguf.info().tensors()[0];
        assert_eq!((t.numel(), gguf.read_f32(t).map(|v| v.len()).ok()), (0, Some(0)), "{ne:?}");
    }
}

/// A file whose tensors, each `[n]` F32 and named `t0`, `t1`, …, all start at data offset 0.
fn tensors_sharing_data(count: usize, n: u64) -> Vec<u8> {
    let mut out = header(3, count as u64, 0);
    for i in 0..count {
        put_str(&mut out, &format!("t{i}"));
        out.extend(1u32.to_le_bytes());
        out.extend(n.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(32) + 4 * n as usize, 0);
    out
}

// Root cause: tensors could share data, so reading them all (`checkpoint_from_bytes`) allocated the
// tensor count times the data size: the 1 MB file below, 20,000 infos sharing 256 KB, asked for 5 GB.
#[test]
fn tensors_whose_data_overlap_are_refused_as_llama_cpp_refuses_them() {
    let e = refusal(&tensors_sharing_data(2, 8));
    assert!(
        matches!(&e, GgufError::OverlappingData { tensor, offset: 0, other } if tensor == "t1" && other == "t0"),
        "{e:?}"
    );
    let bytes = tensors_sharing_data(20_000, 1 << 16);
    assert!(matches!(checkpoint_from_bytes(&bytes), Err(LoadError::Gguf(GgufError::OverlappingData { .. }))));
    // Tensors of no values take no bytes, wherever they start.
    let empty = GgufWriter::default().tensor("e", &[0], 0, vec![]).f32_tensor("w", &[2], &[1., 2.]).to_bytes();
    assert_eq!(read_everything(&empty).expect("valid"), vec![vec![], vec![1., 2.]]);
}

#[test]
fn every_truncation_of_a_valid_file_is_refused_as_a_truncation() {
    let bytes = small_file();
    parse(&bytes);
    for len in 0..bytes.len() {
        let e = refusal(&bytes[..len]);
        assert!(
            matches!(e, GgufError::Truncated { .. } | GgufError::OutOfBounds { .. }),
            "a prefix of {len} bytes: {e:?}"
        );
    }
}

#[test]
fn errors_say_where_and_what_in_words() {
    let e = refusal(&one_kv(4, &[]));
    assert_eq!(e.to_string(), "truncated at byte 37: the value of `k` needs 4 bytes, 0 are left");
    let e = refusal(&[header(3, 0, 1), 20u64.to_le_bytes().to_vec(), b"abcde".to_vec()].concat());
    assert_eq!(
        e.to_string(),
        "truncated at byte 32: the key of metadata entry 0 at byte 24 (20 bytes) needs 20 bytes, 5 are left"
    );
    let bytes = GgufWriter::default().tensor("blk.0.x", &[256], 16, vec![0; 66]).to_bytes();
    let gguf = Gguf::parse(&bytes).expect("valid");
    let e = gguf.read_f32(&gguf.info().tensors()[0]).expect_err("IQ2_XXS");
    assert_eq!(e.to_string(), "tensor `blk.0.x` is of ggml type IQ2_XXS (16), which this reader does not decode");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_everything(&bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_everything(&[b"GGUF".as_slice(), &3u32.to_le_bytes(), &tail].concat());
    }

    #[test]
    fn any_single_byte_corruption_of_a_valid_file_never_panics(at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = small_file();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let _ = read_everything(&bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// The qwen35 loader.

/// What a refused load must be.
type LoadExpect = fn(&LoadError) -> bool;

/// Metadata entries: key and value.
type Metadata = Vec<(&'static str, Value)>;

/// The metadata llama.cpp's converter writes for `spec` (every 4th layer attention).
fn qwen35_metadata(spec: &ModelSpec) -> Metadata {
    let (a, d) = (&spec.attention, &spec.delta_net);
    let u = |n: usize| Value::U32(n as u32);
    vec![
        ("general.architecture", Value::String("qwen35".into())),
        ("general.name", Value::String(spec.name.clone())),
        ("qwen35.block_count", u(spec.layers.len())),
        ("qwen35.context_length", u(262_144)),
        ("qwen35.embedding_length", u(spec.hidden)),
        ("qwen35.feed_forward_length", u(spec.intermediate)),
        ("qwen35.attention.head_count", u(a.heads)),
        ("qwen35.attention.head_count_kv", u(a.kv_heads)),
        ("qwen35.attention.key_length", u(a.head_dim)),
        ("qwen35.attention.value_length", u(a.head_dim)),
        ("qwen35.attention.layer_norm_rms_epsilon", Value::F32(spec.rms_eps as f32)),
        ("qwen35.rope.freq_base", Value::F32(a.rope_theta as f32)),
        ("qwen35.rope.dimension_count", u(a.rotary_dims)),
        ("qwen35.rope.dimension_sections", Value::Array(Array::U32(vec![11, 11, 10, 0]))),
        ("qwen35.ssm.conv_kernel", u(d.conv_kernel)),
        ("qwen35.ssm.state_size", u(d.key_dim)),
        ("qwen35.ssm.group_count", u(d.key_heads)),
        ("qwen35.ssm.time_step_rank", u(d.value_heads)),
        ("qwen35.ssm.inner_size", u(d.value_heads * d.value_dim)),
        ("qwen35.full_attention_interval", u(4)),
        ("qwen35.vocab_size", u(spec.vocab)),
    ]
}

/// A GGUF of `metadata` and the F32 tensors of `ckpt`.
fn qwen35_file(metadata: &[(&str, Value)], ckpt: &Checkpoint) -> Vec<u8> {
    let w = metadata.iter().fold(GgufWriter::default(), |w, (k, v)| w.kv(k, v.clone()));
    ckpt.tensors.iter().fold(w, |w, (name, t)| w.f32_tensor(name, &t.shape, &t.to_f32().expect("f32"))).to_bytes()
}

/// The spec of a file holding `metadata` and the tensors of `ckpt`.
fn spec_of(metadata: &[(&str, Value)], ckpt: &Checkpoint) -> Result<ModelSpec, LoadError> {
    spec_from_gguf(&parse(&qwen35_file(metadata, ckpt)))
}

/// `metadata` with `key` set to `value`, or removed when `value` is `None`.
fn with(metadata: &[(&'static str, Value)], key: &'static str, value: Option<Value>) -> Metadata {
    let mut m = metadata.to_vec();
    m.retain(|(k, _)| *k != key);
    m.extend(value.map(|v| (key, v)));
    m
}

#[test]
fn a_qwen35_file_gives_the_spec_its_metadata_and_tensors_describe() {
    // Tiny's layers, [attention, delta-net, delta-net, attention], are no interval's; the converter
    // writes the default interval 4 all the same. The tensors say which layer is which.
    let spec = presets::tiny();
    assert_eq!(spec.layers, [Mixer::Attention, Mixer::DeltaNet, Mixer::DeltaNet, Mixer::Attention]);
    let ckpt = random_checkpoint(&spec, 3);
    assert_eq!(spec_of(&qwen35_metadata(&spec), &ckpt).expect("loads"), spec);
}

#[test]
fn metadata_alone_makes_every_interval_th_layer_attention() {
    let spec = presets::tiny();
    let metadata = qwen35_metadata(&spec);
    let no_tensors = Checkpoint::default();
    let layers = |m: &[(&str, Value)]| spec_of(m, &no_tensors).expect("loads").layers;
    let (d, a) = (Mixer::DeltaNet, Mixer::Attention);
    assert_eq!(layers(&metadata), [d, d, d, a]);
    assert_eq!(layers(&with(&metadata, "qwen35.full_attention_interval", None)), [d, d, d, a], "default 4");
    assert_eq!(layers(&with(&metadata, "qwen35.full_attention_interval", Some(Value::U32(2)))), [d, a, d, a]);
}

#[test]
fn a_qwen35_file_loads_to_its_checkpoint_and_spec() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 5);
    let bytes = qwen35_file(&qwen35_metadata(&spec), &ckpt);
    assert_eq!(checkpoint_from_bytes(&bytes).expect("loads"), ckpt);
    let conv = ckpt.get("blk.1.ssm_conv1d.weight").expect("conv");
    assert_eq!(conv.shape, [spec.conv_channels(), spec.delta_net.conv_kernel], "ne = [K, C] reads as [C, K]");

    let path = std::env::temp_dir().join(format!("stepcheck-gguf-load-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).expect("write temp file");
    let loaded = load_gguf(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!(loaded.expect("loads"), (spec, ckpt));
}

#[test]
fn without_vocab_size_the_embedding_rows_give_the_vocab_and_without_output_the_head_is_tied() {
    let spec = presets::tiny_tied();
    let ckpt = random_checkpoint(&spec, 1);
    assert!(ckpt.get("output.weight").is_none());
    let metadata = with(&qwen35_metadata(&spec), "qwen35.vocab_size", None);
    assert_eq!(spec_of(&metadata, &ckpt).expect("loads"), spec);
}

#[test]
fn head_counts_may_be_given_per_layer() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 1);
    let metadata = qwen35_metadata(&spec);
    let per_layer = |v: Vec<u32>| Some(Value::Array(Array::U32(v)));
    let kv = "qwen35.attention.head_count_kv";
    assert_eq!(spec_of(&with(&metadata, kv, per_layer(vec![2, 0, 0, 2])), &ckpt).expect("loads"), spec);
    let heads = "qwen35.attention.head_count";
    assert_eq!(spec_of(&with(&metadata, heads, per_layer(vec![4, 4, 4, 4])), &ckpt).expect("loads"), spec);
}

#[test]
fn a_layer_whose_tensors_name_no_one_mixer_is_refused_naming_the_layer() {
    let spec = presets::tiny();
    let metadata = qwen35_metadata(&spec);
    let mut neither = random_checkpoint(&spec, 1);
    neither.tensors.remove("blk.2.attn_qkv.weight");
    let e = spec_of(&metadata, &neither).expect_err("neither");
    assert!(matches!(&e, LoadError::LayerKind { layer: 2, why } if why.contains("neither")), "{e:?}");
    let mut both = random_checkpoint(&spec, 1);
    let q = both.get("blk.0.attn_q.weight").cloned().expect("attn_q");
    both.insert("blk.1.attn_q.weight", q);
    let e = spec_of(&metadata, &both).expect_err("both");
    assert!(matches!(&e, LoadError::LayerKind { layer: 1, why } if why.contains("both")), "{e:?}");
}

#[test]
fn metadata_that_does_not_describe_a_qwen35_step_is_refused_naming_the_key() {
    let spec = presets::tiny();
    let ckpt = random_checkpoint(&spec, 1);
    let base = qwen35_metadata(&spec);
    let with = |key: &'static str, value: Option<Value>| with(&base, key, value);
    let named = |e: &LoadError, key: &str| e.to_string().contains(&format!("`{key}`"));
    let cases: Vec<(&str, Metadata, LoadExpect)> = vec![
        (
            "another architecture",
            with("general.architecture", Some(Value::String("llama".into()))),
            |e| matches!(e, LoadError::UnsupportedArchitecture { found } if found == "llama"),
        ),
        (
            "no architecture",
            with("general.architecture", None),
            |e| matches!(e, LoadError::MissingKey { key } if key == "general.architecture"),
        ),
        (
            "a block count of 2^40",
            with("qwen35.block_count", Some(Value::U64(1 << 40))),
            |e| matches!(e, LoadError::BadValue { key, .. } if key == "qwen35.block_count"),
        ),
        (
            "no block count",
            with("qwen35.block_count", None),
            |e| matches!(e, LoadError::MissingKey { key } if key == "qwen35.block_count"),
        ),
        (
            "no key length",
            with("qwen35.attention.key_length", None),
            |e| matches!(e, LoadError::MissingKey { key } if key == "qwen35.attention.key_length"),
        ),
        (
            "a block count that is a string",
            with("qwen35.block_count", Some(Value::String("4".into()))),
            |e| matches!(e, LoadError::WrongType { key, found, .. } if key == "qwen35.block_count" && found == "string \"4\""),
        ),
        (
            "a negative head count",
            with("qwen35.attention.head_count", Some(Value::I32(-4))),
            |e| matches!(e, LoadError::WrongType { key, .. } if key == "qwen35.attention.head_count"),
        ),
        (
            "an epsilon that is an integer",
            with("qwen35.attention.layer_norm_rms_epsilon", Some(Value::U32(0))),
            |e| matches!(e, LoadError::WrongType { key, expected: "a float", .. } if key.ends_with("layer_norm_rms_epsilon")),
        ),
        (
            "an inner size that does not split into value heads",
            with("qwen35.ssm.inner_size", Some(Value::U32(50))),
            |e| matches!(e, LoadError::BadValue { key, .. } if key == "qwen35.ssm.inner_size"),
        ),
        (
            "a value length other than the key length",
            with("qwen35.attention.value_length", Some(Value::U32(16))),
            |e| matches!(e, LoadError::BadValue { key, .. } if key == "qwen35.attention.value_length"),
        ),
        (
            "an attention interval of 0",
            with("qwen35.full_attention_interval", Some(Value::U32(0))),
            |e| matches!(e, LoadError::BadValue { key, .. } if key == "qwen35.full_attention_interval"),
        ),
        (
            "KV head counts the attention layers disagree on",
            with("qwen35.attention.head_count_kv", Some(Value::Array(Array::U32(vec![2, 0, 0, 1])))),
            |e| matches!(e, LoadError::BadValue { key, why } if key.ends_with("head_count_kv") && why.contains("2 and 1")),
        ),
        (
            "one KV head count per layer, for the wrong number of layers",
            with("qwen35.attention.head_count_kv", Some(Value::Array(Array::U32(vec![2, 2])))),
            |e| matches!(e, LoadError::BadValue { why, .. } if why == "2 values for 4 layers"),
        ),
        ("heads that KV heads do not divide", with("qwen35.attention.head_count_kv", Some(Value::U32(3))), |e| {
            matches!(e, LoadError::Spec(_))
        }),
    ];
    for (what, metadata, expected) in cases {
        let e = spec_of(&metadata, &ckpt).expect_err(what);
        assert!(expected(&e), "{what}: refused with the wrong error: {e:?}");
        if let LoadError::MissingKey { key } | LoadError::WrongType { key, .. } | LoadError::BadValue { key, .. } = &e {
            assert!(named(&e, key), "{what}: the message does not name the key: {e}");
        }
    }
    let no_vocab = with("qwen35.vocab_size", None);
    let e = spec_of(&no_vocab, &Checkpoint::default()).expect_err("no vocab");
    assert!(matches!(&e, LoadError::MissingTensor { tensor } if tensor == "token_embd.weight"), "{e:?}");
}
