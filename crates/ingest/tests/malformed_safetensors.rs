//! One hand-made-bytes test per safetensors / index.json / HF directory error.

use std::path::Path;

use gpack_ingest::safetensors;
use gpack_ingest::{Error, Source};

fn st(header: &str, data: usize) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + data, 0);
    b
}

fn err(bytes: &[u8]) -> Error {
    let e = safetensors::parse(bytes).unwrap_err();
    assert!(e.to_string().starts_with("<memory>: "), "{e}");
    e
}

#[test]
fn truncated_header_size() {
    assert!(matches!(
        err(&[1, 2, 3]),
        Error::Truncated {
            needed: 8,
            available: 3,
            ..
        }
    ));
}

#[test]
fn header_too_large() {
    let mut b = (1u64 << 40).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert!(matches!(err(&b), Error::HeaderTooLarge { max: 2, .. }));
    let mut b = 200_000_000u64.to_le_bytes().to_vec();
    b.resize(200_000_008, b' ');
    assert!(matches!(
        err(&b),
        Error::HeaderTooLarge {
            max: 100_000_000,
            ..
        }
    ));
}

#[test]
fn bad_json_header() {
    for h in [
        "{not json",
        "[]",
        r#"{"a":{"dtype":"F32","shape":[1]}}"#,
        r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
        r#"{"__metadata__":{"k":1}}"#,
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
    ] {
        let e = err(&st(h, 4));
        assert!(
            matches!(
                e,
                Error::BadJson {
                    what: "safetensors header",
                    ..
                }
            ),
            "{h}: {e:?}"
        );
    }
}

