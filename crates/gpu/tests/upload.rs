//! Weight sections streamed to the device: the placement plan's properties
//! (proptest, no device), and uploads on the adapter (lavapipe here; a
//! machine without a Vulkan driver fails these loudly, by design): every
//! tensor read back from where the plan put it equals the source bytes, a
//! corrupted byte is a digest error naming the section, and a real .gpack's
//! NativeDense/Embed/Head sections pass their SHA-256 check.

use gpack_gpu::placement::{Cut, Placement, Tensor};
use gpack_gpu::upload::{Options, Resident, Section};
use gpack_gpu::{Error, Gpu, Want};
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::path::Path;

fn gpu() -> Gpu {
    Gpu::open(Want::Any).expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers libvulkan1)")
}

/// Deterministic noise (xorshift), so a misplaced byte shows.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Every piece read back equals its source bytes, and a tensor's pieces
/// tile it; returns the number of pieces checked.
fn assert_round_trip(g: &Gpu, r: &Resident, bytes: &[u8], tensors: &[Tensor]) -> usize {
    let mut n = 0;
    for (i, t) in tensors.iter().enumerate() {
        let mut joined = Vec::with_capacity(t.len as usize);
        for p in r.placement.pieces_of(i) {
            let got = g.read(&r.buffers[p.buffer], p.offset, p.len).unwrap();
            let want = &bytes[p.src as usize..(p.src + p.len) as usize];
            assert!(got == want, "tensor {i} piece {p:?} differs");
            joined.extend_from_slice(&got);
            n += 1;
        }
        assert!(
            joined == bytes[t.offset as usize..(t.offset + t.len) as usize],
            "tensor {i}"
        );
    }
    n
}

/// A section of `n` tensors of ragged sizes: most 256-aligned as in the
/// arena, some at odd offsets, with odd lengths.
fn ragged(n: usize, seed: u64) -> (Vec<u8>, Vec<Tensor>) {
    let sizes = noise(n * 2, seed);
    let mut tensors = Vec::new();
    let mut at = 0u64;
    for i in 0..n {
        let len = 1 + u64::from(sizes[2 * i]) * 97 + u64::from(sizes[2 * i + 1]) * 3;
        if i % 7 == 3 {
            at += 1 + u64::from(sizes[2 * i] % 13);
        } else {
            at = at.next_multiple_of(256);
        }
        tensors.push(Tensor {
            offset: at,
            len,
            cut: None,
        });
        at += len;
    }
    (noise(at as usize + 100, seed ^ 0xabcdef), tensors)
}

