// Q5_K (block_q5_K { f16 d @0; f16 dmin @2; u8 scales[12] @4; u8 qh[32] @16;
// u8 qs[128] @48 }), 256 per block: Q4_K plus a fifth bit, bit j of qh[b]
// for element 32j + b.
fn scale_min_k4(base: u32, j: u32, row: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(lb(base, 4u, j, row) & 63u), f32(lb(base, 4u, j + 4u, row) & 63u));
    }
    let a = lb(base, 4u, j + 4u, row);
    let sc = (a & 15u) | ((lb(base, 4u, j - 4u, row) >> 6u) << 4u);
    let m = (a >> 4u) | ((lb(base, 4u, j, row) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

fn decode(row: u32, u: u32) {
    let j = u % 8u;
    let base = gb(row, u / 8u);
    let d = sh(base, 0u, row);
    let dmin = sh(base, 2u, row);
    let sm = scale_min_k4(base, j, row);
    let s = d * sm.x;
    let m = -(dmin * sm.y);
    let shift = 4u * (j % 2u);
    for (var k = 0u; k < 8u; k++) {
        let lo = bits4(lw(base, 48u, 8u * (j / 2u) + k, row), shift, 15u);
        let hi = bits4(lw(base, 16u, k, row), j, 1u) << vec4<u32>(4u);
        w[k] = vec4<f32>(lo | hi) * s + m;
    }
}
