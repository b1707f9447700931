//! Writes a GGUF holding only a PLE table (`per_layer_token_embd.weight`,
//! F16) of about `GB` gigabytes: `make_ple OUT.gguf GB`.

use gpack_ingest::{gguf::TensorHeader, gguf::Writer, GgmlType, GgufString, Metadata, Value};
use std::io::{BufWriter, Write};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let gb: f64 = a
        .get(2)
        .and_then(|s| s.parse().ok())
        .expect("usage: make_ple OUT.gguf GB");
    let ne0 = 8960u64; // 35 layers x 256, as Gemma 3n's per-layer embedding
    let rows = ((gb * 1e9) / (ne0 as f64 * 2.0)) as u64;
    let mut meta = Metadata::new();
    meta.insert(
        "general.architecture",
        Value::String(GgufString::from_bytes(b"ple-bench".to_vec())),
    );
    let h = [TensorHeader {
        name: "per_layer_token_embd.weight".into(),
        ggml_type: GgmlType::F16,
        dims: vec![ne0, rows],
    }];
    let f = BufWriter::with_capacity(8 << 20, std::fs::File::create(&a[1]).expect("create"));
    let mut w = Writer::new(f, &meta, &h).expect("writer");
    let row: Vec<u8> = (0..ne0)
        .flat_map(|i| half::f16::from_f32(i as f32 / 1e4).to_le_bytes())
        .collect();
    // The whole table in one write (the GGUF writer takes a tensor at once).
    let mut table = Vec::with_capacity(row.len() * rows as usize);
    for _ in 0..rows {
        table.extend_from_slice(&row);
    }
    w.write_tensor_data(&table).expect("write");
    w.finish().expect("finish").flush().expect("flush");
}
