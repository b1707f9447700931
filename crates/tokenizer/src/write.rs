//! GBT1 writer: lays out a [`TokenizerSpec`] with its hash tables precomputed.

use crate::error::{Error, Result};
use crate::gbt1::*;
use crate::spec::{MergeMode, ModelKind, TokenizerSpec};

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Write `spec` as GBT1 bytes.
pub(crate) fn write_gbt1(spec: &TokenizerSpec) -> Result<Vec<u8>> {
    spec.validate()?;
    let vocab = spec.tokens.len() as u32;
    let blob_len: u64 = spec.tokens.iter().map(|t| t.bytes.len() as u64).sum();
    if blob_len > MAX_BLOB as u64 {
        return Err(Error::Invalid {
            what: "vocab blob size",
            value: blob_len,
            limit: MAX_BLOB as u64,
        });
    }
    let n_merges = spec.merges.len() as u32;
    if n_merges > MAX_MERGES {
        return Err(Error::Invalid {
            what: "merge count",
            value: n_merges as u64,
            limit: MAX_MERGES as u64,
        });
    }
    let template = spec.chat_template.as_deref().unwrap_or("").as_bytes();
    let token_slots = (vocab as u64 * 2).next_power_of_two().max(2) as u32;
    let pair_slots = ((n_merges as u64 * 3 / 2).max(1))
        .next_power_of_two()
        .max(2) as u32;
    // Split-token index: per first byte, the distinct lengths, longest first.
    let mut per_byte: Vec<Vec<u32>> = vec![Vec::new(); 256];
    let mut prefix2 = vec![0u8; 8192];
    for t in spec
        .tokens
        .iter()
        .filter(|t| t.split && !t.bytes.is_empty())
    {
        per_byte[t.bytes[0] as usize].push(t.bytes.len() as u32);
        if t.bytes.len() >= 2 {
            let k = (t.bytes[0] as usize) << 8 | t.bytes[1] as usize;
            prefix2[k >> 3] |= 1 << (k & 7);
        }
    }
    let mut lengths: Vec<u32> = Vec::new();
    let mut index = [0u32; 257];
    for (b, v) in per_byte.iter_mut().enumerate() {
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        index[b] = lengths.len() as u32;
        lengths.extend_from_slice(v);
    }
    index[256] = lengths.len() as u32;
    // SentencePiece: characters that some token has right before a U+2581.
    let mut crossers: Vec<u32> = Vec::new();
    if spec.model == ModelKind::SentencePieceBpe {
        for t in &spec.tokens {
            if let Ok(s) = std::str::from_utf8(&t.bytes) {
                let mut prev: Option<char> = None;
                for c in s.chars() {
                    if let Some(p) = prev {
                        if c == '\u{2581}' && p != '\u{2581}' {
                            crossers.push(p as u32);
                        }
                    }
                    prev = Some(c);
                }
            }
        }
        crossers.sort_unstable();
        crossers.dedup();
    }
    let counts = Counts {
        vocab,
        merges: n_merges,
        blob: blob_len as u32,
        template: template.len() as u32,
        token_slots,
        pair_slots,
        split_lengths: lengths.len() as u32,
        crossers: crossers.len() as u32,
    };
    let l = Layout::compute(&counts)?;
    let mut out = vec![0u8; l.total];

    // Header.
    let mut flags = 0;
    if spec.add_bos {
        flags |= FLAG_ADD_BOS;
    }
    if spec.add_eos {
        flags |= FLAG_ADD_EOS;
    }
    if spec.add_space_prefix {
        flags |= FLAG_ADD_SPACE_PREFIX;
    }
    if spec.byte_fallback {
        flags |= FLAG_BYTE_FALLBACK;
    }
    if spec.ignore_merges {
        flags |= FLAG_IGNORE_MERGES;
    }
    if spec.normalize_nfc {
        flags |= FLAG_NFC;
    }
    if spec.merge_mode == MergeMode::HfQueue {
        flags |= FLAG_HF_QUEUE;
    }
    if spec.model == ModelKind::SentencePieceBpe && spec.merge_mode == MergeMode::BestFirst {
        flags |= FLAG_CHAR_PSEUDO_IDS;
    }
    let mut producers = vec![0u8; vocab as usize];
    for m in &spec.merges {
        let p = &mut producers[m[2] as usize];
        *p = p.saturating_add(1);
    }
    if producers.iter().all(|&p| p <= 1) {
        flags |= FLAG_PAIR_UNIQUE;
    }
    put_u32(&mut out, 0, MAGIC);
    out[4..6].copy_from_slice(&VERSION.to_le_bytes());
    out[6..8].copy_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    put_u32(&mut out, 8, flags);
    out[12] = spec.model as u8;
    out[13] = spec.pre as u8;
    put_u32(&mut out, 16, vocab);
    put_u32(&mut out, 20, n_merges);
    for (k, id) in [spec.bos, spec.eos, spec.pad, spec.unk]
        .into_iter()
        .enumerate()
    {
        put_u32(&mut out, 24 + 4 * k, id.unwrap_or(NONE));
    }
    put_u32(&mut out, 40, counts.blob);
    put_u32(&mut out, 44, counts.template);
    put_u32(&mut out, 48, token_slots);
    put_u32(&mut out, 52, pair_slots);
    put_u32(&mut out, 56, counts.split_lengths);
    let max_len = spec.tokens.iter().map(|t| t.bytes.len()).max().unwrap_or(0) as u32;
    put_u32(&mut out, 60, max_len);
    out[64..72].copy_from_slice(&(l.total as u64).to_le_bytes());
    put_u32(&mut out, 72, counts.crossers);

    // Offsets, types, scores, blob.
    let mut off = 0u32;
    for (i, t) in spec.tokens.iter().enumerate() {
        put_u32(&mut out, l.offsets + 4 * i, off);
        let mut ty = t.ty as u8;
        if t.split {
            ty |= TYPE_SPLIT;
        }
        if t.special {
            ty |= TYPE_SPECIAL;
        }
        if t.split && t.lstrip {
            ty |= TYPE_LSTRIP;
        }
        if t.split && t.rstrip {
            ty |= TYPE_RSTRIP;
        }
        out[l.types + i] = ty;
        put_u32(&mut out, l.scores + 4 * i, t.score.to_bits());
        let a = l.blob + off as usize;
        out[a..a + t.bytes.len()].copy_from_slice(&t.bytes);
        off += t.bytes.len() as u32;
    }
    put_u32(&mut out, l.offsets + 4 * vocab as usize, off);

    // Merges and priorities.
    for (r, m) in spec.merges.iter().enumerate() {
        for (k, &x) in m.iter().enumerate() {
            put_u32(&mut out, l.merges + 12 * r + 4 * k, x);
        }
        let p = spec.merge_ranks.as_ref().map_or(r as u32, |v| v[r]);
        put_u32(&mut out, l.ranks + 4 * r, p);
    }

    // Token hash: split tokens first so that they win over a normal token of equal bytes,
    // then lower ids first.
    let mask = token_slots - 1;
    let order = (0..vocab)
        .filter(|&i| spec.tokens[i as usize].split)
        .chain((0..vocab).filter(|&i| !spec.tokens[i as usize].split));
    let mut taken = std::collections::HashSet::new();
    for id in order {
        let b = &spec.tokens[id as usize].bytes;
        if !taken.insert(b.as_slice()) {
            continue;
        }
        let mut i = (hash_bytes(b) as u32) & mask;
        let mut probes = 1;
        loop {
            let at = l.token_hash + 4 * i as usize;
            if out[at..at + 4] == [0, 0, 0, 0] {
                put_u32(&mut out, at, id + 1);
                break;
            }
            i = (i + 1) & mask;
            probes += 1;
            if probes > MAX_PROBES {
                return Err(Error::Invalid {
                    what: "token hash probe length",
                    value: u64::from(probes),
                    limit: u64::from(MAX_PROBES),
                });
            }
        }
    }

    // Pair hash. HF's merge map keeps the last of duplicate pairs; SentencePiece derivation
    // never produces duplicates.
    let pmask = pair_slots - 1;
    for s in 0..pair_slots as usize {
        put_u32(&mut out, l.pair_hash + 16 * s, NONE);
    }
    for (r, m) in spec.merges.iter().enumerate() {
        let p = spec.merge_ranks.as_ref().map_or(r as u32, |v| v[r]);
        let mut i = (hash_pair(m[0], m[1]) as u32) & pmask;
        let mut probes = 1;
        loop {
            let at = l.pair_hash + 16 * i as usize;
            let left = u32::from_le_bytes(out[at..at + 4].try_into().unwrap_or([0; 4]));
            let right = u32::from_le_bytes(out[at + 4..at + 8].try_into().unwrap_or([0; 4]));
            if left == NONE || (left == m[0] && right == m[1]) {
                put_u32(&mut out, at, m[0]);
                put_u32(&mut out, at + 4, m[1]);
                put_u32(&mut out, at + 8, p);
                put_u32(&mut out, at + 12, m[2]);
                break;
            }
            i = (i + 1) & pmask;
            probes += 1;
            if probes > MAX_PROBES {
                return Err(Error::Invalid {
                    what: "pair hash probe length",
                    value: u64::from(probes),
                    limit: u64::from(MAX_PROBES),
                });
            }
        }
    }

    // Byte table.
    let mut table = [NONE; 256];
    let by_bytes = |b: &[u8]| -> Option<u32> {
        // First non-split token with these bytes (byte-level BPE's single-byte tokens).
        spec.tokens
            .iter()
            .position(|t| t.bytes == b && !t.split)
            .map(|i| i as u32)
    };
    match spec.model {
        ModelKind::ByteLevelBpe => {
            let mut single = [NONE; 256];
            for (i, t) in spec.tokens.iter().enumerate() {
                if t.bytes.len() == 1 && !t.split && single[t.bytes[0] as usize] == NONE {
                    single[t.bytes[0] as usize] = i as u32;
                }
            }
            table = single;
            let _ = by_bytes;
        }
        ModelKind::SentencePieceBpe => {
            for (i, t) in spec.tokens.iter().enumerate() {
                if let Some(b) = crate::spec::parse_byte_token(&t.bytes) {
                    if table[b as usize] == NONE {
                        table[b as usize] = i as u32;
                    }
                }
            }
        }
    }
    for (b, id) in table.iter().enumerate() {
        put_u32(&mut out, l.byte_table + 4 * b, *id);
    }

    out[l.split_prefix2..l.split_prefix2 + 8192].copy_from_slice(&prefix2);
    for (b, v) in index.iter().enumerate() {
        put_u32(&mut out, l.split_index + 4 * b, *v);
    }
    for (k, len) in lengths.iter().enumerate() {
        put_u32(&mut out, l.split_lengths + 4 * k, *len);
    }
    for (k, c) in crossers.iter().enumerate() {
        put_u32(&mut out, l.crossers + 4 * k, *c);
    }
    out[l.template..l.template + template.len()].copy_from_slice(template);
    let h = hash_bytes(&out[HEADER_SIZE..]);
    out[76..84].copy_from_slice(&h.to_le_bytes());
    Ok(out)
}
