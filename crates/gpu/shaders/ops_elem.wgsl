// Element-wise kernels: the residual add, scales and soft-caps of a step,
// and the gated activations of the FFN (gpack-runtime model/step.rs glu,
// ops::silu, ops::gelu_tanh). One invocation per element.

struct ElemParams {
    n: u32,
    mode: u32,
    a: f32,
    ff: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<uniform> p: ElemParams;

fn elem_index(ids: Ids) -> u32 {
    return group_index(ids) * WG + ids.lid;
}

// dst[i] += a · src[i] (a = 1, or granite's residual_scale); with mode
// (a period) non-zero, dst[i] += a · src[i % mode]: a bias row broadcast
// over token rows.
@compute @workgroup_size(64)
fn add(ids: Ids) {
    let i = elem_index(ids);
    if i < p.n {
        let j = select(i, i % max(p.mode, 1u), p.mode != 0u);
        dst[i] += p.a * src[j];
    }
}

// mode 0: dst[i] *= a; 1: dst[i] = a · tanh(dst[i] / a) (soft-cap);
// 2: dst[i] /= a (granite's logit_scale).
@compute @workgroup_size(64)
fn map(ids: Ids) {
    let i = elem_index(ids);
    if i < p.n {
        let x = dst[i];
        switch p.mode {
            case 0u: { dst[i] = x * p.a; }
            case 1u: { dst[i] = p.a * tanh_safe(x / p.a); }
            default: { dst[i] = x / p.a; }
        }
    }
}

// dst[t · ff + j] = act(g) · u with g = src[t · 2ff + j], u = src[t · 2ff +
// ff + j] (gate‖up rows). mode 0: SiLU; 1: tanh GELU; 2: gpt-oss's clamped
// SwiGLU (alpha 1.702, limit 7).
@compute @workgroup_size(64)
fn glu(ids: Ids) {
    let i = elem_index(ids);
    if i < p.n {
        let t = i / p.ff;
        let j = i % p.ff;
        let g = src[t * 2u * p.ff + j];
        let u = src[t * 2u * p.ff + p.ff + j];
        switch p.mode {
            case 0u: { dst[i] = g / (1.0 + exp(-g)) * u; }
            case 1u: {
                let c = 0.7978846;
                dst[i] = 0.5 * g * (1.0 + tanh_safe(c * (g + 0.044715 * g * g * g))) * u;
            }
            default: {
                let gc = min(g, 7.0);
                let uc = clamp(u, -7.0, 7.0);
                dst[i] = (uc + 1.0) * (gc / (1.0 + exp(-1.702 * gc)));
            }
        }
    }
}

// dst[rows[3k+1] · d + j] += w_k · src[rows[3k] · d + j], w_k the f32 bits
// of rows[3k+2], for p.n = pairs · d elements (p.ff = d): the routed
// experts' outputs added into their tokens' rows. A pair's destination rows
// are distinct within one dispatch (a token picks an expert once), so no
// two invocations write one element.
@group(0) @binding(2) var<storage, read> rows: array<u32>;

@compute @workgroup_size(64)
fn add_rows(ids: Ids) {
    let i = elem_index(ids);
    if i < p.n {
        let k = i / p.ff;
        let j = i % p.ff;
        let w = bitcast<f32>(rows[3u * k + 2u]);
        dst[rows[3u * k + 1u] * p.ff + j] += w * src[rows[3u * k] * p.ff + j];
    }
}
