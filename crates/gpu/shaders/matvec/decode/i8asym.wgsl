// I8Asym/G (crates/quant/src/layout.rs): u8 codes row-major, one f32 scale and
// min per group of G (16 or 32) columns; x = q·s + m.
@group(0) @binding(4) var<storage, read> scales: array<f32>;
@group(0) @binding(5) var<storage, read> mins: array<f32>;

fn decode(row: u32, u: u32) {
    let o = p.codes_off + (row * p.cols + 32u * u) / 4u;
    let gi = row * (p.cols / G) + 32u * u / G;
    let s0 = scales[p.scales_off + gi];
    let m0 = mins[p.mins_off + gi];
    var s1 = s0;
    var m1 = m0;
    if (G == 16u) {
        s1 = scales[p.scales_off + gi + 1u];
        m1 = mins[p.mins_off + gi + 1u];
    }
    for (var k = 0u; k < 8u; k++) {
        if (k < 4u) {
            w[k] = u8x4(codes[o + k]) * s0 + m0;
        } else {
            w[k] = u8x4(codes[o + k]) * s1 + m1;
        }
    }
}
