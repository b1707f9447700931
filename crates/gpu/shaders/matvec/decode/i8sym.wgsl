// I8Sym/G (crates/quant/src/layout.rs): i8 codes row-major, one f32 scale per
// group of G (16 or 32) columns; x = q·s.
@group(0) @binding(4) var<storage, read> scales: array<f32>;

fn decode(row: u32, u: u32) {
    let o = p.codes_off + (row * p.cols + 32u * u) / 4u;
    let gi = p.scales_off + row * (p.cols / G) + 32u * u / G;
    let s0 = scales[gi];
    var s1 = s0;
    if (G == 16u) {
        s1 = scales[gi + 1u];
    }
    for (var k = 0u; k < 8u; k++) {
        w[k] = i8x4(codes[o + k]) * select(s1, s0, k < 4u);
    }
}
