//! End-to-end tests of the `gpack` binary.

mod convert_inspect;
mod interrupt;
mod moe;
mod run;
mod tokenize;
mod verify_inspect;

pub fn gpack() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpack"))
}

/// The real SmolLM2 model, fetched by the committed script when not cached.
pub fn smollm2() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/fetch-models.sh"))
        .output()
        .expect("run scripts/fetch-models.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `gpack run MODEL -p "The capital of France is" -n N --ctx CTX`, which must
/// succeed: its (stdout, stderr).
pub fn run_greedy(model: &std::path::Path, n: u32, ctx: u32) -> (String, String) {
    let o = gpack()
        .arg("run")
        .arg(model)
        .args([
            "-p",
            "The capital of France is",
            "-n",
            &n.to_string(),
            "--ctx",
            &ctx.to_string(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}
