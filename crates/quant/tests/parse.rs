//! NativeView::parse: never panics, one hand-made-bytes test per error.

use crate::common::Aligned;
use gpack_quant::layout::NativeTensorHeader;
use gpack_quant::{Error, GgmlType, Layout, NativeView};
use proptest::prelude::*;

fn valid(layout: Layout, rows: u64, cols: u64) -> Vec<u8> {
    let (h, total) = NativeTensorHeader::new(layout, rows, cols, false).unwrap();
    let mut b = vec![0u8; total as usize];
    b[..64].copy_from_slice(&h.to_bytes());
    b
}

fn parse(b: &[u8]) -> Result<(), Error> {
    let a = Aligned::new(b);
    NativeView::parse(a.bytes()).map(|_| ())
}

#[test]
fn valid_tensors_parse_and_have_canonical_offsets() {
    for l in [
        Layout::F32,
        Layout::F16,
        Layout::BF16,
        Layout::I8Sym { group: 32 },
        Layout::I8Sym { group: 16 },
        Layout::I8Asym { group: 32 },
        Layout::I8Asym { group: 16 },
        Layout::I4Sym { group: 32 },
        Layout::I4Asym { group: 32 },
        Layout::Ggml(GgmlType::IQ4_XS),
    ] {
        let cols = if matches!(l, Layout::Ggml(_)) {
            512
        } else {
            96 * 2 + 64
        };
        let b = valid(l, 3, cols);
        let a = Aligned::new(&b);
        let v = NativeView::parse(a.bytes()).unwrap();
        assert_eq!(v.byte_len(), b.len());
        assert_eq!((v.rows(), v.cols(), v.layout()), (3, cols as usize, l));
        let h = NativeTensorHeader::from_bytes(&b).unwrap();
        assert_eq!(h.codes_off, 64);
        for off in [h.scales_off, h.mins_off] {
            assert_eq!(off % 16, 0);
        }
        assert_eq!(
            v.scales().len(),
            if l.has_scales() {
                3 * cols as usize / l.group() as usize
            } else {
                0
            }
        );
        assert_eq!(
            v.mins().len(),
            if l.has_mins() { v.scales().len() } else { 0 }
        );
        // Trailing bytes after the tensor are allowed (arena), and ignored.
        let mut longer = b.clone();
        longer.extend_from_slice(&[0xAA; 40]);
        let a = Aligned::new(&longer);
        assert_eq!(NativeView::parse(a.bytes()).unwrap().byte_len(), b.len());
    }
}

#[test]
fn f16_scales_flag() {
    let (h, total) = NativeTensorHeader::new(Layout::I4Sym { group: 32 }, 2, 64, true).unwrap();
    let mut b = vec![0u8; total as usize];
    b[..64].copy_from_slice(&h.to_bytes());
    let a = Aligned::new(&b);
    let v = NativeView::parse(a.bytes()).unwrap();
    assert_eq!(v.f16_scales().len(), 4);
    assert!(NativeTensorHeader::new(Layout::F32, 2, 64, true).is_err());
}

