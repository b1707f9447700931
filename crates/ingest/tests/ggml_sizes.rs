//! Cross-check of `gpack_format::ggml::GgmlType`'s block table against the `gguf`
//! Python package (0.19.0) `GGML_QUANT_SIZES`, dumped to
//! `testdata/ingest/gguf-0.19.0-ggml-quant-sizes.json` (name -> [id, block, bytes]).

use gpack_ingest::GgmlType;

use crate::common::testdata;

/// Where gguf-py and ggml's C headers disagree, the C layout (ggml-common.h) is what
/// files contain: `block_q8_1` is `{ggml_half d, s; int8_t qs[32]}` = 36 bytes, while
/// gguf-py still lists (32, 4 + 4 + 32) from the old float layout. No file stores Q8_1.
const KNOWN_DIFFERENT: [&str; 1] = ["Q8_1"];

/// Types gguf 0.19.0 knows that the table does not have: none.
const NOT_IN_TABLE: [&str; 0] = [];

#[test]
fn ggml_table_matches_gguf_py() {
    let text = std::fs::read_to_string(testdata().join("ingest/gguf-0.19.0-ggml-quant-sizes.json"))
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let map = json.as_object().unwrap();
    let mut different = vec![];
    for t in GgmlType::ALL {
        let e = map
            .get(t.name())
            .unwrap_or_else(|| panic!("{t} not in gguf-py"));
        let v: Vec<u64> = e
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(v[0], u64::from(t.id()), "{t} id");
        if (v[1], v[2]) != t.block() {
            different.push(t.name());
        }
    }
    assert_eq!(different, KNOWN_DIFFERENT);
    let mut missing: Vec<_> = map
        .keys()
        .filter(|k| GgmlType::from_name(k).is_none())
        .map(String::as_str)
        .collect();
    missing.sort();
    assert_eq!(missing, NOT_IN_TABLE.to_vec());
}
