//! safetensors bytes: the Hugging Face loader's check of a weight file never panics, and every tensor
//! it accepts widens to as many values as its shape holds.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use stepcheck::model::hf::tensors_from_bytes;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensors) = tensors_from_bytes(Path::new("fuzz.safetensors"), data) {
        for (name, t) in tensors {
            assert_eq!(t.data.len(), t.shape.iter().product::<usize>(), "tensor {name}");
        }
    }
});
