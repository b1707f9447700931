// MXFP4 (block_mxfp4 { u8 e @0; u8 qs[16] @1 }): x = kvalues_mxfp4[q]·2^(e-128)
// (ggml's e8m0_to_fp32_half; the e2m1 values are stored doubled), nibbles as
// Q4_0.
var<private> KV: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
    0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

fn kv4(q: u32, s: u32) -> vec4<f32> {
    let i = bits4(q, s, 15u);
    return vec4<f32>(KV[i.x], KV[i.y], KV[i.z], KV[i.w]);
}

fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let e = sb(base, 0u, row);
    let d = select(bitcast<f32>((max(e, 1u) - 1u) << 23u), bitcast<f32>(2097152u << e), e < 2u);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 1u, k, row);
        w[k] = kv4(q, 0u) * d;
        w[k + 4u] = kv4(q, 4u) * d;
    }
}
