// Q5_1 (block_q5_1 { f16 d @0; f16 m @2; u8 qh[4] @4; u8 qs[16] @8 }):
// x = (nibble | bit i of qh << 4)·d + m, nibbles as Q4_0.
fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    let m = sh(base, 2u, row);
    let qh = lw(base, 4u, 0u, row);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 8u, k, row);
        let hl = ((vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + 4u * k)) & vec4<u32>(1u)) << vec4<u32>(4u);
        let hh = ((vec4<u32>(qh) >> (vec4<u32>(16u, 17u, 18u, 19u) + 4u * k)) & vec4<u32>(1u)) << vec4<u32>(4u);
        w[k] = vec4<f32>(bits4(q, 0u, 15u) | hl) * d + m;
        w[k + 4u] = vec4<f32>(bits4(q, 4u, 15u) | hh) * d + m;
    }
}
