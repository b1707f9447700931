//! The prefix cache in `gpack serve` (issue 44) on SmolLM2: 8 concurrent
//! streams sharing a long system prompt equal their solo runs without any
//! cache, and reuse its blocks (usage.prompt_tokens_details.cached_tokens,
//! vLLM's prefix-cache counters); a restarted server and a second process
//! on the same directory read the blocks back; a server killed while it
//! writes blocks leaves no file that is ever used.

use super::{body, gauge, get, model, post, read_all, start};
use std::net::SocketAddr;

/// A system prompt of a few hundred tokens, then a question.
fn prompt(i: usize) -> String {
    let system: String = (0..30)
        .map(|k| {
            format!(
                "Rule {k}: answer politely, cite source {} and keep it short.",
                k * 3 % 17
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "{system}\nQuestion {i}: what is {i} plus {}? Answer:",
        i * 2
    )
}

fn request(i: usize) -> String {
    let sampling = if i.is_multiple_of(2) {
        r#""temperature":0"#.to_string()
    } else {
        format!(r#""temperature":0.8,"top_k":40,"seed":{i}"#)
    };
    format!(r#"{{"prompt":{:?},"max_tokens":12,{sampling}}}"#, prompt(i))
}

/// (text, usage.prompt_tokens_details.cached_tokens) of request `i`.
fn complete(addr: SocketAddr, i: usize) -> (String, u64) {
    let resp = read_all(post(addr, "/v1/completions", &request(i)));
    let v: serde_json::Value =
        serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"));
    let text = v["choices"][0]["text"].as_str().expect("text").to_string();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cached_tokens: {v}"));
    (text, cached)
}

fn labelled(metrics: &str, sample: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in:\n{metrics}"))
}

#[test]
fn shared_prefixes_are_reused_across_slots_restarts_and_processes() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let kv = dir.path().join("kv");
    let kv = kv.to_str().unwrap();
    // Solo runs, no prefix cache at all.
    let solo = start(&m.gpack, &["--parallel", "1", "--kv-cache-bytes", "0"]);
    let want: Vec<String> = (0..8).map(|i| complete(solo.addr, i).0).collect();
    drop(solo);

    let s = start(&m.gpack, &["--parallel", "8", "--kv-cache-dir", kv]);
    // One request first: the others find its blocks.
    let (t0, c0) = complete(s.addr, 0);
    assert_eq!((t0.as_str(), c0), (want[0].as_str(), 0));
    let got: Vec<(String, u64)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (1..8)
            .map(|i| sc.spawn(move || complete(s.addr, i)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (text, cached)) in got.iter().enumerate() {
        assert_eq!(text, &want[i + 1], "stream {} with the prefix cache", i + 1);
        assert!(*cached >= 256, "stream {}: {cached} cached tokens", i + 1);
    }
    let metrics = get(s.addr, "/metrics");
    assert!(gauge(&metrics, "vllm:prefix_cache_hits_total") >= 7.0 * 256.0);
    assert!(
        gauge(&metrics, "vllm:prefix_cache_queries_total")
            > gauge(&metrics, "vllm:prefix_cache_hits_total")
    );
    assert!(
        labelled(
            &metrics,
            "gpack_kv_cache_blocks_reused_total{source=\"memory\"} "
        ) >= 28.0
    );
    assert!(gauge(&metrics, "gpack_kv_cache_bytes") > 0.0);
    drop(s);
    let files = gpack_runtime::kvcache::dir::list(std::path::Path::new(kv));
    assert!(files.len() >= 4, "{} block files", files.len());

    // A restarted server, and a second process at the same time, read the
    // blocks from the directory.
    let a = start(&m.gpack, &["--parallel", "2", "--kv-cache-dir", kv]);
    let b = start(&m.gpack, &["--parallel", "2", "--kv-cache-dir", kv]);
    for (srv, i) in [(&a, 3), (&b, 4)] {
        let (text, cached) = complete(srv.addr, i);
        assert_eq!(text, want[i], "after a restart, request {i}");
        assert!(cached >= 256, "{cached}");
        let metrics = get(srv.addr, "/metrics");
        assert!(
            labelled(
                &metrics,
                "gpack_kv_cache_blocks_reused_total{source=\"disk\"} "
            ) >= 4.0
        );
        assert_eq!(gauge(&metrics, "gpack_kv_cache_disk_rejected_total"), 0.0);
    }
}

/// SIGKILL while blocks are being written (a long new prompt, killed as
/// its prefill runs): every block file left is whole and is used by the
/// next server without a refusal, and the text is the uncached one.
#[test]
fn a_server_killed_while_writing_blocks_leaves_none_that_is_used() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let kv = dir.path().join("kv");
    let kvs = kv.to_str().unwrap();
    let long: String = (0..120)
        .map(|k| format!("Line {k} of the log says event {} happened.", k * 13 % 97))
        .collect::<Vec<_>>()
        .join(" ");
    let req = format!(r#"{{"prompt":{long:?},"max_tokens":4,"temperature":0}}"#);
    for delay_ms in [300, 900] {
        let mut s = start(&m.gpack, &["--parallel", "1", "--kv-cache-dir", kvs]);
        let conn = post(s.addr, "/v1/completions", &req);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.child.kill().unwrap();
        s.child.wait().unwrap();
        drop(conn);
    }
    let s = start(&m.gpack, &["--parallel", "1", "--kv-cache-dir", kvs]);
    let text = |addr| {
        let resp = read_all(post(addr, "/v1/completions", &req));
        let v: serde_json::Value = serde_json::from_str(body(&resp)).unwrap();
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let got = text(s.addr);
    let metrics = get(s.addr, "/metrics");
    assert_eq!(gauge(&metrics, "gpack_kv_cache_disk_rejected_total"), 0.0);
    drop(s);
    let fresh = start(&m.gpack, &["--parallel", "1", "--kv-cache-bytes", "0"]);
    assert_eq!(got, text(fresh.addr));
}
