//! Fuzz the GGUF parser: it must never panic, and whatever it accepts must be
//! self-consistent (every tensor range inside the input and aligned).
//! Half of the inputs get a valid magic + version prepended, to get past the magic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let Ok(g) = gpack_ingest::gguf::parse(bytes) else {
        return;
    };
    for (k, v) in g.metadata.iter() {
        let _ = (k.len(), v.value_type(), v.as_u64(), v.as_i64(), v.as_str());
        if let Some(a) = v.as_array() {
            let _ = (a.len(), a.element_type());
        }
    }
    for t in &g.tensors {
        let range = bytes
            .get(t.offset as usize..(t.offset + t.size) as usize)
            .expect("tensor inside the input");
        assert_eq!(range.len() as u64, t.size);
        assert_eq!(t.offset % g.alignment, 0);
        assert_eq!(t.ggml_type.bytes_for(t.dims.iter().product()), Some(t.size));
    }
    // What we accept, we can write back, and read again to the same thing.
    let out = gpack_ingest::gguf::to_vec(
        &g.metadata,
        g.tensors.iter().map(|t| {
            (
                t.name.as_str(),
                t.ggml_type,
                t.dims.as_slice(),
                &bytes[t.offset as usize..(t.offset + t.size) as usize],
            )
        }),
    )
    .expect("rewrite an accepted file");
    let again = gpack_ingest::gguf::parse(&out).expect("re-read a rewritten file");
    assert_eq!(again.tensors.len(), g.tensors.len());
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((flag, rest)) if flag & 1 == 1 => {
            let mut v = b"GGUF\x03\0\0\0".to_vec();
            v.extend_from_slice(rest);
            check(&v);
        }
        _ => check(data),
    }
});
