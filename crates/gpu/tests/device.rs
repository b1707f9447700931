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