#[test]
fn a_section_of_ragged_tensors_round_trips() {
    let g = gpu();
    let (bytes, tensors) = ragged(300, 7);
    let p = g.place(&tensors, bytes.len() as u64).unwrap();
    assert_eq!(
        p.buffers.len(),
        1,
        "one binding holds {} bytes",
        bytes.len()
    );
    // Aligned tensors follow each other in one copy; each unaligned one
    // (every 7th) breaks it before and after.
    let unaligned = tensors.iter().filter(|t| t.offset % 256 != 0).count();
    assert!(
        p.copies.len() <= 2 * unaligned + 1,
        "{} copies for {} tensors, {unaligned} unaligned",
        p.copies.len(),
        tensors.len()
    );
    let section = Section {
        name: "native_dense",
        bytes: &bytes,
        sha256: sha(&bytes),
    };
    // A chunk that is not a multiple of 4 nor of any tensor boundary.
    let mut calls = Vec::new();
    let opts = Options {
        chunk: 40_001,
        in_flight: 1,
    };
    let r = g
        .upload_section_with(section, p, opts, &mut |d, t| calls.push((d, t)))
        .unwrap();
    assert_eq!(assert_round_trip(&g, &r, &bytes, &tensors), tensors.len());
    assert_eq!(
        calls.last(),
        Some(&(bytes.len() as u64, bytes.len() as u64))
    );
    assert!(calls.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(r.report.bytes, bytes.len() as u64);
    assert_eq!(r.report.buffers, 1);
    let shown = r.report.to_string();
    assert!(
        shown.starts_with("native_dense: ") && shown.contains("1 buffer,"),
        "{shown}"
    );
    eprintln!("{shown}");
}

#[test]
fn a_small_binding_limit_packs_several_buffers_and_cuts_rows() {
    let g = gpu();
    const MIB: u64 = 1 << 20;
    let (mut bytes, mut tensors) = ragged(120, 11);
    // A Rows16-like tensor (64-byte head, 16-row groups of 17 408 bytes,
    // the last group padded) and an F16-like one (any row, 2 000 bytes a
    // row), both larger than a binding.
    let rows16 = Cut {
        head: 64,
        rows: 3001,
        group_rows: 16,
        group_bytes: 17_408,
    };
    let f16 = Cut {
        head: 64,
        rows: 1500,
        group_rows: 1,
        group_bytes: 2_000,
    };
    for cut in [rows16, f16] {
        let at = (bytes.len() as u64).next_multiple_of(256);
        let len = cut.head + cut.groups() * cut.group_bytes;
        tensors.push(Tensor {
            offset: at,
            len,
            cut: Some(cut),
        });
        bytes.resize(at as usize, 0);
        bytes.extend(noise(len as usize, at));
    }
    let limit = MIB;
    let p = Placement::new(&tensors, bytes.len() as u64, limit, g.caps().offset_align).unwrap();
    let least = (bytes.len() as u64).div_ceil(limit) as usize;
    assert!(p.buffers.len() >= least.max(4), "{:?}", p.buffers);
    assert!(p.buffers.iter().all(|&b| b <= limit));
    let n = tensors.len();
    for (i, cut) in [(n - 2, rows16), (n - 1, f16)] {
        let pieces = p.pieces_of(i);
        assert!(pieces.len() >= 3, "tensor {i}: {pieces:?}");
        assert_eq!(pieces[0].head, 64);
        for w in pieces.windows(2) {
            assert_eq!(w[0].rows.end, w[1].rows.start);
            assert_eq!(w[1].rows.start % cut.group_rows, 0, "{w:?}");
            assert_eq!(w[1].head, 0);
        }
        assert_eq!(pieces.last().unwrap().rows.end, cut.rows);
    }
    let section = Section {
        name: "native_dense",
        bytes: &bytes,
        sha256: sha(&bytes),
    };
    let opts = Options {
        chunk: 300_001,
        in_flight: 2,
    };
    let r = g
        .upload_section_with(section, p, opts, &mut |_, _| {})
        .unwrap();
    let pieces = assert_round_trip(&g, &r, &bytes, &tensors);
    assert!(pieces > tensors.len());
    assert_eq!(
        r.report.device_bytes,
        r.buffers.iter().map(|b| b.size()).sum::<u64>()
    );
    eprintln!("{} ({pieces} pieces)", r.report);
}

#[test]
fn a_corrupted_byte_is_a_digest_error_naming_the_section() {
    let g = gpu();
    let (mut bytes, tensors) = ragged(50, 3);
    let want = sha(&bytes);
    bytes[12_345] ^= 0x10;
    let p = g.place(&tensors, bytes.len() as u64).unwrap();
    let e = g
        .upload_section(
            Section {
                name: "native_dense",
                bytes: &bytes,
                sha256: want,
            },
            p,
            &mut |_, _| {},
        )
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Digest { .. }), "{e:?}");
    let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(msg.contains("section native_dense"), "{msg}");
    assert!(msg.contains(&hex(want)), "{msg}");
    assert!(msg.contains(&hex(sha(&bytes))), "{msg}");
    // The device is still usable.
    g.check().unwrap();
}

#[test]
fn a_placement_for_another_length_is_refused() {
    let g = gpu();
    let bytes = vec![0u8; 1000];
    let p = Placement::new(&[], 999, 4096, 256).unwrap();
    let s = Section {
        name: "embed",
        bytes: &bytes,
        sha256: sha(&bytes),
    };
    let e = g.upload_section(s, p, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("section embed"), "{e}");
    // A placement edited by hand to copy past the section.
    let mut p = Placement::new(
        &[Tensor {
            offset: 0,
            len: 1000,
            cut: None,
        }],
        1000,
        4096,
        256,
    )
    .unwrap();
    p.copies[0].len = 2000;
    let e = g.upload_section(s, p, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("does not fit section embed"), "{e}");
}

/// The tensors of a real .gpack's NativeDense arena, Embed and Head, as the
/// runtime will describe them: Rows16 cut at 16-row groups, F32/F16/BF16 at
/// any row, the other layouts whole.
fn native_tensor(blob: &[u8], offset: u64, len: u64) -> Tensor {
    use gpack_quant::{interleave, Layout, NativeTensorHeader};
    let h = NativeTensorHeader::from_bytes(&blob[offset as usize..]).unwrap();
    let layout = Layout::from_code(h.layout, h.group).unwrap();
    let group = match layout {
        Layout::F32 => Some((1, h.cols * 4)),
        Layout::F16 | Layout::BF16 => Some((1, h.cols * 2)),
        Layout::Rows16(t) => Some((16, interleave::codes_len(t, 16, h.cols).unwrap())),
        _ => None,
    };
    Tensor {
        offset,
        len,
        cut: group.map(|(group_rows, group_bytes)| Cut {
            head: h.codes_off,
            rows: h.rows,
            group_rows,
            group_bytes,
        }),
    }
}

