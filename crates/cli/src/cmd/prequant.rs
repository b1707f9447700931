//! `gpack prequant`: GGUF / safetensors / HF directory → one prequantized
//! `.giw` bundle (docs/GIW.md), streamed one tensor at a time.

use anyhow::{Context, Result};
use gpack_convert::giw::{prequant, PrequantOptions};
use gpack_convert::Quant;
use gpack_format::giw::Target;
use std::path::PathBuf;
use std::process::ExitCode;

/// Prequantize a model into a .giw bundle (weights stored already quantized,
/// aliased from the mapped file at load).
///
/// The quant is baked in: a bundle built with --quant int8int8 is an int8int8
/// model, and loading it with another quant is an error. Build one bundle per
/// quant. Tensors are read, quantized, written and freed one at a time (peak
/// memory: about the largest tensor plus a fixed budget), into
/// `.<OUT>.gpack-tmp.<pid>.<n>`, which is checked and renamed into place.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  gpack prequant SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.giw
  gpack prequant ./hf_model_dir -o model.giw --quant int4 --target metal --json")]
pub struct Args {
    /// The source model: a GGUF file, a safetensors file or index, or an HF directory.
    src: PathBuf,
    /// The .giw to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Weight quantization, the same words as `gpack convert`: keep, int8,
    /// int8int8 (int8's layouts; the label loaders ask for), int4. Exact
    /// layouts in a .giw are the row-major split layouts (docs/GIW.md). A
    /// matrix already at the asked precision (Q8_0, Q5_0 for int8; Q4_0,
    /// Q4_1, Q4_K for int4), an embedding table, or one whose columns are not
    /// a multiple of 32 is stored exactly instead of re-quantized.
    #[arg(long, default_value = "int8int8", value_parser = super::quant_parser())]
    quant: Quant,
    /// cpu (weights format 12) or metal (fused q‖k‖v / gate‖up groups and f16
    /// scales, weights format 14).
    #[arg(long, default_value = "cpu")]
    target: Target,
    /// Replace an existing output.
    #[arg(long)]
    force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Weights format to write (12, 13 or 14; default: the target's). For
    /// compatibility fixtures.
    #[arg(long, hide = true)]
    weights_format: Option<u16>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<ExitCode> {
    let opts = PrequantOptions {
        quant: a.quant,
        target: a.target,
        weights_version: a.weights_format,
        force: a.force,
        resident: false,
    };
    let r = prequant(&a.src, &a.output, &opts)
        .with_context(|| format!("prequantizing {}", a.src.display()))?;
    if a.json {
        super::print_json(&serde_json::to_value(&r)?)?;
    } else {
        eprintln!(
            "wrote {} ({} bytes, weights format v{}, quant {}, target {}): {} records, {} fused groups, {} with f16 scales, {} matrices quantized, in {:.2} s",
            r.path.display(),
            r.bytes,
            r.weights_version,
            r.quant,
            r.target,
            r.records,
            r.fused_groups,
            r.f16_scale_tensors,
            r.quantized,
            r.seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use gpack_convert::giw::{
        ensure_sidecar, prequant, sidecar_for, PrequantOptions, SidecarStatus, StaleSidecar,
    };
    use gpack_convert::{convert, ConvertOptions, Quant};
    use gpack_format::giw::Target;
    use gpack_runtime::giw::GiwWeights;
    use gpack_runtime::{GgufWeights, GpackWeights, Logits, Model, WeightSource};
    use std::path::{Path, PathBuf};

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    fn logits(w: &dyn WeightSource) -> Vec<f32> {
        let m = Model::load(w).expect("load");
        let mut s = m.new_state(64);
        m.forward(&mut s, &[1, 5, 9, 13, 2, 7], Logits::All)
            .expect("forward")
            .to_vec()
    }

    /// Relative L2 distance of `a` from `b`.
    fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
        (num / den).sqrt()
    }

    /// A GIW "keep" bundle holds the row-major split layouts (GIW v12–v14),
    /// the .gguf and .gpack the row-interleaved ggml blocks (the same
    /// values; their kernels round each block's sum once, the row-major
    /// kernels per 8 lanes): near, not equal. Float tensors (f16) run the
    /// same float kernels in both and stay equal.
    fn assert_giw_close(got: &[f32], want: &[f32], what: &str) {
        let d = rel_l2(got, want);
        eprintln!("{what}: rel L2 {d:.2e} from the .gguf");
        assert!(d < 0.02, "{what}: rel L2 {d}");
    }

    fn giw(src: &Path, dir: &Path, quant: Quant, target: Target, tag: &str) -> PathBuf {
        let out = dir.join(format!("{tag}.giw"));
        let opts = PrequantOptions {
            quant,
            target,
            ..Default::default()
        };
        prequant(src, &out, &opts).expect("prequant");
        out
    }

    fn gpack(src: &Path, dir: &Path, quant: Quant, tag: &str) -> PathBuf {
        let out = dir.join(format!("{tag}.gpack"));
        convert(
            &ConvertOptions {
                source: src.to_path_buf(),
                output: out.clone(),
                name: None,
                quant,
                force: true,
                ..Default::default()
            },
            &(),
        )
        .expect("convert");
        out
    }

    /// Same model: .gguf (GgufWeights) and .gpack (GpackWeights) give
    /// identical logits (the same canonical layout), .giw (GiwWeights, cpu
    /// and metal) the same for f16 and near for quantized types (see
    /// `assert_giw_close`).
    #[test]
    fn giw_gguf_gpack_same_logits_keep() {
        let dir = tempfile::tempdir().unwrap();
        for (arch, file) in [
            ("llama", "llama-q8_0.gguf"),
            ("llama", "llama-f16.gguf"),
            ("qwen3", "qwen3-q8_0.gguf"),
        ] {
            let src = repo().join("testdata/tiny").join(arch).join(file);
            let want = logits(&GgufWeights::open(&src).unwrap());
            let g = gpack(&src, dir.path(), Quant::Keep, file);
            assert_eq!(
                logits(&GpackWeights::open(&g).unwrap()),
                want,
                "{file} gpack"
            );
            for t in [Target::Cpu, Target::Metal] {
                let p = giw(&src, dir.path(), Quant::Keep, t, &format!("{file}{t:?}"));
                let w = GiwWeights::open(&p, Some("keep")).unwrap();
                assert_eq!(w.copied_payloads(), 0);
                if file.contains("f16") {
                    assert!(logits(&w) == want, "{file} giw {t:?}");
                } else {
                    assert_giw_close(&logits(&w), &want, &format!("{file} giw {t:?}"));
                }
            }
        }
    }

    /// int8 quantization: the .gpack and the .giw quantize the same way.
    #[test]
    fn giw_gpack_same_logits_int8_from_f16() {
        let dir = tempfile::tempdir().unwrap();
        let src = repo().join("testdata/tiny/llama/llama-f16.gguf");
        let g = gpack(&src, dir.path(), Quant::Int8, "i8");
        let want = logits(&GpackWeights::open(&g).unwrap());
        let p = giw(&src, dir.path(), Quant::Int8, Target::Cpu, "i8");
        let w = GiwWeights::open(&p, Some("int8")).unwrap();
        assert!(logits(&w) == want, "int8 logits differ");
        let e = GiwWeights::open(&p, Some("int8int8")).unwrap_err();
        assert!(e.to_string().contains("fixed when it is built"), "{e}");
    }

    /// HF safetensors source: same logits as the HF directory via GgufWeights.
    #[test]
    fn giw_from_hf_matches() {
        let dir = tempfile::tempdir().unwrap();
        let src = repo().join("testdata/tiny/llama/hf");
        let want = logits(&GgufWeights::open(&src).unwrap());
        let p = giw(&src, dir.path(), Quant::Keep, Target::Cpu, "hf");
        assert!(logits(&GiwWeights::open(&p, None).unwrap()) == want);
    }

    /// Streamed and resident builds are byte-identical, for every quant and
    /// target, from GGUF and safetensors.
    #[test]
    fn giw_streamed_equals_resident() {
        let dir = tempfile::tempdir().unwrap();
        for src in [
            repo().join("testdata/tiny/llama/llama-q8_0.gguf"),
            repo().join("testdata/tiny/llama/hf-sharded"),
        ] {
            for quant in [Quant::Keep, Quant::Int8Int8, Quant::Int4] {
                for target in [Target::Cpu, Target::Metal] {
                    let mut bytes = Vec::new();
                    for resident in [false, true] {
                        let out = dir.path().join(format!("r{resident}.giw"));
                        let opts = PrequantOptions {
                            quant,
                            target,
                            force: true,
                            resident,
                            ..Default::default()
                        };
                        prequant(&src, &out, &opts).unwrap();
                        bytes.push(std::fs::read(&out).unwrap());
                    }
                    assert!(bytes[0] == bytes[1], "{src:?} {quant:?} {target:?}");
                }
            }
        }
    }

    #[test]
    fn sidecar_built_reused_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("m.gguf");
        std::fs::copy(repo().join("testdata/tiny/llama/llama-q8_0.gguf"), &src).unwrap();
        let side = sidecar_for(&src, Quant::Int4, Target::Cpu);
        assert_eq!(side, dir.path().join("m.int4.cpu.giw"));
        let (p, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert_eq!(p, side);
        assert!(matches!(s, SidecarStatus::Built), "{s:?}");
        let before = std::fs::read(&p).unwrap();
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        let (_, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(matches!(s, SidecarStatus::Reused), "{s:?}");
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), mtime);
        // Corrupt one byte: reported and rebuilt.
        let mut bad = before.clone();
        bad[200] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let (_, s) = ensure_sidecar(&src, Quant::Int4, Target::Cpu).unwrap();
        assert!(
            matches!(
                &s,
                SidecarStatus::Rebuilt {
                    reason: StaleSidecar::Invalid(gpack_format::giw::Error::Crc { .. })
                }
            ),
            "{s:?}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), before);
    }

    fn smollm2() -> Option<PathBuf> {
        let cache = std::env::var_os("GPACK_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/gpack")));
        cache
            .map(|c| c.join("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
            .filter(|p| p.exists())
    }

    /// SmolLM2 (Q4_1) with --quant keep: the metal bundle (v14: fused q‖k‖v
    /// and gate‖up groups, f16 scales) and the cpu bundle (v12) give the
    /// GGUF's logits bit for bit. Skipped when SmolLM2 is absent.
    #[test]
    fn giw_smollm2_keep_matches_gguf() {
        let Some(src) = smollm2() else {
            eprintln!("skipped: SmolLM2 not found (bash scripts/fetch-models.sh)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let want = logits(&GgufWeights::open(&src).unwrap());
        for t in [Target::Cpu, Target::Metal] {
            let p = giw(&src, dir.path(), Quant::Keep, t, &format!("{t:?}"));
            let w = GiwWeights::open(&p, Some("keep")).unwrap();
            let groups = w
                .giw()
                .records()
                .iter()
                .filter(|r| r.kind == gpack_format::giw::RecordKind::Group)
                .count();
            let f16 = w
                .giw()
                .records()
                .iter()
                .filter(|r| r.native_flags & 1 != 0)
                .count();
            eprintln!("SmolLM2 keep {t:?}: {groups} fused groups, {f16} tensors with f16 scales");
            if t == Target::Metal {
                assert!(groups > 0 && f16 > 0);
                assert!(matches!(
                    w.giw().fused(&[
                        "blk.0.attn_q.weight",
                        "blk.0.attn_k.weight",
                        "blk.0.attn_v.weight"
                    ]),
                    gpack_format::giw::Fused::Contiguous { .. }
                ));
            }
            assert_giw_close(&logits(&w), &want, &format!("SmolLM2 keep {t:?}"));
        }
    }

    fn rss_anon_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// Heap check (issue 5): loading a .giw (GiwWeights::open, then
    /// Model::load) grows anonymous memory by at most 5 % of the weight
    /// bytes. SmolLM2 (scripts/fetch-models.sh); skipped when absent. The load
    /// runs in a child process so other tests' allocations do not interfere.
    #[test]
    fn giw_load_heap_under_5_percent() {
        if let Ok(p) = std::env::var("GIW_HEAP_CHILD") {
            let before = rss_anon_kib();
            let w = GiwWeights::open(Path::new(&p), Some("int8int8")).unwrap();
            let open = rss_anon_kib();
            let m = Model::load(&w).unwrap();
            let load = rss_anon_kib();
            println!(
                "GIW_HEAP {before} {open} {load} {} {}",
                w.giw().weight_bytes(),
                w.copied_payloads()
            );
            drop(m);
            return;
        }
        let Some(src) = smollm2() else {
            eprintln!("skipped: SmolLM2 not found (bash scripts/fetch-models.sh)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let p = giw(&src, dir.path(), Quant::Int8Int8, Target::Cpu, "smol");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cmd::prequant::tests::giw_load_heap_under_5_percent",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GIW_HEAP_CHILD", &p)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        let v: Vec<u64> = stdout
            .lines()
            .find_map(|l| l.split_once("GIW_HEAP ").map(|(_, v)| v))
            .unwrap_or_else(|| panic!("child did not report: {stdout}"))
            .split_whitespace()
            .take(5)
            .map(|x| x.parse().unwrap())
            .collect();
        let (before, open, load, weights, copied) = (v[0], v[1], v[2], v[3], v[4]);
        eprintln!(
            "SmolLM2 int8int8 .giw: weights {:.1} MiB; RssAnon +{} KiB after open, +{} KiB after Model::load ({:.2} %); {copied} payloads copied",
            weights as f64 / 1048576.0,
            open.saturating_sub(before),
            load.saturating_sub(before),
            load.saturating_sub(before) as f64 * 1024.0 * 100.0 / weights as f64
        );
        assert_eq!(copied, 0);
        assert!(load.saturating_sub(before) * 1024 * 20 <= weights);
    }
}
