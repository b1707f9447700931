// Q3_K (block_q3_K { u8 hmask[32] @0; u8 qs[64] @32; u8 scales[12] @96;
// f16 d @108 }), 256 per block. 16 signed 6-bit scales; element
// e = 128h + 32k + b has q = ((qs[32h + b] >> 2k) & 3) - (bit e/32 of
// hmask[b] ? 0 : 4) and x = (d·sc_{e/16})·q.
fn q3_scale(base: u32, i: u32, row: u32) -> f32 {
    var lo: u32;
    if (i < 8u) {
        lo = lb(base, 96u, i, row) & 15u;
    } else {
        lo = lb(base, 96u, i - 8u, row) >> 4u;
    }
    let hi = (lb(base, 96u, 8u + i % 4u, row) >> (2u * (i / 4u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

fn decode(row: u32, u: u32) {
    let j = u % 8u;
    let base = gb(row, u / 8u);
    let d = sh(base, 108u, row);
    let s0 = d * q3_scale(base, 2u * j, row);
    let s1 = d * q3_scale(base, 2u * j + 1u, row);
    let h = j / 4u;
    let shift = 2u * (j % 4u);
    for (var k = 0u; k < 8u; k++) {
        let ql = vec4<f32>(bits4(lw(base, 32u, 8u * h + k, row), shift, 3u));
        let hb = vec4<f32>(bits4(lw(base, 0u, k, row), j, 1u));
        let q = ql - 4.0 + 4.0 * hb;
        w[k] = q * select(s1, s0, k < 4u);
    }
}
