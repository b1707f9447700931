//! Split GGUF: found from any shard, checked, presented as one source.

use std::path::Path;

use gpack_ingest::gguf;
use gpack_ingest::{Error, Source, Value};

use crate::common::tiny;

const SHARD1: &str = "llama-f16-00001-of-00002.gguf";
const SHARD2: &str = "llama-f16-00002-of-00002.gguf";

#[test]
fn any_shard_opens_the_whole_split_equal_to_the_unsplit_file() {
    let whole = Source::open(&tiny("llama").join("llama-f16.gguf")).unwrap();
    for shard in [SHARD1, SHARD2] {
        let s = Source::open(&tiny("llama").join("split").join(shard)).unwrap();
        assert_eq!(s.files.len(), 2);
        assert_eq!(s.tensors.len(), 21);
        assert_eq!(s.tensors.iter().filter(|t| t.file == 1).count(), 9);
        assert_eq!(
            s.metadata, whole.metadata,
            "metadata = first shard's without split.*"
        );
        let names: Vec<_> = s.tensors.iter().map(|t| &t.name).collect();
        let want: Vec<_> = whole.tensors.iter().map(|t| &t.name).collect();
        assert_eq!(names, want);
        for (a, b) in s.tensors.iter().zip(&whole.tensors) {
            assert_eq!((a.ggml_type, &a.dims), (b.ggml_type, &b.dims));
            assert!(
                s.tensor_bytes(a).unwrap() == whole.tensor_bytes(b).unwrap(),
                "{}",
                a.name
            );
        }
    }
}

fn copy_split(to: &Path) {
    for f in [SHARD1, SHARD2] {
        std::fs::copy(tiny("llama").join("split").join(f), to.join(f)).unwrap();
    }
}

/// Rewrites `file` with `edit` applied to its metadata.
fn edit(file: &Path, f: impl FnOnce(&mut gpack_ingest::Metadata)) {
    let bytes = std::fs::read(file).unwrap();
    let g = gguf::parse(&bytes).unwrap();
    let mut m = g.metadata.clone();
    f(&mut m);
    let tensors = g.tensors.iter().map(|t| {
        (
            t.name.as_str(),
            t.ggml_type,
            t.dims.as_slice(),
            &bytes[t.offset as usize..(t.offset + t.size) as usize],
        )
    });
    gguf::write(file, &m, tensors).unwrap();
}

#[test]
fn missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    copy_split(dir.path());
    std::fs::remove_file(dir.path().join(SHARD2)).unwrap();
    let e = Source::open(&dir.path().join(SHARD1)).unwrap_err();
    assert!(
        matches!(e, Error::MissingShard { no: 2, count: 2, ref file } if file.ends_with(SHARD2)),
        "{e:?}"
    );
    assert!(e.to_string().contains("missing shard 2 of 2"), "{e}");
}

#[test]
fn inconsistent_split_keys() {
    let cases: [(&str, &str, Value, &str); 4] = [
        (SHARD2, "split.no", Value::U16(0), "split.no"),
        (SHARD2, "split.count", Value::U16(3), "split.count"),
        (
            SHARD2,
            "split.tensors.count",
            Value::I32(20),
            "split.tensors.count",
        ),
        (
            SHARD1,
            "split.tensors.count",
            Value::I32(22),
            "split.tensors.count",
        ),
    ];
    for (file, key, value, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_split(dir.path());
        edit(&dir.path().join(file), |m| {
            m.insert(key, value.clone());
        });
        let e = Source::open(&dir.path().join(SHARD1)).unwrap_err();
        assert!(
            matches!(e, Error::SplitInconsistent { key, .. } if key == want),
            "{file} {key}: {e:?}"
        );
    }
    // A missing split.no.
    let dir = tempfile::tempdir().unwrap();
    copy_split(dir.path());
    edit(&dir.path().join(SHARD2), |m| {
        m.remove("split.no");
    });
    let e = Source::open(&dir.path().join(SHARD2)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SplitInconsistent {
                key: "split.no",
                found: None,
                expected: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().ends_with("split.no is missing, expected 1"),
        "{e}"
    );
}

#[test]
fn a_shard_under_a_plain_name_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("renamed.gguf");
    std::fs::copy(tiny("llama").join("split").join(SHARD1), &p).unwrap();
    let e = Source::open(&p).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SplitInconsistent {
                key: "split.count",
                expected: 1,
                found: Some(2),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn duplicate_tensor_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    copy_split(dir.path());
    let p = dir.path().join(SHARD2);
    let bytes = std::fs::read(&p).unwrap();
    let g = gguf::parse(&bytes).unwrap();
    let zeros = vec![0u8; 64 * 2048 * 2];
    let tensors = g.tensors.iter().enumerate().map(|(i, t)| {
        let name = if i == 0 {
            "output.weight"
        } else {
            t.name.as_str()
        };
        let d = if i == 0 {
            &[64u64, 2048][..]
        } else {
            t.dims.as_slice()
        };
        let data = if i == 0 {
            &zeros[..]
        } else {
            &bytes[t.offset as usize..(t.offset + t.size) as usize]
        };
        (name, t.ggml_type, d, data)
    });
    gguf::write(&p, &g.metadata, tensors).unwrap();
    let e = Source::open(&dir.path().join(SHARD1)).unwrap_err();
    assert!(
        matches!(e, Error::DuplicateTensor { ref tensor, .. } if tensor == "output.weight"),
        "{e:?}"
    );
}
