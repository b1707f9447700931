//! The prefix cache (`gpack_runtime::kvcache`) on whole models: a sequence
//! that takes its first blocks from the cache (in memory, or from a cache
//! directory written by an earlier cache, as after a restart or by another
//! process) computes the same logits, bit for bit, as one that ran the
//! whole prompt; blocks of another context, truncated, flipped, or not
//! regular files are refused and the positions recomputed; an untrusted
//! directory is refused.

use super::fixtures::testdata;
use gpack_runtime::kvcache::{dir, CacheOptions, ModelIdentity, PrefixCache};
use gpack_runtime::{GgufWeights, KvType, KvTypes, LoadOptions, Logits, Model, KB};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::atomic::Ordering;

fn load(w: &GgufWeights, kv: KvTypes) -> Model<'_> {
    let opts = LoadOptions {
        kv,
        ..LoadOptions::default()
    };
    Model::load_with(w, &opts).unwrap()
}

/// A stand-in for a .gpack's digests: the GGUF's own SHA-256.
fn identity(path: &Path) -> ModelIdentity {
    let d: [u8; 32] = Sha256::digest(std::fs::read(path).unwrap()).into();
    ModelIdentity {
        model: d,
        tokenizer: d,
    }
}

fn prompt(m: &Model, n: usize) -> Vec<u32> {
    let nv = m.config.n_vocab as u32;
    (0..n as u32).map(|i| (i * 7919 + 13) % nv).collect()
}

/// The last logits of `tokens` run from an empty cache in one prefill.
fn plain(m: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut s = m.new_state(512);
    m.forward(&mut s, tokens, Logits::Last).unwrap().to_vec()
}

/// The last logits of `tokens` after `cache` restored what it could;
/// returns them with the positions restored.
fn cached(m: &Model, cache: &mut PrefixCache, tokens: &[u32]) -> (Vec<f32>, usize) {
    let mut s = m.new_state(512);
    let have = cache.restore(m, s.sequence_mut(), tokens, 0);
    let l = m
        .forward(&mut s, &tokens[have..], Logits::Last)
        .unwrap()
        .to_vec();
    (l, have)
}

/// Runs `tokens` and publishes their full blocks to `cache`.
fn fill(m: &Model, cache: &mut PrefixCache, tokens: &[u32]) {
    let mut s = m.new_state(512);
    m.forward(&mut s, tokens, Logits::None).unwrap();
    let n = cache.publish(m, s.sequence(), tokens, 0);
    assert_eq!(n, tokens.len() / KB);
}

fn memory() -> CacheOptions {
    CacheOptions {
        memory_bytes: 1 << 30,
        dir: None,
    }
}

#[test]
fn reused_blocks_give_the_logits_of_a_full_prefill_on_every_family() {
    let families = gpack_testkit::TINY_FAMILIES.into_iter().chain(["gemma3n"]);
    for fam in families {
        let d = testdata().join("tiny").join(fam);
        let w = GgufWeights::open(&d.join(format!("{fam}-f16.gguf"))).unwrap();
        let types: &[KvType] = if fam == "deepseek2" {
            &[KvType::F16, KvType::F32]
        } else {
            &[KvType::F16, KvType::Q8_0, KvType::Q4_0]
        };
        for &t in types {
            let m = load(&w, KvTypes::both(t));
            let p = prompt(&m, 3 * KB + 9);
            let want = plain(&m, &p);
            let mut cache = PrefixCache::new(&m, None, fam, &memory()).unwrap();
            // A different prompt sharing the first two blocks fills the cache.
            let mut other = p[..2 * KB].to_vec();
            other.extend(prompt(&m, 3 * KB).iter().map(|x| x ^ 1).take(KB + 20));
            fill(&m, &mut cache, &other);
            let (got, have) = cached(&m, &mut cache, &p);
            assert_eq!(have, 2 * KB, "{fam} {t}: the two shared blocks");
            assert_eq!(got, want, "{fam} {t}: logits after two cached blocks");
            // Now all three full blocks of `p`; the prompt's last token is
            // always computed (its logits are needed).
            fill(&m, &mut cache, &p);
            let (got, have) = cached(&m, &mut cache, &p);
            assert_eq!(have, 3 * KB, "{fam} {t}");
            assert_eq!(got, want, "{fam} {t}: logits after three cached blocks");
            let exact = &p[..3 * KB + 1];
            let (_, have) = cached(&m, &mut cache, exact);
            assert_eq!(have, 3 * KB, "{fam} {t}: all but the last token");
            let s = cache.stats();
            assert_eq!(s.memory_blocks.load(Ordering::Relaxed), 2 + 3 + 3);
        }
    }
}

