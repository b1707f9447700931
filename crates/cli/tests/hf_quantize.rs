//! HF safetensors (bf16) → Q4_K_M in one `gpack convert`, block for block
//! what llama.cpp's two steps write: `convert_hf_to_gguf.py --outtype bf16`
//! then `llama-quantize … Q4_K_M` (their tensors' sha256 in
//! testdata/quantize/hf-<model>-Q4_K_M.sha256, made once by
//! make_hf_references.sh: torch stays out of CI). Covers the HF path's
//! names, q/k permutation, bf16 values and the mix. See: issue 45.

use crate::gpack;
use gpack_ingest::Source;
use sha2::{Digest, Sha256};
use std::path::Path;

#[test]
fn hf_safetensors_to_q4_k_m_equals_convert_hf_to_gguf_and_llama_quantize() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let tmp = tempfile::tempdir().unwrap();
    // qwen3 ties its output to the embedding: one matrix fewer.
    for (m, matrices) in [("llama", 16), ("qwen3", 15)] {
        let (pack, back) = (
            tmp.path().join(format!("{m}.gpack")),
            tmp.path().join(format!("{m}.gguf")),
        );
        let o = gpack()
            .arg("convert")
            .arg(root.join(format!("tiny/{m}/hf")))
            .arg("-o")
            .arg(&pack)
            .args(["--quant", "Q4_K_M"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("Q4_K_M: ") && stdout.contains("bits per weight (file)"),
            "{stdout}"
        );
        let o = gpack()
            .arg("export")
            .arg(&pack)
            .arg("-o")
            .arg(&back)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ours = Source::open(&back).unwrap();
        let refs =
            std::fs::read_to_string(root.join(format!("quantize/hf-{m}-Q4_K_M.sha256"))).unwrap();
        let mut checked = 0;
        for line in refs.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let (name, ty, sha) = (f[0], f[1], f[2]);
            if ty == "F32" {
                // Norms: convert_hf_to_gguf.py writes them as F32, gpack keeps
                // the source's bf16 (the same values); not quantized.
                continue;
            }
            let t = ours
                .tensor(name)
                .unwrap_or_else(|| panic!("{m}: {name} missing"));
            assert_eq!(t.ggml_type.name(), ty, "{m}: {name}");
            let got = hex::encode(Sha256::digest(&*ours.tensor_bytes(t).unwrap()));
            assert_eq!(got, sha, "{m}: {name} ({ty}) differs from llama-quantize's");
            checked += 1;
        }
        // Every matrix: 2 layers × 7, the embedding and the output.
        assert_eq!(checked, matrices, "{m}");
    }
}
