// IQ4_XS (block_iq4_xs { f16 d @0; u16 scales_h @2; u8 scales_l[4] @4;
// u8 qs[128] @8 }), 256 per block. Sub-block j of 32:
// ls = (scales_l[j/2] >> 4(j%2)) & 15 | ((scales_h >> 2j) & 3) << 4,
// x = (d·(ls - 32))·kvalues_iq4nl[q], qs[16j..16j+16] in Q4_0's nibble order.
var<private> KV: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn kv4(q: u32, s: u32) -> vec4<f32> {
    let i = bits4(q, s, 15u);
    return vec4<f32>(KV[i.x], KV[i.y], KV[i.z], KV[i.w]);
}

fn decode(row: u32, u: u32) {
    let j = u % 8u;
    let base = gb(row, u / 8u);
    let d = sh(base, 0u, row);
    let lo = (lw(base, 4u, 0u, row) >> (4u * j)) & 15u;
    let hi = (su16(base, 2u, row) >> (2u * j)) & 3u;
    let dl = d * f32(i32(lo | (hi << 4u)) - 32);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 8u, 4u * j + k, row);
        w[k] = kv4(q, 0u) * dl;
        w[k + 4u] = kv4(q, 4u) * dl;
    }
}
