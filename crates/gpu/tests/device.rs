//! Opening a device and running one kernel on it. On machines without a
//! hardware GPU this runs on Mesa's lavapipe (`.ci/run` installs it); a
//! machine with no Vulkan driver at all fails here, loudly, by design.

use gpack_gpu::{Gpu, Want};

fn gpu() -> Gpu {
    Gpu::open(Want::Any).expect("a Vulkan adapter (apt-get install mesa-vulkan-drivers libvulkan1)")
}

#[test]
fn axpy_runs_and_reads_back() {
    let g = gpu();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let xb = g.upload("x", bytemuck::cast_slice(&x)).unwrap();
    let yb = g.upload("y", bytemuck::cast_slice(&y)).unwrap();
    let mut params = Vec::new();
    params.extend_from_slice(&(n as u32).to_le_bytes());
    params.extend_from_slice(&3.0f32.to_le_bytes());
    let pb = g.uniform("p", &params);
    let p = g
        .pipeline("smoke", include_str!("../shaders/smoke.wgsl"), "main")
        .unwrap();
    g.dispatch(&p, &[&xb, &yb, &pb], [(n as u32).div_ceil(64), 1, 1])
        .unwrap();
    let out = g.read_f32(&yb, n).unwrap();
    for i in 0..n {
        assert_eq!(out[i], 3.0 * x[i] + y[i], "element {i}");
    }
}

#[test]
fn a_bad_shader_is_an_error_naming_it() {
    let g = gpu();
    let e = g
        .pipeline(
            "broken",
            "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
            "main",
        )
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("broken::main"), "{msg}");
}

#[test]
fn auto_never_opens_a_software_adapter() {
    match Gpu::open(Want::Auto) {
        Ok(g) => assert_eq!(g.caps().kind, gpack_gpu::AdapterKind::Hardware),
        Err(e) => assert!(e.to_string().contains("no hardware GPU"), "{e}"),
    }
}

/// Without a GPU device node `auto` answers without loading a driver: the
/// process's anonymous memory does not grow by the ICD's (lavapipe's LLVM)
/// megabytes, and the error names the nodes looked for.
#[test]
fn auto_without_a_device_node_loads_no_driver() {
    if gpack_gpu::hardware_gpu_possible() {
        // This machine has a GPU node: the check answers "maybe", and
        // `auto_never_opens_a_software_adapter` covers what happens.
        assert!(
            std::path::Path::new("/dev/dri").exists()
                || std::path::Path::new("/dev/nvidia0").exists()
                || std::path::Path::new("/dev/dxg").exists()
        );
        return;
    }
    // The other tests of this binary load the driver in this process: the
    // check runs in a child that runs this test alone.
    if std::env::var_os("GPACK_GPU_AUTO_CHILD").is_none() {
        let o = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "auto_without_a_device_node_loads_no_driver",
                "--test-threads",
                "1",
            ])
            .env("GPACK_GPU_AUTO_CHILD", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        return;
    }
    let e = Gpu::open(Want::Auto).unwrap_err().to_string();
    assert!(e.contains("/dev/dri/renderD*"), "{e}");
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(!maps.contains("libvulkan"), "auto loaded the Vulkan loader");
}

#[test]
fn an_adapter_index_out_of_range_names_what_exists() {
    let n = Gpu::adapters().len();
    let e = Gpu::open(Want::Index(n + 5)).unwrap_err().to_string();
    assert!(e.contains(&format!("no adapter number {}", n + 5)), "{e}");
}

#[test]
fn caps_are_reported() {
    let g = gpu();
    let c = g.caps();
    eprintln!("{c:?}");
    assert!(!c.name.is_empty());
    assert!(c.max_binding >= 128 << 20, "{c:?}");
}

#[test]
fn optional_features_can_be_withheld() {
    let g = Gpu::open_with(
        Want::Any,
        gpack_gpu::Allow {
            f16: false,
            subgroups: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!g.caps().f16 && !g.caps().subgroups);
}

/// A buffer the adapter refuses (here: one word over its largest buffer)
/// is caught by the allocation's error scope: an error naming the buffer
/// and its bytes, not a panic, and not a failure left for the next call
/// (the device still runs a kernel after it). A driver out of device
/// memory takes the same path with the out-of-memory filter (lavapipe
/// allocates host memory and cannot be made to refuse here).
#[test]
fn a_refused_allocation_is_an_error_naming_the_buffer() {
    let g = gpu();
    let bytes = g.caps().max_buffer + 4;
    let e = g.storage("kv cache of everything", bytes).unwrap_err();
    assert!(
        matches!(
            e,
            gpack_gpu::Error::Allocation { .. } | gpack_gpu::Error::OutOfMemory { .. }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("kv cache of everything") && msg.contains(&bytes.to_string()),
        "{msg}"
    );
    g.check().expect("the refusal is not left for a later call");
    let x = g.upload("x", bytemuck::cast_slice(&[1.0f32, 2.0])).unwrap();
    assert_eq!(g.read_f32(&x, 2).unwrap(), vec![1.0, 2.0]);
}

/// Kernels are recorded into one pending encoder and submitted once, by
/// the read-back that needs them; a write into a buffer with work pending
/// submits that work first, so it does not overtake it.
#[test]
fn kernels_are_recorded_and_submitted_by_the_read_back() {
    let g = gpu();
    let n = 256usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let xb = g.upload("x", bytemuck::cast_slice(&x)).unwrap();
    let yb = g.storage("y", (n * 4) as u64).unwrap();
    let mut params = Vec::new();
    params.extend_from_slice(&(n as u32).to_le_bytes());
    params.extend_from_slice(&1.0f32.to_le_bytes());
    let pb = g.uniform("p", &params);
    let p = g
        .pipeline("smoke", include_str!("../shaders/smoke.wgsl"), "main")
        .unwrap();
    g.wait().unwrap();
    let before = g.submissions();
    for _ in 0..5 {
        g.dispatch(&p, &[&xb, &yb, &pb], [(n as u32).div_ceil(64), 1, 1])
            .unwrap();
    }
    assert_eq!(
        g.submissions(),
        before,
        "five kernels recorded, none submitted"
    );
    // y = 5 x; then x is overwritten: the kernels above must have read the
    // old x, so the write submits them first.
    g.write_f32(&xb, 0, &vec![100.0; n]);
    assert_eq!(
        g.submissions(),
        before + 1,
        "the write submitted the pending kernels"
    );
    g.dispatch(&p, &[&xb, &yb, &pb], [(n as u32).div_ceil(64), 1, 1])
        .unwrap();
    let y = g.read_f32(&yb, n).unwrap();
    assert_eq!(
        g.submissions(),
        before + 2,
        "one more submission: the read-back's"
    );
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, 5.0 * i as f32 + 100.0, "element {i}");
    }
}
