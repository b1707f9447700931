//! Reading real GGUF fixtures, and writer round trips.

use gpack_ingest::gguf::{self, TensorHeader, Writer};
use gpack_ingest::{Array, GgmlType, GgufString, Metadata, Source, SourceKind, Value};

use crate::common::{arches, tiny, B};

#[test]
fn every_tiny_gguf_parses_with_expected_tensor_counts() {
    // Counts as printed by gguf-dump (gguf 0.19.0).
    let counts = [
        ("llama", 21),
        ("qwen2", 26),
        ("qwen3", 24),
        ("qwen3moe", 27),
        ("mixtral", 23),
        ("gemma3", 80),
        ("gemma3n", 145),
        ("smollm3", 38),
        ("granite", 21),
        ("gemma2", 46),
        ("olmo2", 25),
        ("phi3", 17),
        ("gpt-oss", 79),
        ("deepseek2", 67),
    ];
    for (arch, n) in counts {
        for q in ["f16", "q8_0"] {
            let p = tiny(arch).join(format!("{arch}-{q}.gguf"));
            let s = Source::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(s.kind, SourceKind::Gguf);
            assert_eq!(s.tensors.len(), n, "{arch} {q}");
            let want_arch = if arch == "mixtral" { "llama" } else { arch };
            assert_eq!(s.architecture(), Some(want_arch));
            for t in &s.tensors {
                let b = s.tensor_bytes(t).unwrap();
                assert!(matches!(b, std::borrow::Cow::Borrowed(_)));
                assert_eq!(b.len() as u64, t.size);
                assert_eq!(t.ggml_type.bytes_for(t.n_elements()), Some(t.size));
            }
        }
    }
}

#[test]
fn llama_f16_metadata_and_tensors() {
    let s = Source::open(&tiny("llama").join("llama-f16.gguf")).unwrap();
    let m = &s.metadata;
    assert_eq!(m.len(), 30);
    assert_eq!(m.get_str("general.name"), Some("tiny-random-llama"));
    assert_eq!(m.get_u32("llama.block_count"), Some(2));
    assert_eq!(m.get_f32("llama.rope.freq_base"), Some(10000.0));
    assert_eq!(
        m.get_f32("llama.attention.layer_norm_rms_epsilon"),
        Some(1e-6)
    );
    assert_eq!(m.get_bool("tokenizer.ggml.add_bos_token"), Some(false));
    assert_eq!(
        m.get_string_array("tokenizer.ggml.tokens").map(<[_]>::len),
        Some(2048)
    );
    assert_eq!(
        m.get_i32_array("tokenizer.ggml.token_type")
            .map(|v| &v[..4]),
        Some(&[3, 3, 3, 1][..])
    );
    assert_eq!(
        m.get_string_array("tokenizer.ggml.merges")
            .map(|v| v[4].as_str()),
        Some(Some("s e"))
    );
    assert_eq!(m.keys().next(), Some("general.architecture"));
    let t = s.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (t.ggml_type, t.dims.as_slice()),
        (GgmlType::F16, &[128u64, 64][..])
    );
    let n = s.tensor("output_norm.weight").unwrap();
    assert_eq!(
        (n.ggml_type, n.dims.as_slice(), n.size),
        (GgmlType::F32, &[64u64][..], 256)
    );
    assert_eq!(s.tensors[0].name, "output.weight");
    assert!(s.tensor("nope").is_none());
}

