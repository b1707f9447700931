//! The temporary-file cleanup of gpack's writers touches gpack's own
//! temporary files only (issue 15).

use crate::gpack;
use std::path::Path;

// See: issue 15 (any unlocked `*.tmp.<n>[.<n>]` in the output directory
// was deleted, e.g. another program's `notes.tmp.1`).
#[test]
fn convert_and_prequant_remove_dead_gpack_temps_and_nothing_else() {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-q8_0.gguf");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let others = ["notes.tmp.1", "notes.tmp.1.2", "x.gpack.tmp.999999.0"];
    for (cmd, out, extra) in [
        ("convert", "m.gpack", &[][..]),
        ("prequant", "m.giw", &["--quant", "int8"][..]),
    ] {
        for o in others {
            std::fs::write(d.join(o), b"another program's").unwrap();
        }
        // A dead gpack writer's temp (no process holds its lock).
        let dead = d.join(".y.gpack.gpack-tmp.999999.0");
        std::fs::write(&dead, b"half a file").unwrap();
        let o = gpack()
            .arg(cmd)
            .arg(&src)
            .args(extra)
            .arg("-o")
            .arg(d.join(out))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!dead.exists(), "{cmd} left the dead writer's temp");
        for o in others {
            assert_eq!(
                std::fs::read(d.join(o)).unwrap(),
                b"another program's",
                "{cmd} touched {o}"
            );
        }
    }
}