#[test]
fn eviction_under_a_tiny_budget_keeps_answers_right() {
    let d = testdata().join("tiny").join("llama");
    let w = GgufWeights::open(&d.join("llama-f16.gguf")).unwrap();
    let m = load(&w, KvTypes::F16);
    let bb = m.kv_block_bytes();
    // Room for two blocks: the third block of a prompt evicts the oldest.
    let opts = CacheOptions {
        memory_bytes: 2 * bb,
        dir: None,
    };
    let mut cache = PrefixCache::new(&m, None, "llama", &opts).unwrap();
    let p = prompt(&m, 3 * KB + 5);
    fill(&m, &mut cache, &p);
    assert!(cache.stats().memory_bytes.load(Ordering::Relaxed) <= 2 * bb as u64);
    // Block 0 was evicted: nothing is reused (a chain starts at block 0).
    let (got, have) = cached(&m, &mut cache, &p);
    assert_eq!(have, 0);
    assert_eq!(got, plain(&m, &p));
}

fn private_dir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    t
}

fn with_dir(p: &Path) -> CacheOptions {
    CacheOptions {
        memory_bytes: 1 << 30,
        dir: Some((p.to_path_buf(), 1 << 30)),
    }
}

#[test]
fn a_cache_directory_serves_a_new_process_and_refuses_bad_blocks() {
    let d = testdata().join("tiny").join("qwen2");
    let path = d.join("qwen2-f16.gguf");
    let w = GgufWeights::open(&path).unwrap();
    let m = load(&w, KvTypes::F16);
    let id = identity(&path);
    let t = private_dir();
    let p = prompt(&m, 2 * KB + 3);
    let want = plain(&m, &p);
    {
        let mut c = PrefixCache::new(&m, Some(id), "qwen2", &with_dir(t.path())).unwrap();
        fill(&m, &mut c, &p);
        c.flush();
        assert_eq!(c.stats().disk_writes.load(Ordering::Relaxed), 2);
    }
    let files = dir::list(t.path());
    assert_eq!(files.len(), 2);
    for f in &files {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", f.path.display());
    }
    // A new cache (a restart, another process): memory empty, blocks read
    // from the directory.
    let fresh = || PrefixCache::new(&m, Some(id), "qwen2", &with_dir(t.path())).unwrap();
    let mut c = fresh();
    let (got, have) = cached(&m, &mut c, &p);
    assert_eq!(
        (have, c.stats().disk_blocks.load(Ordering::Relaxed)),
        (2 * KB, 2)
    );
    assert_eq!(got, want);
    drop(c);

    // The files by chain order (block 0's file has the parent of the context).
    let by_index = |i: u32| {
        files
            .iter()
            .find(|f| {
                let b = std::fs::read(&f.path).unwrap();
                b[28..32] == i.to_le_bytes()
            })
            .unwrap()
            .path
            .clone()
    };
    let (b0, b1) = (by_index(0), by_index(1));
    let good1 = std::fs::read(&b1).unwrap();

    // A flipped payload byte: block 1 is refused and recomputed.
    let mut bad = good1.clone();
    let n = bad.len();
    bad[n - 100] ^= 0x40;
    std::fs::write(&b1, &bad).unwrap();
    let mut c = fresh();
    let (got, have) = cached(&m, &mut c, &p);
    assert_eq!(have, KB);
    assert_eq!(c.stats().disk_rejected.load(Ordering::Relaxed), 1);
    assert_eq!(got, want);
    drop(c);

    // Truncated.
    std::fs::write(&b1, &good1[..good1.len() - 1]).unwrap();
    let mut c = fresh();
    assert_eq!(cached(&m, &mut c, &p).1, KB);
    assert_eq!(c.stats().disk_rejected.load(Ordering::Relaxed), 1);
    drop(c);

    // A symlink in place of a block file is ignored.
    std::fs::remove_file(&b1).unwrap();
    let elsewhere = t.path().join("elsewhere");
    std::fs::write(&elsewhere, &good1).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &b1).unwrap();
    let mut c = fresh();
    assert_eq!(cached(&m, &mut c, &p).1, KB);
    assert_eq!(c.stats().disk_rejected.load(Ordering::Relaxed), 1);
    drop(c);
    std::fs::remove_file(&b1).unwrap();
    std::fs::write(&b1, &good1).unwrap();

    // Another model's or setting's block at this key's name: refused (its
    // context digest differs). A q8_0 cache writes its own block 0, which
    // is put where the f16 cache looks for block 0.
    let q8 = load(&w, KvTypes::both(KvType::Q8_0));
    let t2 = private_dir();
    {
        let mut c = PrefixCache::new(&q8, Some(id), "qwen2", &with_dir(t2.path())).unwrap();
        fill(&q8, &mut c, &p[..KB + 1]);
    }
    let foreign = dir::list(t2.path());
    assert_eq!(foreign.len(), 1);
    std::fs::copy(&foreign[0].path, &b0).unwrap();
    let mut c = fresh();
    let (got, have) = cached(&m, &mut c, &p);
    assert_eq!(have, 0);
    assert_eq!(c.stats().disk_rejected.load(Ordering::Relaxed), 1);
    assert_eq!(got, want);
}

