//! Read-only memory maps: the one place outside the kernels with `unsafe`.
#![allow(unsafe_code)]

use std::fs::File;

pub use memmap2::Mmap;

/// Maps `file` read-only.
///
/// The mapping is private and read-only, so this process cannot change the
/// file through it. Another process truncating or rewriting the file while it
/// is mapped could change what the reader sees (or raise SIGBUS); gpack never
/// writes a file in place (every write goes to a temporary file that is
/// renamed over the destination), so a file we map is never modified by us.
/// That is the same contract ripgrep and the `safetensors` loaders rely on.
pub fn map_file(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: see the function docs: the file is only ever replaced by an
    // atomic rename, never modified in place, by gpack; a mapping keeps the
    // old inode alive after such a rename.
    unsafe { memmap2::MmapOptions::new().map(file) }
}

/// Drops the pages of `map[offset..offset + len]` from this process (they are
/// read again from the file if touched later), so a streaming reader of a huge
/// file keeps its resident set bounded. Errors are ignored: this is advice.
pub fn release(map: &Mmap, offset: usize, len: usize) {
    let page = 4096;
    let start = offset / page * page;
    let end = offset.saturating_add(len).min(map.len());
    if end <= start {
        return;
    }
    // SAFETY: MADV_DONTNEED on a read-only, private file mapping discards
    // only clean page-cache-backed pages of this process's view; the next
    // access faults them back in from the unchanged file, so no value any
    // live reference can observe changes. Nothing was ever written through
    // this mapping (it is read-only), so no private copy is lost.
    let _ = unsafe {
        map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
    };
}

/// Asks the kernel to read `map` ahead sequentially (for a streaming pass).
pub fn advise_sequential(map: &Mmap) {
    let _ = map.advise(memmap2::Advice::Sequential);
}