/// Re-writing a parsed file must give back the same bytes (gguf-py's layout).
#[test]
fn rewriting_every_tiny_gguf_reproduces_its_bytes() {
    let mut paths = vec![];
    for arch in arches() {
        for q in ["f16", "q8_0"] {
            paths.push(tiny(arch).join(format!("{arch}-{q}.gguf")));
        }
    }
    paths.push(tiny("llama").join("split/llama-f16-00002-of-00002.gguf"));
    for p in paths {
        let bytes = std::fs::read(&p).unwrap();
        let g = gguf::parse(&bytes).unwrap();
        let out = gguf::to_vec(
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
        .unwrap();
        assert!(
            out == bytes,
            "{}: rewrite differs ({} vs {} bytes)",
            p.display(),
            out.len(),
            bytes.len()
        );
    }
}

fn every_value_type() -> Metadata {
    let mut m = Metadata::new();
    m.insert("u8", Value::U8(200));
    m.insert("i8", Value::I8(-100));
    m.insert("u16", Value::U16(60000));
    m.insert("i16", Value::I16(-30000));
    m.insert("u32", Value::U32(4_000_000_000));
    m.insert("i32", Value::I32(-2_000_000_000));
    m.insert("u64", Value::U64(u64::MAX));
    m.insert("i64", Value::I64(i64::MIN));
    m.insert("f32", Value::F32(-1.5));
    m.insert("f64", Value::F64(1e300));
    m.insert("bool", Value::Bool(true));
    m.insert("str", Value::String("héllo".into()));
    m.insert(
        "bytes",
        Value::String(GgufString::from_bytes(vec![0xff, 0xfe, 0])),
    );
    m.insert("a.u8", Value::Array(Array::U8(vec![1, 2, 3])));
    m.insert("a.i8", Value::Array(Array::I8(vec![-1])));
    m.insert("a.u16", Value::Array(Array::U16(vec![1, 65535])));
    m.insert("a.i16", Value::Array(Array::I16(vec![-2])));
    m.insert("a.u32", Value::Array(Array::U32(vec![7])));
    m.insert("a.i32", Value::Array(Array::I32(vec![-7, 8])));
    m.insert("a.u64", Value::Array(Array::U64(vec![u64::MAX])));
    m.insert("a.i64", Value::Array(Array::I64(vec![i64::MIN])));
    m.insert("a.f32", Value::Array(Array::F32(vec![0.5, -0.0])));
    m.insert("a.f64", Value::Array(Array::F64(vec![2.5])));
    m.insert("a.bool", Value::Array(Array::Bool(vec![true, false])));
    m.insert(
        "a.str",
        Value::Array(Array::String(vec![
            "a".into(),
            GgufString::from_bytes(vec![0x80]),
        ])),
    );
    m.insert("a.empty", Value::Array(Array::F32(vec![])));
    m.insert(
        "a.nested",
        Value::Array(Array::Array(vec![
            Array::U32(vec![1, 2]),
            Array::String(vec!["x".into()]),
            Array::Array(vec![Array::Bool(vec![true])]),
            Array::I64(vec![]),
        ])),
    );
    m.insert("general.alignment", Value::U32(64));
    m
}

#[test]
fn every_value_type_round_trips_through_the_writer() {
    let m = every_value_type();
    let q8 = [7u8; 34 * 2];
    let f32s: Vec<u8> = (0..6).flat_map(|i: i32| (i as f32).to_le_bytes()).collect();
    let bytes = gguf::to_vec(
        &m,
        [
            ("q", GgmlType::Q8_0, &[64u64][..], &q8[..]),
            ("empty", GgmlType::F32, &[0u64, 3][..], &[][..]),
            ("f", GgmlType::F32, &[3u64, 2][..], &f32s[..]),
            ("scalar", GgmlType::I32, &[][..], &[1, 0, 0, 0][..]),
        ],
    )
    .unwrap();
    let g = gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.alignment, 64);
    assert_eq!(g.metadata, m);
    assert_eq!(g.data_offset % 64, 0);
    let names: Vec<_> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["q", "empty", "f", "scalar"]);
    for t in &g.tensors {
        assert_eq!(t.offset % 64, 0);
    }
    let f = &g.tensors[2];
    assert_eq!(
        &bytes[f.offset as usize..(f.offset + f.size) as usize],
        &f32s[..]
    );
    assert_eq!(g.tensors[3].size, 4);
    assert_eq!(bytes.len() as u64 % 64, 0);
}

