//! `gpack imatrix` against llama-imatrix, and each tool's importance matrix
//! in the other (references: testdata/imatrix/make_references.sh, the
//! registry-built llama.cpp peer). See: issue 45, item 2.
//!
//! Tolerances (the two forward passes differ in kernels and summation
//! order; measured on these fixtures: dense in_sum2 9.4e-4, in_sum 5.9e-4,
//! expert counts 0.1 %, expert mean squares 1.9e-3):
//! * dense weights: counts equal; each `in_sum2` within 2e-3 relative; each
//!   `in_sum` within 2e-3 of the entry's largest |in_sum|;
//! * stacked experts: a token whose router scores nearly tie may go to
//!   another expert in one tool, so each expert's count is within 0.5 % and
//!   its mean squares (`in_sum2 / count`, what the quantizers use) within
//!   1e-2 relative L2.

use crate::gpack;
use gpack_ingest::imatrix::{Entry, Imatrix};
use gpack_ingest::Source;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/imatrix")
}

fn model(m: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/tiny/{m}/{m}-f16.gguf"))
}

/// `gpack imatrix MODEL -f text.txt -o OUT -c 512 EXTRA…`, which must succeed.
fn gpack_imatrix(model: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = gpack()
        .arg("imatrix")
        .arg(model)
        .arg("-f")
        .arg(dir().join("text.txt"))
        .arg("-o")
        .arg(out)
        .args(["-c", "512", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut d, mut n) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        d += (f64::from(*x) - f64::from(*y)).powi(2);
        n += f64::from(*y).powi(2);
    }
    (d / n.max(1e-300)).sqrt()
}

fn assert_close(name: &str, ours: &Entry, want: &Entry) {
    assert_eq!(ours.sums.len(), want.sums.len(), "{name}");
    assert_eq!(ours.counts.len(), want.counts.len(), "{name}");
    let (a, b) = (
        ours.activations.as_ref().unwrap(),
        want.activations.as_ref().unwrap(),
    );
    if want.counts.len() == 1 {
        assert_eq!(ours.counts, want.counts, "{name}: counts");
        for (i, (x, y)) in ours.sums.iter().zip(&want.sums).enumerate() {
            let rel = ((x - y) / y).abs();
            assert!(
                rel <= 2e-3,
                "{name}: in_sum2[{i}] {x} vs llama-imatrix {y} ({rel:.1e})"
            );
        }
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 2e-3 * scale,
                "{name}: in_sum[{i}] {x} vs {y}"
            );
        }
        return;
    }
    let cols = want.cols();
    for (e, (&c, &w)) in ours.counts.iter().zip(&want.counts).enumerate() {
        assert!(
            (c - w).abs() as f64 <= 0.005 * w as f64,
            "{name}: expert {e} count {c} vs llama-imatrix {w}"
        );
        let ms = |s: &[f32], c: i64| -> Vec<f32> {
            s[e * cols..(e + 1) * cols]
                .iter()
                .map(|v| v / c as f32)
                .collect()
        };
        let r = rel_l2(&ms(&ours.sums, c), &ms(&want.sums, w));
        assert!(r <= 1e-2, "{name}: expert {e} mean squares rel L2 {r:.1e}");
        let r = rel_l2(&ms(a, c), &ms(b, w));
        assert!(r <= 1e-2, "{name}: expert {e} mean inputs rel L2 {r:.1e}");
    }
}

/// `gpack imatrix` of the tiny llama and the tiny 4-expert qwen3moe over
/// the same text and context equals llama-imatrix's: the same entries
/// (q, k, v, output, gate, up, down; the router and each expert of the
/// stacked tensors), chunk count and size, and statistics within the
/// tolerances above.
#[test]
fn gpack_imatrix_equals_llama_imatrix() {
    let tmp = tempfile::tempdir().unwrap();
    for m in ["llama", "qwen3moe"] {
        let out = tmp.path().join(format!("{m}.imatrix"));
        let report = gpack_imatrix(&model(m), &out, &[]);
        assert_eq!(report["schema"], "gpack.imatrix.v1");
        assert_eq!(report["chunks"], 9);
        let ours = Imatrix::read(&out).unwrap();
        let want = Imatrix::read(&dir().join(format!("{m}-f16.imatrix"))).unwrap();
        assert_eq!((ours.chunk_count, ours.chunk_size), (9, 512));
        assert_eq!((want.chunk_count, want.chunk_size), (9, 512));
        let names = |i: &Imatrix| i.entries.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&ours), names(&want), "{m}: entries");
        for (name, w) in &want.entries {
            assert_close(name, &ours.entries[name], w);
        }
        if m == "qwen3moe" {
            assert_eq!(ours.entries["blk.1.ffn_down_exps.weight"].counts.len(), 4);
            assert!(ours.entries.contains_key("blk.0.ffn_gate_inp.weight"));
        }
    }
}

