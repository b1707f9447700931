//! Fuzz the safetensors header parser: it must never panic, and whatever it accepts
//! must tile the data exactly. Half of the inputs get a valid header-size prefix
//! (the input's length) so the JSON parser is reached more often.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let Ok(s) = gpack_ingest::safetensors::parse(bytes) else {
        return;
    };
    let mut end = s.data_offset;
    for t in &s.tensors {
        assert_eq!(t.offset, end);
        assert_eq!(
            gpack_ingest::safetensors::dtype_to_ggml(&t.dtype),
            Some(t.ggml_type)
        );
        let n: u64 = t.shape.iter().product();
        assert_eq!(t.ggml_type.bytes_for(n), Some(t.size));
        end += t.size;
    }
    assert_eq!(end, bytes.len() as u64);
    let _ = s.metadata.len();
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((flag, rest)) if flag & 1 == 1 => {
            // Header = the whole rest, or all but a data tail of `flag >> 1` bytes.
            let tail = usize::from(flag >> 1).min(rest.len());
            let mut v = ((rest.len() - tail) as u64).to_le_bytes().to_vec();
            v.extend_from_slice(rest);
            check(&v);
        }
        _ => check(data),
    }
});
