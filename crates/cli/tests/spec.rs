//! Speculative decoding from the command line: a draft model packed into
//! the .gpack (`convert --draft`) drafts by default and gives the plain
//! text; full verify catches a damaged Mtp section; a draft with another
//! vocabulary is refused at convert; wrong flag combinations are errors.

use crate::gpack;
use gpack_testkit::root;
use std::path::Path;

fn tiny(name: &str) -> std::path::PathBuf {
    root().join("testdata/tiny").join(name)
}

/// `gpack run` greedy on `model` with extra flags: (exit ok, stdout, stderr).
fn run(model: &Path, extra: &[&str]) -> (bool, String, String) {
    let o = gpack()
        .arg("run")
        .arg(model)
        .args([
            "-p",
            "one two three one two three one two",
            "-n",
            "40",
            "--verbose",
        ])
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `gpack convert MODEL -o OUT --json [--draft D]`, which must succeed:
/// its report and the report's `mtp` section.
fn convert_json(
    model: &Path,
    out: &Path,
    draft: &[&Path],
) -> (serde_json::Value, serde_json::Value) {
    let mut c = gpack();
    c.arg("convert").arg(model).arg("-o").arg(out).arg("--json");
    for d in draft {
        c.arg("--draft").arg(d);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mtp = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "mtp")
        .cloned()
        .unwrap_or_else(|| panic!("no mtp section: {report}"));
    (report, mtp)
}

#[test]
fn a_packed_draft_drafts_by_default_and_keeps_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama-with-draft.gpack");
    let draft = tiny("llama/llama-q8_0.gguf");
    let (_, mtp) = convert_json(&tiny("llama/llama-f16.gguf"), &out, &[&draft]);
    assert!(mtp["items"].as_u64().unwrap() > 0, "{mtp}");

    let (ok, plain, err) = run(&out, &["--spec", "none"]);
    assert!(ok, "{err}");
    assert!(err.contains("speculation: none"), "{err}");
    let (ok, spec, err) = run(&out, &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains("speculation: draft,"),
        "the packed draft is the default: {err}"
    );
    assert_eq!(spec, plain, "the packed draft changed the text");
    let (ok, ngram, err) = run(&out, &["--spec", "ngram"]);
    assert!(ok, "{err}");
    assert_eq!(ngram, plain);

    let o = gpack().arg("inspect").arg(&out).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("draft:     llama model, 21 tensors"),
        "{text}"
    );

    // The Mtp section is hashed like every section: flip one byte of it.
    let o = gpack().arg("verify").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = gpack()
        .arg("inspect")
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sec = info["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == 13)
        .unwrap_or_else(|| panic!("no section of kind 13 (mtp): {info}"));
    let at = sec["offset"].as_u64().unwrap() + sec["size"].as_u64().unwrap() / 2;
    let mut bytes = std::fs::read(&out).unwrap();
    bytes[at as usize] ^= 0x40;
    std::fs::write(&out, &bytes).unwrap();
    let o = gpack().arg("verify").arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(text.contains("mtp"), "the damaged section is named: {text}");
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad.gpack");
    let o = gpack()
        .arg("convert")
        .arg(tiny("llama/llama-f16.gguf"))
        .arg("--draft")
        .arg(tiny("gemma3/gemma3-f16.gguf"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("vocabulary differs") && err.contains("tokenizer"),
        "{err}"
    );
    assert!(!out.exists(), "no output after a refused draft");
    // At run time too (--draft FILE).
    let (ok, _, err) = run(
        &tiny("llama/llama-f16.gguf"),
        &["--draft", tiny("gemma3/gemma3-f16.gguf").to_str().unwrap()],
    );
    assert!(!ok);
    assert!(err.contains("another vocabulary"), "{err}");
}

#[test]
fn speculation_flags_are_checked() {
    let m = tiny("llama/llama-f16.gguf");
    let (ok, _, err) = run(&m, &["--spec", "draft"]);
    assert!(!ok);
    assert!(err.contains("needs a draft model"), "{err}");
    let q8 = tiny("llama/llama-q8_0.gguf");
    let (ok, _, err) = run(&m, &["--spec", "ngram", "--draft", q8.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("only used with --spec draft"), "{err}");
    let (ok, _, err) = run(&m, &["--draft-max", "0"]);
    assert!(!ok);
    assert!(err.contains("draft length"), "{err}");
    // --draft FILE at run time: the text of plain decoding.
    let (ok, plain, err) = run(&m, &["--spec", "none"]);
    assert!(ok, "{err}");
    let (ok, spec, err) = run(&m, &["--draft", q8.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(err.contains("speculation: draft,"), "{err}");
    assert_eq!(spec, plain);
}

/// `--spec mtp` drafts with the model's multi-token-prediction block (the
/// tiny GLM-4.7-Flash fixture, from its GGUF and its .gpack) and prints the
/// text of `--spec none`; a model without a block is refused with its
/// path named, exit 1, by `run` and `serve`.
#[test]
fn spec_mtp_drafts_with_the_models_block_and_keeps_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = tiny("glm4-mtp/glm4-mtp-f16.gguf");
    let packed = dir.path().join("glm4-mtp.gpack");
    // The block is in the Mtp section; verify hashes it; inspect says so.
    let (report, mtp) = convert_json(&gguf, &packed, &[]);
    let source = gpack_ingest::Source::open(&gguf).unwrap();
    let block: Vec<&str> = source
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| n.starts_with("blk.4."))
        .collect();
    assert!(block.contains(&"blk.4.nextn.eh_proj.weight"), "{block:?}");
    assert_eq!(mtp["items"].as_u64(), Some(block.len() as u64), "{mtp}");
    assert!(
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["name"].as_str().unwrap().starts_with("blk.4.")),
        "a block tensor among the trunk's"
    );
    let o = gpack().arg("verify").arg(&packed).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = gpack().arg("inspect").arg(&packed).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("mtp:       1 multi-token-prediction block(s) after layer 4"),
        "{text}"
    );
    // A draft model cannot take the block's place.
    let o = gpack()
        .arg("convert")
        .arg(&gguf)
        .arg("--draft")
        .arg(&gguf)
        .arg("-o")
        .arg(dir.path().join("refused.gpack"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("its own multi-token-prediction block"),
        "{err}"
    );
    assert!(!dir.path().join("refused.gpack").exists());
    for model in [&gguf, &packed] {
        let (ok, plain, err) = run(model, &["--spec", "none"]);
        assert!(ok, "{err}");
        let (ok, spec, err) = run(model, &["--spec", "mtp", "--draft-p-min", "0"]);
        assert!(ok, "{err}");
        assert_eq!(
            spec,
            plain,
            "{}: --spec mtp changed the text",
            model.display()
        );
        let line = err
            .lines()
            .find(|l| l.starts_with("speculation: mtp"))
            .unwrap_or_else(|| panic!("no speculation line: {err}"));
        let drafted: u64 = line
            .split(", ")
            .nth(1)
            .and_then(|s| s.strip_suffix(" drafted"))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(drafted > 0, "{line}");
    }
    let llama = tiny("llama/llama-f16.gguf");
    let o = gpack()
        .arg("run")
        .arg(&llama)
        .args(["-p", "hi", "-n", "4", "--spec", "mtp"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("multi-token-prediction block") && err.contains("llama-f16.gguf"),
        "{err}"
    );
    let o = gpack()
        .arg("serve")
        .arg(&llama)
        .args(["--spec", "mtp", "--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("multi-token-prediction block"), "{err}");
}
