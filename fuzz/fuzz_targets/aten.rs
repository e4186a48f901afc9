//! torch.export's serialized program (a `.pt2` archive, or its `models/model.json`): the reader and
//! the operators' shape rules never panic and never allocate from a size they have not checked,
//! whatever the bytes; what they cannot follow is an `ImportError`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let json = if data.starts_with(b"PK") {
        match aten::archive::program_json(data) {
            Ok(json) => json,
            Err(_) => return,
        }
    } else {
        data.to_vec()
    };
    let Ok(program) = aten::Exported::from_json(&json) else { return };
    let _ = aten::ops::check_shapes(&program);
});