/// llama-imatrix's legacy .dat reads as its GGUF: the same entries and
/// weights (the .dat stores mean × ncall, so within f32 rounding); and
/// gpack's own --output-format dat reads back to its GGUF's weights.
#[test]
fn legacy_dat_files_read_as_their_gguf() {
    let check = |dat: &Imatrix, gguf: &Imatrix| {
        assert!(dat.legacy && !gguf.legacy);
        let (wd, wg) = (dat.weights(), gguf.weights());
        assert_eq!(wd.keys().collect::<Vec<_>>(), wg.keys().collect::<Vec<_>>());
        for (k, v) in &wg {
            for (x, y) in wd[k].iter().zip(v) {
                assert!((x - y).abs() <= 1e-6 * y.abs(), "{k}: {x} vs {y}");
            }
        }
    };
    let dat = Imatrix::read(&dir().join("llama-f16.imatrix.dat")).unwrap();
    assert_eq!(dat.chunk_count, 9);
    check(
        &dat,
        &Imatrix::read(&dir().join("llama-f16.imatrix")).unwrap(),
    );
    let tmp = tempfile::tempdir().unwrap();
    let (g, d) = (tmp.path().join("g.imatrix"), tmp.path().join("d.dat"));
    gpack_imatrix(&model("llama"), &g, &[]);
    gpack_imatrix(&model("llama"), &d, &["--output-format", "dat"]);
    check(&Imatrix::read(&d).unwrap(), &Imatrix::read(&g).unwrap());
}

/// gpack's importance matrix works in llama.cpp: `llama-quantize --imatrix
/// llama-f16.gpack.imatrix` (a `gpack imatrix` output) wrote
/// llama-f16-gpack-imatrix-Q4_0.gguf, and `gpack convert --quant Q4_0
/// --imatrix` of the same file writes the same blocks (exported back to
/// GGUF, tensor for tensor).
#[test]
fn llama_quantize_reads_gpack_imatrix_to_the_same_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let (pack, back) = (tmp.path().join("q.gpack"), tmp.path().join("q.gguf"));
    let o = gpack()
        .arg("convert")
        .arg(model("llama"))
        .arg("-o")
        .arg(&pack)
        .args(["--quant", "Q4_0", "--json", "--imatrix"])
        .arg(dir().join("llama-f16.gpack.imatrix"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["imatrix"], "llama-f16.gpack.imatrix");
    // Q4_0 is 4.5 bits per weight, the Q8_0 head 8.5: (131072·4.5 + 131072·8.5
    // + 73728·4.5) / 335872 = 6.06, plus each tensor's 64-byte header.
    let w = report["weights_bits_per_weight"].as_f64().unwrap();
    assert!((6.06..6.3).contains(&w), "weights_bits_per_weight {w}");
    let f = report["bits_per_weight"].as_f64().unwrap();
    // The whole file: also the tokenizer, metadata and page padding.
    assert!(f > w, "bits_per_weight {f}");
    // inspect: the mix and the matrix it was made with, each tensor's stored type.
    let o = gpack()
        .arg("inspect")
        .arg(&pack)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["manifest"]["convert"]["quant"], "Q4_0");
    assert_eq!(
        v["manifest"]["convert"]["imatrix"],
        "llama-f16.gpack.imatrix"
    );
    let t = |name: &str| {
        let all = v["tensors"].as_array().unwrap();
        let e = all.iter().find(|e| e["name"] == name).unwrap();
        (e["type"].clone(), e["stored_type"].clone())
    };
    assert_eq!(t("blk.0.attn_q.weight"), ("F16".into(), "Q4_0".into()));
    assert_eq!(t("output.weight"), ("F16".into(), "Q8_0".into()));
    assert_eq!(t("blk.0.attn_norm.weight"), ("F32".into(), "F32".into()));
    let o = gpack().arg("inspect").arg(&pack).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("quant:     Q4_0 (llama-quantize mix"),
        "{text}"
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
    let want = Source::open(&dir().join("llama-f16-gpack-imatrix-Q4_0.gguf")).unwrap();
    let mut quantized = 0;
    for w in &want.tensors {
        let t = ours
            .tensor(&w.name)
            .unwrap_or_else(|| panic!("{} not exported", w.name));
        assert_eq!(t.ggml_type, w.ggml_type, "{}", w.name);
        assert!(
            ours.tensor_bytes(t).unwrap() == want.tensor_bytes(w).unwrap(),
            "{}: blocks differ from llama-quantize's",
            w.name
        );
        quantized += usize::from(w.ggml_type == gpack_ingest::GgmlType::Q4_0);
    }
    // Every block matrix (14, all with weights) and the embedding.
    assert_eq!(quantized, 15, "Q4_0 tensors");
}

/// Too little text for two chunks, or a context under 16 tokens: a clear
/// error and no output.
#[test]
fn too_short_a_text_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.imatrix");
    for (c, want) in [("4096", "at least 8192"), ("8", "at least 16")] {
        let o = gpack()
            .arg("imatrix")
            .arg(model("llama"))
            .arg("-f")
            .arg(dir().join("text.txt"))
            .arg("-o")
            .arg(&out)
            .args(["-c", c])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "{err}");
        assert!(!out.exists());
    }
}
