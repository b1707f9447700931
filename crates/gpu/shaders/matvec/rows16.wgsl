// Reading one row's fields out of a Rows16 group-block (the normative layout
// is crates/quant/src/interleave.rs): a field at byte `s` of the ggml block
// starts at byte 16·s of the group-block, i.e. word 4·s; a field of 1 or 2
// bytes holds the 16 rows' values one after another, a longer one is 4-byte
// words, 16 rows per word index.

// The first word of block `b` of the row group holding `row`.
fn gb(row: u32, b: u32) -> u32 {
    return p.codes_off + ((row / 16u) * p.nb + b) * p.gb_words;
}

// Word `j` of the long field at byte `s`, for `row`.
fn lw(base: u32, s: u32, j: u32, row: u32) -> u32 {
    return codes[base + s * 4u + j * 16u + row % 16u];
}

// Byte `o` of the long field at byte `s`, for `row`.
fn lb(base: u32, s: u32, o: u32, row: u32) -> u32 {
    return (lw(base, s, o / 4u, row) >> (8u * (o % 4u))) & 255u;
}

// The 2-byte field at byte `s` as a u16, for `row`.
fn su16(base: u32, s: u32, row: u32) -> u32 {
    let r = row % 16u;
    return (codes[base + s * 4u + r / 2u] >> (16u * (r & 1u))) & 65535u;
}

// The 2-byte field at byte `s` as an f16, for `row`.
fn sh(base: u32, s: u32, row: u32) -> f32 {
    let r = row % 16u;
    return f16x2(codes[base + s * 4u + r / 2u])[r & 1u];
}

// The 1-byte field at byte `s`, for `row`.
fn sb(base: u32, s: u32, row: u32) -> u32 {
    let r = row % 16u;
    return (codes[base + s * 4u + r / 4u] >> (8u * (r & 3u))) & 255u;
}
