// RMS norms: `x / sqrt(mean(x²) + eps) (· w)` per row (gpack-runtime
// ops::rmsnorm, rms_inv, add_rmsnorm). One workgroup per row.
//
// Rows are addressed as `off + (r / per_tok) · stride + (r % per_tok) · d`:
// plain rows (per_tok 1, stride d) or the heads of a token inside a wider
// row (the q or k heads of q‖k‖v).

struct NormParams {
    rows: u32,
    d: u32,
    per_tok: u32,
    off: u32,
    stride: u32,
    has_w: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> p: NormParams;

fn row_base(r: u32) -> u32 {
    return p.off + (r / p.per_tok) * p.stride + (r % p.per_tok) * p.d;
}

fn weight(i: u32) -> f32 {
    if p.has_w != 0u {
        return w[i];
    }
    return 1.0;
}

// dst[r · d ..] = rmsnorm(src row r) (· w): rows out dense.
@compute @workgroup_size(64)
fn rmsnorm(ids: Ids) {
    let g = group_index(ids);
    let r = min(g, p.rows - 1u);
    let base = row_base(r);
    var s = 0.0;
    for (var i = ids.lid; i < p.d; i += WG) {
        let v = src[base + i];
        s += v * v;
    }
    let inv = 1.0 / sqrt(wg_sum(s, ids) / f32(p.d) + p.eps);
    if g < p.rows {
        for (var i = ids.lid; i < p.d; i += WG) {
            dst[r * p.d + i] = src[base + i] * inv * weight(i);
        }
    }
}

// dst row r = rmsnorm(dst row r) (· w), rows addressed in dst.
@compute @workgroup_size(64)
fn rmsnorm_inplace(ids: Ids) {
    let g = group_index(ids);
    let r = min(g, p.rows - 1u);
    let base = row_base(r);
    var s = 0.0;
    for (var i = ids.lid; i < p.d; i += WG) {
        let v = dst[base + i];
        s += v * v;
    }
    let inv = 1.0 / sqrt(wg_sum(s, ids) / f32(p.d) + p.eps);
    workgroupBarrier();
    if g < p.rows {
        for (var i = ids.lid; i < p.d; i += WG) {
            dst[base + i] = dst[base + i] * inv * weight(i);
        }
    }
}

// dst[r · d ..] += rmsnorm(src row r) (· w): the residual add through a
// post-norm (gemma's post-attention and post-FFN norms).
@compute @workgroup_size(64)
fn add_rmsnorm(ids: Ids) {
    let g = group_index(ids);
    let r = min(g, p.rows - 1u);
    let base = row_base(r);
    var s = 0.0;
    for (var i = ids.lid; i < p.d; i += WG) {
        let v = src[base + i];
        s += v * v;
    }
    let inv = 1.0 / sqrt(wg_sum(s, ids) / f32(p.d) + p.eps);
    if g < p.rows {
        for (var i = ids.lid; i < p.d; i += WG) {
            dst[r * p.d + i] += src[base + i] * inv * weight(i);
        }
    }
}
