//! Ctrl-C (SIGINT) and SIGTERM during `gpack convert` unlink the temporary
//! file and leave the destination untouched.

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
        let tmp = dir.path().join(format!("m.gpack.tmp.{}", child.id()));
        let start = Instant::now();
        while !tmp.exists() && start.elapsed() < Duration::from_secs(20) {
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
        assert!(!tmp.exists(), "temporary file left after SIG{signal}");
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
