#![no_main]
//! Fuzz the .giw bundle reader (CRC check off, so mutated inputs reach the
//! header, record table and payload checks) and, on success, every accessor:
//! payloads, lookups, fused groups, and each native payload's parse.

use gpack_format::giw::{Giw, ReadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = ReadOptions {
        verify_crc: false,
        ..ReadOptions::default()
    };
    for misalign in [0, 3] {
        let Ok(g) = Giw::from_bytes(data, misalign, &opts) else {
            continue;
        };
        let _ = (
            g.header(),
            g.metadata(),
            g.weight_bytes(),
            g.copied_payloads(),
        );
        for (i, r) in g.records().iter().enumerate() {
            let p = g.payload(i);
            let _ = g.is_aliased(i);
            let _ = g.find(&r.name);
            let _ = gpack_quant::NativeView::parse(p);
        }
        let _ = g.fused(&[
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight",
            "blk.0.attn_v.weight",
        ]);
    }
});
