//! Choosing and opening an adapter, and the primitives every kernel uses.
//!
//! Policy ([`Want`]): `auto` takes a hardware GPU or nothing (the caller then
//! runs on the CPU); `gpu` takes a hardware GPU, else a software adapter
//! (Mesa's lavapipe, WARP) with a warning; `gpu:N` takes the N-th adapter of
//! [`Gpu::adapters`]. A software adapter is a conformant device on the CPU:
//! it proves kernels correct, not fast.
//!
//! Errors never panic: wgpu's default handler for uncaptured errors panics,
//! so [`Gpu::open`] installs one that records the message, and [`Gpu::check`]
//! (called by [`Gpu::read`] and [`Gpu::wait`]) turns it, or a lost device,
//! into [`Error::Device`]. Allocations ([`Gpu::storage`]) run inside
//! wgpu error scopes: a driver that refuses a buffer (out of device memory,
//! over the adapter's limits) is an error naming the buffer and its bytes.
//!
//! Submission policy: kernels, copies and clears are recorded into one
//! pending command encoder, submitted when the host needs a result
//! ([`Gpu::read`], [`Gpu::read_many`], [`Gpu::wait`], [`Gpu::flush`]) or
//! before a `queue.write_buffer` into an existing buffer (which would
//! otherwise land before the commands recorded ahead of it). A model step
//! is then one submission: its uploads come first, its read-back last.
//! [`Gpu::submissions`] counts them.

use crate::Error;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Which adapter to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// A hardware GPU, or none (never a software adapter).
    Auto,
    /// A hardware GPU, else a software one with a warning.
    Any,
    /// The adapter at this index of [`Gpu::adapters`].
    Index(usize),
}

/// Hardware or software (a CPU implementation of the API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterKind {
    /// A discrete, integrated or virtual GPU.
    Hardware,
    /// A CPU implementation (lavapipe, SwiftShader, WARP).
    Software,
}

/// What an opened device is and can do.
#[derive(Clone, Debug)]
pub struct Caps {
    /// The adapter's name ("llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA GeForce …").
    pub name: String,
    /// The API: "vulkan", "metal", "dx12".
    pub backend: &'static str,
    /// The driver's name and version, as the adapter reports them.
    pub driver: String,
    /// Hardware or software.
    pub kind: AdapterKind,
    /// WGSL `f16` (the `shader-f16` feature) is enabled.
    pub f16: bool,
    /// Subgroup operations are enabled.
    pub subgroups: bool,
    /// WGSL's packed 4×8-bit integer dot products
    /// (`packed_4x8_integer_dot_product`: `dot4I8Packed`) are used by the
    /// Q8_0/Q4_0 matmuls (on native backends wgpu always has them: a
    /// driver without the instruction gets naga's polyfill).
    pub int8_dot: bool,
    /// The largest storage-buffer binding, in bytes.
    pub max_binding: u64,
    /// The largest buffer, in bytes.
    pub max_buffer: u64,
    /// The most workgroups per dispatch dimension.
    pub max_workgroups: u32,
    /// A storage-buffer binding's offset must be a multiple of this
    /// (`min_storage_buffer_offset_alignment`, a power of two, 256 at most).
    pub offset_align: u64,
    /// The adapter's PCI vendor and device ids (0 when it has none).
    pub pci: (u32, u32),
}

/// Which optional features [`Gpu::open_with`] may enable (each only where
/// the adapter has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allow {
    /// WGSL `f16` arithmetic and storage (`shader-f16`).
    pub f16: bool,
    /// Subgroup operations.
    pub subgroups: bool,
    /// Packed int8 dot products in the quantized matmuls.
    pub int8_dot: bool,
    /// A cap on each storage binding below the adapter's limit (`None`:
    /// the adapter's): tensors over it are bound as row pieces, so tests
    /// exercise that on small models, and a driver whose large bindings
    /// misbehave can be worked around.
    pub max_binding: Option<u64>,
}

impl Default for Allow {
    fn default() -> Self {
        Allow {
            f16: true,
            subgroups: true,
            int8_dot: true,
            max_binding: None,
        }
    }
}

