//! Every ggml weight type a user downloads, end to end (issue 13's "Tests"):
//! a tiny GGUF of each type (`testdata/quant-types/`, made by llama.cpp's
//! `llama-quantize --pure` from one F32 master by
//! `testdata/scripts/30_make_quant_type_fixtures.sh`) converts with
//! `--quant keep`, passes the full `gpack verify`, runs, and gives the same
//! greedy text from the .gguf and from the .gpack; the .gpack's weights take
//! at most 1.02× the GGUF's bytes.
//!
//! The size is compared on the weights (the payloads of the .gpack's weight
//! sections against the GGUF's tensor data), not on the whole files: a
//! .gpack also holds its compiled tokenizer (`tokenizer_bin`, 148 KB here)
//! and page-aligns its sections (up to 4 KiB each), which is nothing on a
//! real model (0.02 % of a 1B) but 3–35 % of these 0.4–4.5 MB files, so the
//! whole-file ratio (printed too) could not reach 1.02 even with every
//! layout compact.
//!
//! The two lists below are what does not hold yet. A type on a list must
//! still fail that check (the test says which entry to remove once it
//! passes), and every other check still applies to it.

use crate::gpack;
use gpack_format::SectionKind;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Every type of issue 13, one fixture each: `tiny-llama-256-<TYPE>.gguf`.
const TYPES: &[&str] = &[
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
    "IQ4_XS", "MXFP4", "F16", "BF16", "F32",
];

/// Types whose weights are still stored in more than 1.02× the GGUF's bytes
/// (`convert --quant keep` widens them: measured ratios in the comments).
/// Remove an entry when its compact native layout lands.
const SIZE_NOT_YET_COMPACT: &[&str] = &[];

/// Types gpack cannot decode yet (no dequantization/kernel: the conversion
/// or the run fails). Remove an entry when its layout lands.
const NOT_YET_DECODABLE: &[&str] = &[];

const MAX_RATIO: f64 = 1.02;

