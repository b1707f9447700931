//! `gpack serve --device gpu` on lavapipe (issue 43): concurrent streams
//! through the GPU's batched step equal their solo runs; a device lost
//! mid-run fails the requests it held and turns `/health` 503, never a
//! hang; `/metrics` names the adapter.

use super::{body, completion_text, get, post, read_all, start, start_with_env};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The tiny qwen2 fixture (q8_0, with its real tokenizer): lavapipe runs
/// SmolLM2 at ~2 tokens/s, which a loaded CI machine stretches past the
/// clients' timeouts; what these tests check does not depend on the size.
fn tiny() -> PathBuf {
    gpack_testkit::root().join("testdata/tiny/qwen2/qwen2-q8_0.gguf")
}

/// Four streams at once on the GPU (one batched step for all their rows)
/// give the text each prompt gets alone on the GPU, greedy and seeded.
#[test]
fn gpu_four_concurrent_streams_equal_their_solo_runs() {
    let m = tiny();
    let prompts = [
        "The capital of France is",
        "Once upon a time, in a small village by the sea,",
        "def fibonacci(n):",
        "List three colors, one per line:",
    ];
    let req = |i: usize, p: &str| {
        let sampling = if i.is_multiple_of(2) {
            r#""temperature":0"#.to_string()
        } else {
            format!(r#""temperature":0.8,"top_k":40,"seed":{i}"#)
        };
        format!(r#"{{"prompt":{p:?},"max_tokens":32,{sampling}}}"#)
    };
    let gpu = ["--device", "gpu", "--spec", "none"];
    let solo = start(&m, &[&gpu[..], &["--parallel", "1"]].concat());
    let want: Vec<String> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| completion_text(solo.addr, &req(i, p)))
        .collect();
    drop(solo);
    let s = start(&m, &[&gpu[..], &["--parallel", "4"]].concat());
    let metrics = get(s.addr, "/metrics");
    assert!(
        metrics.contains("gpack_device_info{device=\"gpu\"")
            && metrics.contains("backend=\"vulkan\"")
            && metrics.contains("kind=\"software\""),
        "{metrics}"
    );
    let got: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let r = req(i, p);
                sc.spawn(move || completion_text(s.addr, &r))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "prompt {i}: concurrent on the GPU vs solo");
    }
    let m = get(s.addr, "/metrics");
    let steps = m
        .lines()
        .find_map(|l| l.strip_prefix("gpack_batch_steps_total "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    // Batched: far fewer steps than the 4 × 32 tokens (plus prefills).
    assert!(steps.is_some_and(|n| n < 100), "steps: {steps:?}\n{m}");
}

/// The device destroyed at the third step (`GPACK_TEST_GPU_LOST_AT_STEP`,
/// wgpu's `Device::destroy`, as a driver reset loses it): the request in
/// flight fails with an error naming the lost device, `/health` answers
/// 503 saying so, later requests are refused with 503; nothing hangs.
#[test]
fn a_lost_gpu_fails_its_requests_and_health_turns_503() {
    let m = tiny();
    let srv = start_with_env(
        &m,
        &["--device", "gpu", "--ctx", "256", "--spec", "none"],
        &[("GPACK_TEST_GPU_LOST_AT_STEP", "3")],
    );
    let req = r#"{"prompt":"Hello","max_tokens":16,"temperature":0}"#;
    let t0 = Instant::now();
    let first = read_all(post(srv.addr, "/v1/completions", req));
    assert!(t0.elapsed() < Duration::from_secs(60), "the request hung");
    assert!(first.starts_with("HTTP/1.1 500"), "{first}");
    assert!(body(&first).contains("lost"), "{first}");
    let h = loop {
        let h = get(srv.addr, "/health");
        if !h.starts_with("HTTP/1.1 200") || t0.elapsed() > Duration::from_secs(20) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(h.starts_with("HTTP/1.1 503"), "{h}");
    assert!(h.contains("device was lost"), "{h}");
    let again = read_all(post(srv.addr, "/v1/completions", req));
    assert!(again.starts_with("HTTP/1.1 503"), "{again}");
    assert!(again.contains("device was lost"), "{again}");
}
