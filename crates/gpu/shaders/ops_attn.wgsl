// Attention over a device-resident f16 KV cache (gpack-runtime
// model/attention.rs semantics): scores `(q · k) · scale`, soft-capped
// `cap · tanh(s / cap)` when a cap is set, a softmax over the causal (and
// sliding-window) range whose denominator has one more logit per head
// where the layer has sinks (gpt-oss), then the weighted sum of the values.
// Query head h reads KV head h / (n_head / n_head_kv) (GQA).
//
// Cache layout (one buffer each for K and V per layer): `[n_head_kv][n_ctx]
// [dim]` as f16 pairs (`KV`), a position's head row contiguous, so the
// append writes whole pairs and no two invocations share a word.

struct AppendParams {
    n_tok: u32,
    n_head_kv: u32,
    hd: u32,
    hdv: u32,
    n_ctx: u32,
    k_off: u32,
    v_off: u32,
    stride: u32,
}

struct AttnParams {
    n_tok: u32,
    n_head: u32,
    n_head_kv: u32,
    hd: u32,
    hdv: u32,
    n_ctx: u32,
    q_off: u32,
    q_stride: u32,
    window: u32,
    has_sinks: u32,
    scale: f32,
    softcap: f32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<u32>;
@group(0) @binding(3) var<uniform> pa: AppendParams;
@group(0) @binding(4) var<storage, read_write> kc_w: array<KV>;
@group(0) @binding(5) var<storage, read_write> vc_w: array<KV>;
@group(0) @binding(6) var<uniform> p: AttnParams;
@group(0) @binding(7) var<storage, read> kc: array<KV>;
@group(0) @binding(8) var<storage, read> vc: array<KV>;
@group(0) @binding(9) var<storage, read> sinks: array<f32>;

// Stores token t's k and v heads (f32 in src, rows `stride` apart, k at
// k_off and v at v_off) at position pos[t] of the cache, rounded to f16.
// One invocation per (token, KV head, pair).
@compute @workgroup_size(64)
fn kv_append(ids: Ids) {
    let pairs = max(pa.hd, pa.hdv) / 2u;
    let i = group_index(ids) * WG + ids.lid;
    if i >= pa.n_tok * pa.n_head_kv * pairs {
        return;
    }
    let k = i % pairs;
    let h = (i / pairs) % pa.n_head_kv;
    let t = i / (pairs * pa.n_head_kv);
    let at = pos[t];
    if at >= pa.n_ctx {
        return;
    }
    let row = t * pa.stride;
    if k < pa.hd / 2u {
        let s = row + pa.k_off + h * pa.hd + 2u * k;
        kc_w[(h * pa.n_ctx + at) * (pa.hd / 2u) + k] = kv_put(vec2<f32>(src[s], src[s + 1u]));
    }
    if k < pa.hdv / 2u {
        let s = row + pa.v_off + h * pa.hdv + 2u * k;
        vc_w[(h * pa.n_ctx + at) * (pa.hdv / 2u) + k] = kv_put(vec2<f32>(src[s], src[s + 1u]));
    }
}

// The largest head dims a workgroup holds (q in shared memory, 4 value
// pairs per invocation).
const MAX_HD: u32 = 512u;
const ACC: u32 = 4u;

var<workgroup> q_sh: array<f32, 512>;
var<workgroup> e_sh: array<f32, 64>;
var<workgroup> pos_sh: u32;

// One workgroup per (query head, row): a streaming softmax over tiles of 64
// positions (each invocation scores one position of the tile, then owns
// up to ACC value pairs of the output), the running maximum rescaling what
// is summed so far. out is `[n_tok][n_head · hdv]`.
@compute @workgroup_size(64)
fn attention(ids: Ids) {
    let h = ids.wg.x;
    let t = ids.wg.y;
    let lid = ids.lid;
    for (var i = lid; i < p.hd; i += WG) {
        q_sh[i] = src[p.q_off + t * p.q_stride + h * p.hd + i];
    }
    if lid == 0u {
        pos_sh = pos[t];
    }
    let last = workgroupUniformLoad(&pos_sh);
    var start = 0u;
    if p.window != 0u && last + 1u > p.window {
        start = last + 1u - p.window;
    }
    let kvh = h / (p.n_head / p.n_head_kv);
    let hp = p.hd / 2u;
    let vp = p.hdv / 2u;
    var m = LOWEST;
    if p.has_sinks != 0u {
        m = sinks[h];
    }
    var l = 0.0;
    var acc: array<vec2<f32>, 4>;
    for (var t0 = start; t0 <= last; t0 += WG) {
        let j = t0 + lid;
        let valid = j <= last;
        var s = LOWEST;
        if valid {
            let kr = (kvh * p.n_ctx + j) * hp;
            var d = 0.0;
            for (var i = 0u; i < hp; i++) {
                let kk = kv_get(kc[kr + i]);
                d += q_sh[2u * i] * kk.x + q_sh[2u * i + 1u] * kk.y;
            }
            s = d * p.scale;
            if p.softcap > 0.0 {
                s = p.softcap * tanh_safe(s / p.softcap);
            }
        }
        let m_new = max(m, wg_max(s, ids));
        let alpha = exp(m - m_new);
        var e = 0.0;
        if valid {
            e = exp(s - m_new);
        }
        l = l * alpha + e;
        workgroupBarrier();
        e_sh[lid] = e;
        workgroupBarrier();
        let cnt = min(WG, last + 1u - t0);
        for (var a = 0u; a < ACC; a++) {
            acc[a] *= alpha;
        }
        for (var q = 0u; q < cnt; q++) {
            let w = e_sh[q];
            let vr = (kvh * p.n_ctx + t0 + q) * vp;
            for (var a = 0u; a < ACC; a++) {
                let k = lid + a * WG;
                if k < vp {
                    acc[a] += w * kv_get(vc[vr + k]);
                }
            }
        }
        m = m_new;
    }
    var total = wg_sum(l, ids);
    if p.has_sinks != 0u {
        total += exp(sinks[h] - m);
    }
    let inv = 1.0 / total;
    let o = t * p.n_head * p.hdv + h * p.hdv;
    for (var a = 0u; a < ACC; a++) {
        let k = lid + a * WG;
        if k < vp {
            let r = acc[a] * inv;
            dst[o + 2u * k] = r.x;
            dst[o + 2u * k + 1u] = r.y;
        }
    }
}