fn set_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn set_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn each_error_variant() {
    let base = valid(Layout::I8Asym { group: 32 }, 2, 64);
    // Truncated header.
    assert!(matches!(parse(&base[..63]), Err(Error::Truncated { .. })));
    // Truncated array.
    assert!(matches!(
        parse(&base[..base.len() - 1]),
        Err(Error::Truncated { .. })
    ));
    // Unknown layout code.
    let mut b = base.clone();
    set_u32(&mut b, 0, 99);
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid {
            what: "layout code",
            ..
        })
    ));
    let mut b = base.clone();
    set_u32(&mut b, 0, 0x1000 + 4); // removed ggml id
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid {
            what: "layout code",
            ..
        })
    ));
    // Bad group.
    let mut b = base.clone();
    set_u32(&mut b, 4, 64);
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid { what: "group", .. })
    ));
    let mut b = base.clone();
    set_u32(&mut b, 4, 0);
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid { what: "group", .. })
    ));
    // Unknown flags, reserved word.
    let mut b = base.clone();
    set_u32(&mut b, 8, 2);
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid { what: "flags", .. })
    ));
    let mut b = base.clone();
    set_u32(&mut b, 12, 1);
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid {
            what: "reserved header word",
            ..
        })
    ));
    // Zero / misfitting / overflowing shapes.
    let mut b = base.clone();
    set_u64(&mut b, 16, 0);
    assert!(matches!(parse(&b), Err(Error::Shape { .. })));
    let mut b = base.clone();
    set_u64(&mut b, 24, 48);
    assert!(matches!(parse(&b), Err(Error::Shape { .. })));
    let mut b = base.clone();
    set_u64(&mut b, 16, u64::MAX);
    assert!(matches!(parse(&b), Err(Error::Overflow { .. })));
    // Offsets.
    for o in [32usize, 40, 48, 56] {
        let mut b = base.clone();
        set_u64(&mut b, o, 0x50);
        assert!(
            matches!(parse(&b), Err(Error::Offset { .. })),
            "offset field @{o}"
        );
    }
    // Non-zero padding.
    let mut b = valid(Layout::I8Asym { group: 32 }, 1, 32); // 4 bytes of scales, 12 of padding
    let h = NativeTensorHeader::from_bytes(&b).unwrap();
    assert_eq!(h.mins_off, h.scales_off + 16);
    b[h.mins_off as usize - 1] = 1;
    assert!(matches!(
        parse(&b),
        Err(Error::Invalid {
            what: "padding byte",
            ..
        })
    ));
    // Misaligned scales address.
    let mut shifted = vec![0u8; 1];
    shifted.extend_from_slice(&base);
    let a = Aligned::new(&shifted);
    assert!(matches!(
        NativeView::parse(&a.bytes()[1..]),
        Err(Error::Invalid { .. })
    ));
    // Error messages are lower-case nouns.
    let e = parse(&base[..10]).unwrap_err().to_string();
    assert!(e.starts_with("native tensor header is truncated"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&b);
    }

    /// A valid header with mutated fields: parse fails or yields a view whose
    /// accessors all work.
    #[test]
    fn parse_never_panics_on_mutated_headers(
        layout in 0u32..8, group in prop_oneof![Just(0u32), Just(16), Just(32), any::<u32>()],
        flags in 0u32..4, rows in prop_oneof![0u64..5, any::<u64>()], cols in prop_oneof![0u64..300, any::<u64>()],
        offs in proptest::array::uniform4(prop_oneof![0u64..400, any::<u64>()]), tail in 0usize..700,
    ) {
        let mut b = vec![0u8; 64 + tail];
        set_u32(&mut b, 0, layout);
        set_u32(&mut b, 4, group);
        set_u32(&mut b, 8, flags);
        set_u64(&mut b, 16, rows);
        set_u64(&mut b, 24, cols);
        for (i, o) in offs.iter().enumerate() {
            set_u64(&mut b, 32 + 8 * i, *o);
        }
        // Half the time, use the canonical offsets so deeper checks run.
        if tail % 2 == 0 {
            if let Ok(l) = Layout::from_code(layout, group) {
                if let Ok((h, _)) = NativeTensorHeader::new(l, rows, cols, flags & 1 == 1) {
                    b[..64].copy_from_slice(&h.to_bytes());
                }
            }
        }
        let a = Aligned::new(&b);
        if let Ok(v) = NativeView::parse(a.bytes()) {
            let mut out = vec![0f32; v.cols()];
            for r in 0..v.rows() {
                let _ = (v.row_codes(r), v.row_scales(r), v.row_mins(r));
                if !matches!(v.layout(), Layout::Ggml(_)) {
                    v.dequantize_row(r, &mut out);
                }
            }
        }
    }
}

