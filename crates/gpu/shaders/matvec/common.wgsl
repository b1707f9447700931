// Helpers every decoder may use (spliced before the decoder).

const SHIFTS: vec4<u32> = vec4<u32>(0u, 8u, 16u, 24u);

// The four bytes of `q`, each shifted right by `sh` and masked with `mask`.
fn bits4(q: u32, sh: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(q) >> (SHIFTS + vec4<u32>(sh))) & vec4<u32>(mask);
}

// The low (sh = 0) or high (sh = 4) nibbles of the four bytes of `q`.
fn nib4(q: u32, sh: u32) -> vec4<f32> {
    return vec4<f32>(bits4(q, sh, 15u));
}

// The four bytes of `q` as unsigned values.
fn u8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(bits4(q, 0u, 255u));
}

// The four bytes of `q` as signed (i8) values.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// One byte as a signed (i8) value.
fn i8_of(b: u32) -> f32 {
    return f32(bitcast<i32>(b << 24u) >> 24u);
}
