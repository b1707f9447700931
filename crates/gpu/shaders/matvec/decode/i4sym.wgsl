// I4Sym/G32 (crates/quant/src/layout.rs): 16 bytes of nibbles per group
// (byte i: element i low, i + 16 high, as Q4_0), one f32 scale; x = (q - 8)·s.
@group(0) @binding(4) var<storage, read> scales: array<f32>;

fn decode(row: u32, u: u32) {
    let o = p.codes_off + (row * p.cols / 2u + 16u * u) / 4u;
    let s = scales[p.scales_off + row * (p.cols / 32u) + u];
    for (var k = 0u; k < 4u; k++) {
        let q = codes[o + k];
        w[k] = (nib4(q, 0u) - 8.0) * s;
        w[k + 4u] = (nib4(q, 4u) - 8.0) * s;
    }
}
