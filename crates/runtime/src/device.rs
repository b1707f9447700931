//! Where a model's blocks run: the device seam's setting ([`Device`]).
//!
//! The CPU runs every model. A GPU (through `gpack-gpu`: Vulkan, Metal,
//! DX12) runs the dense families' blocks and head; the model's step hands
//! its residual rows to it and takes the logits back
//! (`model/gpu/`). Sampling, grammars and speculation stay on the host,
//! above the seam. A CUDA device would be another variant here and another
//! executor beside `model/gpu/`, with the graph unchanged.

use std::fmt;
use std::str::FromStr;

/// Which device runs a model's blocks ([`crate::LoadOptions::device`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The CPU (the library's default: loading touches no GPU driver).
    #[default]
    Cpu,
    /// A hardware GPU when one exists and the model runs and fits on it,
    /// else the CPU, logging which (never a software adapter).
    Auto,
    /// A GPU: the adapter of this index ([`gpack_gpu::Gpu::adapters`]), or
    /// with `None` a hardware one, else a software one (lavapipe) with a
    /// warning. No adapter, or a model it cannot run, is an error.
    Gpu(Option<usize>),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Auto => f.write_str("auto"),
            Device::Gpu(None) => f.write_str("gpu"),
            Device::Gpu(Some(i)) => write!(f, "gpu:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = String;

    /// `auto`, `cpu`, `gpu` or `gpu:N`.
    fn from_str(s: &str) -> Result<Device, String> {
        let bad = || format!("device {s:?}: expected auto, cpu, gpu or gpu:N (an adapter index)");
        match s.trim() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu(None)),
            t => {
                let n = t.strip_prefix("gpu:").ok_or_else(bad)?;
                n.parse().map(|i| Device::Gpu(Some(i))).map_err(|_| bad())
            }
        }
    }
}

/// The device memory gpack may use on a GPU ([`crate::LoadOptions::gpu_memory`]):
/// what the memory plan checks before uploading anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuMemory {
    /// Not known (the default): nothing is planned against a budget; a
    /// buffer the driver refuses is an error naming it and its bytes.
    #[default]
    Unknown,
    /// What the system says where it says it without a driver query
    /// (`gpack_gpu::Gpu::memory_hint`: AMD's sysfs, a software adapter's
    /// host memory), else not known.
    Auto,
    /// This many bytes.
    Bytes(u64),
}

impl fmt::Display for GpuMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuMemory::Unknown => f.write_str("unknown"),
            GpuMemory::Auto => f.write_str("auto"),
            GpuMemory::Bytes(b) => write!(f, "{}", crate::device::bytes(*b)),
        }
    }
}

impl FromStr for GpuMemory {
    type Err = String;

    /// `auto`, or a size: bytes, or a number with `K`/`M`/`G`/`T` (or
    /// `KiB`, `MB`, …: powers of 1024) (`8GiB`, `512MiB`, `1.5G`).
    fn from_str(s: &str) -> Result<GpuMemory, String> {
        match s.trim() {
            "auto" => Ok(GpuMemory::Auto),
            t => match crate::experts::parse_size(t) {
                Some(b) if b > 0 => Ok(GpuMemory::Bytes(b as u64)),
                _ => Err(format!(
                    "GPU memory {s:?}: expected auto or a size (bytes, or a number with K, M, G or T: 8GiB, 512MiB)"
                )),
            },
        }
    }
}

/// `b` bytes for people: `96.0 KiB`, `512.0 MiB`, `7.50 GiB`.
pub(crate) fn bytes(b: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (MIB * 1024.0))
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / MIB)
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_sizes_parse() {
        for (s, m) in [
            ("auto", GpuMemory::Auto),
            ("8GiB", GpuMemory::Bytes(8 << 30)),
            ("512MiB", GpuMemory::Bytes(512 << 20)),
            ("512M", GpuMemory::Bytes(512 << 20)),
            ("1.5G", GpuMemory::Bytes(3 << 29)),
            ("4096", GpuMemory::Bytes(4096)),
        ] {
            assert_eq!(s.parse::<GpuMemory>(), Ok(m), "{s}");
        }
        for bad in ["", "0", "lots", "8 parsecs", "-1G"] {
            let e = bad.parse::<GpuMemory>().unwrap_err();
            assert!(e.contains("expected auto or a size"), "{e}");
        }
    }

    #[test]
    fn devices_parse_and_print_back() {
        for (s, d) in [
            ("auto", Device::Auto),
            ("cpu", Device::Cpu),
            ("gpu", Device::Gpu(None)),
            ("gpu:1", Device::Gpu(Some(1))),
        ] {
            assert_eq!(s.parse::<Device>(), Ok(d));
            assert_eq!(d.to_string(), s);
        }
        for bad in ["", "cuda", "gpu:", "gpu:x", "gpu:-1"] {
            let e = bad.parse::<Device>().unwrap_err();
            assert!(e.contains("expected auto, cpu, gpu or gpu:N"), "{e}");
        }
    }
}

/// The GPU a model runs on and what it holds there ([`crate::Model::gpu_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// The adapter's name (`llvmpipe (LLVM 15.0.6, 256 bits)`, a GPU's).
    pub adapter: String,
    /// `vulkan`, `metal` or `dx12`.
    pub backend: &'static str,
    /// A software adapter (the CPU behind a GPU API: lavapipe, WARP).
    pub software: bool,
    /// Blocks on the device (the first ones).
    pub blocks: usize,
    /// The final norm and head are on the device too.
    pub head: bool,
    /// Device memory the weights take.
    pub weight_bytes: u64,
    /// Device memory one sequence's f16 KV cache takes per position.
    pub kv_bytes_per_position: u64,
    /// The model's blocks (on the device or not).
    pub blocks_total: usize,
    /// The device memory budget the placement was planned against
    /// ([`GpuMemory`]; `None`: not known).
    pub memory_budget: Option<u64>,
    /// What the placement was planned to take: weights, the f16 KV caches
    /// at the planned context and sequences, the step's buffers.
    pub memory_planned: u64,
    /// Steps run on the device.
    pub steps: u64,
    /// Queue submissions of the last step (1 for a dense model's step:
    /// its commands recorded in one encoder; a MoE model adds one per MoE
    /// layer, whose router reads the rows back).
    pub last_step_submissions: u64,
}

/// A GPU adapter the installed drivers offer ([`adapters`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapter {
    /// Its index: `--device gpu:N`.
    pub index: usize,
    /// The adapter's name.
    pub name: String,
    /// `vulkan`, `metal` or `dx12`.
    pub backend: &'static str,
    /// A software adapter (lavapipe, WARP): taken only by `--device gpu`.
    pub software: bool,
}

/// Every GPU adapter the installed drivers offer, in a stable order.
pub fn adapters() -> Vec<Adapter> {
    gpack_gpu::Gpu::adapters()
        .into_iter()
        .map(|a| Adapter {
            index: a.index,
            name: a.name,
            backend: a.backend,
            software: a.kind == gpack_gpu::AdapterKind::Software,
        })
        .collect()
}

/// The adapter [`Device::Auto`] takes among `list`: the first hardware one
/// (never a software adapter); `None`: the CPU.
pub fn auto_adapter(list: &[Adapter]) -> Option<&Adapter> {
    list.iter().find(|a| !a.software)
}