/// An opened device: its queue, capabilities and a pipeline cache.
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    caps: Caps,
    pipelines: Mutex<HashMap<(String, String), Arc<wgpu::ComputePipeline>>>,
    lost: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<String>>>,
    /// Commands recorded and not submitted yet.
    pending: Mutex<Option<wgpu::CommandEncoder>>,
    /// Queue submissions so far.
    submits: AtomicU64,
    /// A 4-byte storage buffer for bindings a kernel does not read.
    unused: std::sync::OnceLock<wgpu::Buffer>,
    /// A grow-only buffer for a kernel's intermediate (the int8
    /// activations of a matmul; commands run in order, so one serves all).
    scratch: Mutex<Option<Arc<wgpu::Buffer>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12;
    // Respect WGPU_BACKEND and friends, as every wgpu program does.
    desc = desc.with_env();
    wgpu::Instance::new(desc)
}

fn kind_of(info: &wgpu::AdapterInfo) -> AdapterKind {
    match info.device_type {
        wgpu::DeviceType::Cpu => AdapterKind::Software,
        _ => AdapterKind::Hardware,
    }
}

fn backend_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "vulkan",
        wgpu::Backend::Metal => "metal",
        wgpu::Backend::Dx12 => "dx12",
        wgpu::Backend::Gl => "gl",
        wgpu::Backend::BrowserWebGpu => "webgpu",
        _ => "other",
    }
}

/// A (multi-line) wgpu error message on one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The device nodes a hardware GPU shows on Linux.
const NODES: &str = "/dev/dri/renderD*, /dev/nvidia0 or /dev/dxg";

/// Whether this machine may have a hardware GPU, known without loading a
/// driver: on Linux, a DRM render node (`/dev/dri/renderD*`: AMD, Intel,
/// NVIDIA with nvidia-drm, Apple under Asahi), NVIDIA's own node or WSL's
/// `/dev/dxg`; elsewhere always (the drivers are asked).
pub fn hardware_gpu_possible() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let render = std::fs::read_dir("/dev/dri").is_ok_and(|d| {
        d.filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
    });
    render
        || std::path::Path::new("/dev/nvidia0").exists()
        || std::path::Path::new("/dev/dxg").exists()
}

/// One adapter as [`Gpu::adapters`] lists it.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Its index, for [`Want::Index`].
    pub index: usize,
    /// The adapter's name.
    pub name: String,
    /// The API.
    pub backend: &'static str,
    /// Hardware or software.
    pub kind: AdapterKind,
}

