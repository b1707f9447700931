//! Split GGUF (`gguf-split`): `<prefix>-00001-of-00003.gguf` … presented as one source.
//!
//! llama.cpp names shards `"%s-%05d-of-%05d.gguf"` (`llama_split_path`) and writes
//! `split.no` (0-based), `split.count` and `split.tensors.count` into every shard;
//! only the first shard carries the model metadata. Given any shard we rebuild all
//! names from the pattern, require every file, and check each shard's keys against
//! its name and the total tensor count against `split.tensors.count`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::source::{Source, SourceFile, SourceKind, TensorInfo};

/// `split.no`: 0-based shard number.
pub const KEY_SPLIT_NO: &str = "split.no";
/// `split.count`: number of shards.
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: tensors across all shards.
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// `(prefix path, 1-based number, count)` when `path`'s name is `<prefix>-NNNNN-of-MMMMM.gguf`.
pub(crate) fn split_name(path: &Path) -> Option<(PathBuf, u64, u64)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    // "-NNNNN-of-MMMMM" is 15 bytes of ASCII.
    let cut = stem.len().checked_sub(15)?;
    let (prefix, tail) = (stem.get(..cut)?, stem.get(cut..)?);
    let tail = tail.as_bytes();
    if tail[0] != b'-' || &tail[6..10] != b"-of-" {
        return None;
    }
    let num = |b: &[u8]| -> Option<u64> {
        if b.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(b).ok()?.parse().ok()
        } else {
            None
        }
    };
    let (no, count) = (num(&tail[1..6])?, num(&tail[10..15])?);
    if no == 0 || count == 0 || no > count {
        return None;
    }
    Some((path.with_file_name(prefix), no, count))
}

fn shard_path(prefix: &Path, no: u64, count: u64) -> PathBuf {
    let mut name = prefix.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-{no:05}-of-{count:05}.gguf"));
    prefix.with_file_name(name)
}

/// Opens a GGUF whose first bytes were checked to be the magic; finds the other
/// shards when the file is one shard of a split.
pub(crate) fn open(first: SourceFile) -> Result<Source, Error> {
    let parsed = super::parse_named(first.bytes(), &first.path)?;
    let declared = parsed.metadata.get(KEY_SPLIT_COUNT).map(|v| v.as_u64());
    let Some((prefix, _, count)) = split_name(&first.path) else {
        // Not named like a shard: a plain file, unless it says it is part of a split.
        if let Some(found) = declared {
            if found != Some(1) {
                return Err(Error::SplitInconsistent {
                    file: first.path.clone(),
                    key: KEY_SPLIT_COUNT,
                    expected: 1,
                    found,
                });
            }
        }
        return Ok(single(first, parsed));
    };
    if count == 1 && declared.is_none() {
        return Ok(single(first, parsed));
    }

    let mut files = Vec::new();
    let mut metadata = None;
    let mut tensors = Vec::new();
    let mut names = HashSet::new();
    let mut total_declared = None;
    let mut given = Some((first, parsed));
    for no in 1..=count {
        let path = shard_path(&prefix, no, count);
        let (file, g) = match given.take_if(|(f, _)| f.path == path) {
            Some(fg) => fg,
            None => {
                if !path.exists() {
                    return Err(Error::MissingShard {
                        file: path,
                        no,
                        count,
                    });
                }
                let f = SourceFile::open(&path)?;
                let g = super::parse_named(f.bytes(), &f.path)?;
                (f, g)
            }
        };
        let check = |key: &'static str, expected: u64| -> Result<(), Error> {
            let found = g.metadata.get(key).and_then(|v| v.as_u64());
            if found != Some(expected) {
                return Err(Error::SplitInconsistent {
                    file: path.clone(),
                    key,
                    expected,
                    found,
                });
            }
            Ok(())
        };
        check(KEY_SPLIT_NO, no - 1)?;
        check(KEY_SPLIT_COUNT, count)?;
        let t = g
            .metadata
            .get(KEY_SPLIT_TENSORS_COUNT)
            .and_then(|v| v.as_u64());
        match (total_declared, t) {
            (None, Some(t)) => total_declared = Some(t),
            (Some(e), found) if found != Some(e) => {
                return Err(Error::SplitInconsistent {
                    file: path,
                    key: KEY_SPLIT_TENSORS_COUNT,
                    expected: e,
                    found,
                })
            }
            _ => {}
        }
        let index = files.len();
        for t in g.tensors {
            if !names.insert(t.name.clone()) {
                return Err(Error::DuplicateTensor {
                    file: path,
                    tensor: t.name,
                });
            }
            tensors.push(TensorInfo {
                name: t.name,
                ggml_type: t.ggml_type,
                dims: t.dims,
                file: index,
                offset: t.offset,
                size: t.size,
                transform: None,
            });
        }
        if metadata.is_none() {
            metadata = Some(g.metadata);
        }
        files.push(file);
    }
    let total = tensors.len() as u64;
    if total_declared != Some(total) {
        return Err(Error::SplitInconsistent {
            file: shard_path(&prefix, 1, count),
            key: KEY_SPLIT_TENSORS_COUNT,
            expected: total,
            found: total_declared,
        });
    }
    let mut metadata = metadata.unwrap_or_default();
    for k in [KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT] {
        metadata.remove(k);
    }
    Ok(Source {
        kind: SourceKind::Gguf,
        files,
        metadata,
        tensors,
        assets: Vec::new(),
    })
}

fn single(file: SourceFile, g: super::GgufFile) -> Source {
    let tensors = g
        .tensors
        .into_iter()
        .map(|t| TensorInfo {
            name: t.name,
            ggml_type: t.ggml_type,
            dims: t.dims,
            file: 0,
            offset: t.offset,
            size: t.size,
            transform: None,
        })
        .collect();
    Source {
        kind: SourceKind::Gguf,
        files: vec![file],
        metadata: g.metadata,
        tensors,
        assets: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names() {
        let (p, no, n) = split_name(Path::new("/d/m-f16-00002-of-00003.gguf")).unwrap();
        assert_eq!((p.as_path(), no, n), (Path::new("/d/m-f16"), 2, 3));
        assert_eq!(
            shard_path(&p, 1, 3),
            Path::new("/d/m-f16-00001-of-00003.gguf")
        );
        assert!(split_name(Path::new("m-00004-of-00003.gguf")).is_none());
        assert!(split_name(Path::new("m-0001-of-00003.gguf")).is_none());
        assert!(split_name(Path::new("m.gguf")).is_none());
        assert!(split_name(Path::new("m-00001-of-00003.bin")).is_none());
        assert!(split_name(Path::new("é-00001-of-0000é.gguf")).is_none());
    }
}
