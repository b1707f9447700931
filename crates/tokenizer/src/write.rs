//! GBT1 writer: lays out a [`TokenizerSpec`] with its hash tables precomputed
//! ([`TokenizerSpec::to_gbt1`], defined here so the spec does not depend on its writer).

use crate::error::{Error, Result};
use crate::gbt1::*;
use crate::raw::{Header, MergeRecord, PairSlot};
use crate::spec::{MergeMode, ModelKind, TokenizerSpec};
use zerocopy::little_endian::{F32, U16, U32, U64};
use zerocopy::IntoBytes;

impl TokenizerSpec {
    /// Write this spec as GBT1 bytes.
    pub fn to_gbt1(&self) -> Result<Vec<u8>> {
        write_gbt1(self)
    }
}

/// Write `spec` as GBT1 bytes.
fn write_gbt1(spec: &TokenizerSpec) -> Result<Vec<u8>> {
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
    // End-of-turn/message ids only where the metadata has them (files
    // without keep the bytes reserved, readable by readers from before).
    let end_ids = spec.eot.is_some() || spec.eom.is_some();
    if end_ids {
        flags |= FLAG_END_IDS;
    }
    let max_len = spec.tokens.iter().map(|t| t.bytes.len()).max().unwrap_or(0) as u32;
    let id = |id: Option<u32>| U32::new(id.unwrap_or(NONE));
    let mut header = Header {
        magic: MAGIC.into(),
        version: VERSION.into(),
        header_size: (HEADER_SIZE as u16).into(),
        flags: flags.into(),
        model: spec.model as u8,
        pre_tokenizer: spec.pre as u8,
        reserved0: U16::ZERO,
        vocab_size: vocab.into(),
        n_merges: n_merges.into(),
        bos_id: id(spec.bos),
        eos_id: id(spec.eos),
        pad_id: id(spec.pad),
        unk_id: id(spec.unk),
        vocab_blob_bytes: counts.blob.into(),
        chat_template_bytes: counts.template.into(),
        token_hash_slots: token_slots.into(),
        pair_hash_slots: pair_slots.into(),
        n_split_lengths: counts.split_lengths.into(),
        max_token_bytes: max_len.into(),
        total_size: (l.total as u64).into(),
        n_mark_crossers: counts.crossers.into(),
        // Set once the bytes it hashes are written.
        content_hash: U64::ZERO,
        eot_id: match end_ids {
            true => id(spec.eot),
            false => U32::ZERO,
        },
        eom_id: match end_ids {
            true => id(spec.eom),
            false => U32::ZERO,
        },
        reserved: [0; 36],
    };

    // Offsets, types, scores, blob.
    let mut offsets = Vec::with_capacity(spec.tokens.len() + 1);
    let mut types = Vec::with_capacity(spec.tokens.len());
    let mut scores = Vec::with_capacity(spec.tokens.len());
    let mut blob = Vec::with_capacity(blob_len as usize);
    for t in &spec.tokens {
        offsets.push(U32::new(blob.len() as u32));
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
        types.push(ty);
        scores.push(F32::new(t.score));
        blob.extend_from_slice(&t.bytes);
    }
    offsets.push(U32::new(blob.len() as u32));

    // Merges and priorities.
    let priority = |r: usize| spec.merge_ranks.as_ref().map_or(r as u32, |v| v[r]);
    let merges: Vec<MergeRecord> = spec
        .merges
        .iter()
        .map(|m| MergeRecord {
            left: m[0].into(),
            right: m[1].into(),
            merged: m[2].into(),
        })
        .collect();
    let ranks: Vec<U32> = (0..spec.merges.len()).map(|r| priority(r).into()).collect();

    // Token hash: split tokens first so that they win over a normal token of equal bytes,
    // then lower ids first.
    let mask = token_slots - 1;
    let mut token_hash = vec![U32::ZERO; token_slots as usize];
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
            let slot = &mut token_hash[i as usize];
            if slot.get() == 0 {
                *slot = U32::new(id + 1);
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
    let mut pair_hash = vec![PairSlot::EMPTY; pair_slots as usize];
    for (r, m) in spec.merges.iter().enumerate() {
        let mut i = (hash_pair(m[0], m[1]) as u32) & pmask;
        let mut probes = 1;
        loop {
            let slot = &mut pair_hash[i as usize];
            let left = slot.left.get();
            if left == NONE || (left == m[0] && slot.right.get() == m[1]) {
                *slot = PairSlot {
                    left: m[0].into(),
                    right: m[1].into(),
                    priority: priority(r).into(),
                    merged: m[2].into(),
                };
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
    let byte_table = table.map(U32::new);
    let split_index = index.map(U32::new);
    let lengths: Vec<U32> = lengths.into_iter().map(U32::new).collect();
    let crossers: Vec<U32> = crossers.into_iter().map(U32::new).collect();

    // The regions in file order, each at its layout offset (zero padding between), then
    // the header, which holds the hash of everything after it.
    let mut out = Vec::with_capacity(l.total);
    out.resize(HEADER_SIZE, 0);
    for (at, bytes) in [
        (l.offsets, offsets.as_bytes()),
        (l.types, types.as_bytes()),
        (l.scores, scores.as_bytes()),
        (l.blob, blob.as_bytes()),
        (l.merges, merges.as_bytes()),
        (l.ranks, ranks.as_bytes()),
        (l.token_hash, token_hash.as_bytes()),
        (l.pair_hash, pair_hash.as_bytes()),
        (l.byte_table, byte_table.as_bytes()),
        (l.split_prefix2, prefix2.as_bytes()),
        (l.split_index, split_index.as_bytes()),
        (l.split_lengths, lengths.as_bytes()),
        (l.crossers, crossers.as_bytes()),
        (l.template, template),
    ] {
        debug_assert!(out.len() <= at, "regions out of order");
        out.resize(at, 0);
        out.extend_from_slice(bytes);
    }
    out.resize(l.total, 0);
    header.content_hash = hash_bytes(&out[HEADER_SIZE..]).into();
    out[..HEADER_SIZE].copy_from_slice(header.as_bytes());
    Ok(out)
}
