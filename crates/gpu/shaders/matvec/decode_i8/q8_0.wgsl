// Q8_0 (block_q8_0 { f16 d @0; i8 qs[32] @2 }): the codes are the packed
// i8 words themselves; x = q·d.
fn decode_i8(row: u32, u: u32) -> vec2<f32> {
    let base = gb(row, u);
    for (var k = 0u; k < 8u; k++) {
        wq[k] = lw(base, 2u, k, row);
    }
    return vec2<f32>(sh(base, 0u, row), 0.0);
}
