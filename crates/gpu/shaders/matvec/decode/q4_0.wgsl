// Q4_0 (block_q4_0 { f16 d @0; u8 qs[16] @2 }): x = (q - 8)·d; byte i of qs
// holds element i (low nibble) and i + 16 (high).
fn decode(row: u32, u: u32) {
    let base = gb(row, u);
    let d = sh(base, 0u, row);
    for (var k = 0u; k < 4u; k++) {
        let q = lw(base, 2u, k, row);
        w[k] = (nib4(q, 0u) - 8.0) * d;
        w[k + 4u] = (nib4(q, 4u) - 8.0) * d;
    }
}
