//! Weight look-ahead between the calls of a decoding step: while the caller
//! does a step's serial work (norms, rope, attention, the activation), the
//! pool's workers are idle; each brings the start of its region of the
//! *next* decode-sized call towards its own cache, so that call starts at
//! cache speed while the memory stream ramps up.
//!
//! The next call is predicted, not told: a step runs the same matrices in
//! the same order every token, so the call that followed a matrix last
//! time is the best guess for next time ([`Predictor`], keyed by the first
//! member's weight address). A wrong guess costs only the idle worker's
//! time and some cache lines. Prefetching is only a hint: it never faults,
//! whatever the address (x86 `prefetcht1`), so a stale prediction pointing
//! at unmapped weights is harmless.
//!
//! `GPACK_LOOKAHEAD_KB` sets the bytes per region (default
//! [`DEFAULT_BYTES`]; 0 turns the look-ahead off).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Default bytes brought in per region (a quarter of Zen 4's 1 MiB L2).
pub const DEFAULT_BYTES: usize = 256 * 1024;
/// Regions (threads) a prediction covers.
pub const MAX_REGIONS: usize = 16;

/// The start of each region of one call: `(address, bytes)`, `(0, 0)` for
/// none.
pub type Plan = [(usize, usize); MAX_REGIONS];

static BYTES: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Bytes per region to bring in (`GPACK_LOOKAHEAD_KB`, read once, unless
/// [`set_bytes`] said otherwise).
pub fn bytes() -> usize {
    match BYTES.load(Ordering::Relaxed) {
        usize::MAX => {
            let b = std::env::var("GPACK_LOOKAHEAD_KB")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(DEFAULT_BYTES, |kb| kb * 1024);
            BYTES.store(b, Ordering::Relaxed);
            b
        }
        b => b,
    }
}

/// Sets the bytes per region (probes compare settings in one process).
pub fn set_bytes(b: usize) {
    BYTES.store(b.min(usize::MAX - 1), Ordering::Relaxed);
}

/// Which call followed which: `key → the plan of the call after it`.
#[derive(Default)]
pub struct Predictor {
    /// The key of the previous call.
    prev: usize,
    /// A small open table (a step has ~4–8 calls per layer; 1024 entries
    /// hold 100+ layers); a collision overwrites.
    slots: Vec<(usize, Plan)>,
}

const SLOTS: usize = 1024;

fn slot(key: usize) -> usize {
    // Weight addresses are at least 64-byte aligned: mix the high bits in.
    ((key >> 6) ^ (key >> 17) ^ (key >> 29)) % SLOTS
}

impl Predictor {
    /// Records that the call `key` (with the region starts `plan`) follows
    /// the previous call, and returns the plan predicted for the call after
    /// this one (the one that followed `key` last time), if any.
    pub fn observe(&mut self, key: usize, plan: &Plan) -> Option<Plan> {
        if self.slots.is_empty() {
            self.slots = vec![(0, [(0, 0); MAX_REGIONS]); SLOTS];
        }
        if self.prev != 0 {
            self.slots[slot(self.prev)] = (self.prev, *plan);
        }
        self.prev = key;
        let (k, next) = self.slots[slot(key)];
        (k == key).then_some(next)
    }
}

/// [`Predictor::observe`] on the process's predictor (the decode calls of
/// every model run through it).
pub fn observe(key: usize, plan: &Plan) -> Option<Plan> {
    static P: OnceLock<Mutex<Predictor>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(Predictor::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .observe(key, plan)
}

/// Prefetches `len` bytes at `addr` towards this core's L2, a cache line
/// at a time, checking `stop` every 1 KiB (the next job has come).
pub fn prefetch(addr: usize, len: usize, stop: &dyn Fn() -> bool) {
    let mut off = 0;
    while off < len {
        if stop() {
            return;
        }
        let end = (off + 1024).min(len);
        while off < end {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint: it never faults and writes
            // nothing, whatever the address (Intel SDM, PREFETCHh: "does not
            // affect program behavior"); SSE is in the x86-64 baseline.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
                _mm_prefetch::<_MM_HINT_T1>(addr.wrapping_add(off) as *const i8);
            }
            off += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(a: usize) -> Plan {
        let mut p = [(0, 0); MAX_REGIONS];
        p[1] = (a, 4096);
        p
    }

    /// After one pass over a cycle of calls, each call predicts the one
    /// that followed it; a changed order is learned in one pass.
    #[test]
    fn the_call_that_followed_last_time_is_predicted() {
        let mut p = Predictor::default();
        let keys = [0x7000_0000usize, 0x7100_0040, 0x7200_0080, 0x7300_00c0];
        for &k in &keys {
            assert_eq!(p.observe(k, &plan(k + 1)), None);
        }
        for (i, &k) in keys.iter().enumerate() {
            let got = p.observe(k, &plan(k + 1));
            let next = keys.get(i + 1).unwrap_or(&keys[0]);
            assert_eq!(got, Some(plan(next + 1)), "call {i}");
        }
        // Now 0 is followed by 2.
        p.observe(keys[0], &plan(keys[0] + 1));
        p.observe(keys[2], &plan(keys[2] + 1));
        assert_eq!(
            p.observe(keys[0], &plan(keys[0] + 1)),
            Some(plan(keys[2] + 1))
        );
    }

    /// A prefetch of any address, mapped or not, does nothing visible, and
    /// `stop` ends it at once.
    #[test]
    fn prefetch_is_harmless_and_stops() {
        let v = vec![1u8; 1 << 16];
        prefetch(v.as_ptr() as usize, v.len(), &|| false);
        prefetch(0x10, 1 << 16, &|| false);
        let calls = std::cell::Cell::new(0);
        prefetch(v.as_ptr() as usize, v.len(), &|| {
            calls.set(calls.get() + 1);
            true
        });
        assert_eq!(calls.get(), 1);
        assert!(v.iter().all(|&b| b == 1));
    }
}
