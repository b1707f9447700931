//! What a cached block is keyed by: a digest of everything that changes
//! the values the cache stores (the context), and a hash chain over the
//! token ids of the blocks from the first position on.

use crate::model::{KvTypes, Model, KB};
use sha2::{Digest, Sha256};

/// A block's key: SHA-256 over its parent's key and its [`KB`] token ids
/// (the first block's parent is the context digest), so equal keys mean
/// the same tokens at the same positions, from the start, under the same
/// context.
pub type BlockHash = [u8; 32];

/// Which model a cache belongs to: the .gpack's footer digest (SHA-256 of
/// its manifest, which names every section's SHA-256) and the SHA-256 of
/// its tokenizer section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelIdentity {
    /// The model file's footer digest.
    pub model: [u8; 32],
    /// The tokenizer section's SHA-256.
    pub tokenizer: [u8; 32],
}

impl ModelIdentity {
    /// The identity of a model with no file digest (a GGUF or Hugging Face
    /// source, transcoded at load): good for one process's memory only.
    pub const UNNAMED: ModelIdentity = ModelIdentity {
        model: [0; 32],
        tokenizer: [0; 32],
    };
}

/// The revision of what a block stores (the KV cache's layouts and the
/// transforms applied before storing): raise it whenever a build would
/// store other bytes for the same tokens, so that no older block is read.
/// 2: q8_0/q4_0 heads are stored Walsh-Hadamard rotated (`model::kvrot`).
pub const KV_LAYOUT_REVISION: u32 = 2;

/// Everything the values of a cached block depend on besides its tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheContext {
    /// The model and tokenizer.
    pub identity: ModelIdentity,
    /// The KV cache's types.
    pub kv: KvTypes,
    /// The kernel path that computed the keys and values (`avx512vnni`,
    /// `avx2`, `scalar`, with `+amx` when AMX tiles run the matmuls):
    /// paths round differently.
    pub isa: String,
    /// SHA-256 of the model's hyperparameters as the graph reads them
    /// (RoPE base and scaling, context, norms, soft-caps, …).
    pub config: [u8; 32],
    /// Bytes of one block.
    pub block_bytes: usize,
}

impl CacheContext {
    /// The context of `model`'s sequences, with `identity`.
    pub fn of(model: &Model<'_>, identity: ModelIdentity) -> CacheContext {
        let mut isa = gpack_quant::kernels::Isa::best().name().to_string();
        if gpack_quant::kernels::rows16::amx_enabled() {
            isa.push_str("+amx");
        }
        if model.kv_dequantized() {
            isa.push_str("+deq");
        }
        CacheContext {
            identity,
            kv: model.kv_types(),
            isa,
            config: Sha256::digest(format!("{:?}", model.config)).into(),
            block_bytes: model.kv_block_bytes(),
        }
    }

    /// The digest every block key descends from.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"gpack kv cache context v1\0");
        // The release and the layout revision: another build may round
        // differently or store other bytes.
        h.update(env!("CARGO_PKG_VERSION").as_bytes());
        h.update(b"\0");
        h.update(KV_LAYOUT_REVISION.to_le_bytes());
        h.update(self.identity.model);
        h.update(self.identity.tokenizer);
        h.update(self.kv.k.name());
        h.update(b"/");
        h.update(self.kv.v.name());
        h.update(b"\0");
        h.update(self.isa.as_bytes());
        h.update(b"\0");
        h.update(if cfg!(target_endian = "little") {
            b"le"
        } else {
            b"be"
        });
        h.update(self.config);
        h.update((KB as u64).to_le_bytes());
        h.update((self.block_bytes as u64).to_le_bytes());
        h.finalize().into()
    }
}

/// The key of the block of `tokens` (`KB` ids) after `parent`.
pub fn next_hash(parent: &BlockHash, tokens: &[u32]) -> BlockHash {
    debug_assert_eq!(tokens.len(), KB);
    let mut h = Sha256::new();
    h.update(parent);
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    h.finalize().into()
}

/// The keys of the full blocks of `tokens`, from the context `root`.
pub fn chain(root: &BlockHash, tokens: &[u32]) -> Vec<BlockHash> {
    let mut out = Vec::with_capacity(tokens.len() / KB);
    let mut parent = *root;
    for b in tokens.chunks_exact(KB) {
        parent = next_hash(&parent, b);
        out.push(parent);
    }
    out
}

/// Lower-case hex of a key (block file names).
pub fn hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}