#[test]
fn unsupported_dtype_names_tensor_and_dtype() {
    for dt in ["U16", "BOOL", "F8_E4M3", "U32", "C64"] {
        let e = err(&st(
            &format!(r#"{{"w":{{"dtype":"{dt}","shape":[4],"data_offsets":[0,4]}}}}"#),
            4,
        ));
        assert!(
            matches!(e, Error::UnsupportedDtype { ref tensor, ref dtype, .. } if tensor == "w" && dtype == dt),
            "{e:?}"
        );
    }
}

#[test]
fn too_many_dims() {
    let e = err(&st(
        r#"{"w":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}}"#,
        4,
    ));
    assert!(matches!(e, Error::TooManyDims { n_dims: 5, .. }), "{e:?}");
}

#[test]
fn size_mismatch() {
    let e = err(&st(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
        4,
    ));
    assert!(
        matches!(
            e,
            Error::TensorSizeMismatch {
                expected: 8,
                found: 4,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&st(
        r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
        4,
    ));
    assert!(
        matches!(e, Error::TensorSizeMismatch { found: 0, .. }),
        "{e:?}"
    );
    let e = err(&st(
        r#"{"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}}"#,
        4,
    ));
    assert!(
        matches!(
            e,
            Error::TensorSizeMismatch {
                expected: u64::MAX,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn gaps_and_overlaps() {
    let gap = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
    let e = err(&st(gap, 12));
    assert!(
        matches!(e, Error::OffsetsNotTiled { expected: 4, found: 8, ref tensor, .. } if tensor == "b"),
        "{e:?}"
    );
    let overlap = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let e = err(&st(overlap, 8));
    assert!(
        matches!(
            e,
            Error::OffsetsNotTiled {
                expected: 8,
                found: 4,
                ..
            }
        ),
        "{e:?}"
    );
    let late_start = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    assert!(matches!(
        err(&st(late_start, 8)),
        Error::OffsetsNotTiled {
            expected: 0,
            found: 4,
            ..
        }
    ));
}

#[test]
fn trailing_bytes_and_out_of_bounds() {
    let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let e = err(&st(h, 5));
    assert!(matches!(e, Error::TrailingBytes { .. }), "{e:?}");
    let e = err(&st(h, 3));
    assert!(
        matches!(e, Error::TensorOutOfBounds { size: 4, .. }),
        "{e:?}"
    );
    assert!(safetensors::parse(&st(h, 4)).is_ok());
}

fn write_st(dir: &Path, name: &str, tensors: &[(&str, usize)]) {
    // F32 1-D tensors back to back.
    let mut at = 0;
    let entries: Vec<String> = tensors
        .iter()
        .map(|(n, len)| {
            let s = format!(
                r#""{n}":{{"dtype":"F32","shape":[{len}],"data_offsets":[{at},{}]}}"#,
                at + 4 * len
            );
            at += 4 * len;
            s
        })
        .collect();
    std::fs::write(
        dir.join(name),
        st(&format!("{{{}}}", entries.join(",")), at),
    )
    .unwrap();
}

fn write_index(dir: &Path, map: &[(&str, &str)]) -> std::path::PathBuf {
    let entries: Vec<String> = map.iter().map(|(t, f)| format!(r#""{t}":"{f}""#)).collect();
    let p = dir.join("model.safetensors.index.json");
    std::fs::write(
        &p,
        format!(
            r#"{{"metadata":{{}},"weight_map":{{{}}}}}"#,
            entries.join(",")
        ),
    )
    .unwrap();
    p
}

#[test]
fn index_paths_must_stay_inside_the_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    write_st(root.path(), "outside.safetensors", &[("a", 1)]);
    for shard in [
        "../outside.safetensors",
        "/etc/passwd",
        "./x.safetensors",
        "a/../../outside.safetensors",
        "",
    ] {
        let p = write_index(&dir, &[("a", shard)]);
        let e = Source::open(&p).unwrap_err();
        assert!(
            matches!(e, Error::UnsafeShardPath { shard: ref s, .. } if s == shard),
            "{shard}: {e:?}"
        );
        // Through the directory too.
        assert!(matches!(
            Source::open(&dir),
            Err(Error::UnsafeShardPath { .. })
        ));
    }
}

#[test]
fn index_missing_shard_and_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_st(d, "s1.safetensors", &[("a", 1), ("b", 2)]);
    let p = write_index(
        d,
        &[
            ("a", "s1.safetensors"),
            ("b", "s1.safetensors"),
            ("c", "s2.safetensors"),
        ],
    );
    let e = Source::open(&p).unwrap_err();
    assert!(
        matches!(e, Error::Io { what: "open", ref file, .. } if file.ends_with("s2.safetensors")),
        "{e:?}"
    );

    let p = write_index(d, &[("a", "s1.safetensors")]);
    let e = Source::open(&p).unwrap_err();
    assert!(
        matches!(e, Error::IndexMismatch { ref tensor, problem: gpack_ingest::IndexProblem::NotListed, .. } if tensor == "b"),
        "{e:?}"
    );

    let p = write_index(
        d,
        &[
            ("a", "s1.safetensors"),
            ("b", "s1.safetensors"),
            ("z", "s1.safetensors"),
        ],
    );
    let e = Source::open(&p).unwrap_err();
    assert!(
        matches!(e, Error::IndexMismatch { ref tensor, problem: gpack_ingest::IndexProblem::MissingFromShard, .. } if tensor == "z"),
        "{e:?}"
    );

    std::fs::write(&p, b"{\"weight_map\": 3}").unwrap();
    assert!(matches!(
        Source::open(&p),
        Err(Error::BadJson {
            what: "index.json",
            ..
        })
    ));

    // A good index: tensors from both shards, in shard-name order.
    write_st(d, "s2.safetensors", &[("c", 3)]);
    let p = write_index(
        d,
        &[
            ("a", "s1.safetensors"),
            ("b", "s1.safetensors"),
            ("c", "s2.safetensors"),
        ],
    );
    let s = Source::open(&p).unwrap();
    let names: Vec<_> = s
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.file))
        .collect();
    assert_eq!(names, [("a", 0), ("b", 0), ("c", 1)]);
    assert_eq!(s.architecture(), None);
}

#[test]
fn two_hf_names_mapping_to_one_gguf_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_st(
        d,
        "model.safetensors",
        &[("model.norm.weight", 4), ("output_norm.weight", 4)],
    );
    std::fs::write(d.join("config.json"), br#"{"model_type":"qwen2"}"#).unwrap();
    let e = Source::open(d).unwrap_err();
    assert!(
        matches!(e, Error::DuplicateTensor { ref tensor, .. } if tensor == "output_norm.weight"),
        "{e:?}"
    );
    // Unmapped (unknown architecture): both keep their names.
    std::fs::write(d.join("config.json"), br#"{"model_type":"other"}"#).unwrap();
    assert_eq!(Source::open(d).unwrap().tensors.len(), 2);
}

#[test]
fn directories_without_weights_and_bad_configs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(matches!(Source::open(d), Err(Error::NoWeights { .. })));
    write_st(d, "a.safetensors", &[("x", 1)]);
    write_st(d, "b.safetensors", &[("y", 1)]);
    assert!(
        matches!(Source::open(d), Err(Error::NoWeights { .. })),
        "two candidate files"
    );
    std::fs::remove_file(d.join("b.safetensors")).unwrap();
    assert_eq!(Source::open(d).unwrap().tensors.len(), 1);

    std::fs::write(d.join("config.json"), b"{oops").unwrap();
    assert!(matches!(
        Source::open(d),
        Err(Error::BadJson {
            what: "config.json",
            ..
        })
    ));
    std::fs::write(
        d.join("config.json"),
        br#"{"model_type":"llama","num_hidden_layers":"two"}"#,
    )
    .unwrap();
    let e = Source::open(d).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadConfig {
                key: "num_hidden_layers",
                problem: gpack_ingest::ConfigProblem::NotU32,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("config.json: num_hidden_layers must be an unsigned integer"),
        "{e}"
    );
}

#[test]
fn bad_transforms() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // llama q_proj needs num_attention_heads for the rope permutation.
    write_st(
        d,
        "model.safetensors",
        &[("model.layers.0.self_attn.q_proj.weight", 8)],
    );
    std::fs::write(d.join("config.json"), br#"{"model_type":"llama"}"#).unwrap();
    assert!(matches!(
        Source::open(d),
        Err(Error::BadConfig {
            key: "num_attention_heads",
            problem: gpack_ingest::ConfigProblem::MissingForRope,
            ..
        })
    ));
    // 8 rows do not split into 2 x 3 heads.
    std::fs::write(
        d.join("config.json"),
        br#"{"model_type":"llama","num_attention_heads":3}"#,
    )
    .unwrap();
    assert!(matches!(
        Source::open(d),
        Err(Error::BadTransform {
            reason: gpack_ingest::TransformProblem::RopeRows,
            ..
        })
    ));
    // Experts with a gap.
    write_st(
        d,
        "model.safetensors",
        &[
            ("model.layers.0.mlp.experts.0.up_proj.weight", 4),
            ("model.layers.0.mlp.experts.2.up_proj.weight", 4),
        ],
    );
    std::fs::write(d.join("config.json"), br#"{"model_type":"qwen3_moe"}"#).unwrap();
    let e = Source::open(d).unwrap_err();
    assert!(
        matches!(e, Error::BadTransform { ref tensor, reason: gpack_ingest::TransformProblem::PartNumbers, .. } if tensor == "blk.0.ffn_up_exps.weight"),
        "{e:?}"
    );
}