fn fixture(t: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/quant-types")
        .join(format!("tiny-llama-256-{t}.gguf"))
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `gpack run MODEL` greedy (the default `--temp 0`), 16 tokens.
fn run(model: &Path) -> Output {
    gpack()
        .arg("run")
        .arg(model)
        .args(["-p", "The quick brown fox", "-n", "16", "--ctx", "64"])
        .args(["--temp", "0"])
        .output()
        .unwrap()
}

/// The `generated N tokens` count of a run's summary line.
fn generated(o: &Output) -> Option<u32> {
    let err = String::from_utf8_lossy(&o.stderr);
    let i = err.find("generated ")?;
    err[i + "generated ".len()..]
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The fixture holds what its name says: every matrix in `t`, the 1-D norm
/// weights in F32 (llama-quantize never quantizes those).
fn check_tensor_types(t: &str, gguf: &Path) -> Result<(), String> {
    let bytes = std::fs::read(gguf).map_err(|e| format!("{}: {e}", gguf.display()))?;
    let f = gpack_ingest::gguf::parse(&bytes).map_err(|e| e.to_string())?;
    for x in &f.tensors {
        let want = if x.dims.len() == 1 { "F32" } else { t };
        let got = format!("{:?}", x.ggml_type);
        if got != want {
            return Err(format!("{} is {got}, not {want}", x.name));
        }
    }
    Ok(())
}

/// Sections that hold weights (their payloads, without alignment padding).
const WEIGHT_SECTIONS: &[SectionKind] = &[
    SectionKind::DensePack,
    SectionKind::NativeDense,
    SectionKind::Embed,
    SectionKind::Head,
    SectionKind::Ple,
    SectionKind::ExpertBlobs,
    SectionKind::Mtp,
];

/// (weight bytes, tokenizer_bin bytes) of a .gpack.
fn gpack_bytes(p: &Path) -> (u64, u64) {
    let g = gpack_format::Gpack::open(p).unwrap();
    let size = |k: SectionKind| g.section(k).map_or(0, |s| s.bytes.len() as u64);
    (
        WEIGHT_SECTIONS.iter().map(|&k| size(k)).sum(),
        size(SectionKind::TokenizerBin),
    )
}

/// The bytes of a GGUF's tensor data (without its alignment padding).
fn gguf_weight_bytes(p: &Path) -> u64 {
    let bytes = std::fs::read(p).unwrap();
    let f = gpack_ingest::gguf::parse(&bytes).unwrap();
    f.tensors.iter().map(|t| t.size).sum()
}

/// Runs every check on one type; the messages of those that fail.
fn check(t: &str, dir: &Path) -> Vec<String> {
    let mut fails = Vec::new();
    let gguf = fixture(t);
    // A missing fixture is a failure, never a skip.
    assert!(gguf.is_file(), "missing fixture {}", gguf.display());
    if let Err(e) = check_tensor_types(t, &gguf) {
        fails.push(format!("fixture: {e}"));
    }
    let decodable = !NOT_YET_DECODABLE.contains(&t);
    let out = dir.join(format!("{t}.gpack"));
    let conv = gpack()
        .arg("convert")
        .arg(&gguf)
        .args(["--quant", "keep", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let mut runs_agree = false;
    if conv.status.success() {
        let v = gpack().arg("verify").arg(&out).output().unwrap();
        if !v.status.success() {
            fails.push(format!("verify: {}", text(&v)));
        }
        let (a, b) = (run(&gguf), run(&out));
        let ok = |o: &Output| o.status.success() && generated(o).is_some_and(|n| n > 0);
        runs_agree = ok(&a) && ok(&b) && generated(&a) == generated(&b) && a.stdout == b.stdout;
        if decodable && !runs_agree {
            fails.push(format!(
                "the runs differ or fail:\n.gguf {}\n.gpack {}",
                text(&a),
                text(&b)
            ));
        }
        let (gs, ps) = (
            std::fs::metadata(&gguf).unwrap().len(),
            std::fs::metadata(&out).unwrap().len(),
        );
        let (gw, (pw, tok)) = (gguf_weight_bytes(&gguf), gpack_bytes(&out));
        let ratio = pw as f64 / gw as f64;
        eprintln!(
            "{t:7} weights: gguf {gw:8} B, gpack {pw:8} B, ratio {ratio:.3} · files: gguf {gs:8} B, \
             gpack {ps:8} B ({tok} B tokenizer_bin), ratio {:.3} · runs agree: {runs_agree} {:?}",
            ps as f64 / gs as f64,
            String::from_utf8_lossy(&b.stdout).trim_end()
        );
        let compact = ratio <= MAX_RATIO;
        match (compact, SIZE_NOT_YET_COMPACT.contains(&t)) {
            (false, false) => fails.push(format!(
                "the .gpack's weights take {ratio:.3}× the GGUF's ({pw} vs {gw} bytes), over {MAX_RATIO}×"
            )),
            (true, true) => fails.push(format!(
                "the .gpack's weights take {ratio:.3}× the GGUF's: remove {t} from SIZE_NOT_YET_COMPACT"
            )),
            _ => {}
        }
    } else {
        eprintln!("{t:7} convert failed: {}", text(&conv).replace('\n', " | "));
        if decodable {
            fails.push(format!("convert: {}", text(&conv)));
        }
        // A conversion that fails cannot show the size; the list must say so.
        if !SIZE_NOT_YET_COMPACT.contains(&t) {
            fails.push("convert failed, so the size is unknown".into());
        }
    }
    if !decodable && runs_agree {
        fails.push(format!(
            "converts and runs like its GGUF: remove {t} from NOT_YET_DECODABLE"
        ));
    }
    fails
}

#[test]
fn every_quant_type_converts_verifies_and_runs_like_its_gguf() {
    for t in SIZE_NOT_YET_COMPACT.iter().chain(NOT_YET_DECODABLE) {
        assert!(TYPES.contains(t), "{t} is not in TYPES");
    }
    let dir = tempfile::tempdir().unwrap();
    let fails: Vec<String> = TYPES
        .iter()
        .flat_map(|t| {
            check(t, dir.path())
                .into_iter()
                .map(move |f| format!("{t}: {f}"))
        })
        .collect();
    assert!(fails.is_empty(), "{}", fails.join("\n\n"));
}
