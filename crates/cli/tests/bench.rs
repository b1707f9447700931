//! `gpack bench`: the llama-bench shape (pp / tg tokens/s over repetitions)
//! on the tiny llama fixture, in JSON.

use crate::gpack;
use std::path::Path;

#[test]
fn bench_reports_pp_and_tg_with_the_read_bandwidth_and_int8_peak_shares() {
    let gguf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf");
    let o = gpack()
        .arg("bench")
        .arg(&gguf)
        .args(["-p", "16", "-n", "8", "-r", "2", "--kv-k", "q8_0", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // llama-bench's names for the KV cache's types.
    assert_eq!(
        (v["type_k"].as_str(), v["type_v"].as_str()),
        (Some("q8_0"), Some("f16"))
    );
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 2, "{v}");
    assert_eq!(
        (tests[0]["test"].as_str(), tests[1]["test"].as_str()),
        (Some("pp16"), Some("tg8"))
    );
    for t in tests {
        let s = t["samples_ts"].as_array().unwrap();
        assert_eq!(s.len(), 2, "{t}");
        assert!(s.iter().all(|x| x.as_f64().unwrap() > 0.0), "{t}");
    }
    assert!(tests[0]["gmacs"].as_f64().unwrap() > 0.0);
    assert!(tests[1]["read_bw_fraction"].as_f64().unwrap() > 0.0);
    assert!(v["read_bw_gbs"].as_f64().unwrap() > 0.1);
    // The prefill tile: the ISA's own, or AMX under the AVX-512 path.
    let tile = v["prefill_tile"].as_str().unwrap();
    assert!(
        tile == v["isa"] || (tile == "amx-int8" && v["isa"] == "avx512vnni"),
        "{v}"
    );
    // The int8 peak of the path the kernels ran, and pp's share of it.
    let gmacs = tests[0]["gmacs"].as_f64().unwrap();
    if v["isa"] == "scalar" {
        assert!(v["int8_peak_gmacs"].is_null(), "{v}");
        assert!(tests[0]["int8_peak_fraction"].is_null(), "{v}");
    } else {
        let peak = v["int8_peak_gmacs"].as_f64().unwrap();
        assert!(peak > gmacs, "peak {peak} GMAC/s, pp {gmacs} GMAC/s");
        let want = if v["isa"] == "avx2" {
            "vpmaddubsw"
        } else {
            "vpdpbusd"
        };
        let instr = v["int8_peak_instruction"].as_str().unwrap();
        assert!(instr.starts_with(want), "{instr} on {}", v["isa"]);
        let f = tests[0]["int8_peak_fraction"].as_f64().unwrap();
        assert!(
            (f - gmacs / peak).abs() <= 1e-9 * f,
            "{f} vs {gmacs} / {peak}"
        );
    }
    // The weights the kernels read per token are (almost) the file: q8_0
    // matrices and the f16 embedding used as the head.
    let file = std::fs::metadata(&gguf).unwrap().len() as f64;
    let bpt = v["bytes_per_token"].as_f64().unwrap();
    assert!(
        bpt > 0.5 * file && bpt < 2.0 * file,
        "{bpt} bytes per token, file {file}"
    );
    // With -d, each test runs after that much context, and says so.
    let o = gpack()
        .arg("bench")
        .arg(&gguf)
        .args(["-p", "8", "-n", "4", "-d", "24", "-r", "1", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v16: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The KV cache's bytes per position: this run's f16 keys take 32 bytes
    // a head of 16, the first run's q8_0 keys one zero-padded 34-byte
    // block (values f16 in both).
    let kv = |v: &serde_json::Value| v["kv_bytes_per_token"].as_f64().unwrap();
    assert!(kv(&v16) > 0.0, "{v16}");
    assert_eq!(kv(&v) * 64.0, kv(&v16) * 66.0, "q8_0 K: {v}");
    let v = v16;
    let names: Vec<_> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["test"].as_str().unwrap().to_string(),
                t["n_depth"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("pp8 @ d24".to_string(), Some(24)),
            ("tg4 @ d24".to_string(), Some(24))
        ]
    );
    // Bad usage is refused with a message.
    let o = gpack()
        .arg("bench")
        .arg(&gguf)
        .args(["-r", "0"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("-r must be"));
}
