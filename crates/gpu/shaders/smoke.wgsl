// y[i] = a * x[i] + y[i]: the device smoke test (tests/device.rs).
struct Params { n: u32, a: f32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < p.n) {
        y[i] = p.a * x[i] + y[i];
    }
}