impl Gpu {
    /// Every adapter the installed drivers offer, in a stable order.
    pub fn adapters() -> Vec<AdapterSummary> {
        let inst = instance();
        pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()))
            .iter()
            .enumerate()
            .map(|(index, a)| {
                let i = a.get_info();
                AdapterSummary {
                    index,
                    name: i.name.clone(),
                    backend: backend_name(i.backend),
                    kind: kind_of(&i),
                }
            })
            .collect()
    }

    /// Opens the adapter `want` names, with `shader-f16` and subgroups when
    /// it has them and its own limits for buffer sizes.
    pub fn open(want: Want) -> Result<Gpu, Error> {
        Gpu::open_with(want, Allow::default())
    }

    /// [`Gpu::open`], enabling only the optional features `allow` permits
    /// (tests force the fallback kernels of adapters without them).
    pub fn open_with(want: Want, allow: Allow) -> Result<Gpu, Error> {
        // `auto` on a machine that cannot have a hardware GPU loads no
        // driver at all: enumerating adapters loads every installed ICD
        // (lavapipe brings LLVM: megabytes of heap and tens of ms at every
        // start of a CPU-only run).
        if want == Want::Auto && !hardware_gpu_possible() {
            return Err(Error::NoAdapter {
                tried: format!("no hardware GPU (no {NODES})"),
            });
        }
        let inst = instance();
        let adapters = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
        let found = || {
            if adapters.is_empty() {
                "no Vulkan, Metal or DX12 adapter is installed (on Linux: a Vulkan driver, e.g. \
                 `apt-get install mesa-vulkan-drivers libvulkan1`)"
                    .to_string()
            } else {
                let names: Vec<String> = adapters
                    .iter()
                    .map(|a| {
                        let i = a.get_info();
                        format!(
                            "{} ({:?}, {})",
                            i.name,
                            kind_of(&i),
                            backend_name(i.backend)
                        )
                    })
                    .collect();
                format!("found {}", names.join(", "))
            }
        };
        let hardware = adapters
            .iter()
            .position(|a| kind_of(&a.get_info()) == AdapterKind::Hardware);
        let pick = match want {
            Want::Auto => hardware.ok_or_else(|| Error::NoAdapter {
                tried: format!("no hardware GPU ({})", found()),
            })?,
            Want::Any => match hardware {
                Some(i) => i,
                None if !adapters.is_empty() => {
                    log::warn!(
                        "no hardware GPU; using the software adapter {:?}: correct, not fast",
                        adapters[0].get_info().name
                    );
                    0
                }
                None => return Err(Error::NoAdapter { tried: found() }),
            },
            Want::Index(i) if i < adapters.len() => i,
            Want::Index(i) => {
                return Err(Error::NoAdapter {
                    tried: format!("no adapter number {i} ({})", found()),
                })
            }
        };
        let adapter = &adapters[pick];
        let info = adapter.get_info();
        let have = adapter.features();
        let mut features = wgpu::Features::empty();
        for (f, ok) in [
            (wgpu::Features::SHADER_F16, allow.f16),
            (wgpu::Features::SUBGROUP, allow.subgroups),
        ] {
            if ok && have.contains(f) {
                features |= f;
            }
        }
        let al = adapter.limits();
        let mut limits = wgpu::Limits::defaults();
        limits.max_storage_buffer_binding_size = al.max_storage_buffer_binding_size;
        limits.max_buffer_size = al.max_buffer_size;
        limits.max_storage_buffers_per_shader_stage =
            al.max_storage_buffers_per_shader_stage.min(16);
        limits.max_compute_workgroup_storage_size = al.max_compute_workgroup_storage_size;
        limits.max_compute_invocations_per_workgroup = al.max_compute_invocations_per_workgroup;
        limits.max_compute_workgroup_size_x = al.max_compute_workgroup_size_x;
        limits.max_compute_workgroup_size_y = al.max_compute_workgroup_size_y;
        limits.max_compute_workgroups_per_dimension = al.max_compute_workgroups_per_dimension;
        let desc = wgpu::DeviceDescriptor {
            label: Some("gpack"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            Error::RequestDevice {
                adapter: info.name.clone(),
                why: e.to_string(),
            }
        })?;
        let lost = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None::<String>));
        {
            let lost = lost.clone();
            let failure = failure.clone();
            device.set_device_lost_callback(move |reason, msg| {
                lost.store(true, Ordering::SeqCst);
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(format!("device lost ({reason:?}): {msg}"));
                }
            });
        }
        {
            let failure = failure.clone();
            device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(e.to_string());
                }
            }));
        }
        let caps = Caps {
            name: info.name.clone(),
            backend: backend_name(info.backend),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            kind: kind_of(&info),
            f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            int8_dot: allow.int8_dot
                && inst
                    .wgsl_language_features()
                    .contains(wgpu::WgslLanguageFeatures::Packed4x8IntegerDotProduct),
            max_binding: allow
                .max_binding
                .map_or(limits.max_storage_buffer_binding_size, |cap| {
                    cap.clamp(1 << 16, limits.max_storage_buffer_binding_size)
                }),
            max_buffer: limits.max_buffer_size,
            max_workgroups: limits.max_compute_workgroups_per_dimension,
            offset_align: u64::from(device.limits().min_storage_buffer_offset_alignment),
            pci: (info.vendor, info.device),
        };
        Ok(Gpu {
            device,
            queue,
            caps,
            pipelines: Mutex::new(HashMap::new()),
            lost,
            failure,
            pending: Mutex::new(None),
            submits: AtomicU64::new(0),
            unused: std::sync::OnceLock::new(),
            scratch: Mutex::new(None),
        })
    }

    /// The device's memory where the system says it without a driver
    /// query (wgpu has none): a software adapter's is the host's
    /// (`MemAvailable` of /proc/meminfo); an AMD GPU's VRAM is in sysfs
    /// (`/sys/class/drm/card*/device/mem_info_vram_total`, matched by PCI
    /// ids). `None` elsewhere (NVIDIA, Intel, Apple: pass the size).
    /// Returns the bytes and where they came from.
    pub fn memory_hint(&self) -> Option<(u64, String)> {
        if self.caps.kind == AdapterKind::Software {
            let info = std::fs::read_to_string("/proc/meminfo").ok()?;
            let kib: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            return Some((
                kib.checked_mul(1024)?,
                "the host's available memory (a software adapter's device memory is the host's)"
                    .into(),
            ));
        }
        let (vendor, device) = self.caps.pci;
        let hex = |p: &std::path::Path| -> Option<u32> {
            let s = std::fs::read_to_string(p).ok()?;
            u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
        };
        for e in std::fs::read_dir("/sys/class/drm").ok()?.flatten() {
            let dir = e.path().join("device");
            if hex(&dir.join("vendor")) != Some(vendor) || hex(&dir.join("device")) != Some(device)
            {
                continue;
            }
            let vram = dir.join("mem_info_vram_total");
            if let Some(b) = std::fs::read_to_string(&vram)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                return Some((b, vram.display().to_string()));
            }
        }
        None
    }

    /// What this device is and can do.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The wgpu device, for kernel modules.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue, for kernel modules.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Why the device was lost, if it was (its lost callback ran: a driver
    /// reset, an unplugged GPU, [`Gpu::destroy`]).
    pub fn lost(&self) -> Option<String> {
        self.lost
            .load(Ordering::SeqCst)
            .then(|| "the GPU device was lost (a driver reset, a removed device)".to_string())
    }

    /// Destroys the device as a driver reset would lose it: everything
    /// after fails with a device-lost error (fault injection for tests).
    pub fn destroy(&self) {
        self.device.destroy();
        self.lost.store(true, Ordering::SeqCst);
    }

    /// `Err` if the device was lost or an operation failed since the last check.
    pub fn check(&self) -> Result<(), Error> {
        let msg = self.failure.lock().ok().and_then(|mut f| f.take());
        match msg {
            Some(m) => Err(Error::Device(m)),
            None if self.lost.load(Ordering::SeqCst) => Err(Error::Device("device lost".into())),
            None => Ok(()),
        }
    }

    /// The compute pipeline for `entry` in the WGSL `source`, compiled once
    /// per `(label, entry)` and cached (bind group layout: derived from the
    /// shader). A shader that does not validate is [`Error::Shader`].
    pub fn pipeline(
        &self,
        label: &str,
        source: &str,
        entry: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>, Error> {
        let key = (label.to_string(), entry.to_string());
        if let Some(p) = self
            .pipelines
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return Ok(p);
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(Cow::Borrowed(source)),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Shader {
                label: format!("{label}::{entry}"),
                why: e.to_string(),
            });
        }
        let p = Arc::new(pipeline);
        if let Ok(mut m) = self.pipelines.lock() {
            m.insert(key, p.clone());
        }
        Ok(p)
    }

    /// A storage buffer holding `bytes` (padded to a multiple of 4), usable
    /// as a kernel's input or output and as a copy source.
    pub fn upload(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer, Error> {
        let size = (bytes.len() as u64).div_ceil(4).max(1) * 4;
        let buf = self.storage(label, size)?;
        let whole = bytes.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(&buf, 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(&buf, whole as u64, &tail);
        }
        Ok(buf)
    }

    /// A zeroed storage buffer of `size` bytes (a multiple of 4), made
    /// inside wgpu error scopes: a driver out of device memory is
    /// [`Error::OutOfMemory`], a size over the adapter's limits
    /// [`Error::Allocation`], both naming `label` and the bytes (never a
    /// panic, never an error left for a later call).
    pub fn storage(&self, label: &str, size: u64) -> Result<wgpu::Buffer, Error> {
        let size = size.max(4);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let oom = pollster::block_on(oom.pop());
        let invalid = pollster::block_on(validation.pop());
        if let Some(e) = oom {
            return Err(Error::OutOfMemory {
                what: label.to_string(),
                bytes: size,
                why: e.to_string(),
            });
        }
        if let Some(e) = invalid {
            return Err(Error::Allocation {
                what: label.to_string(),
                bytes: size,
                limit: self.caps.max_buffer,
                why: one_line(&e.to_string()),
            });
        }
        Ok(buf)
    }

    /// A storage buffer of at least `size` bytes shared by the kernels
    /// that need an intermediate (grown, never shrunk; the commands recorded
    /// before a growth keep the old buffer alive).
    pub fn scratch(&self, label: &str, size: u64) -> Result<Arc<wgpu::Buffer>, Error> {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = s.as_ref().filter(|b| b.size() >= size) {
            return Ok(b.clone());
        }
        let grown = size.next_power_of_two().min(self.caps.max_buffer).max(size);
        let b = Arc::new(self.storage(label, grown)?);
        *s = Some(b.clone());
        Ok(b)
    }

    /// A 4-byte storage buffer for a binding the kernel does not read
    /// (made once).
    pub fn unused(&self) -> Result<&wgpu::Buffer, Error> {
        if let Some(b) = self.unused.get() {
            return Ok(b);
        }
        let b = self.storage("unused", 4)?;
        Ok(self.unused.get_or_init(|| b))
    }

    /// A uniform buffer holding `bytes` (a kernel's small parameters).
    pub fn uniform(&self, label: &str, bytes: &[u8]) -> wgpu::Buffer {
        let size = (bytes.len() as u64).div_ceil(16).max(1) * 16;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut padded = bytes.to_vec();
        padded.resize(size as usize, 0);
        self.queue.write_buffer(&buf, 0, &padded);
        buf
    }

    /// Records one dispatch of `pipeline` with `bindings` as group 0
    /// (binding `i` = `bindings[i]`, whole buffers) and submits it.
    pub fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) -> Result<(), Error> {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.dispatch_entries(pipeline, &entries, workgroups)
    }

    /// [`Gpu::dispatch`] with explicit bind group entries (buffer ranges).
    pub fn dispatch_entries(
        &self,
        pipeline: &wgpu::ComputePipeline,
        entries: &[wgpu::BindGroupEntry<'_>],
        workgroups: [u32; 3],
    ) -> Result<(), Error> {
        for (axis, &n) in workgroups.iter().enumerate() {
            if n > self.caps.max_workgroups {
                return Err(Error::TooLarge {
                    what: format!("dispatch axis {axis} workgroups"),
                    bytes: u64::from(n),
                    limit: u64::from(self.caps.max_workgroups),
                });
            }
        }
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries,
        });
        self.record(|enc| {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
        });
        self.check()
    }

    /// Runs `f` on the pending command encoder (made when there is none).
    fn record<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let enc = pending.get_or_insert_with(|| {
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("gpack step"),
                })
        });
        f(enc)
    }

    /// Submits the commands recorded so far (none: nothing is submitted).
    ///
    /// The lock is held through the submission: a thread that recorded
    /// commands and finds nothing pending then knows another thread's
    /// submission of them has reached the queue (a read-back mapped between
    /// that thread's take and its submit would be mapped before its copy
    /// ran, and read zeros: seen with the kernel tests' threads sharing
    /// one device).
    fn submit_pending(&self) -> Option<wgpu::SubmissionIndex> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let enc = pending.take()?;
        let index = self.submit([enc.finish()]);
        drop(pending);
        Some(index)
    }

    /// Submits `commands` (counted by [`Gpu::submissions`]).
    pub(crate) fn submit<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        commands: I,
    ) -> wgpu::SubmissionIndex {
        self.submits.fetch_add(1, Ordering::Relaxed);
        self.queue.submit(commands)
    }

    /// Submits the commands recorded so far without waiting for them.
    pub fn flush(&self) -> Result<(), Error> {
        self.submit_pending();
        self.check()
    }

    /// Drops the commands recorded and not submitted (after a failed step:
    /// its half-recorded work must not run before the next one's).
    pub fn discard(&self) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Queue submissions since the device was opened (uploads included):
    /// a model step's count shows how often the host waited on the device.
    pub fn submissions(&self) -> u64 {
        self.submits.load(Ordering::Relaxed)
    }

    /// Waits until everything submitted has run.
    pub fn wait(&self) -> Result<(), Error> {
        self.submit_pending();
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Device(e.to_string()))?;
        self.check()
    }

    /// Copies `len` bytes at `offset` of `buf` back to the host (submits
    /// what is pending and waits).
    pub fn read(&self, buf: &wgpu::Buffer, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        let mut out = self.read_many(&[(buf, offset, len)])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`Gpu::read`] of several ranges `(buffer, offset, len)` in one
    /// submission (with the commands pending before it).
    pub fn read_many(&self, ranges: &[(&wgpu::Buffer, u64, u64)]) -> Result<Vec<Vec<u8>>, Error> {
        let mut staged = Vec::with_capacity(ranges.len());
        for &(buf, offset, len) in ranges {
            let size = len.div_ceil(4) * 4;
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read-back"),
                size: size.max(4),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            if size > 0 {
                self.record(|enc| enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size));
            }
            staged.push((staging, len));
        }
        self.submit_pending();
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, (staging, _)) in staged.iter().enumerate() {
            let tx = tx.clone();
            staging.map_async(wgpu::MapMode::Read, .., move |r| {
                let _ = tx.send((i, r));
            });
        }
        drop(tx);
        self.wait()?;
        for _ in 0..staged.len() {
            let (_, r) = rx
                .recv()
                .map_err(|_| Error::Device("read-back never completed".into()))?;
            r.map_err(|e| Error::Device(e.to_string()))?;
        }
        let mut out = Vec::with_capacity(staged.len());
        for (staging, len) in &staged {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| Error::Device(e.to_string()))?;
            out.push(view[..*len as usize].to_vec());
            drop(view);
            staging.unmap();
        }
        Ok(out)
    }

    /// Writes `values` at element `at` of `buf` (queued: it lands before
    /// the next submission runs).
    ///
    /// # Panics
    /// If the values do not fit `buf`.
    pub fn write_f32(&self, buf: &wgpu::Buffer, at: usize, values: &[f32]) {
        self.write_words(buf, at, bytemuck::cast_slice(values));
    }

    /// [`Gpu::write_f32`] for `u32` values.
    ///
    /// # Panics
    /// If the values do not fit `buf`.
    pub fn write_u32(&self, buf: &wgpu::Buffer, at: usize, values: &[u32]) {
        self.write_words(buf, at, bytemuck::cast_slice(values));
    }

    fn write_words(&self, buf: &wgpu::Buffer, at: usize, bytes: &[u8]) {
        let off = at as u64 * 4;
        assert!(
            off + bytes.len() as u64 <= buf.size(),
            "write: {} bytes at {off} past a buffer of {}",
            bytes.len(),
            buf.size()
        );
        if !bytes.is_empty() {
            // The write lands before the next submission: the commands
            // recorded ahead of it go first, so it does not overtake them.
            self.submit_pending();
            self.queue.write_buffer(buf, off, bytes);
        }
    }

    /// Copies `copies` (source element, destination element, elements)
    /// from `src` to `dst` (recorded with the pending commands; 4-byte
    /// elements).
    ///
    /// # Panics
    /// If a copy does not fit its buffers.
    pub fn copy_f32(
        &self,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        copies: &[(usize, usize, usize)],
    ) -> Result<(), Error> {
        self.record(|enc| {
            for &(s, d, n) in copies {
                let (s, d, n) = (s as u64 * 4, d as u64 * 4, n as u64 * 4);
                assert!(
                    s + n <= src.size() && d + n <= dst.size(),
                    "copy: {n} bytes from {s} to {d} past the buffers"
                );
                if n > 0 {
                    enc.copy_buffer_to_buffer(src, s, dst, d, n);
                }
            }
        });
        self.check()
    }

    /// Zeroes `n` 4-byte elements of `buf` from element `at` (recorded with
    /// the pending commands).
    ///
    /// # Panics
    /// If the range does not fit `buf`.
    pub fn clear_f32(&self, buf: &wgpu::Buffer, at: usize, n: usize) -> Result<(), Error> {
        let (off, len) = (at as u64 * 4, n as u64 * 4);
        assert!(
            off + len <= buf.size(),
            "clear: {len} bytes at {off} past the buffer"
        );
        if len > 0 {
            self.record(|enc| enc.clear_buffer(buf, off, Some(len)));
        }
        self.check()
    }

    /// [`Gpu::read`] as `f32` values (`n` of them from the start).
    pub fn read_f32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<f32>, Error> {
        let bytes = self.read(buf, 0, n as u64 * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}
