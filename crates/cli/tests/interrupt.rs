//! Ctrl-C (SIGINT) and SIGTERM during `gpack convert` unlink the temporary
//! file and leave the destination untouched; after SIGKILL during `gpack
//! prequant` (which no handler sees), the next run of any writer in the
//! directory removes the dead writer's temporary file.

use crate::{gpack, smollm2};
use std::time::{Duration, Instant};

#[test]
fn signals_during_convert_leave_no_partial_file() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    std::fs::write(&out, b"the user's file").unwrap();
    let mut interrupted = 0;
    for (i, signal) in ["INT", "TERM", "INT", "TERM", "INT", "TERM"]
        .iter()
        .enumerate()
    {
        let mut child = gpack()
            .arg("convert")
            .arg(&model)
            .arg("-o")
            .arg(&out)
            .arg("--force")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the temporary file exists (the write is under way).
        let tmp = || gpack_format::temp_files_of(&out);
        let start = Instant::now();
        while tmp().is_empty() && start.elapsed() < Duration::from_secs(20) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(10 * i as u64));
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status();
        let status = child.wait().unwrap();
        assert_eq!(tmp(), Vec::<std::path::PathBuf>::new(), "after SIG{signal}");
        if status.code() == Some(130) {
            interrupted += 1;
            assert_eq!(std::fs::read(&out).unwrap(), b"the user's file");
        } else {
            // The conversion finished before the signal: a complete file.
            assert!(status.success());
            gpack_format::Gpack::open(&out).unwrap();
            std::fs::write(&out, b"the user's file").unwrap();
        }
    }
    assert!(
        interrupted >= 3,
        "only {interrupted} of 6 signals landed mid-write"
    );
}

#[test]
fn sigkill_during_prequant_leaves_nothing_after_the_next_run() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.giw");
    std::fs::write(&out, b"the user's file").unwrap();
    let temps = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".gpack-tmp."))
            .collect()
    };
    let mut killed = 0;
    for _ in 0..10 {
        let before = temps().len();
        let mut child = gpack()
            .arg("prequant")
            .arg(&model)
            .args(["--quant", "int8", "--force", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        // Until this writer's temporary file exists.
        while temps().len() == before && start.elapsed() < Duration::from_secs(20) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill(); // SIGKILL: no handler runs
        child.wait().unwrap();
        // The user's file, or (the kill landed after the atomic rename) a
        // complete bundle that replaced it whole.
        if std::fs::read(&out).unwrap() != b"the user's file" {
            gpack_format::giw::Giw::open(&out).expect("a complete bundle");
            std::fs::write(&out, b"the user's file").unwrap();
        }
        if temps().len() > before {
            killed += 1;
        }
    }
    assert!(
        killed >= 3,
        "only {killed} of 10 kills left a temporary file"
    );
    // The next writer in the directory (another destination) cleans up.
    let other = dir.path().join("other.gpack");
    let o = gpack()
        .arg("convert")
        .arg(&model)
        .arg("-o")
        .arg(&other)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(temps(), Vec::<String>::new());
    assert!(std::fs::read(&out).unwrap() == b"the user's file");
}

/// SIGINT stops `gpack run` within 100 ms wherever the generation is (the
/// prefill of a long prompt, decoding, a check of n-gram drafts), exit 130,
/// 20 times in a row at spread-out moments.
#[test]
fn sigint_stops_gpack_run_within_100_ms() {
    let model = smollm2();
    let long: String = (0..300).map(|i| format!("word{i} ")).collect();
    for i in 0..20u64 {
        let prompt = if i % 2 == 0 {
            "Once upon a time"
        } else {
            &long
        };
        let mut child = gpack()
            .arg("run")
            .arg(&model)
            .args(["-p", prompt, "-n", "100000", "--ctx", "2048"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Past start-up (the first bytes of output, or a moment into the
        // prefill of the long prompt), then a spread of moments.
        let mut out = child.stdout.take().unwrap();
        if i % 2 == 0 {
            use std::io::Read;
            let mut b = [0u8; 1];
            let _ = out.read(&mut b);
        }
        std::thread::sleep(Duration::from_millis(5 + 15 * i));
        let sent = Instant::now();
        let st = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(5),
                "round {i}: gpack run still running 5 s after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        let took = sent.elapsed();
        assert_eq!(status.code(), Some(130), "round {i}");
        // `kill` itself is a process start (a few ms) inside this figure.
        assert!(took < Duration::from_millis(100), "round {i}: {took:?}");
    }
}
