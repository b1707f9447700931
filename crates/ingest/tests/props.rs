//! Property tests: the parsers never panic, and write -> read is the identity.

use gpack_ingest::gguf;
use gpack_ingest::safetensors;
use gpack_ingest::{Array, GgmlType, GgufString, Metadata, Value};
use proptest::prelude::*;

fn valid_gguf() -> Vec<u8> {
    let mut m = Metadata::new();
    m.insert("general.architecture", Value::String("llama".into()));
    m.insert(
        "a",
        Value::Array(Array::Array(vec![
            Array::U32(vec![1, 2]),
            Array::String(vec!["x".into()]),
        ])),
    );
    m.insert("b", Value::Bool(true));
    m.insert("f", Value::F64(0.5));
    let q = [1u8; 34];
    let f = [2u8; 16];
    gguf::to_vec(
        &m,
        [
            ("q", GgmlType::Q8_0, &[32u64][..], &q[..]),
            ("f", GgmlType::F32, &[2u64, 2][..], &f[..]),
        ],
    )
    .unwrap()
}

fn valid_safetensors() -> Vec<u8> {
    let h = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}}"#;
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(h.as_bytes());
    b.resize(b.len() + 16, 3);
    b
}

/// Touches everything a successful parse returns (goblin's fuzz habit).
fn touch_gguf(bytes: &[u8]) {
    if let Ok(g) = gguf::parse(bytes) {
        for (k, v) in g.metadata.iter() {
            let _ = (k.len(), v.value_type(), v.as_u64(), v.as_str());
        }
        for t in &g.tensors {
            let r = &bytes[t.offset as usize..(t.offset + t.size) as usize];
            assert_eq!(r.len() as u64, t.size);
            assert_eq!(t.offset % g.alignment, 0);
        }
        // What is accepted can be written back and read again to the same thing.
        // (Compared as bytes: metadata may hold NaNs.)
        let rewrite = |g: &gguf::GgufFile, bytes: &[u8]| {
            gguf::to_vec(
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
            .unwrap()
        };
        let out = rewrite(&g, bytes);
        let again = gguf::parse(&out).unwrap();
        assert!(rewrite(&again, &out) == out);
    }
}

fn touch_safetensors(bytes: &[u8]) {
    if let Ok(s) = safetensors::parse(bytes) {
        let mut end = s.data_offset;
        for t in &s.tensors {
            assert_eq!(t.offset, end);
            end += t.size;
        }
        assert_eq!(end, bytes.len() as u64);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
    SetU64(usize, u64),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
            any::<usize>().prop_map(Mutation::Truncate),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Remove),
            (
                any::<usize>(),
                prop_oneof![any::<u64>(), 0..100u64, Just(u64::MAX)]
            )
                .prop_map(|(i, v)| Mutation::SetU64(i, v)),
        ],
        1..6,
    )
}

fn apply(mut b: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match *m {
            Mutation::Set(i, v) => b[i % n] = v,
            Mutation::Truncate(i) => b.truncate(i % n),
            Mutation::Insert(i, v) => b.insert(i % n, v),
            Mutation::Remove(i) => {
                b.remove(i % n);
            }
            Mutation::SetU64(i, v) => {
                let i = i % n;
                let end = (i + 8).min(n);
                b[i..end].copy_from_slice(&v.to_le_bytes()[..end - i]);
            }
        }
    }
    b
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        any::<f32>()
            .prop_filter("NaN != NaN", |v| !v.is_nan())
            .prop_map(Value::F32),
        any::<f64>()
            .prop_filter("NaN != NaN", |v| !v.is_nan())
            .prop_map(Value::F64),
        any::<bool>().prop_map(Value::Bool),
        prop::collection::vec(any::<u8>(), 0..20)
            .prop_map(|b| Value::String(GgufString::from_bytes(b))),
    ];
    let array = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..10).prop_map(Array::U8),
        prop::collection::vec(any::<i64>(), 0..10).prop_map(Array::I64),
        prop::collection::vec(any::<bool>(), 0..10).prop_map(Array::Bool),
        prop::collection::vec(any::<i32>(), 0..10).prop_map(Array::I32),
        prop::collection::vec(".{0,8}".prop_map(GgufString::from), 0..10).prop_map(Array::String),
    ];
    let nested = array.prop_recursive(3, 20, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Array::Array)
    });
    prop_oneof![leaf, nested.prop_map(Value::Array)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..512)) {
        touch_gguf(&b);
        touch_safetensors(&b);
        // With a valid prefix, to get past the magic.
        let mut g = b"GGUF\x03\0\0\0".to_vec();
        g.extend_from_slice(&b);
        touch_gguf(&g);
    }

    #[test]
    fn mutated_gguf_never_panics(ms in mutations()) {
        touch_gguf(&apply(valid_gguf(), &ms));
    }

    #[test]
    fn mutated_safetensors_never_panics(ms in mutations()) {
        touch_safetensors(&apply(valid_safetensors(), &ms));
    }

    #[test]
    fn metadata_round_trips(entries in prop::collection::vec(("[a-z.]{1,12}", value()), 0..12)) {
        let m: Metadata = entries.into_iter().filter(|(k, _)| k != "general.alignment").collect();
        let bytes = gguf::to_vec(&m, []).unwrap();
        let g = gguf::parse(&bytes).unwrap();
        prop_assert_eq!(g.metadata, m);
    }

    #[test]
    fn tensors_round_trip(shapes in prop::collection::vec((1u64..5, 1u64..4, prop::sample::select(vec![GgmlType::F32, GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::BF16])), 0..6), align in prop::sample::select(vec![8u32, 32, 64, 4096])) {
        let mut m = Metadata::new();
        m.insert("general.alignment", Value::U32(align));
        let tensors: Vec<(String, GgmlType, Vec<u64>, Vec<u8>)> = shapes.iter().enumerate().map(|(i, &(a, b, t))| {
            let dims = vec![a * t.block_size(), b];
            let size = t.bytes_for(dims[0] * dims[1]).unwrap();
            (format!("t{i}"), t, dims, (0..size).map(|x| (x * 7 + i as u64) as u8).collect())
        }).collect();
        let bytes = gguf::to_vec(&m, tensors.iter().map(|(n, t, d, b)| (n.as_str(), *t, d.as_slice(), b.as_slice()))).unwrap();
        let g = gguf::parse(&bytes).unwrap();
        prop_assert_eq!(g.tensors.len(), tensors.len());
        for (p, (n, t, d, b)) in g.tensors.iter().zip(&tensors) {
            prop_assert_eq!((&p.name, p.ggml_type, &p.dims), (n, *t, d));
            prop_assert_eq!(&bytes[p.offset as usize..(p.offset + p.size) as usize], b.as_slice());
        }
    }
}
