//! Writes a synthetic GPACK file of about the requested size, for tests and
//! benchmarks: `gpack-synth OUT SIZE_BYTES [--replace] [--slow]`.
//! Payload bytes are a cheap deterministic pattern; every section kind that
//! can be empty-or-present is exercised. With `--slow`, it sleeps a little
//! between chunks so a test can kill it at random points mid-write.

use gpack_format::{GpackWriter, ManifestInput, SectionKind, WriteOptions};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gpack-synth OUT SIZE_BYTES [--replace] [--slow]");
        std::process::exit(2);
    }
    let out = PathBuf::from(&args[1]);
    let size: u64 = args[2].parse().unwrap_or_else(|_| {
        eprintln!("SIZE_BYTES must be an integer");
        std::process::exit(2)
    });
    let replace = args.iter().any(|a| a == "--replace");
    let slow = args.iter().any(|a| a == "--slow");
    if let Err(e) = run(&out, size, replace, slow) {
        eprintln!("gpack-synth: {}", gpack_format::error_chain(&e));
        std::process::exit(1);
    }
}

fn run(
    out: &std::path::Path,
    size: u64,
    replace: bool,
    slow: bool,
) -> Result<(), gpack_format::Error> {
    let mut w = GpackWriter::create(out, WriteOptions { replace })?;
    w.add_section(SectionKind::MetadataKv, "metadata_kv", b"synthetic", 1)?;
    // Split the bulk over blob sections: 70% arena, 10% embed, 20% experts;
    // an empty-but-present Mtp section ends them.
    let parts = [
        (SectionKind::NativeDense, size / 10 * 7),
        (SectionKind::Embed, size / 10),
        (SectionKind::ExpertBlobs, size / 10 * 2),
        (SectionKind::Mtp, 0),
    ];
    let chunk: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    for (kind, n) in parts {
        let mut s = w.begin_section(kind, kind.default_name())?;
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len() as u64) as usize;
            s.write_bytes(&chunk[..k])?;
            left -= k as u64;
            if slow {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        s.finish(1)?;
    }
    let written = w.finish(&ManifestInput {
        name: "synthetic".into(),
        architecture: "none".into(),
        ..Default::default()
    })?;
    println!("{} {}", written.path.display(), written.size);
    Ok(())
}
