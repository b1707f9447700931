//! Crash safety: SIGKILL mid-write, and running out of space.

use crate::common::synth_bin;
use gpack_format::Gpack;
use std::process::Command;
use std::time::{Duration, Instant};

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A writer killed with SIGKILL at random points never leaves a partial file
/// at the destination, and a pre-existing destination stays intact (or is
/// replaced whole, when the kill landed after the atomic rename).
#[test]
fn sigkill_mid_write_leaves_no_partial_destination() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut killed_mid_write = 0;
    for round in 0..24 {
        let out = dir.path().join(format!("m{round}.gpack"));
        let preexisting = round % 2 == 0;
        if preexisting {
            std::fs::write(&out, b"the user's good file").unwrap();
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(seed % 450);
        let mut child = Command::new(synth_bin())
            .arg(&out)
            .arg("48000000")
            .arg("--replace")
            .arg("--slow")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut finished = false;
        while start.elapsed() < delay {
            if child.try_wait().unwrap().is_some() {
                finished = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if !finished {
            child.kill().unwrap(); // SIGKILL
            killed_mid_write += 1;
        }
        child.wait().unwrap();
        match std::fs::read(&out) {
            Ok(bytes) if bytes == b"the user's good file" => assert!(preexisting),
            Ok(_) => {
                // Only a complete, valid file can be there.
                let g = Gpack::open(&out).unwrap();
                g.verify_full(&|_| {}).unwrap();
            }
            Err(_) => assert!(!preexisting, "the pre-existing file disappeared"),
        }
    }
    assert!(
        killed_mid_write >= 20,
        "only {killed_mid_write} kills landed mid-write"
    );
    // Killed writers leave their temporary files behind (the lock they held
    // died with them); the next writer in the directory, whatever its
    // destination, removes every one of them.
    let temps = |d: &std::path::Path| {
        entries(d)
            .into_iter()
            .filter(|n| n.contains(".gpack-tmp."))
            .count()
    };
    assert!(temps(dir.path()) > 0, "no kill left a temporary file");
    let out = dir.path().join("another.gpack");
    let status = Command::new(synth_bin())
        .arg(&out)
        .arg("10000")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(temps(dir.path()), 0, "{:?}", entries(dir.path()));
}

/// A file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so the write fails
/// with EFBIG) makes the write fail with a clear error and no temporary file.
#[test]
fn out_of_space_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.gpack");
    std::fs::write(dir.path().join("other"), b"x").unwrap();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 1024; exec '{}' '{}' 8000000",
            synth_bin(),
            out.display()
        ))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("write") && err.contains(".m.gpack.gpack-tmp."),
        "{err}"
    );
    assert!(err.to_lowercase().contains("file too large"), "{err}");
    assert_eq!(entries(dir.path()), ["other"]);
}
