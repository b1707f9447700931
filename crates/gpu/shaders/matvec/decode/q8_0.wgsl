// Q8_0 (block_q8_0 { f16 d @0; i8 qs[32] @2 }): x = q·d.
fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    for (var k = 0u; k < 8u; k++) {
        w[k] = i8x4(lw(base, 2u, k, row)) * d;
    }
}
