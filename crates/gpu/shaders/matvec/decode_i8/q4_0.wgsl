// Q4_0 (block_q4_0 { f16 d @0; u8 qs[16] @2 }): x = (q - 8)·d; byte i of qs
// holds element i (low nibble) and i + 16 (high). The nibbles 0..15 are
// valid i8 codes; the -8 is the offset.
fn decode_i8(row: u32, u: u32) -> vec2<f32> {
    let base = gb(row, u);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 2u, k, row);
        wq[k] = q & 0x0f0f0f0fu;
        wq[k + 4u] = (q >> 4u) & 0x0f0f0f0fu;
    }
    return vec2<f32>(sh(base, 0u, row), -8.0);
}
