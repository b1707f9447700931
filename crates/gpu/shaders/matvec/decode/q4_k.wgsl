// Q4_K (block_q4_K { f16 d @0; f16 dmin @2; u8 scales[12] @4;
// u8 qs[128] @16 }), 256 per block. Sub-block j of 32: 6-bit (sc, m) as
// ggml's get_scale_min_k4, s = d·sc, m' = -(dmin·m); qs[32(j/2) + b] holds
// element 32j + b in its low (j even) or high (j odd) nibble; x = q·s + m'.
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
        w[k] = nib4(lw(base, 16u, 8u * (j / 2u) + k, row), shift) * s + m;
    }
}
