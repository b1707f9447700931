// Two f16 values packed in a word (low half first) as f32, exactly. This is
// also the path with `shader-f16`: naga 30 lowers `bitcast<vec2<f16>>(u32)`
// as a scalar f32 bitcast (on lavapipe it returned the word's f32 bits in
// both lanes, and `.x` on the result does not validate); see
// gfx-rs/wgpu#8896 and #4403 (bitcasts between types of different widths).
fn f16x2(v: u32) -> vec2<f32> {
    return unpack2x16float(v);
}
