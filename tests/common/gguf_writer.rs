//! A GGUF writer for tests: header, metadata, tensor infos and aligned data, all in memory. It
//! writes whatever it is told, so tests can also make files that break the format's rules.

use stepcheck::formats::gguf::{Array, Value};

/// One tensor to write: its dims innermost first (ggml's `ne`), its type id and its data bytes.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub name: String,
    pub ne: Vec<u64>,
    pub ggml_type: u32,
    pub data: Vec<u8>,
}

/// A GGUF file to write.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    pub version: u32,
    pub kvs: Vec<(String, Value)>,
    pub tensors: Vec<TensorEntry>,
    pub alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter { version: 3, kvs: vec![], tensors: vec![], alignment: 32 }
    }
}

impl GgufWriter {
    pub fn kv(mut self, key: &str, value: Value) -> Self {
        self.kvs.push((key.into(), value));
        self
    }

    /// Writes `general.alignment` and aligns the data to it.
    pub fn aligned(mut self, alignment: u32) -> Self {
        self.alignment = alignment.into();
        self.kv("general.alignment", Value::U32(alignment))
    }

    pub fn tensor(mut self, name: &str, ne: &[u64], ggml_type: u32, data: Vec<u8>) -> Self {
        self.tensors.push(TensorEntry { name: name.into(), ne: ne.to_vec(), ggml_type, data });
        self
    }

    /// An F32 tensor of `shape` (outermost first) holding `values` row-major: stored with the
    /// dims reversed, as GGUF does.
    pub fn f32_tensor(self, name: &str, shape: &[usize], values: &[f32]) -> Self {
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        self.tensor(name, &ne, 0, values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// The file's bytes. Each tensor's data starts aligned; the last ends the file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            out.extend(type_id(value).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut next = 0u64;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend((t.ne.len() as u32).to_le_bytes());
            t.ne.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.ggml_type.to_le_bytes());
            out.extend(next.to_le_bytes());
            next = (next + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        for t in &self.tensors {
            out.resize((out.len() as u64).next_multiple_of(self.alignment) as usize, 0);
            out.extend(&t.data);
        }
        out
    }
}

/// The 12-byte header alone: magic, version, tensor count, metadata count.
pub fn header(version: u32, n_tensors: u64, n_kvs: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(version.to_le_bytes());
    out.extend(n_tensors.to_le_bytes());
    out.extend(n_kvs.to_le_bytes());
    out
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// GGUF's value type ids, written out here so the writer does not borrow the reader's.
pub fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.extend(x.to_le_bytes()),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    macro_rules! each {
        ($id:expr, $v:expr, $put:expr) => {{
            out.extend(($id as u32).to_le_bytes());
            out.extend(($v.len() as u64).to_le_bytes());
            $v.iter().for_each(|x| $put(&mut *out, x));
        }};
    }
    match a {
        Array::U8(v) => each!(0, v, |o: &mut Vec<u8>, x: &u8| o.extend(x.to_le_bytes())),
        Array::I8(v) => each!(1, v, |o: &mut Vec<u8>, x: &i8| o.extend(x.to_le_bytes())),
        Array::U16(v) => each!(2, v, |o: &mut Vec<u8>, x: &u16| o.extend(x.to_le_bytes())),
        Array::I16(v) => each!(3, v, |o: &mut Vec<u8>, x: &i16| o.extend(x.to_le_bytes())),
        Array::U32(v) => each!(4, v, |o: &mut Vec<u8>, x: &u32| o.extend(x.to_le_bytes())),
        Array::I32(v) => each!(5, v, |o: &mut Vec<u8>, x: &i32| o.extend(x.to_le_bytes())),
        Array::F32(v) => each!(6, v, |o: &mut Vec<u8>, x: &f32| o.extend(x.to_le_bytes())),
        Array::Bool(v) => each!(7, v, |o: &mut Vec<u8>, x: &bool| o.push(u8::from(*x))),
        Array::String(v) => each!(8, v, |o: &mut Vec<u8>, x: &String| put_str(o, x)),
        Array::Array(v) => each!(9, v, |o: &mut Vec<u8>, x: &Array| put_array(o, x)),
        Array::U64(v) => each!(10, v, |o: &mut Vec<u8>, x: &u64| o.extend(x.to_le_bytes())),
        Array::I64(v) => each!(11, v, |o: &mut Vec<u8>, x: &i64| o.extend(x.to_le_bytes())),
        Array::F64(v) => each!(12, v, |o: &mut Vec<u8>, x: &f64| o.extend(x.to_le_bytes())),
    }
}
