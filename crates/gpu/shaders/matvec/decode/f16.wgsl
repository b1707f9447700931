// F16: row-major IEEE binary16 values (a row starts on an odd element when
// cols is odd).
fn decode(row: u32, u: u32) {
    let e = row * p.cols + 32u * u;
    if ((e & 1u) == 0u) {
        let o = p.codes_off + e / 2u;
        for (var k = 0u; k < 8u; k++) {
            w[k] = vec4<f32>(f16x2(codes[o + 2u * k]), f16x2(codes[o + 2u * k + 1u]));
        }
    } else {
        for (var i = 0u; i < 32u; i++) {
            w[i / 4u][i % 4u] = f16x2(codes[p.codes_off + (e + i) / 2u])[(e + i) & 1u];
        }
    }
}