#[test]
fn encode_and_decode_single_values() {
    for (_, v) in every_value_type().iter() {
        let b = gguf::encode_value(v);
        assert_eq!(&gguf::decode_value(v.value_type().id(), &b).unwrap(), v);
        let mut longer = b.clone();
        longer.push(0);
        assert!(matches!(
            gguf::decode_value(v.value_type().id(), &longer),
            Err(gpack_ingest::Error::TrailingBytes { .. })
        ));
        if !b.is_empty() {
            assert!(gguf::decode_value(v.value_type().id(), &b[..b.len() - 1]).is_err());
        }
    }
    assert_eq!(gguf::encode_value(&Value::U32(7)), 7u32.to_le_bytes());
    assert!(matches!(
        gguf::decode_value(13, &[]),
        Err(gpack_ingest::Error::UnknownValueType { type_id: 13, .. })
    ));
}

#[test]
fn version_2_is_read_like_version_3() {
    let mut bytes = gguf::to_vec(&every_value_type(), []).unwrap();
    bytes[4] = 2;
    let g = gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 2);
    assert_eq!(g.metadata, every_value_type());
}

#[test]
fn writer_streams_and_checks_its_input() {
    let m = Metadata::new();
    let h = |name: &str, t, dims: &[u64]| TensorHeader {
        name: name.into(),
        ggml_type: t,
        dims: dims.to_vec(),
    };
    let mut w = Writer::new(
        Vec::new(),
        &m,
        &[h("a", GgmlType::F16, &[3]), h("b", GgmlType::F32, &[1])],
    )
    .unwrap();
    assert!(w.write_tensor_data(&[0; 5]).is_err(), "wrong length");
    w.write_tensor_data(&[1; 6]).unwrap();
    let w2 = Writer::new(Vec::new(), &m, &[h("a", GgmlType::F32, &[1])]).unwrap();
    assert!(w2.finish().is_err(), "missing tensor data");
    w.write_tensor_data(&[2; 4]).unwrap();
    assert!(w.write_tensor_data(&[2; 4]).is_err(), "one tensor too many");
    let bytes = w.finish().unwrap();
    let g = gguf::parse(&bytes).unwrap();
    assert_eq!(g.tensors[1].offset - g.tensors[0].offset, 32);

    use gpack_ingest::WriteProblem;
    for (bad, want) in [
        (
            vec![h("a", GgmlType::F32, &[1]), h("a", GgmlType::F32, &[1])],
            WriteProblem::DuplicateName,
        ),
        (
            vec![h(&"n".repeat(64), GgmlType::F32, &[1])],
            WriteProblem::NameTooLong,
        ),
        (
            vec![h("a", GgmlType::F32, &[1, 1, 1, 1, 1])],
            WriteProblem::TooManyDims,
        ),
        (
            vec![h("a", GgmlType::Q4_0, &[31])],
            WriteProblem::InvalidShape,
        ),
    ] {
        let e = Writer::new(Vec::new(), &m, &bad).err();
        assert!(
            matches!(e, Some(gpack_ingest::Error::Write { reason, .. }) if reason == want),
            "{e:?}"
        );
    }
    let mut m = Metadata::new();
    m.insert("general.alignment", Value::U32(48));
    assert!(matches!(
        Writer::new(Vec::new(), &m, &[]).err(),
        Some(gpack_ingest::Error::Write {
            reason: WriteProblem::Alignment,
            ..
        })
    ));
}

#[test]
fn write_to_path_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let mut m = Metadata::new();
    m.insert("general.architecture", Value::String("llama".into()));
    let data = [0u8; 8];
    gguf::write(&p, &m, [("t", GgmlType::F16, &[4u64][..], &data[..])]).unwrap();
    let s = Source::open(&p).unwrap();
    assert_eq!(s.architecture(), Some("llama"));
    assert_eq!(&*s.tensor_bytes(&s.tensors[0]).unwrap(), &data);
}

#[test]
fn builder_bytes_parse() {
    // Sanity check of the hand-made byte builder used by the malformed tests.
    let b = B::header(3, 1, 1)
        .kv_u32("k", 5)
        .tensor("t", &[2], 0, 0)
        .pad(32)
        .zeros(8);
    let g = gguf::parse(b.bytes()).unwrap();
    assert_eq!(g.metadata.get_u32("k"), Some(5));
    assert_eq!(g.tensors[0].size, 8);
}
