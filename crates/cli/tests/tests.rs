//! End-to-end tests of the `gpack` binary.

mod bench;
mod convert_inspect;
mod device;
mod errors;
mod export;
mod hf_quantize;
mod imatrix;
mod interrupt;
mod kv;
mod kvcache;
mod modelpack;
mod moe;
mod oci;
mod perplexity;
mod ple;
mod quant_types;
mod run;
mod serve;
mod spec;
mod temps;
mod threads;
mod token_server;
mod tokenize;
mod unsupported;
mod verify_inspect;

pub use gpack_testkit::smollm2;

pub fn gpack() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpack"))
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
