//! How a decode-sized call (at most [`super::VT`] vectors: bound by reading
//! the weights) shares its row groups among the pool's threads: each thread
//! owns one contiguous region of the call's bytes and walks it from the
//! front in chunks of [`OWN_BYTES`], so its weight stream is one sequential
//! read (the software look-ahead and the hardware prefetchers run on from
//! one chunk into the next); a thread done with its region takes chunks of
//! [`STEAL_BYTES`] from the back of the region with the most left, so the
//! threads finish within one short chunk of each other whatever their
//! speeds.
//!
//! The guided split ([`super::guided_tasks`]) hands chunks out in turn, so
//! each thread jumps between distant chunks and every jump restarts a
//! stream: a decode's small matrices then stream well below the rate of its
//! large ones. Prefill, bound by arithmetic, keeps the guided split.
//!
//! Every group is claimed exactly once (one compare-and-swap per claim on
//! the region's packed front and back), and a claim never crosses a
//! member's end, so each claim is one [`super::run_groups`] call. Which
//! thread computes a group does not change its bits.

use crate::view::NativeView;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes a thread claims at a time from the front of its own region.
pub(super) const OWN_BYTES: usize = 64 * 1024;
/// Bytes a thread claims at a time from the back of another region.
pub(super) const STEAL_BYTES: usize = 32 * 1024;

/// The regions of one call, over the call's row groups numbered across its
/// members in order (member `p`'s group `g` is `starts[p] + g`).
#[derive(Default)]
pub(super) struct Regions {
    /// Each member's first global group, then the total.
    starts: Vec<usize>,
    /// Each member's groups per own claim and per stolen claim.
    chunks: Vec<(usize, usize)>,
    /// Each region's `front << 32 | back` (global groups; empty when
    /// `front >= back`).
    spans: Vec<Span>,
}

/// A region's packed front and back, alone on its cache lines: the owners
/// claim from their own regions at the same time, and spans sharing a line
/// sent it back and forth between the cores at every claim (2 % of a 1B
/// decode at 4096 tokens of context).
#[derive(Default)]
#[repr(align(128))]
struct Span(AtomicU64);

fn pack(front: usize, back: usize) -> u64 {
    (front as u64) << 32 | back as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & 0xFFFF_FFFF) as usize)
}

impl Regions {
    /// Splits the row groups of `ws` into `threads` regions of about equal
    /// bytes (reusing this value's buffers).
    pub(super) fn reset(&mut self, ws: &[NativeView], threads: usize) {
        let threads = threads.max(1);
        self.starts.clear();
        self.chunks.clear();
        let mut total_groups = 0usize;
        let mut total_bytes = 0usize;
        for w in ws {
            let groups = w.rows().div_ceil(crate::interleave::R);
            let gb = w.rows16_group_bytes().max(1);
            self.starts.push(total_groups);
            self.chunks
                .push(((OWN_BYTES / gb).max(1), (STEAL_BYTES / gb).max(1)));
            total_groups += groups;
            total_bytes += groups * gb;
        }
        self.starts.push(total_groups);
        assert!(
            total_groups < u32::MAX as usize,
            "too many row groups in one call"
        );
        // Region t ends at the first group boundary where the bytes before
        // it reach (t + 1) / threads of the total.
        let mut bounds = Vec::with_capacity(threads + 1);
        bounds.push(0);
        let (mut g, mut bytes) = (0usize, 0usize);
        for t in 1..threads {
            let want = total_bytes * t / threads;
            while g < total_groups && bytes < want {
                let p = self.member_of(g);
                bytes += ws[p].rows16_group_bytes().max(1);
                g += 1;
            }
            bounds.push(g);
        }
        bounds.push(total_groups);
        self.spans.truncate(threads);
        while self.spans.len() < threads {
            self.spans.push(Span::default());
        }
        for (s, b) in self.spans.iter_mut().zip(bounds.windows(2)) {
            *s.0.get_mut() = pack(b[0], b[1]);
        }
    }

    /// The member whose groups include global group `g` (`g` < total).
    fn member_of(&self, g: usize) -> usize {
        self.starts[1..].iter().position(|&s| g < s).unwrap_or(0)
    }

