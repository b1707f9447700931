// IQ4_NL (block_iq4_nl { f16 d @0; u8 qs[16] @2 }): x = kvalues_iq4nl[q]·d,
// nibbles as Q4_0.
var<private> KV: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn kv4(q: u32, s: u32) -> vec4<f32> {
    let i = bits4(q, s, 15u);
    return vec4<f32>(KV[i.x], KV[i.y], KV[i.z], KV[i.w]);
}

fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 2u, k, row);
        w[k] = kv4(q, 0u) * d;
        w[k + 4u] = kv4(q, 4u) * d;
    }
}
