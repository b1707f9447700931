// Q5_0 (block_q5_0 { f16 d @0; u8 qh[4] @2; u8 qs[16] @6 }):
// x = ((nibble | bit i of qh << 4) - 16)·d, nibbles as Q4_0.
fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    let qh = lw(base, 2u, 0u, row);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 6u, k, row);
        let hl = ((vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + 4u * k)) & vec4<u32>(1u)) << vec4<u32>(4u);
        let hh = ((vec4<u32>(qh) >> (vec4<u32>(16u, 17u, 18u, 19u) + 4u * k)) & vec4<u32>(1u)) << vec4<u32>(4u);
        w[k] = (vec4<f32>(bits4(q, 0u, 15u) | hl) - 16.0) * d;
        w[k + 4u] = (vec4<f32>(bits4(q, 4u, 15u) | hh) - 16.0) * d;
    }
}
