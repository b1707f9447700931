//! [`AlignedBuf`]: an owned, 64-byte-aligned byte buffer to write a native
//! tensor into and view it in place ([`crate::NativeView::parse`] needs its
//! scale arrays at least 4-aligned; a `Vec<u8>` guarantees 1).

/// A byte buffer whose start is 64-byte aligned, made in safe Rust by
/// over-allocating a `Vec<u8>` and starting at the first aligned address.
/// Native views need their scale arrays 4-aligned and prefer 16/64 for SIMD
/// loads; a plain `Vec<u8>` guarantees only 1.
pub struct AlignedBuf {
    buf: Vec<u8>,
    off: usize,
    len: usize,
    pos: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        let buf = vec![0u8; len + 64];
        let off = (64 - (buf.as_ptr() as usize % 64)) % 64;
        AlignedBuf {
            buf,
            off,
            len,
            pos: 0,
        }
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    /// Bytes written so far through the `Write` impl.
    pub fn written(&self) -> usize {
        self.pos
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

impl std::io::Write for AlignedBuf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = self.len - self.pos;
        if data.len() > room {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "native tensor longer than its encoded_len",
            ));
        }
        let s = self.off + self.pos;
        self.buf[s..s + data.len()].copy_from_slice(data);
        self.pos += data.len();
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
