// The generic matmul body: y[v][row] = Σ_c W[row][c] · x[v][c] for the rows
// of one piece of a weight and NB vectors per workgroup.
//
// Spliced after: the constants NB (vectors per workgroup) and K (slices per
// row), `f16x2`, the helpers of common.wgsl and one decoder
// (decode/*.wgsl) whose `decode(row, u)` writes the 32 weights of row `row`,
// columns 32u .. 32u + 32, into `w` (crates/gpu/src/matvec/source.rs).
//
// A workgroup is 16 rows × K slices: invocation (r, k) takes row 16g + r and
// the units u = k, k + K, …; invocations r = 0..16 of one slice read the 16
// consecutive words a Rows16 group-block keeps for its 16 rows. The K partial
// sums of a row are added in workgroup memory.

struct Params {
    // Rows of this piece.
    rows: u32,
    cols: u32,
    // Vectors in x and y.
    n: u32,
    // 32-column units per row: ceil(cols / 32).
    units: u32,
    // Word offsets of the codes, scales and mins inside their bindings.
    codes_off: u32,
    scales_off: u32,
    mins_off: u32,
    // Workgroups along x of this dispatch (the row groups continue along z).
    groups_x: u32,
    // Rows of the whole matrix: y is n × y_stride.
    y_stride: u32,
    // The piece's first row in y.
    y_row0: u32,
    // Rows16: words of one group-block (16 × type size / 4), blocks per row.
    gb_words: u32,
    nb: u32,
}

@group(0) @binding(0) var<storage, read> codes: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 16u * K;

// The decoded weights of one unit: element i is w[i / 4][i % 4].
var<private> w: array<vec4<f32>, 8>;

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
            decode(row, u);
            let c0 = u * 32u;
            let full = c0 + 32u <= p.cols;
            for (var v = 0u; v < NB; v++) {
                if (v0 + v < p.n) {
                    let xb = (v0 + v) * p.cols + c0;
                    var s = 0.0;
                    if (full) {
                        for (var q = 0u; q < 8u; q++) {
                            let i = xb + 4u * q;
                            s += dot(w[q], vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]));
                        }
                    } else {
                        // The ragged last unit: only the columns that exist.
                        for (var e = 0u; e < p.cols - c0; e++) {
                            s += w[e / 4u][e % 4u] * x[xb + e];
                        }
                    }
                    acc[v] += s;
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
