//! gpack-convert: a model source (GGUF, split GGUF, safetensors, HF directory)
//! → a plan (which tensor goes to which section, in which layout, at which
//! offset) → one streamed, atomic GPACK write.
//!
//! Every offset is computed by the plan before the first byte is written
//! (native encoded sizes are known from shapes), so the index sections can be
//! written first, in kind order, and each tensor is then read, transcoded into
//! its section and dropped: peak memory is one tensor plus buffers, never the
//! model.
//!
//! Which layout a tensor gets, and whether it is quantized or transcoded
//! exactly, is [`policy`]'s decision, shared with the `.giw` builder
//! ([`giw`]); [`policy::Quant`] is the one `--quant` vocabulary of both.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod encode;
mod error;
pub mod giw;
pub mod mix;
mod plan;
pub mod policy;
pub mod tokenizer;
mod write;

/// Peak resident memory of this process (`VmHWM`), in KiB: the bounded-RSS
/// tests' measure.
#[cfg(test)]
pub(crate) fn vm_hwm_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Runs the test `test` of this binary again as a child process with `var`
/// set to `src` (the child does the work and prints `VMHWM_KB=` with its
/// [`vm_hwm_kb`]), and returns that peak: the bounded-RSS tests' parent
/// side, whose measure is then the work's alone.
#[cfg(test)]
pub(crate) fn child_vm_hwm_kb(test: &str, var: &str, src: &std::path::Path) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, src)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("VMHWM_KB=").map(|(_, v)| v))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("child did not report VmHWM: {stdout}"))
}

pub use error::{Error, ImatrixProblem, OptionProblem, QuantizeProblem, TensorProblem};
pub use plan::{Fuse, Placement, Plan, PlannedTensor, FUSED_GROUPS};
pub use policy::Quant;
pub use write::{
    convert, ConvertOptions, Progress, Report, SectionReport, TensorReport, DRAFT_PREFIX,
};