fn section_tensors(g: &gpack_format::Gpack, kind: gpack_format::SectionKind) -> Vec<Tensor> {
    use gpack_format::SectionKind as K;
    let s = g.section(kind).unwrap();
    match kind {
        K::NativeDense => {
            let idx = g.section(K::NativeDenseIndex).unwrap();
            let entries = gpack_format::payload::parse_blob_index(
                idx.bytes,
                K::NativeDenseIndex,
                s.bytes.len() as u64,
                256,
            )
            .unwrap();
            entries
                .iter()
                .map(|e| native_tensor(s.bytes, e.offset, e.size))
                .collect()
        }
        _ => {
            let (h, data) = gpack_format::single_tensor(s).unwrap();
            let len = data.len() as u64;
            if h.reserved0.get() == 1 {
                vec![native_tensor(s.bytes, 64, len)]
            } else {
                let t = gpack_format::ggml::GgmlType::from_id(h.ggml_type.get()).unwrap();
                let row = t.bytes_for(h.ne0.get()).unwrap();
                assert_eq!(row * h.ne1.get(), len);
                vec![Tensor {
                    offset: 0,
                    len: 64 + len,
                    cut: Some(Cut {
                        head: 64,
                        rows: h.ne1.get(),
                        group_rows: 1,
                        group_bytes: row,
                    }),
                }]
            }
        }
    }
}

#[test]
fn a_converted_fixtures_weight_sections_upload_with_their_digests() {
    use gpack_format::SectionKind as K;
    let g = gpu();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("testdata/tiny/llama/llama-q8_0.gguf");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama-q8_0.gpack");
    gpack_convert::convert(
        &gpack_convert::ConvertOptions {
            source: src,
            output: out.clone(),
            ..Default::default()
        },
        &(),
    )
    .unwrap_or_else(|e| panic!("convert: {e:?}"));
    let file = gpack_format::Gpack::open(&out).unwrap();
    let (mut uploaded, mut cut_rows16) = (0, false);
    for kind in [K::NativeDense, K::Embed, K::Head] {
        let Some(s) = file.section(kind) else {
            assert_ne!(kind, K::NativeDense, "the fixture has a NativeDense arena");
            continue;
        };
        let tensors = section_tensors(&file, kind);
        // The adapter's own limit, and the smallest one that holds every
        // tensor that may not be cut and one row group of every other: it
        // cuts every cuttable tensor of more than one group.
        let align = g.caps().offset_align;
        let tight = tensors
            .iter()
            .map(|t| t.cut.map_or(t.len, |c| c.head + c.group_bytes))
            .max()
            .unwrap()
            .next_multiple_of(align);
        for limit in [None, Some(tight)] {
            let len = s.bytes.len() as u64;
            let p = match limit {
                None => g.place(&tensors, len).unwrap(),
                Some(l) => Placement::new(&tensors, len, l, align).unwrap(),
            };
            let section = Section {
                name: &s.info.name,
                bytes: s.bytes,
                sha256: s.info.sha256,
            };
            let r = g.upload_section(section, p, &mut |_, _| {}).unwrap();
            assert_round_trip(&g, &r, s.bytes, &tensors);
            eprintln!(
                "{} ({} tensors, {} pieces, limit {limit:?})",
                r.report,
                tensors.len(),
                r.placement.pieces.len()
            );
            if limit.is_none() {
                assert_eq!(r.buffers.len(), 1);
                assert_eq!(r.placement.copies.len(), 1, "{:?}", r.placement.copies);
            } else {
                for (i, t) in tensors.iter().enumerate() {
                    let Some(c) = t.cut.filter(|c| c.groups() > 1) else {
                        continue;
                    };
                    let pieces = r.placement.pieces_of(i);
                    assert!(pieces.len() > 1, "{kind:?} tensor {i} {c:?} is not cut");
                    assert!(pieces.iter().all(|p| p.rows.start % c.group_rows == 0));
                    cut_rows16 |= c.group_rows == 16;
                }
            }
        }
        uploaded += 1;
    }
    assert!(uploaded >= 2);
    assert!(cut_rows16, "no Rows16 tensor of the fixture was cut");
}

