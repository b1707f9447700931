// The matmul body with packed int8 dot products (WGSL `dot4I8Packed`, the
// language feature packed_4x8_integer_dot_product): y[v][row] = Σ_u dw·dx ·
// (Σ code·q + off · Σ q) over the 32-column units u, the activations
// quantized to int8 per unit on the device first (quant_x.wgsl), as the
// CPU's integer kernels compute it (exact integer sums per unit).
//
// The same workgroup shape, parameters and reduction as body.wgsl (16 rows ×
// K slices; see there); spliced after the constants, the helpers and one
// int8 decoder (decode_i8/*.wgsl) whose `decode_i8(row, u)` writes the
// unit's 32 integer codes into `wq` (8 packed i8x4 words, element order) and
// returns (dw, off): the weights are dw · (code + off).

struct Params {
    rows: u32,
    cols: u32,
    n: u32,
    units: u32,
    codes_off: u32,
    scales_off: u32,
    mins_off: u32,
    groups_x: u32,
    y_stride: u32,
    y_row0: u32,
    gb_words: u32,
    nb: u32,
}

@group(0) @binding(0) var<storage, read> codes: array<u32>;
// [n][units][9]: 8 code words and the f32 scale of each unit.
@group(0) @binding(1) var<storage, read> xq: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 16u * K;
const ONES: u32 = 0x01010101u;

var<private> wq: array<u32, 8>;

var<workgroup> red: array<f32, NB * WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wid.x + wid.z * p.groups_x;
    let r = li % 16u;
    let k = li / 16u;
    let row = g * 16u + r;
    let v0 = wid.y * NB;
    var acc: array<f32, NB>;
    if (row < p.rows) {
        for (var u = k; u < p.units; u += K) {
            let s = decode_i8(row, u);
            for (var v = 0u; v < NB; v++) {
                if (v0 + v < p.n) {
                    let xb = ((v0 + v) * p.units + u) * 9u;
                    var isum = 0;
                    var xsum = 0;
                    for (var q = 0u; q < 8u; q++) {
                        let xw = xq[xb + q];
                        isum += dot4I8Packed(wq[q], xw);
                        xsum += dot4I8Packed(xw, ONES);
                    }
                    let dx = bitcast<f32>(xq[xb + 8u]);
                    acc[v] += s.x * dx * (f32(isum) + s.y * f32(xsum));
                }
            }
        }
    }
    for (var v = 0u; v < NB; v++) {
        red[v * WG + li] = acc[v];
    }
    workgroupBarrier();
    if (k == 0u && row < p.rows) {
        for (var v = 0u; v < NB; v++) {
            if (v0 + v < p.n) {
                var s = 0.0;
                for (var kk = 0u; kk < K; kk++) {
                    s += red[v * WG + kk * 16u + r];
                }
                y[(v0 + v) * p.y_stride + p.y_row0 + row] = s;
            }
        }
    }
}
