//! The one merge loop that serves byte-level and SentencePiece-style BPE.
//!
//! Symbols start as bytes (byte-level) or characters (SentencePiece); the pair table maps
//! `(left, right)` to `(priority, merged)`. The loop repeatedly applies the pair with the
//! lowest priority, leftmost first:
//!
//! * llama.cpp's `llm_tokenizer_spm` and SentencePiece order bigrams by score (higher
//!   first) then by left position: GBT1 stores SentencePiece priorities as the dense rank of
//!   the score, so equal scores tie and the position decides, as there.
//! * HF `tokenizers` (`Word::merge_all`) pops `(rank, pos)` from a heap and accepts a stale
//!   entry whose pair now yields the same token ([`MergeMode::HfQueue`]); reproduced exactly
//!   because HF and llama.cpp differ on Gemma's space runs precisely there.
//!
//! Perf log (1 MB corpus, one thread): words of byte-level BPE are short (mean ~4 bytes),
//! so a linear scan over at most 32 symbols beats the heap 3x; the heap is kept for long
//! words and for SentencePiece fragments (a whole line or document).
//!
//! [`MergeMode::HfQueue`]: crate::spec::MergeMode::HfQueue

use crate::gbt1::{Gbt1, PSEUDO_CHAR};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const DEAD: u32 = u32::MAX;

/// Reusable buffers.
#[derive(Default)]
pub(crate) struct Scratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
    small: Vec<(u32, u32, u32)>,
}

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: u32,
    next: u32,
}

/// Merge `ids` (initial symbols) and append the result to `out`.
///
/// `hf_queue`: HF's stale-entry rule; `exact_small`: the linear scan gives the same result
/// (true unless `hf_queue` on a vocabulary where several merges make the same token).
pub(crate) fn merge(
    g: &Gbt1<'_>,
    ids: &[u32],
    hf_queue: bool,
    exact_small: bool,
    sc: &mut Scratch,
    out: &mut Vec<u32>,
) {
    if ids.len() <= 1 {
        out.extend_from_slice(ids);
        return;
    }
    if exact_small && ids.len() <= 32 {
        merge_small(g, ids, sc, out);
    } else {
        merge_heap(g, ids, hf_queue, sc, out);
    }
}

fn merge_small(g: &Gbt1<'_>, ids: &[u32], sc: &mut Scratch, out: &mut Vec<u32>) {
    // (id, priority of (this, next), merged)
    let v = &mut sc.small;
    v.clear();
    for w in ids.windows(2) {
        let (p, m) = g.pair(w[0], w[1]).unwrap_or((u32::MAX, 0));
        v.push((w[0], p, m));
    }
    v.push((ids[ids.len() - 1], u32::MAX, 0));
    loop {
        let mut best = u32::MAX;
        let mut at = usize::MAX;
        for (k, e) in v.iter().enumerate() {
            if e.1 < best {
                best = e.1;
                at = k;
            }
        }
        if at == usize::MAX {
            break;
        }
        let merged = v[at].2;
        v[at].0 = merged;
        v.remove(at + 1);
        let set = |v: &mut Vec<(u32, u32, u32)>, k: usize| {
            if k + 1 < v.len() {
                let (p, m) = g.pair(v[k].0, v[k + 1].0).unwrap_or((u32::MAX, 0));
                v[k].1 = p;
                v[k].2 = m;
            } else {
                v[k].1 = u32::MAX;
            }
        };
        set(v, at);
        if at > 0 {
            set(v, at - 1);
        }
    }
    out.extend(v.iter().map(|e| e.0));
}

fn merge_heap(g: &Gbt1<'_>, ids: &[u32], hf_queue: bool, sc: &mut Scratch, out: &mut Vec<u32>) {
    let n = ids.len();
    let syms = &mut sc.syms;
    syms.clear();
    syms.extend(ids.iter().enumerate().map(|(i, &id)| Sym {
        id,
        prev: if i == 0 { DEAD } else { i as u32 - 1 },
        next: if i + 1 == n { DEAD } else { i as u32 + 1 },
    }));
    let heap = &mut sc.heap;
    heap.clear();
    for i in 0..n - 1 {
        if let Some((p, m)) = g.pair(ids[i], ids[i + 1]) {
            heap.push(Reverse((p, i as u32, m, ids[i + 1])));
        }
    }
    while let Some(Reverse((_p, pos, new_id, right_id))) = heap.pop() {
        let cur = syms[pos as usize];
        if cur.id == DEAD || cur.next == DEAD {
            continue;
        }
        let next = cur.next as usize;
        let right = syms[next];
        if hf_queue {
            match g.pair(cur.id, right.id) {
                Some((_, m)) if m == new_id => {}
                _ => continue,
            }
        } else {
            // Exact staleness: the left symbol is unchanged iff it still would merge into
            // new_id with an unchanged right symbol.
            if right.id != right_id {
                continue;
            }
            match g.pair(cur.id, right.id) {
                Some((_, m)) if m == new_id => {}
                _ => continue,
            }
        }
        syms[pos as usize].id = new_id;
        syms[pos as usize].next = right.next;
        if right.next != DEAD {
            syms[right.next as usize].prev = pos;
        }
        syms[next].id = DEAD;
        let cur = syms[pos as usize];
        if cur.prev != DEAD {
            let pv = syms[cur.prev as usize];
            if let Some((p, m)) = g.pair(pv.id, cur.id) {
                heap.push(Reverse((p, cur.prev, m, cur.id)));
            }
        }
        if cur.next != DEAD {
            let nx = syms[cur.next as usize];
            if let Some((p, m)) = g.pair(cur.id, nx.id) {
                heap.push(Reverse((p, pos, m, nx.id)));
            }
        }
    }
    let mut i = 0u32;
    while i != DEAD && (i as usize) < syms.len() {
        out.push(syms[i as usize].id);
        i = syms[i as usize].next;
    }
}

/// Is `id` a pseudo-id for a character outside the vocabulary?
#[inline]
pub(crate) fn is_pseudo(id: u32) -> bool {
    id & PSEUDO_CHAR != 0 && id != DEAD
}
