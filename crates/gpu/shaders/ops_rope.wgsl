// Rotary embeddings from the host's table (gpack-runtime ops::Rope::apply
// with the `cs` of Rope::cos_sin: `[n_tok][n_rot / 2][cos, sin]`, so
// linear, YaRN and LongRoPE scaling are already in it). Dims past n_rot
// are left unchanged. One invocation per rotated pair.

struct RopeParams {
    n_tok: u32,
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    neox: u32,
    off: u32,
    stride: u32,
    _pad: u32,
}

@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> cs: array<f32>;
@group(0) @binding(3) var<uniform> p: RopeParams;

@compute @workgroup_size(64)
fn rope(ids: Ids) {
    let hr = p.n_rot / 2u;
    let i = group_index(ids) * WG + ids.lid;
    if i >= p.n_tok * p.n_heads * hr {
        return;
    }
    let k = i % hr;
    let h = (i / hr) % p.n_heads;
    let t = i / (hr * p.n_heads);
    let base = p.off + t * p.stride + h * p.head_dim;
    var i0 = base + 2u * k;
    var i1 = i0 + 1u;
    if p.neox != 0u {
        i0 = base + k;
        i1 = base + k + hr;
    }
    let c = cs[t * p.n_rot + 2u * k];
    let s = cs[t * p.n_rot + 2u * k + 1u];
    let x0 = x[i0];
    let x1 = x[i1];
    x[i0] = x0 * c - x1 * s;
    x[i1] = x0 * s + x1 * c;
}
