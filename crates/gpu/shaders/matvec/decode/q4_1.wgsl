// Q4_1 (block_q4_1 { f16 d @0; f16 m @2; u8 qs[16] @4 }): x = q·d + m,
// nibbles as Q4_0.
fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    let m = sh(base, 2u, row);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 4u, k, row);
        w[k] = nib4(q, 0u) * d + m;
        w[k + 4u] = nib4(q, 4u) * d + m;
    }
}
