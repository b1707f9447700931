//! The blocks kept in memory: shared by every sequence of a process,
//! least recently used evicted first under a byte budget.

use super::key::BlockHash;
use std::collections::HashMap;
use std::sync::Arc;

/// A block's bytes, shared: a block being copied into a sequence stays
/// alive while evicted (the reference count is the `Arc`'s).
pub type Block = Arc<[u8]>;

/// Blocks in memory under a budget.
#[derive(Debug, Default)]
pub struct Pool {
    blocks: HashMap<BlockHash, (Block, u64)>,
    budget: usize,
    used: usize,
    clock: u64,
    evicted: u64,
}

impl Pool {
    /// An empty pool of at most `budget` bytes.
    pub fn new(budget: usize) -> Pool {
        Pool {
            budget,
            ..Pool::default()
        }
    }
    /// The block of key `h`, marked used.
    pub fn get(&mut self, h: &BlockHash) -> Option<Block> {
        self.clock += 1;
        let clock = self.clock;
        self.blocks.get_mut(h).map(|(b, t)| {
            *t = clock;
            b.clone()
        })
    }
    /// Whether the pool holds `h` (without marking it used).
    pub fn contains(&self, h: &BlockHash) -> bool {
        self.blocks.contains_key(h)
    }
    /// Keeps `block` as `h`, evicting the least recently used blocks to fit
    /// (a block larger than the whole budget is not kept).
    pub fn insert(&mut self, h: BlockHash, block: Block) {
        if block.len() > self.budget || self.blocks.contains_key(&h) {
            return;
        }
        while self.used + block.len() > self.budget {
            let Some(old) = self
                .blocks
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some((b, _)) = self.blocks.remove(&old) {
                self.used -= b.len();
                self.evicted += 1;
            }
        }
        self.clock += 1;
        self.used += block.len();
        self.blocks.insert(h, (block, self.clock));
    }
    /// Bytes held.
    pub fn used(&self) -> usize {
        self.used
    }
    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }
    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }
    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
    /// Blocks evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize, v: u8) -> Block {
        vec![v; n].into()
    }

    #[test]
    fn evicts_the_least_recently_used_under_the_budget() {
        let mut p = Pool::new(300);
        p.insert([1; 32], block(100, 1));
        p.insert([2; 32], block(100, 2));
        p.insert([3; 32], block(100, 3));
        // Using block 1 makes block 2 the oldest.
        assert_eq!(p.get(&[1; 32]).unwrap()[0], 1);
        p.insert([4; 32], block(100, 4));
        assert!(p.contains(&[1; 32]) && !p.contains(&[2; 32]));
        assert!(p.contains(&[3; 32]) && p.contains(&[4; 32]));
        assert_eq!((p.used(), p.len(), p.evicted()), (300, 3, 1));
        // A block larger than the budget is never kept.
        p.insert([5; 32], block(301, 5));
        assert!(!p.contains(&[5; 32]));
        assert_eq!(p.used(), 300);
    }

    #[test]
    fn a_held_block_outlives_its_eviction() {
        let mut p = Pool::new(100);
        p.insert([1; 32], block(100, 7));
        let held = p.get(&[1; 32]).unwrap();
        p.insert([2; 32], block(100, 8));
        assert!(!p.contains(&[1; 32]));
        assert_eq!(held[99], 7);
    }
}
