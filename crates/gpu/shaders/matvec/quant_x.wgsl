// Activations to int8 per 32-column unit, as the CPU's integer kernels take
// them (gpack-quant kernels::act, ggml's q8_0 rule): d = amax / 127, q =
// roundf(clamp(x / d, ±127)) (half away from zero), d kept rounded to f16.
// Per vector v and unit u, 9 words at (v · units + u) · 9: the 32 codes as
// 8 packed i8x4 words (element order), then bitcast<u32>(d). A ragged last
// unit's missing columns are zeros.

struct QParams {
    n: u32,
    cols: u32,
    units: u32,
    // Invocations along x of the dispatch (blocks continue along y).
    width: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> xq: array<u32>;
@group(0) @binding(2) var<uniform> p: QParams;

fn round_half_away(v: f32) -> i32 {
    return i32(sign(v) * floor(abs(v) + 0.5));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * p.width;
    if (i >= p.n * p.units) {
        return;
    }
    let v = i / p.units;
    let u = i % p.units;
    let base = v * p.cols + u * 32u;
    let m = min(32u, p.cols - u * 32u);
    var amax = 0.0;
    for (var e = 0u; e < m; e++) {
        amax = max(amax, abs(x[base + e]));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    for (var k = 0u; k < 8u; k++) {
        var word = 0u;
        for (var j = 0u; j < 4u; j++) {
            let e = 4u * k + j;
            if (e < m) {
                let q = round_half_away(clamp(x[base + e] * id, -127.0, 127.0));
                word |= (bitcast<u32>(q) & 255u) << (8u * j);
            }
        }
        xq[i * 9u + k] = word;
    }
    xq[i * 9u + 8u] = bitcast<u32>(unpack2x16float(pack2x16float(vec2<f32>(d, 0.0))).x);
}
