// Two f16 values packed in a word (low half first) as f32, exactly. This is
// also the path with `shader-f16`: naga 30 translates
// `bitcast<vec2<f16>>(u32)` as a scalar bitcast (lavapipe returned garbage
// and `.x` on the result does not validate), so no kernel relies on it.
fn f16x2(v: u32) -> vec2<f32> {
    return unpack2x16float(v);
}
