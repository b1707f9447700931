// Shared by every ops_*.wgsl kernel (prepended by gpack_gpu::ops, after the
// variant's own lines: `enable f16;`, the `KV` storage type of the f16 cache
// and its kv_get/kv_put, the `Ids` builtins and wg_sum/wg_max; see
// src/ops.rs). Workgroups are 64 invocations, one dimension.

const WG: u32 = 64u;
// The lowest finite f32: the identity of max (WGSL has no -inf literal).
const LOWEST: f32 = -3.40282347e38;

// The workgroup's linear index over a 2-D grid (grids wider than the
// adapter's per-axis limit wrap into y).
fn group_index(ids: Ids) -> u32 {
    return ids.wg.x + ids.wg.y * ids.nwg.x;
}

// tanh as a rational function (Eigen's and XLA's `ptanh_float`: x·P(x²)/
// Q(x²) on |x| ≤ 7.9053, where it reaches ±1 in f32; x itself below
// 4e-4): within 6 ulp everywhere. Not the builtin: drivers may compute
// tanh through exp, which loses the relative precision near 0 (lavapipe's
// is 2e-5 off at 0.003, which a soft-cap of 30 multiplies) and can give
// NaN for large arguments.
fn tanh_safe(x_in: f32) -> f32 {
    let x = clamp(x_in, -7.90531110763549805, 7.90531110763549805);
    if abs(x) < 0.0004 {
        return x;
    }
    let x2 = x * x;
    var p = -2.76076847742355e-16;
    p = p * x2 + 2.00018790482477e-13;
    p = p * x2 - 8.60467152213735e-11;
    p = p * x2 + 5.12229709037114e-08;
    p = p * x2 + 1.48572235717979e-05;
    p = p * x2 + 6.37261928875436e-04;
    p = p * x2 + 4.89352455891786e-03;
    var q = 1.19825839466702e-06;
    q = q * x2 + 1.18534705686654e-04;
    q = q * x2 + 2.26843463243900e-03;
    q = q * x2 + 4.89352518554385e-03;
    return x * p / q;
}
