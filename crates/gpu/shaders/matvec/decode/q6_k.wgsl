// Q6_K (block_q6_K { u8 ql[128] @0; u8 qh[64] @128; i8 scales[16] @192;
// f16 d @208 }), 256 per block. Element e = 128h + t: low nibble
// (ql[64h + t%64] >> 4(t/64)) & 15, high bits (qh[32h + t%32] >> 2(t/32)) & 3,
// q = (lo | hi << 4) - 32, x = (d·sc_{e/16})·q.
fn decode(row: u32, u: u32) {
    let j = u % 8u;
    let base = gb(row, u / 8u);
    let d = sh(base, 208u, row);
    let s0 = d * i8_of(lb(base, 192u, 2u * j, row));
    let s1 = d * i8_of(lb(base, 192u, 2u * j + 1u, row));
    let h = j / 4u;
    let t = j % 4u;
    for (var k = 0u; k < 8u; k++) {
        let lo = bits4(lw(base, 0u, 16u * h + 8u * (t % 2u) + k, row), 4u * (t / 2u), 15u);
        let hi = bits4(lw(base, 128u, 8u * h + k, row), 2u * t, 3u) << vec4<u32>(4u);
        w[k] = (vec4<f32>(lo | hi) - 32.0) * select(s1, s0, k < 4u);
    }
}
