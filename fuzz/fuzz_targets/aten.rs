//! torch.export's serialized program (a `.pt2` archive, or its `models/model.json`): the reader,
//! the operators' shape rules and the translation into the IR never panic and never allocate from
//! a size they have not checked, whatever the bytes; what they cannot follow is an `ImportError`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (json, buffers) = if data.starts_with(b"PK") {
        match (aten::archive::program_json(data), aten::archive::buffers(data)) {
            (Ok(json), Ok(buffers)) => (json, buffers),
            _ => return,
        }
    } else {
        (data.to_vec(), Default::default())
    };
    let Ok(program) = aten::Exported::from_json(&json) else { return };
    if aten::ops::check_shapes(&program).is_ok() {
        let _ = aten::import::import(&program, &buffers, "fuzzed");
    }
});