fn arb_tensors() -> impl Strategy<Value = (Vec<Tensor>, u64, u64, u64)> {
    let one = (
        0u64..600,  // gap before
        1u64..5000, // plain length
        prop::option::of((
            0u64..3,
            1u64..200,
            prop::sample::select(vec![1u64, 16]),
            1u64..900,
        )),
    );
    (
        prop::collection::vec(one, 0..40),
        prop::sample::select(vec![4u64, 16, 64, 256]),
        1024u64..20_000,
    )
        .prop_map(|(spec, align, limit)| {
            let mut at = 0u64;
            let mut ts = Vec::new();
            for (gap, len, cut) in spec {
                at += gap;
                let t = match cut {
                    None => Tensor {
                        offset: at,
                        len: len.min(limit / 2),
                        cut: None,
                    },
                    Some((h, rows, group_rows, group_bytes)) => {
                        let cut = Cut {
                            head: [0, 64, 13][h as usize],
                            rows: rows * group_rows / 3 + 1,
                            group_rows,
                            group_bytes: group_bytes.min(limit / 2),
                        };
                        Tensor {
                            offset: at,
                            len: cut.head + cut.groups() * cut.group_bytes,
                            cut: Some(cut),
                        }
                    }
                };
                at += t.len;
                ts.push(t);
            }
            (ts, at + 7, limit, align)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every tensor placed exactly once (its pieces tile it, rows cut only
    /// at group boundaries), no two pieces overlap, every buffer within the
    /// limit, every piece aligned, and the copies carry exactly the pieces.
    #[test]
    fn placements_tile_fit_and_align((tensors, section_len, limit, align) in arb_tensors()) {
        let p = Placement::new(&tensors, section_len, limit, align).unwrap();
        prop_assert_eq!(p.tensors.len(), tensors.len());
        let mut seen = vec![0usize; p.pieces.len()];
        for (i, t) in tensors.iter().enumerate() {
            let pieces = p.pieces_of(i);
            prop_assert!(!pieces.is_empty());
            let mut src = t.offset;
            for (k, x) in pieces.iter().enumerate() {
                prop_assert_eq!(x.tensor, i);
                prop_assert_eq!(x.src, src);
                src += x.len;
                seen[p.tensors[i].start + k] += 1;
                if let Some(c) = t.cut {
                    prop_assert_eq!(x.head, if k == 0 { c.head } else { 0 });
                    prop_assert_eq!(x.rows.start % c.group_rows, 0);
                    let groups = (x.len - x.head) / c.group_bytes;
                    prop_assert_eq!(x.head + groups * c.group_bytes, x.len);
                }
            }
            prop_assert_eq!(src, t.offset + t.len);
            if let Some(c) = t.cut {
                prop_assert_eq!(pieces[0].rows.start, 0);
                prop_assert_eq!(pieces.last().unwrap().rows.end, c.rows);
                for w in pieces.windows(2) {
                    prop_assert_eq!(w[0].rows.end, w[1].rows.start);
                }
            } else {
                prop_assert_eq!(pieces.len(), 1);
            }
        }
        prop_assert!(seen.iter().all(|&n| n == 1));
        for (b, &size) in p.buffers.iter().enumerate() {
            prop_assert!(size <= limit && size % 4 == 0, "buffer {} of {} > {}", b, size, limit);
            let mut mine: Vec<_> = p.pieces.iter().filter(|x| x.buffer == b).collect();
            prop_assert!(!mine.is_empty());
            mine.sort_by_key(|x| x.offset);
            for w in mine.windows(2) {
                prop_assert!(w[0].offset + w[0].len <= w[1].offset, "{:?} overlaps {:?}", w[0], w[1]);
            }
            for x in &mine {
                prop_assert_eq!(x.offset % align, 0);
                prop_assert!(x.offset + x.len <= size);
            }
        }
        // Each piece lies inside one copy at the same src-to-device delta.
        for x in &p.pieces {
            let n = p.copies.iter().filter(|c| {
                c.buffer == x.buffer
                    && c.src <= x.src
                    && x.src + x.len <= c.src + c.len
                    && x.src - c.src == x.offset - c.offset
            }).count();
            prop_assert_eq!(n, 1, "piece {:?}", x);
        }
        // Copies do not overlap on the device.
        let mut copies = p.copies.clone();
        copies.sort_by_key(|c| (c.buffer, c.offset));
        for w in copies.windows(2) {
            prop_assert!(w[0].buffer != w[1].buffer || w[0].offset + w[0].len <= w[1].offset);
        }
    }
}