#[test]
fn f16_scales_copy_round_trips_when_exact() {
    use gpack_quant::{transcode, write_with_f16_scales};
    // Q8_0 scales are f16 in the source: exact.
    let mut src = vec![0u8; 2 * 34];
    src[0..2].copy_from_slice(&half::f16::from_f32(0.125).to_le_bytes());
    src[34..36].copy_from_slice(&half::f16::from_f32(-3.5e-5).to_le_bytes());
    src[2] = 7;
    let mut out = Vec::new();
    transcode(GgmlType::Q8_0, &src, 2, 32, &mut out).unwrap();
    let a = Aligned::new(&out);
    let v = NativeView::parse(a.bytes()).unwrap();
    let mut with = Vec::new();
    let n = write_with_f16_scales(&v, &mut with).unwrap();
    assert_eq!(n, with.len() as u64);
    let b = Aligned::new(&with);
    let v2 = NativeView::parse(b.bytes()).unwrap();
    assert_eq!(v2.codes(), v.codes());
    assert_eq!(v2.scales(), v.scales());
    let back: Vec<f32> = v2
        .f16_scales()
        .iter()
        .map(|&h| half::f16::from_bits(h).to_f32())
        .collect();
    assert_eq!(back, v.scales());
    // A scale f16 cannot hold is refused.
    let mut q = Vec::new();
    let x: Vec<u8> = (0..32)
        .flat_map(|i| (i as f32 * 0.0123457).to_le_bytes())
        .collect();
    gpack_quant::quantize(
        GgmlType::F32,
        &x,
        1,
        32,
        Layout::I8Sym { group: 32 },
        &mut q,
    )
    .unwrap();
    let c = Aligned::new(&q);
    let v3 = NativeView::parse(c.bytes()).unwrap();
    if gpack_quant::f16_scales_if_exact(v3.scales()).is_none() {
        assert!(write_with_f16_scales(&v3, &mut Vec::new()).is_err());
    }
    // F32 has no scales.
    assert!(gpack_quant::f16_scales_if_exact(&[0.1]).is_none());
    assert_eq!(
        gpack_quant::f16_scales_if_exact(&[-0.0, 0.5]),
        Some(vec![0x8000, 0x3800])
    );
}

struct FailingWriter;
impl std::io::Write for FailingWriter {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("disk full"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_errors_are_io_errors() {
    let src = vec![0u8; 34];
    let e = gpack_quant::transcode(GgmlType::Q8_0, &src, 1, 32, &mut FailingWriter).unwrap_err();
    assert!(matches!(e, Error::Io(_)));
    assert!(std::error::Error::source(&e).is_some());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// quantize → parse → dequantize round trip on random shapes: every
    /// value within half a quantization step (plus the scale search slack).
    #[test]
    fn quantize_round_trip(rows in 1u64..4, groups in 1u64..6, seed in any::<u64>(), target in 0usize..3) {
        let cols = groups * 32;
        let mut rng = crate::common::Rng::new(seed);
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
        let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let target = [Layout::I8Sym { group: 32 }, Layout::I4Sym { group: 32 }, Layout::I4Asym { group: 32 }][target];
        let mut out = Vec::new();
        let n = gpack_quant::quantize(GgmlType::F32, &src, rows, cols, target, &mut out).unwrap();
        prop_assert_eq!(n as usize, out.len());
        let a = Aligned::new(&out);
        let v = NativeView::parse(a.bytes()).unwrap();
        let mut row = vec![0f32; cols as usize];
        for r in 0..rows as usize {
            v.dequantize_row(r, &mut row);
            for (g, (dq, xs)) in row.chunks(32).zip(x[r * cols as usize..].chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |a, b| a.max(b.abs()));
                let range = xs.iter().fold(f32::MIN, |a, b| a.max(*b)) - xs.iter().fold(f32::MAX, |a, b| a.min(*b));
                let step = match target {
                    Layout::I8Sym { .. } => 2.0 * amax / 127.0,
                    Layout::I4Sym { .. } => 2.0 * amax / 7.0,
                    _ => 2.0 * range / 15.0,
                };
                for (d, xv) in dq.iter().zip(xs) {
                    prop_assert!((d - xv).abs() <= step + 1e-6, "{target} row {r} group {g}: {d} vs {xv} (step {step})");
                }
            }
        }
    }
}
