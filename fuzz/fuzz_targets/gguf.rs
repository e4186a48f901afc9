//! GGUF bytes: the reader never panics; a file it parses has every tensor either read, as many
//! values as its shape holds, or refused by a typed error; the checkpoint loader agrees with reading
//! tensor by tensor; and the qwen35 spec reader never panics on what the file says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepcheck::formats::gguf::{Gguf, GgufInfo};
use stepcheck::model::gguf::{checkpoint_from_bytes, spec_from_gguf};

/// Values read per input byte before the target stops reading tensors one by one: tensors may share
/// data, so reading all of them can cost more than the file.
const VALUES_PER_BYTE: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Ok(info) = GgufInfo::parse(data) else { return };
    let gguf = Gguf::parse(data).expect("bytes GgufInfo::parse accepts, Gguf::parse accepts");
    assert_eq!(gguf.info(), &info);
    if let Ok(spec) = spec_from_gguf(&info) {
        assert!(spec.validate().is_ok(), "spec_from_gguf gave a spec that does not validate");
    }
    let budget = VALUES_PER_BYTE * data.len().max(1);
    let mut read = 0;
    let mut all_read = true;
    for t in info.tensors() {
        if let Ok(values) = gguf.read_f32(t) {
            assert_eq!(values.len(), t.numel(), "tensor {} read as {} values", t.name, values.len());
            read += values.len();
        } else {
            all_read = false;
        }
        if read > budget {
            return;
        }
    }
    let ckpt = checkpoint_from_bytes(data);
    assert_eq!(ckpt.is_ok(), all_read, "the checkpoint loader and the tensor reader disagree: {:?}", ckpt.err());
});
