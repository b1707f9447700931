// BF16: row-major bfloat16 values (the high half of an f32).
fn bf16x2(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xFFFF0000u));
}

fn decode(row: u32, u: u32) {
    let e = row * p.cols + 32u * u;
    if ((e & 1u) == 0u) {
        let o = p.codes_off + e / 2u;
        for (var k = 0u; k < 8u; k++) {
            w[k] = vec4<f32>(bf16x2(codes[o + 2u * k]), bf16x2(codes[o + 2u * k + 1u]));
        }
    } else {
        for (var i = 0u; i < 32u; i++) {
            w[i / 4u][i % 4u] = bf16x2(codes[p.codes_off + (e + i) / 2u])[(e + i) & 1u];
        }
    }
}
