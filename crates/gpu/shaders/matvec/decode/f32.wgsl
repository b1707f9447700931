// F32: row-major little-endian f32 values.
fn decode(row: u32, u: u32) {
    let o = p.codes_off + row * p.cols + 32u * u;
    for (var k = 0u; k < 8u; k++) {
        let i = o + 4u * k;
        w[k] = bitcast<vec4<f32>>(vec4<u32>(codes[i], codes[i + 1u], codes[i + 2u], codes[i + 3u]));
    }
}
