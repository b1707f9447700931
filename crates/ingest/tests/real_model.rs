//! The real SmolLM2-135M-Instruct Q4_1 GGUF. Not skipped when absent: it is fetched
//! with `scripts/fetch-models.sh` (network needed on the first run only).

use std::io::Write;

use gpack_ingest::gguf::{TensorHeader, Writer};
use gpack_ingest::{GgmlType, Source};

use gpack_testkit::smollm2;

/// A writer that compares what it is given with the expected bytes.
struct Compare<'a> {
    want: &'a [u8],
    at: usize,
}

impl Write for Compare<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.at + buf.len();
        if self.want.get(self.at..end) != Some(buf) {
            return Err(std::io::Error::other(format!(
                "differs in bytes {}..{end}",
                self.at
            )));
        }
        self.at = end;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn smollm2_q4_1_opens_and_rewrites_byte_identically() {
    let s = Source::open(&smollm2()).unwrap();
    let m = &s.metadata;
    // As gguf-dump prints them.
    assert_eq!(s.tensors.len(), 272);
    assert_eq!(m.len(), 33);
    assert_eq!(s.architecture(), Some("llama"));
    assert_eq!(m.get_u32("llama.block_count"), Some(30));
    assert_eq!(m.get_u32("llama.context_length"), Some(8192));
    assert_eq!(m.get_u32("llama.embedding_length"), Some(576));
    assert_eq!(m.get_u32("llama.feed_forward_length"), Some(1536));
    assert_eq!(m.get_u32("llama.attention.head_count"), Some(9));
    assert_eq!(m.get_u32("llama.attention.head_count_kv"), Some(3));
    assert_eq!(m.get_f32("llama.rope.freq_base"), Some(100000.0));
    assert_eq!(m.get_u32("general.file_type"), Some(3));
    assert_eq!(m.get_str("tokenizer.ggml.pre"), Some("smollm"));
    assert_eq!(
        m.get_string_array("tokenizer.ggml.tokens").map(<[_]>::len),
        Some(49152)
    );
    assert_eq!(
        m.get_string_array("tokenizer.ggml.merges").map(<[_]>::len),
        Some(48900)
    );
    assert_eq!(
        m.get_string_array("general.languages")
            .map(|l| l[0].as_str()),
        Some(Some("en"))
    );
    let e = s.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (e.ggml_type, e.dims.as_slice()),
        (GgmlType::Q8_0, &[576u64, 49152][..])
    );
    let q = s.tensor("blk.29.attn_k.weight").unwrap();
    assert_eq!(
        (q.ggml_type, q.dims.as_slice()),
        (GgmlType::Q4_1, &[576u64, 192][..])
    );
    let count = |t| s.tensors.iter().filter(|x| x.ggml_type == t).count();
    assert_eq!(
        (
            count(GgmlType::Q4_1),
            count(GgmlType::F32),
            count(GgmlType::Q8_0)
        ),
        (210, 61, 1)
    );

    // Streaming re-write gives back the file, byte for byte.
    let bytes = s.files[0].bytes();
    let headers: Vec<TensorHeader> = s
        .tensors
        .iter()
        .map(|t| TensorHeader {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
        })
        .collect();
    let mut w = Writer::new(Compare { want: bytes, at: 0 }, m, &headers).unwrap();
    for t in &s.tensors {
        w.write_tensor_data(&s.tensor_bytes(t).unwrap()).unwrap();
    }
    let c = w.finish().unwrap();
    assert_eq!(c.at, bytes.len());
}