    /// Claims the next chunk of region `r` from its front (`own`) or back:
    /// `(member, first group, end group)` in the member's numbering, or
    /// `None` when the region is empty.
    fn claim(&self, r: usize, own: bool) -> Option<(usize, usize, usize)> {
        let span = &self.spans[r].0;
        let mut cur = span.load(Ordering::Acquire);
        loop {
            let (f, b) = unpack(cur);
            if f >= b {
                return None;
            }
            let (p, g0, g1, next) = if own {
                let p = self.member_of(f);
                let end = self.starts[p + 1].min(b);
                let nf = (f + self.chunks[p].0).min(end);
                (p, f, nf, pack(nf, b))
            } else {
                let p = self.member_of(b - 1);
                let start = self.starts[p].max(f);
                let nb = b.saturating_sub(self.chunks[p].1).max(start);
                (p, nb, b, pack(f, nb))
            };
            match span.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some((p, g0 - self.starts[p], g1 - self.starts[p])),
                Err(now) => cur = now,
            }
        }
    }

    /// The next chunk for the thread running region `t`: from its own
    /// region while it lasts, then from the back of the region with the
    /// most groups left; `None` when every region is empty.
    pub(super) fn next(&self, t: usize) -> Option<(usize, usize, usize)> {
        if let Some(c) = self.claim(t, true) {
            return Some(c);
        }
        loop {
            let left = |s: &Span| {
                let (f, b) = unpack(s.0.load(Ordering::Acquire));
                b.saturating_sub(f)
            };
            let (r, n) = self
                .spans
                .iter()
                .enumerate()
                .map(|(r, s)| (r, left(s)))
                .max_by_key(|&(_, n)| n)?;
            if n == 0 {
                return None;
            }
            if let Some(c) = self.claim(r, false) {
                return Some(c);
            }
        }
    }

    /// The number of regions (the tasks of the call's pool run).
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::rows16::tests::{blocks, rows16};
    use crate::GgmlType;

    fn members() -> Vec<crate::AlignedBuf> {
        let mut seed = 9u64;
        [
            (GgmlType::Q4_K, 1024usize),
            (GgmlType::Q6_K, 272),
            (GgmlType::Q8_0, 48),
        ]
        .iter()
        .map(|&(t, rows)| rows16(t, &blocks(t, rows, 2048, 1, &mut seed), rows, 2048))
        .collect()
    }

    fn views(bufs: &[crate::AlignedBuf]) -> Vec<NativeView<'_>> {
        bufs.iter()
            .map(|b| NativeView::parse(b.as_slice()).unwrap())
            .collect()
    }

    /// Claimed by several threads at once, every group of every member is
    /// run exactly once, no claim crosses a member's end, and each thread's
    /// own claims continue one another (one sequential stream).
    #[test]
    fn every_group_is_claimed_once_and_own_claims_are_contiguous() {
        let bufs = members();
        let ws = views(&bufs);
        for threads in [1, 2, 3, 8] {
            let mut regions = Regions::default();
            regions.reset(&ws, threads);
            assert_eq!(regions.len(), threads);
            let claims: Vec<Vec<(usize, usize, usize)>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let regions = &regions;
                        s.spawn(move || std::iter::from_fn(|| regions.next(t)).collect())
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut seen: Vec<Vec<u32>> = ws.iter().map(|w| vec![0; w.rows() / 16]).collect();
            for c in claims.iter().flatten() {
                let (p, g0, g1) = *c;
                assert!(g0 < g1 && g1 <= ws[p].rows() / 16, "{c:?}");
                seen[p][g0..g1].iter_mut().for_each(|n| *n += 1);
            }
            for (p, s) in seen.iter().enumerate() {
                assert!(s.iter().all(|&n| n == 1), "{threads} threads, member {p}");
            }
        }
        // One thread alone: its own region is everything, claimed front to
        // back in order.
        let mut regions = Regions::default();
        regions.reset(&ws, 1);
        let mut at = (0, 0);
        while let Some((p, g0, g1)) = regions.next(0) {
            if p != at.0 {
                assert_eq!((p, g0), (at.0 + 1, 0));
            } else {
                assert_eq!(g0, at.1);
            }
            at = (p, g1);
        }
        assert_eq!(at, (2, 3));
    }

    /// The regions hold about equal bytes: each within one group of the
    /// even share.
    #[test]
    fn regions_split_the_bytes_evenly() {
        let bufs = members();
        let ws = views(&bufs);
        let total: usize = ws
            .iter()
            .map(|w| w.rows() / 16 * w.rows16_group_bytes())
            .sum();
        let biggest = ws.iter().map(|w| w.rows16_group_bytes()).max().unwrap();
        for threads in [2, 3, 5] {
            let mut regions = Regions::default();
            regions.reset(&ws, threads);
            for t in 0..threads {
                let mut bytes = 0;
                while let Some((p, g0, g1)) = regions.claim(t, true) {
                    bytes += (g1 - g0) * ws[p].rows16_group_bytes();
                }
                let share = total / threads;
                assert!(
                    bytes.abs_diff(share) <= biggest,
                    "{threads} threads, region {t}: {bytes} vs {share}"
                );
            }
        }
    }
}