#[test]
fn an_untrusted_or_digestless_cache_directory_is_refused() {
    let d = testdata().join("tiny").join("llama");
    let path = d.join("llama-f16.gguf");
    let w = GgufWeights::open(&path).unwrap();
    let m = load(&w, KvTypes::F16);
    let t = private_dir();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = PrefixCache::new(&m, Some(identity(&path)), "llama", &with_dir(t.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not trusted") && e.contains("777"), "{e}");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = PrefixCache::new(&m, None, "llama-f16.gguf", &with_dir(t.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains(".gpack") && e.contains("llama-f16.gguf"), "{e}");
}

#[test]
fn a_cache_directory_stays_under_its_disk_budget() {
    let d = testdata().join("tiny").join("llama");
    let path = d.join("llama-f16.gguf");
    let w = GgufWeights::open(&path).unwrap();
    let m = load(&w, KvTypes::F16);
    let t = private_dir();
    let one = gpack_runtime::kvcache::file::file_bytes(1, m.kv_block_bytes()).unwrap() as u64;
    // Room for two block files: a prompt of four blocks keeps its last two
    // written (the least recently used are removed first).
    let opts = CacheOptions {
        memory_bytes: 0,
        dir: Some((t.path().to_path_buf(), 2 * one)),
    };
    let p = prompt(&m, 4 * KB + 1);
    {
        let mut c = PrefixCache::new(&m, Some(identity(&path)), "llama", &opts).unwrap();
        let mut s = m.new_state(512);
        m.forward(&mut s, &p, Logits::None).unwrap();
        // One block a call, as a server publishes them while it prefills.
        for b in 0..4 {
            c.publish(&m, s.sequence(), &p[..(b + 1) * KB], b);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        c.flush();
        assert_eq!(c.stats().disk_writes.load(Ordering::Relaxed), 4);
    }
    let files = dir::list(t.path());
    let total: u64 = files.iter().map(|f| f.bytes).sum();
    assert!(total <= 2 * one, "{total} bytes > {}", 2 * one);
    let first: Vec<u32> = files
        .iter()
        .map(|f| {
            let b = std::fs::read(&f.path).unwrap();
            u32::from_le_bytes(b[28..32].try_into().unwrap())
        })
        .collect();
    assert!(
        !first.contains(&0),
        "block 0 (the oldest) was kept: {first:?}"
    );
    // Without block 0 nothing is reused, and the answer is still right.
    let mut c = PrefixCache::new(&m, Some(identity(&path)), "llama", &opts).unwrap();
    let (got, have) = cached(&m, &mut c, &p);
    assert_eq!(have, 0);
    assert_eq!(got, plain(&m, &p));
}
