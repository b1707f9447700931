//! What bounds the AMX prefill tile (`kernels/rows16/amx.rs`): the cost of
//! each part of its per-block pattern on this CPU, one thread.
//!
//! `cargo run --release -p gpack-quant --example amx_tiles`
//!
//! Every pattern runs 16×16×32 products (8192 MACs each: 16 rows of 32
//! activation bytes times 8 × 64 bytes of codes, the tile's shape) in pairs
//! and prints ns per product and GMAC/s:
//! - `dp`: products only, operands already in tiles;
//! - `dp+store`: each product's sums stored (1 KiB, `tilestored`);
//! - `load+dp`: each product loads its activations and codes first;
//! - `load+dp+store`: both (the tile's AMX part);
//! - `shared codes`: two products per code load (two vector tiles);
//! - `tile pattern`: `load+dp+store` with the sums read back by AVX-512
//!   loads after every 8 products (the float steps' loads, no arithmetic);
//! - `reads interleaved`: the same reads, those of the products of two
//!   pairs before issued after each pair.
//!
//! What it shows on an Emerald Rapids Xeon (figures:
//! docs/perf-history/kernels.md): the tile unit runs its loads, products and
//! stores one after another (a 1 KiB store costs about what a product does,
//! and they do not overlap even on different tiles), sharing a code load
//! between two products saves nothing, and the core's reads of the sums add
//! to that rather than overlap it, least when they follow a batch of
//! products. That `tile pattern` is the ceiling of one product per
//! 32-element block and tile before any float step; the prefill tile takes
//! about twice as long per product, its float steps (a load, the start's
//! add, `cvt` and `fma` per vector) not overlapping the tile unit either.
//!
//! Needs AMX-INT8 and Linux (the process asks for the tile state).

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86 {
    use std::arch::asm;
    use std::arch::x86_64::*;
    use std::time::Instant;

    #[repr(C, align(64))]
    struct Buf([u8; 16384]);

    #[repr(C, align(64))]
    struct Cfg([u8; 64]);

    /// The `ldtilecfg` operand (palette 1): tiles 0–3 sums (16 × 64 B),
    /// 4–5 activations (16 × 32 B), 6–7 codes (8 × 64 B).
    fn config() -> Cfg {
        let mut c = Cfg([0; 64]);
        c.0[0] = 1;
        for i in 0..8 {
            let (rows, bytes): (u8, u16) = match i {
                0..=3 => (16, 64),
                4 | 5 => (16, 32),
                _ => (8, 64),
            };
            c.0[16 + 2 * i..18 + 2 * i].copy_from_slice(&bytes.to_le_bytes());
            c.0[48 + i] = rows;
        }
        c
    }

    #[derive(Clone, Copy, PartialEq)]
    enum P {
        Dp,
        DpStore,
        LoadDp,
        LoadDpStore,
        SharedCodes,
        TilePattern,
        ReadsInterleaved,
    }

    /// Two products (into tiles 0 and 2) as pattern `p`, operands at
    /// `a`/`b` (+512 for the second), sums to `c` (+1024).
    ///
    /// # Safety
    /// Tiles configured; `a`, `b` readable for 1 KiB, `c` writable for
    /// 2 KiB.
    #[inline(always)]
    unsafe fn pair(p: P, a: *const u8, b: *const u8, c: *mut u8) {
        let (a2, b2, c2) = (
            a.wrapping_add(512),
            b.wrapping_add(512),
            c.wrapping_add(1024),
        );
        // SAFETY: per this fn's contract.
        unsafe {
            match p {
                P::Dp => asm!(
                    "tilezero tmm0",
                    "tdpbsud tmm0, tmm4, tmm6",
                    "tilezero tmm2",
                    "tdpbsud tmm2, tmm5, tmm7",
                    options(nostack, nomem)
                ),
                P::DpStore => asm!(
                    "tilezero tmm0", "tdpbsud tmm0, tmm4, tmm6",
                    "tilestored [{c} + {s}*1], tmm0",
                    "tilezero tmm2", "tdpbsud tmm2, tmm5, tmm7",
                    "tilestored [{c2} + {s}*1], tmm2",
                    c = in(reg) c, c2 = in(reg) c2, s = in(reg) 64usize,
                    options(nostack)
                ),
                P::LoadDp => asm!(
                    "tileloadd tmm6, [{b} + {s}*1]", "tilezero tmm0",
                    "tileloadd tmm4, [{a} + {s}*1]", "tdpbsud tmm0, tmm4, tmm6",
                    "tileloadd tmm7, [{b2} + {s}*1]", "tilezero tmm2",
                    "tileloadd tmm5, [{a2} + {s}*1]", "tdpbsud tmm2, tmm5, tmm7",
                    a = in(reg) a, b = in(reg) b, a2 = in(reg) a2, b2 = in(reg) b2,
                    s = in(reg) 64usize, options(nostack)
                ),
                P::LoadDpStore | P::TilePattern | P::ReadsInterleaved => asm!(
                    "tileloadd tmm6, [{b} + {s}*1]", "tilezero tmm0",
                    "tileloadd tmm4, [{a} + {s}*1]", "tdpbsud tmm0, tmm4, tmm6",
                    "tilestored [{c} + {s}*1], tmm0",
                    "tileloadd tmm7, [{b2} + {s}*1]", "tilezero tmm2",
                    "tileloadd tmm5, [{a2} + {s}*1]", "tdpbsud tmm2, tmm5, tmm7",
                    "tilestored [{c2} + {s}*1], tmm2",
                    a = in(reg) a, b = in(reg) b, a2 = in(reg) a2, b2 = in(reg) b2,
                    c = in(reg) c, c2 = in(reg) c2, s = in(reg) 64usize,
                    options(nostack)
                ),
                P::SharedCodes => asm!(
                    "tileloadd tmm6, [{b} + {s}*1]", "tilezero tmm0", "tilezero tmm2",
                    "tileloadd tmm4, [{a} + {s}*1]", "tdpbsud tmm0, tmm4, tmm6",
                    "tileloadd tmm5, [{a2} + {s}*1]", "tdpbsud tmm2, tmm5, tmm6",
                    "tilestored [{c} + {s}*1], tmm0",
                    "tilestored [{c2} + {s}*1], tmm2",
                    a = in(reg) a, b = in(reg) b, a2 = in(reg) a2,
                    c = in(reg) c, c2 = in(reg) c2, s = in(reg) 64usize,
                    options(nostack)
                ),
            }
        }
    }

    /// `acc` plus the `lines` 64-byte lines at `p`, read with AVX-512 loads.
    ///
    /// # Safety
    /// AVX-512F available; `p` 64-byte aligned and readable for the lines.
    #[target_feature(enable = "avx512f")]
    unsafe fn read(mut acc: __m512i, p: *const u8, lines: usize) -> __m512i {
        for l in 0..lines {
            // SAFETY: per this fn's contract.
            acc = _mm512_add_epi32(acc, unsafe { _mm512_load_si512(p.add(l * 64).cast()) });
        }
        acc
    }

    /// `n` products (`n / 2` pairs) as pattern `p`, operands cycling over
    /// 4 KiB of `a` and `b`, sums over an 8 KiB ring at `c`.
    ///
    /// # Safety
    /// Tiles configured, tiles 4–7 loaded; AVX-512F; the buffers 16 KiB.
    #[target_feature(enable = "avx512f")]
    unsafe fn pattern(p: P, n: usize, a: *const u8, b: *const u8, c: *mut u8) -> __m512i {
        let mut acc = _mm512_setzero_si512();
        for i in 0..n / 2 {
            let (o, out) = ((i % 4) * 1024, (i % 4) * 2048);
            // SAFETY: offsets < 4 KiB + 1 KiB read, < 8 KiB + 2 KiB written.
            unsafe {
                pair(p, a.add(o), b.add(o), c.add(out));
                match p {
                    P::TilePattern if i % 4 == 3 => acc = read(acc, c, 128),
                    P::ReadsInterleaved => acc = read(acc, c.add(((i + 2) % 4) * 2048), 32),
                    _ => {}
                }
            }
        }
        acc
    }

    pub fn main() {
        // `amx_enabled` asks Linux for the tile state (and honours
        // GPACK_NO_AMX).
        if !is_x86_feature_detected!("avx512f") || !gpack_quant::kernels::rows16::amx_enabled() {
            eprintln!("amx_tiles: this CPU or kernel gives no AMX-INT8 (or no AVX-512)");
            std::process::exit(1);
        }
        let cfg = config();
        let a = Box::new(Buf([1; 16384]));
        let b = Box::new(Buf([2; 16384]));
        let mut c = Box::new(Buf([0; 16384]));
        let (ap, bp, cp) = (a.0.as_ptr(), b.0.as_ptr(), c.0.as_mut_ptr());
        // SAFETY: AMX permitted (above); the configuration is valid; the
        // operand tiles are loaded from inside `a` and `b`.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
            asm!(
                "tileloadd tmm4, [{a} + {s}*1]", "tileloadd tmm5, [{a} + {s}*1]",
                "tileloadd tmm6, [{b} + {s}*1]", "tileloadd tmm7, [{b} + {s}*1]",
                a = in(reg) ap, b = in(reg) bp, s = in(reg) 64usize, options(nostack)
            );
        }
        let n = 200_000usize;
        for (name, p) in [
            ("dp", P::Dp),
            ("dp+store", P::DpStore),
            ("load+dp", P::LoadDp),
            ("load+dp+store", P::LoadDpStore),
            ("shared codes", P::SharedCodes),
            ("tile pattern", P::TilePattern),
            ("reads interleaved", P::ReadsInterleaved),
        ] {
            let mut best = f64::MAX;
            for _ in 0..6 {
                let t0 = Instant::now();
                // SAFETY: tiles configured and loaded, AVX-512F checked,
                // buffers of 16 KiB.
                std::hint::black_box(unsafe { pattern(p, n, ap, bp, cp) });
                best = best.min(t0.elapsed().as_secs_f64());
            }
            let ns = best * 1e9 / n as f64;
            println!(
                "{name:>18}: {ns:6.2} ns/product, {:6.1} GMAC/s",
                8192.0 / ns
            );
        }
        drop(c);
    }
}

fn main() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    x86::main();
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    eprintln!("amx_tiles: x86-64 Linux only");
}
