// Q2_K (block_q2_K { u8 scales[16] @0; u8 qs[64] @16; f16 d @80;
// f16 dmin @82 }), 256 per block. Sub-block i of 16: s = d·(sc_i & 15),
// m = -(dmin·(sc_i >> 4)); element e = 128h + 32k + b has
// q = (qs[32h + b] >> 2k) & 3 and x = q·s + m.
fn decode(row: u32, u: u32) {
    let j = u % 8u;
    let base = gb(row, u / 8u);
    let d = sh(base, 80u, row);
    let dmin = sh(base, 82u, row);
    let c0 = lb(base, 0u, 2u * j, row);
    let c1 = lb(base, 0u, 2u * j + 1u, row);
    let s0 = d * f32(c0 & 15u);
    let m0 = -(dmin * f32(c0 >> 4u));
    let s1 = d * f32(c1 & 15u);
    let m1 = -(dmin * f32(c1 >> 4u));
    let h = j / 4u;
    let shift = 2u * (j % 4u);
    for (var k = 0u; k < 4u; k++) {
        w[k] = vec4<f32>(bits4(lw(base, 16u, 8u * h + k, row), shift, 3u)) * s0 + m0;
        w[k + 4u] = vec4<f32>(bits4(lw(base, 16u, 8u * h + k + 4u, row), shift, 3u)) * s1 + m1;
    }
}
