//! The probes' matrix: `rows × cols` of type `t` with xorshift bytes and
//! every block's f16 scale (and K-quant min scale) set to 0.01, transcoded
//! to the canonical layout in an aligned buffer.
use gpack_quant::{transcode_canonical, AlignedBuf, GgmlType};

pub fn matrix(t: GgmlType, rows: usize, cols: usize) -> AlignedBuf {
    let (bs, ts) = t.block();
    let nbl = rows * cols / bs as usize;
    let mut src = vec![0u8; nbl * ts as usize];
    let mut s = 12345u64;
    for b in src.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = s as u8;
    }
    for blk in src.chunks_exact_mut(ts as usize) {
        let d = half::f16::from_f32(0.01).to_le_bytes();
        match t {
            GgmlType::Q6_K => blk[208..210].copy_from_slice(&d),
            _ => {
                blk[0..2].copy_from_slice(&d);
                if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
                    blk[2..4].copy_from_slice(&d)
                }
            }
        }
    }
    let mut r16 = Vec::new();
    transcode_canonical(t, &src, rows as u64, cols as u64, &mut r16).unwrap();
    let mut b = AlignedBuf::zeroed(r16.len());
    std::io::Write::write_all(&mut b, &r16).unwrap();
    b
}
