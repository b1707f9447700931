// I4Asym/G32 (crates/quant/src/layout.rs): nibbles as I4Sym, one f32 scale
// and min per group; x = q·s + m.
@group(0) @binding(4) var<storage, read> scales: array<f32>;
@group(0) @binding(5) var<storage, read> mins: array<f32>;

fn decode(row: u32, u: u32) {
    let o = p.codes_off + (row * p.cols / 2u + 16u * u) / 4u;
    let gi = row * (p.cols / 32u) + u;
    let s = scales[p.scales_off + gi];
    let m = mins[p.mins_off + gi];
    for (var k = 0u; k < 4u; k++) {
        let q = codes[o + k];
        w[k] = nib4(q, 0u) * s + m;
        w[k + 4u] = nib4(q, 4u) * s + m;
    }
}
