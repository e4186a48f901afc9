//! safetensors bytes: the Hugging Face loader's check of a weight file never panics, and every tensor
//! it accepts holds the bytes of its shape in its stored type, and decodes to as many values.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use stepcheck::model::hf::tensors_from_bytes;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensors) = tensors_from_bytes(Path::new("fuzz.safetensors"), data) {
        for (name, t) in tensors {
            let values = t.to_f32().unwrap_or_else(|e| panic!("tensor {name}: {e}"));
            assert_eq!(values.len(), t.shape.iter().product::<usize>(), "tensor {name}");
        }
    }
});
